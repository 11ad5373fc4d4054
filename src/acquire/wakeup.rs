//! Waiting without polling (opt-in): releases publish on `<key>:released`,
//! and waiters listening on it retry at once instead of sleeping out their
//! retry delay. They listen on the manager's pub/sub service (`pubsub`),
//! on a channel only while some task waits on it; a lost connection only
//! means falling back to polling until it is back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use crate::metrics;
use crate::node::pubsub::{Heard, Listener, PubSub, Subscription};
use crate::request::channel;

/// The most a woken waiter that lost the previous release to another
/// waiter (of another manager) waits before trying, uniformly at random:
/// the managers' waiters wake together, and spreading them out lets one of
/// them take the lock cleanly instead of all of them colliding again.
pub(crate) const WAKE_JITTER: Duration = Duration::from_millis(5);

/// The first backoff of a waiter whose attempt nobody refused (see
/// [`unheard_backoff`]).
pub(crate) const UNHEARD_BACKOFF: Duration = Duration::from_millis(10);

/// How long a waiter waits (unless woken) after its `unheard`-th attempt in
/// a row (from 0) that failed without any node refusing it — too few nodes
/// answered in time, or the validity ran out — when its retry policy's
/// delay is `delay`; `unit` is a uniform sample in `[0, 1)`.
///
/// Such a failure announces nothing: no holder's release or failed
/// attempt's cleanup is coming to wake the waiter, and it may itself have
/// been the one waiter woken for a release, which the others sleep on.
/// Sleeping its retry delay would leave them all asleep for it with the
/// resource free (a loaded machine whose requests all time out at once is
/// enough). So it tries again soon: the backoff doubles from
/// [`UNHEARD_BACKOFF`] (between half of it and all of it, at random, so
/// that waiters spread out), never longer than `delay`, so that a real
/// outage soon costs no more than polling.
pub(crate) fn unheard_backoff(unheard: u32, delay: Duration, unit: f64) -> Duration {
    let cap = UNHEARD_BACKOFF
        .saturating_mul(1u32 << unheard.min(20))
        .min(delay);
    cap.mul_f64(0.5 + 0.5 * unit.clamp(0.0, 1.0))
}

/// How [`Redlock::lock`](crate::Redlock::lock) waits while a resource is
/// held by someone else: polling after the retry delay, or woken by the
/// release.
///
/// Polling is what every Redlock client does: a waiter sleeps its retry
/// delay (`delay + U(0, jitter)`) and tries again, so after each release
/// the lock sits free for most of a retry delay. With
/// [`Subscribe`](Self::Subscribe), a release also publishes on the
/// resource's channel `<key>:released` on every node where it deleted the
/// key, and each manager wakes one of its tasks waiting on that resource,
/// the longest waiting first, which tries again at once. (Waking them all
/// would only make them collide; a task that lost a release to another
/// manager's waiter adds a random jitter of up to 5 ms the next time.)
/// The retry delay remains the longest a waiter waits, so a lost message,
/// a lock that expires instead of being released, or a pub/sub connection
/// that is down only mean polling. The retry policy is otherwise the same:
/// each wake-up is an attempt. A woken waiter refused by nodes where the
/// release has not run yet (another manager's release travels on other
/// connections) is woken again by those nodes' copies of it, or tries
/// again soon if they came while it tried. A waiter sleeps until woken only after an
/// attempt some node refused (whoever holds that node's key announces when
/// it deletes it, a failed attempt's cleanup included); after an attempt
/// nobody refused (too few nodes answered in time, or its validity ran
/// out) nothing is coming to wake it, and it tries again after a short
/// randomized backoff that doubles from 10 ms up to the retry delay.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use quorumlock::{Redlock, Retry, WakeOnRelease};
///
/// # fn main() -> Result<(), quorumlock::Error> {
/// let locks = Redlock::builder()
///     .nodes(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
///     .wake_on_release(WakeOnRelease::Subscribe)
///     // Wake-ups make attempts come faster under contention: bound the
///     // wait by time rather than by a number of attempts.
///     .retry(Retry::forever().wait(Duration::from_secs(30)))
///     .build()?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum WakeOnRelease {
    /// Poll: retry after the retry policy's randomized delay. Releases do
    /// not publish anything. The default.
    #[default]
    Never,
    /// Releases publish on `<key>:released` (where they deleted the key),
    /// and waiters subscribe to it and retry when a release is announced.
    ///
    /// Enable it on every manager that locks the same resources: a manager
    /// that does not publish does not wake the others (they poll). Each
    /// manager opens one extra connection per node, for pub/sub, the first
    /// time one of its tasks waits (or one of its election observers
    /// listens): its waiters and observers share it. On Redis Cluster,
    /// `PUBLISH` reaches every node of the cluster.
    Subscribe,
}

/// A manager's waiters, by channel, listening on its pub/sub service.
#[derive(Debug)]
pub(crate) struct Wakeups {
    pubsub: Arc<PubSub>,
    channels: Mutex<HashMap<Arc<str>, Waited>>,
}

/// A channel some of the manager's tasks wait on.
#[derive(Debug)]
struct Waited {
    waiters: usize,
    wake: Arc<Wake>,
    /// Listening on the channel for as long as someone waits.
    _subscription: Subscription,
}

/// Wakes one waiter of a channel per announced release, longest waiting
/// first; with no waiter waiting (all are trying), the next one to wait
/// goes at once. One woken waiter per release and manager: the others would
/// only collide with it.
///
/// A release's copies from the other nodes are not news while its waiter
/// tries, or once it got in. They are once it failed: each says one more
/// node is free now, and the waiter was refused by the nodes whose copy of
/// the release had not run yet (the release of another manager, on other
/// connections, or one still queued behind other calls): see
/// [`Waiter::lost_turn`] and [`Waiter::heard`].
#[derive(Debug, Default)]
struct Wake {
    notify: Notify,
    recent: Mutex<Recent>,
    /// Everything heard on the channel (every copy of every release, and
    /// every subscription that may have missed one), counted.
    heard: AtomicU64,
}

/// The last releases announced on a channel: each is announced by every
/// node that held the key, and wakes only one waiter. Many, since a slow
/// node announces a release long after the others (its copy arriving after
/// a few more releases must not wake a waiter for a lock already taken
/// again).
#[derive(Debug)]
struct Recent {
    ids: Box<[u64; RECENT]>,
    /// Where the next release goes in `ids`.
    next: usize,
}

impl Default for Recent {
    fn default() -> Self {
        Self {
            ids: Box::new([0; RECENT]),
            next: 0,
        }
    }
}

/// How many releases of one channel are remembered (see [`Recent`]): at a
/// thousand handoffs a second, the copies a node sends up to a quarter of a
/// second late.
const RECENT: usize = 256;

impl Wake {
    fn announce(&self) {
        metrics::wakeup();
        self.notify.notify_one();
    }

    fn recent(&self) -> MutexGuard<'_, Recent> {
        // The ids stay usable even if a holder of the lock panicked.
        self.recent.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets the releases announced so far: their next copies are news.
    fn forget(&self) {
        let mut recent = self.recent();
        recent.ids.fill(0);
        recent.next = 0;
    }

    /// Whether `release` (an id in hex) was not announced yet; a message
    /// without an id is always news.
    fn is_new(&self, release: &[u8]) -> bool {
        let id = std::str::from_utf8(release)
            .ok()
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
            .filter(|&id| id != 0);
        let Some(id) = id else {
            return true;
        };
        let mut recent = self.recent();
        if recent.ids.contains(&id) {
            return false;
        }
        let at = recent.next % RECENT;
        recent.ids[at] = id;
        recent.next = recent.next.wrapping_add(1);
        true
    }
}

impl Listener for Wake {
    /// A release wakes a waiter, unless another node already announced it;
    /// so does a subscription that may have missed one: the channel's
    /// first, since a release may have happened while its waiters were not
    /// yet listening, and a node's after its connection was lost.
    fn hear(&self, _channel: &str, heard: Heard<'_>) {
        self.heard.fetch_add(1, Ordering::AcqRel);
        match heard {
            Heard::Subscribed { missed } => {
                if missed {
                    self.announce();
                }
            }
            Heard::Message(release) => {
                if self.is_new(release) {
                    self.announce();
                }
            }
        }
    }
}

impl Wakeups {
    /// The waiters of a manager, listening on its `pubsub` service.
    pub(crate) fn new(pubsub: Arc<PubSub>) -> Self {
        Self {
            pubsub,
            channels: Mutex::default(),
        }
    }

    fn channels(&self) -> MutexGuard<'_, HashMap<Arc<str>, Waited>> {
        // The map stays consistent even if a holder of the lock panicked.
        self.channels.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a waiter on `keys`' channels, listening on each from its
    /// first waiter to its last.
    pub(crate) fn waiter(self: &Arc<Self>, keys: &[Arc<str>]) -> Waiter {
        let mut channels = self.channels();
        let wakes = keys
            .iter()
            .map(|key| {
                let name: Arc<str> = channel(key).into();
                let waited = channels.entry(name.clone()).or_insert_with(|| {
                    let wake = Arc::new(Wake::default());
                    Waited {
                        waiters: 0,
                        _subscription: self
                            .pubsub
                            .subscribe(std::slice::from_ref(&name), wake.clone()),
                        wake,
                    }
                });
                waited.waiters += 1;
                (name, waited.wake.clone())
            })
            .collect();
        Waiter {
            wakeups: self.clone(),
            wakes,
        }
    }
}

/// One task's interest in releases of its keys, for as long as it waits.
#[derive(Debug)]
pub(crate) struct Waiter {
    wakeups: Arc<Wakeups>,
    wakes: Vec<(Arc<str>, Arc<Wake>)>,
}

impl Waiter {
    /// Resolves when this waiter's turn comes: a release was announced (or
    /// was while nobody waited), or the subscription started and a release
    /// may have gone unheard before.
    pub(crate) async fn woken(&self) {
        match &self.wakes[..] {
            [] => std::future::pending().await,
            [(_, wake)] => wake.notify.notified().await,
            wakes => {
                let notified = wakes
                    .iter()
                    .map(|(_, wake)| Box::pin(wake.notify.notified()));
                // The others are dropped; one that was woken meanwhile passes
                // its turn on.
                futures::future::select_all(notified).await;
            }
        }
    }
}

impl Waiter {
    /// How much was heard on this waiter's channels so far (see
    /// [`Wake::heard`]): a waiter compares it before and after an attempt.
    /// Something heard while it tried — typically another node's copy of
    /// the very release it tries for, dropped as a duplicate — may have
    /// freed a node that refused it: it tries again soon rather than wait
    /// for an announcement that already came.
    pub(crate) fn heard(&self) -> u64 {
        self.wakes.iter().fold(0u64, |sum, (_, wake)| {
            sum.wrapping_add(wake.heard.load(Ordering::Acquire))
        })
    }

    /// This waiter was woken and its attempt was refused: the release it
    /// was woken for may not have run on every node yet. Its copies still
    /// to come (each a node freed) are news again, and wake a waiter.
    pub(crate) fn lost_turn(&self) {
        for (_, wake) in &self.wakes {
            wake.forget();
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut unwaited = Vec::new();
        {
            let mut channels = self.wakeups.channels();
            for (name, _) in &self.wakes {
                if let Some(waited) = channels.get_mut(name) {
                    waited.waiters = waited.waiters.saturating_sub(1);
                    if waited.waiters == 0 {
                        unwaited.extend(channels.remove(name));
                    }
                }
            }
        }
        // Unsubscribed outside the lock.
        drop(unwaited);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;
    use std::sync::Weak;

    use crate::round::Core;

    fn now_or_never<F: Future>(future: F) -> Option<F::Output> {
        future.now_or_never()
    }

    fn keys(names: &[&str]) -> Vec<Arc<str>> {
        names.iter().map(|&name| Arc::from(name)).collect()
    }

    fn woken(waiter: &Waiter) -> bool {
        now_or_never(waiter.woken()).is_some()
    }

    fn wakeups() -> Arc<Wakeups> {
        Arc::new(Wakeups::new(Arc::new(PubSub::new(Weak::<Core>::new(), 3))))
    }

    /// What the pub/sub service hands the waiters of `channel`.
    fn hear(wakeups: &Wakeups, channel: &str, heard: Heard<'_>) {
        let wake = wakeups.channels().get(channel).map(|w| w.wake.clone());
        if let Some(wake) = wake {
            wake.hear(channel, heard);
        }
    }

    fn release(wakeups: &Wakeups, channel: &str, id: &[u8]) {
        hear(wakeups, channel, Heard::Message(id));
    }

    #[tokio::test]
    async fn a_channel_is_listened_on_while_someone_waits() {
        let wakeups = wakeups();
        let a = wakeups.waiter(&keys(&["r"]));
        let b = wakeups.waiter(&keys(&["r", "s"]));
        let waited = |wakeups: &Wakeups| {
            let mut names: Vec<Arc<str>> = wakeups.channels().keys().cloned().collect();
            names.sort();
            names
        };
        assert_eq!(waited(&wakeups), keys(&["r:released", "s:released"]));
        drop(a);
        assert_eq!(
            waited(&wakeups),
            keys(&["r:released", "s:released"]),
            "r still has a waiter"
        );
        drop(b);
        assert!(waited(&wakeups).is_empty());
    }

    #[tokio::test]
    async fn a_release_announced_by_every_node_wakes_one_waiter_once() {
        let wakeups = wakeups();
        let first = wakeups.waiter(&keys(&["r"]));
        let second = wakeups.waiter(&keys(&["r"]));
        let (mut first_woken, mut second_woken) =
            (Box::pin(first.woken()), Box::pin(second.woken()));
        // Polled once: both wait, in this order.
        assert!(now_or_never(first_woken.as_mut()).is_none());
        assert!(now_or_never(second_woken.as_mut()).is_none());
        for _ in 0..3 {
            release(&wakeups, "r:released", b"00000000000000aa");
        }
        // The longest waiting goes first, and only it.
        assert!(now_or_never(first_woken.as_mut()).is_some());
        assert!(now_or_never(second_woken.as_mut()).is_none());
        // Another release: the next one's turn.
        release(&wakeups, "r:released", b"00000000000000bb");
        assert!(now_or_never(second_woken.as_mut()).is_some());
        // Not the channel of a waiter, or not an id: no harm done.
        release(&wakeups, "other:released", b"1");
        release(&wakeups, "r:released", b"");
        assert!(
            woken(&first),
            "a release without an id is never deduplicated"
        );
    }

    #[tokio::test]
    async fn a_release_still_running_elsewhere_wakes_again_once_its_waiter_lost_its_turn() {
        let wakeups = wakeups();
        let waiter = wakeups.waiter(&keys(&["r"]));
        // The first node's copy wakes the waiter; its attempt is refused by
        // the nodes where the release has not run yet.
        let before = waiter.heard();
        release(&wakeups, "r:released", b"00000000000000aa");
        assert!(woken(&waiter));
        waiter.lost_turn();
        // The next node's copy: one more node free, news again.
        release(&wakeups, "r:released", b"00000000000000aa");
        assert!(woken(&waiter), "the copy after a lost turn wakes");
        release(&wakeups, "r:released", b"00000000000000aa");
        assert!(
            !woken(&waiter),
            "until the next lost turn, copies are not news"
        );
        assert_eq!(
            waiter.heard().wrapping_sub(before),
            3,
            "every copy is heard"
        );
    }

    #[tokio::test]
    async fn a_release_while_nobody_waits_lets_the_next_waiter_go_at_once() {
        let wakeups = wakeups();
        let waiter = wakeups.waiter(&keys(&["r"]));
        // Announced while the waiter was trying, not waiting.
        release(&wakeups, "r:released", b"0000000000000001");
        assert!(woken(&waiter));
        assert!(!woken(&waiter), "one turn per release");
    }

    #[test]
    fn an_unheard_failure_backs_off_doubling_up_to_the_retry_delay() {
        let hour = Duration::from_secs(3600);
        let ms = Duration::from_millis;
        // Between half the step and all of it.
        assert_eq!(unheard_backoff(0, hour, 0.0), ms(5));
        assert_eq!(unheard_backoff(0, hour, 0.999_999).as_millis(), 9);
        assert_eq!(unheard_backoff(1, hour, 0.0), ms(10));
        assert_eq!(unheard_backoff(3, hour, 0.0), ms(40));
        // Never longer than the retry delay, however many in a row.
        assert_eq!(unheard_backoff(3, ms(30), 0.999_999).as_millis(), 29);
        assert!(unheard_backoff(u32::MAX, hour, 1.0) <= hour);
        assert_eq!(unheard_backoff(5, Duration::ZERO, 0.5), Duration::ZERO);
        // Out-of-range samples are clamped.
        assert_eq!(unheard_backoff(0, hour, -3.0), ms(5));
        assert_eq!(unheard_backoff(0, hour, 7.0), ms(10));
    }

    #[tokio::test]
    async fn the_first_subscription_wakes_a_waiter() {
        let wakeups = wakeups();
        let waiter = wakeups.waiter(&keys(&["r"]));
        hear(&wakeups, "r:released", Heard::Subscribed { missed: true });
        assert!(woken(&waiter), "a release may have gone unheard");
        hear(&wakeups, "r:released", Heard::Subscribed { missed: false });
        assert!(!woken(&waiter), "only the first node's subscription");
    }
}
