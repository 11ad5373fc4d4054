//! Waiting without polling (opt-in): releases publish on `<key>:released`,
//! and waiters subscribed to it retry at once instead of sleeping out their
//! retry delay. One pub/sub connection per node and manager, subscribed to
//! a channel only while some task waits on it; a lost connection only
//! means falling back to polling until it is back.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{Notify, watch};

use crate::metrics;
use crate::request::channel;
use crate::round::Core;

/// The most a woken waiter that lost the previous release to another
/// waiter (of another manager) waits before trying, uniformly at random:
/// the managers' waiters wake together, and spreading them out lets one of
/// them take the lock cleanly instead of all of them colliding again.
pub(crate) const WAKE_JITTER: Duration = Duration::from_millis(5);

/// How long a node's pub/sub connection waits before connecting again
/// after failing.
const RECONNECT_DELAY: Duration = Duration::from_millis(500);

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
/// each wake-up is an attempt.
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
    /// time one of its tasks waits. On Redis Cluster, `PUBLISH` reaches
    /// every node of the cluster.
    Subscribe,
}

/// A manager's waiters and its pub/sub connections.
#[derive(Debug)]
pub(crate) struct Wakeups {
    registry: Mutex<HashMap<Arc<str>, Channel>>,
    /// Bumped whenever the set of channels with waiters changes.
    changes: watch::Sender<u64>,
    started: AtomicBool,
    stopped: AtomicBool,
}

#[derive(Debug)]
struct Channel {
    waiters: usize,
    signal: Arc<Signal>,
    /// Per node: whether the channel is subscribed there.
    subscribed: Vec<bool>,
    /// The last releases announced: each is announced by every node that
    /// held the key, and wakes only one waiter. Many, since a slow node
    /// announces a release long after the others (its copy arriving after
    /// a few more releases must not wake a waiter for a lock already
    /// taken again).
    recent: Box<[u64; RECENT]>,
    /// Where the next release goes in `recent`.
    next: usize,
}

/// How many releases of one channel are remembered (see
/// [`Channel::recent`]): at a thousand handoffs a second, the copies a node
/// sends up to a quarter of a second late.
const RECENT: usize = 256;

/// Wakes one waiter of a channel per announced release, longest waiting
/// first; with no waiter waiting (all are trying), the next one to wait
/// goes at once. One woken waiter per release and manager: the others would
/// only collide with it.
#[derive(Debug, Default)]
struct Signal {
    notify: Notify,
}

impl Signal {
    fn announce(&self) {
        metrics::wakeup();
        self.notify.notify_one();
    }
}

impl Default for Wakeups {
    fn default() -> Self {
        Self {
            registry: Mutex::default(),
            changes: watch::Sender::new(0),
            started: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
        }
    }
}

impl Wakeups {
    fn registry(&self) -> MutexGuard<'_, HashMap<Arc<str>, Channel>> {
        // The registry stays consistent even if a holder of the lock panicked.
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn changed(&self) {
        self.changes
            .send_modify(|version| *version = version.wrapping_add(1));
    }

    /// Registers a waiter on `keys`' channels, subscribing to them on every
    /// node (lazily starting one pub/sub task per node).
    pub(crate) fn waiter(self: &Arc<Self>, core: &Arc<Core>, keys: &[Arc<str>]) -> Waiter {
        self.start(core);
        self.register(keys, core.nodes.len())
    }

    fn register(self: &Arc<Self>, keys: &[Arc<str>], nodes: usize) -> Waiter {
        let mut added = false;
        let signals = {
            let mut registry = self.registry();
            keys.iter()
                .map(|key| {
                    let name: Arc<str> = channel(key).into();
                    let entry = registry.entry(name.clone()).or_insert_with(|| {
                        added = true;
                        Channel {
                            waiters: 0,
                            signal: Arc::default(),
                            subscribed: vec![false; nodes],
                            recent: Box::new([0; RECENT]),
                            next: 0,
                        }
                    });
                    entry.waiters += 1;
                    (name, entry.signal.clone())
                })
                .collect()
        };
        if added {
            self.changed();
        }
        Waiter {
            wakeups: self.clone(),
            signals,
        }
    }

    /// Starts the per-node pub/sub tasks, once.
    fn start(self: &Arc<Self>, core: &Arc<Core>) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.started.store(false, Ordering::Release);
            return;
        };
        for node in 0..core.nodes.len() {
            runtime.spawn(follow_node(Arc::downgrade(core), self.clone(), node));
        }
    }

    /// Stops the pub/sub tasks: the manager is gone.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.changed();
    }

    fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// The channels some task waits on.
    fn wanted(&self) -> HashSet<Arc<str>> {
        self.registry().keys().cloned().collect()
    }

    /// Records that `node` subscribed to `channels` (or still is). A channel
    /// subscribed on its first node announces a release: one may have
    /// happened while its waiters were not yet listening.
    fn subscribed(&self, node: usize, channels: &[Arc<str>]) {
        let mut registry = self.registry();
        for name in channels {
            let Some(channel) = registry.get_mut(name) else {
                continue;
            };
            let first = !channel.subscribed.iter().any(|&on| on);
            if let Some(on) = channel.subscribed.get_mut(node) {
                if !*on && first {
                    channel.signal.announce();
                }
                *on = true;
            }
        }
    }

    /// Records that `node` no longer listens on any channel.
    fn disconnected(&self, node: usize) {
        for channel in self.registry().values_mut() {
            if let Some(on) = channel.subscribed.get_mut(node) {
                *on = false;
            }
        }
    }

    /// A message arrived on `name`: wake a waiter, unless another node
    /// already announced the same release.
    fn announce(&self, name: &str, release: &[u8]) {
        let mut registry = self.registry();
        let Some(channel) = registry.get_mut(name) else {
            return;
        };
        let id = std::str::from_utf8(release)
            .ok()
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
            .filter(|&id| id != 0);
        if let Some(id) = id {
            if channel.recent.contains(&id) {
                return;
            }
            channel.recent[channel.next % RECENT] = id;
            channel.next = channel.next.wrapping_add(1);
        }
        channel.signal.announce();
    }
}

/// One task's interest in releases of its keys, for as long as it waits.
#[derive(Debug)]
pub(crate) struct Waiter {
    wakeups: Arc<Wakeups>,
    signals: Vec<(Arc<str>, Arc<Signal>)>,
}

impl Waiter {
    /// Resolves when this waiter's turn comes: a release was announced (or
    /// was while nobody waited), or the subscription started and a release
    /// may have gone unheard before.
    pub(crate) async fn woken(&self) {
        match &self.signals[..] {
            [] => std::future::pending().await,
            [(_, signal)] => signal.notify.notified().await,
            signals => {
                let notified = signals
                    .iter()
                    .map(|(_, signal)| Box::pin(signal.notify.notified()));
                // The others are dropped; one that was woken meanwhile passes
                // its turn on.
                futures::future::select_all(notified).await;
            }
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut removed = false;
        {
            let mut registry = self.wakeups.registry();
            for (name, _) in &self.signals {
                if let Some(channel) = registry.get_mut(name) {
                    channel.waiters = channel.waiters.saturating_sub(1);
                    if channel.waiters == 0 {
                        registry.remove(name);
                        removed = true;
                    }
                }
            }
        }
        if removed {
            self.wakeups.changed();
        }
    }
}

/// Keeps one node's pub/sub connection subscribed to the channels with
/// waiters, for as long as the manager lives. Connects only while there
/// are waiters; a failed connection is retried after [`RECONNECT_DELAY`].
async fn follow_node(core: Weak<Core>, wakeups: Arc<Wakeups>, node: usize) {
    let mut changes = wakeups.changes.subscribe();
    loop {
        if wakeups.stopped() {
            return;
        }
        if wakeups.registry().is_empty() {
            changes.borrow_and_update();
            if wakeups.registry().is_empty() && changes.changed().await.is_err() {
                return;
            }
            continue;
        }
        let (connection, timeout) = {
            let Some(core) = core.upgrade() else {
                return;
            };
            let node = &core.nodes[node];
            (node.pubsub(core.node_timeout).await, core.node_timeout)
        };
        match connection {
            Ok(pubsub) => {
                listen(pubsub, &wakeups, node, timeout, &mut changes).await;
                wakeups.disconnected(node);
            }
            Err(error) => {
                tracing::debug!(op = "subscribe", node, error = %error, "pub/sub connection failed");
                tokio::select! {
                    _ = tokio::time::sleep(RECONNECT_DELAY) => {}
                    _ = wait_stopped(&wakeups, &mut changes) => return,
                }
            }
        }
    }
}

/// Resolves once the manager is gone.
async fn wait_stopped(wakeups: &Wakeups, changes: &mut watch::Receiver<u64>) {
    while !wakeups.stopped() {
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// Subscribes and unsubscribes as waiters come and go, and wakes them when
/// a release is announced; returns when the connection is lost (or the
/// manager is gone).
async fn listen(
    pubsub: redis::aio::PubSub,
    wakeups: &Wakeups,
    node: usize,
    timeout: Duration,
    changes: &mut watch::Receiver<u64>,
) {
    let (mut sink, mut messages) = pubsub.split();
    let mut subscribed: HashSet<Arc<str>> = HashSet::new();
    loop {
        if wakeups.stopped() {
            return;
        }
        changes.borrow_and_update();
        let wanted = wakeups.wanted();
        let add: Vec<Arc<str>> = wanted.difference(&subscribed).cloned().collect();
        let remove: Vec<Arc<str>> = subscribed.difference(&wanted).cloned().collect();
        if !add.is_empty() {
            let names: Vec<&str> = add.iter().map(|name| &**name).collect();
            match tokio::time::timeout(timeout, sink.subscribe(names)).await {
                Ok(Ok(())) => subscribed.extend(add),
                Ok(Err(error)) => {
                    tracing::debug!(op = "subscribe", node, error = %error, "subscribe failed");
                    return;
                }
                Err(_) => return,
            }
        }
        if !remove.is_empty() {
            let names: Vec<&str> = remove.iter().map(|name| &**name).collect();
            match tokio::time::timeout(timeout, sink.unsubscribe(names)).await {
                Ok(Ok(())) => {
                    for name in &remove {
                        subscribed.remove(name);
                    }
                }
                _ => return,
            }
        }
        // Also for channels subscribed before a waiter came back to them.
        let current: Vec<Arc<str>> = wanted.intersection(&subscribed).cloned().collect();
        wakeups.subscribed(node, &current);

        // Until the waiters change: wake them on each announcement.
        loop {
            tokio::select! {
                message = messages.next() => match message {
                    Some(message) => {
                    wakeups.announce(message.get_channel_name(), message.get_payload_bytes());
                }
                    None => return,
                },
                changed = changes.changed() => match changed {
                    Ok(()) => break,
                    Err(_) => return,
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    fn now_or_never<F: Future>(future: F) -> Option<F::Output> {
        future.now_or_never()
    }

    fn keys(names: &[&str]) -> Vec<Arc<str>> {
        names.iter().map(|&name| Arc::from(name)).collect()
    }

    fn woken(waiter: &Waiter) -> bool {
        now_or_never(waiter.woken()).is_some()
    }

    #[tokio::test]
    async fn channels_live_while_someone_waits() {
        let wakeups = Arc::new(Wakeups::default());
        let mut changes = wakeups.changes.subscribe();
        let a = wakeups.register(&keys(&["r"]), 3);
        let b = wakeups.register(&keys(&["r", "s"]), 3);
        assert!(changes.has_changed().expect("sender"));
        changes.borrow_and_update();
        let wanted: HashSet<Arc<str>> = ["r:released".into(), "s:released".into()].into();
        assert_eq!(wakeups.wanted(), wanted);
        drop(a);
        assert!(
            !changes.has_changed().expect("sender"),
            "r still has a waiter"
        );
        drop(b);
        assert!(changes.has_changed().expect("sender"));
        assert!(wakeups.wanted().is_empty());
    }

    #[tokio::test]
    async fn a_release_announced_by_every_node_wakes_one_waiter_once() {
        let wakeups = Arc::new(Wakeups::default());
        let first = wakeups.register(&keys(&["r"]), 3);
        let second = wakeups.register(&keys(&["r"]), 3);
        let (mut first_woken, mut second_woken) =
            (Box::pin(first.woken()), Box::pin(second.woken()));
        // Polled once: both wait, in this order.
        assert!(now_or_never(first_woken.as_mut()).is_none());
        assert!(now_or_never(second_woken.as_mut()).is_none());
        for _ in 0..3 {
            wakeups.announce("r:released", b"00000000000000aa");
        }
        // The longest waiting goes first, and only it.
        assert!(now_or_never(first_woken.as_mut()).is_some());
        assert!(now_or_never(second_woken.as_mut()).is_none());
        // Another release: the next one's turn.
        wakeups.announce("r:released", b"00000000000000bb");
        assert!(now_or_never(second_woken.as_mut()).is_some());
        // Not the channel of a waiter, or not an id: no harm done.
        wakeups.announce("other:released", b"1");
        wakeups.announce("r:released", b"");
        assert!(
            woken(&first),
            "a release without an id is never deduplicated"
        );
    }

    #[tokio::test]
    async fn a_release_while_nobody_waits_lets_the_next_waiter_go_at_once() {
        let wakeups = Arc::new(Wakeups::default());
        let waiter = wakeups.register(&keys(&["r"]), 1);
        // Announced while the waiter was trying, not waiting.
        wakeups.announce("r:released", b"0000000000000001");
        assert!(woken(&waiter));
        assert!(!woken(&waiter), "one turn per release");
    }

    #[tokio::test]
    async fn the_first_subscription_wakes_a_waiter() {
        let wakeups = Arc::new(Wakeups::default());
        let waiter = wakeups.register(&keys(&["r"]), 3);
        let channels: Vec<Arc<str>> = vec!["r:released".into()];
        wakeups.subscribed(1, &channels);
        assert!(woken(&waiter), "a release may have gone unheard");
        wakeups.subscribed(0, &channels);
        wakeups.subscribed(1, &channels);
        assert!(!woken(&waiter), "only the first node's subscription");
        // Every node lost: the next subscription wakes again.
        for node in 0..3 {
            wakeups.disconnected(node);
        }
        wakeups.subscribed(2, &channels);
        assert!(woken(&waiter));
    }
}
