//! Leader election over the quorum: [`Election`] (campaign, leader,
//! observe, the scoped `with_leadership`) and [`Leadership`], the handle of
//! the one candidate that leads. A thin entry point: a campaign is a fenced
//! lock acquired on the manager's one acquire path (as `lock`'s, retried
//! without limit while another candidate leads, and as the retry policy
//! allows while too few nodes are reachable), leadership is that lock held and auto-extended by a
//! [`LockGuard`], and the value beside it is the election primitive's: on
//! the engine (`leader.rs`), on a node (`node.rs`), and its scripts
//! (`elect_proclaim.lua`, `elect_leader.lua`). What
//! [`Redlock::inspect`] reads of it is in `inspect.rs`.

pub(crate) mod inspect;
mod keys;
mod leader;
pub(crate) mod node;

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures::Stream;
use tokio::sync::Notify;

use self::keys::{ELECTED_SUFFIX, LEADER_SUFFIX};
use crate::acquire::call::{Acquisition, Attempts, Manager};
use crate::contract::{Primitive, ReadOnlyScript};
use crate::error::{Error, LossReason};
use crate::holding::guard::{LockGuard, ReleaseSummary};
use crate::holding::lease::Lease;
use crate::node::pubsub::Subscription;
use crate::redlock::Redlock;
use crate::request::{FenceKeys, Fencing, Keys, Request, Ttl, channel};
use crate::round::{Core, shallow};

/// The election in the list of primitives: a fenced lock's key and term
/// counter (the lock's), and its leader's value beside them.
pub(crate) static PRIMITIVE: Primitive = Primitive {
    name: "election",
    scripts: &[&node::ELECT_PROCLAIM, &node::ELECT_LEADER],
    keys: &[LEADER_SUFFIX, ELECTED_SUFFIX],
    kind: crate::contract::stored::ResourceKind::Election,
    reads: &inspect::LeaderReads,
    // Its leader read: who holds the lock key, and what it proclaimed.
    reads_only: Some(ReadOnlyScript {
        lua: &node::ELECT_LEADER,
        keys: |layout| vec![layout.key.clone(), layout.leader()],
    }),
};

impl Redlock {
    /// The election called `name`, on this manager's nodes: see
    /// [`Election`]. No I/O; the name is checked by the calls that use it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run_scheduler() {}
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// let election = locks.election("scheduler");
    /// let leadership = election.campaign("host-a", Duration::from_secs(10)).await?;
    /// println!("leading in term {}", leadership.term());
    /// tokio::select! {
    ///     _ = run_scheduler() => leadership.resign().await.map(|_| ())?,
    ///     reason = leadership.lost() => eprintln!("leadership lost: {reason}"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn election(&self, name: &str) -> Election {
        Election {
            locks: self.clone(),
            name: name.into(),
            poll: Election::DEFAULT_OBSERVE_INTERVAL,
        }
    }
}

/// A leader election among the clients of the same nodes: at most one
/// candidate leads at a time, and each new leader gets a larger **term**.
///
/// A campaign is a fenced lock on the election's name
/// ([`Redlock::lock_fenced`]): the lock's fence is the term, a fencing
/// token that grows with every new leader. Leading is holding that lock,
/// auto-extended for as long as the [`Leadership`] handle lives. Beside the
/// lock, on every node, the leader keeps the value it proclaimed (a host
/// name, an address), written only while the node holds the leader's
/// token; [`leader`](Self::leader) and [`observe`](Self::observe) report a
/// leader only when a quorum of nodes hold the same token.
///
/// The keys are the election's name with the manager's prefix (`<key>`, the
/// lock), `<key>:fence` (the term counter, never expiring) and
/// `<key>:leader` (the value, rewritten by the leader every third of the
/// ttl and expiring two ttls and a node timeout after its last write: it
/// outlives a resigned or crashed leader by that much at most). On a Redis Cluster node they must share a
/// hash slot: use a hash-tagged name such as `{scheduler}`.
///
/// # What leadership guarantees
///
/// As much as the lock does, no more: while a leader's
/// [`lost`](Leadership::lost) has not resolved, no other candidate of these
/// nodes leads, under the lock's timing assumptions (clocks that drift
/// apart by less than the drift allowance; a process that is not paused
/// between checking and acting). A leader whose process is paused past its
/// deadline (GC, swap, SIGSTOP) learns it only when it runs again, after
/// another candidate may have been elected: pass the
/// [`term`](Leadership::term) with anything that must not be done twice,
/// and have it rejected when a larger term was seen.
///
/// # Examples
///
/// Run the scheduler on one instance of the fleet, for as long as it leads:
///
/// ```no_run
/// # use std::time::Duration;
/// # async fn run_scheduler(term: u64) {}
/// # #[tokio::main]
/// # async fn main() -> Result<(), quorumlock::Error> {
/// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
/// let election = locks.election("scheduler");
/// loop {
///     let outcome = election
///         .with_leadership("10.0.0.7:8080", Duration::from_secs(10), |lease| async move {
///             run_scheduler(lease.fence().unwrap_or_default()).await
///         })
///         .await;
///     match outcome {
///         Ok(()) => break,
///         Err(e @ quorumlock::Error::Lost { .. }) => eprintln!("{e}; campaigning again"),
///         Err(e) => return Err(e),
///     }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Election {
    locks: Redlock,
    name: Arc<str>,
    poll: Duration,
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .field("poll_interval", &self.poll)
            .finish_non_exhaustive()
    }
}

/// The leader of an election, as a quorum of nodes confirmed it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Leader {
    term: u64,
    value: String,
}

impl Leader {
    /// The leader's term: its fencing token, larger for every new leader.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The value the leader proclaimed last.
    ///
    /// A copy, as [`Leadership::value`] returns. The leader's own handle
    /// cannot lend out a `&str`: its value changes under `&self`
    /// ([`proclaim`](Leadership::proclaim)), so a borrow would have to hold
    /// a lock for as long as the caller kept it. Both return an owned
    /// `String`, so that code reading either reads alike; the copy is small
    /// next to the read of every node that produced this `Leader`.
    pub fn value(&self) -> String {
        self.value.clone()
    }
}

impl fmt::Display for Leader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (term {})", self.value, self.term)
    }
}

impl Election {
    /// How often [`observe`](Self::observe) reads the election when nothing
    /// wakes it earlier, unless [`poll_interval`](Self::poll_interval) says
    /// otherwise.
    pub const DEFAULT_OBSERVE_INTERVAL: Duration = Duration::from_millis(250);

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How often [`observe`](Self::observe) reads the election when nothing
    /// wakes it earlier. Defaults to
    /// [`DEFAULT_OBSERVE_INTERVAL`](Self::DEFAULT_OBSERVE_INTERVAL); a zero
    /// interval is taken as 1 ms.
    #[must_use]
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.poll = every.max(Duration::from_millis(1));
        self
    }

    /// The election's lock key and leader key, checked.
    fn keys(&self) -> Result<(Arc<str>, Arc<str>), Error> {
        let limits = self.locks.limits();
        let key = limits.key(&self.name)?;
        let leader_key = leader::leader_key(&key);
        // A read: no call, so no id for the counter's mark.
        let fence = FenceKeys::beside(&key, Arc::from(""));
        limits.one_slot(&[&key, &fence.counter, &fence.mark, &leader_key])?;
        Ok((key, leader_key))
    }

    /// Campaigns until this candidate leads, proclaiming `value`; returns
    /// the [`Leadership`], auto-extended with `ttl` while it is held.
    ///
    /// Each attempt is a fenced lock's ([`Redlock::lock_fenced`]): the
    /// fence becomes the term. Once a quorum granted it, the candidate
    /// writes `value` beside the lock on every node that holds its token,
    /// and leads once a quorum of them did. While another candidate leads,
    /// attempts are retried after the manager's retry delay (and at once
    /// when a release is announced, with
    /// [`WakeOnRelease::Subscribe`](crate::WakeOnRelease::Subscribe)),
    /// without limit: bound the wait with `tokio::time::timeout` if needed.
    ///
    /// Unreachable nodes are not waited for without limit: the manager's
    /// [`Retry`](crate::Retry) policy bounds an outage as it bounds
    /// [`lock`](Redlock::lock)'s. Once as many attempts in a row as
    /// [`Retry::unavailable_attempts`](crate::Retry::unavailable_attempts)
    /// allows (without it, the policy's attempt limit: 10 by default)
    /// found too few nodes reachable, or such attempts went on for the
    /// policy's [`wait`](crate::Retry::wait), the campaign fails with
    /// [`Error::Unavailable`], naming each failed node. An attempt that
    /// finds another candidate leading starts that count again. Only a
    /// policy without either ([`Retry::forever`](crate::Retry::forever))
    /// campaigns through an outage.
    ///
    /// An attempt that could not reach a quorum still raises the term
    /// counter by one on each node that granted it, as every fenced
    /// attempt does: during an outage the live nodes' counters rise by one
    /// per attempt, as many as the policy allows. Terms grow, and may skip
    /// numbers; the next leader's term is still larger than every earlier
    /// one.
    ///
    /// A campaign is acquired as [`lock`](Redlock::lock) acquires, but for
    /// the attempt limit and the wait deadline, which bound only an outage
    /// (see above), never the wait for another leader: it runs the manager's
    /// [startup check](crate::check::StartupCheck) on first use, and counts in the
    /// acquisition metrics (`quorumlock_acquisitions_total` and the
    /// `quorumlock_acquire_*` histograms) once it is won (or fails with an
    /// error that is not retried).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty name, a ttl that
    /// [`lock`](Redlock::lock) rejects, or, with a Redis Cluster node, a
    /// name whose keys do not share a hash slot. [`Error::Unavailable`]
    /// when too few nodes were reachable for as many attempts as the retry
    /// policy allows (see above), with each failed node's error in
    /// [`Error::node_failures`]. Another candidate leading is waited for,
    /// never returned.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: dropped mid-attempt, the attempt's keys
    /// are removed in the background, as [`lock`](Redlock::lock)'s are.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// let leadership = locks
    ///     .election("compactor")
    ///     .campaign("worker-3", Duration::from_secs(5))
    ///     .await?;
    /// assert_eq!(leadership.value(), "worker-3");
    /// # Ok(())
    /// # }
    /// ```
    pub fn campaign(
        &self,
        value: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<Leadership, Error>> + Send + use<> {
        self.locks.acquire(
            self.campaign_request(value, ttl),
            Attempts::WhileContended,
            "campaign",
        )
    }

    /// Validates a campaign's arguments into its request. No I/O.
    fn campaign_request(&self, value: &str, ttl: Duration) -> Result<Campaign, Error> {
        // The lock's request forms the key and its counter's keys, and
        // checks them; the leader key joins them here.
        let lock = self.locks.request(&[&self.name], ttl, Fencing::On)?;
        let key = lock.target.keys.first().cloned().unwrap_or_default();
        let leader_key = leader::leader_key(&key);
        let mut keys = vec![&*key, &*leader_key];
        if let Some(fence) = &lock.fence {
            keys.extend([&*fence.counter, &*fence.mark]);
        }
        self.locks.limits().one_slot(&keys)?;
        Ok(Campaign {
            lock,
            key,
            leader_key,
            value: value.into(),
            ttl,
        })
    }

    /// Who leads now, read from every node: the leader's term and value
    /// when a quorum of nodes hold the same leader's token (the newest
    /// value any of them has), `None` when none does — no leader, or one
    /// being elected, resigning or expiring.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when the nodes that failed to answer could
    /// tell: they may hold a leader's token (or its value), or not — a
    /// failed node is never counted as saying "no leader";
    /// [`Error::InvalidArgument`] for an empty name (or one whose keys do
    /// not share a slot on a Redis Cluster node).
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: it only reads.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// match locks.election("scheduler").leader().await? {
    ///     Some(leader) => println!("{} leads in term {}", leader.value(), leader.term()),
    ///     None => println!("no leader"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn leader(&self) -> Result<Option<Leader>, Error> {
        Ok(self.read().await?.map(|c| Leader {
            term: c.term,
            value: c.value,
        }))
    }

    async fn read(&self) -> Result<Option<leader::Confirmed>, Error> {
        let (key, leader_key) = self.keys()?;
        let core = &self.locks.manager().core;
        shallow(leader::read_leader(core, &self.name, &key, &leader_key)).await
    }

    /// A stream of the election's leaders as they change: first who leads
    /// now, then each change — a new leader, a new value proclaimed, or no
    /// leader (`None`). Consecutive items always differ.
    ///
    /// It reads the election as [`leader`](Self::leader) does, so it
    /// reports only leaders a quorum of nodes confirmed, and may miss a
    /// leader that came and went between two reads. A read that the
    /// failed nodes leave undecided (where `leader` returns
    /// [`Error::Unavailable`]) reports `None`: no leader is confirmed.
    ///
    /// It reads every [`poll_interval`](Self::poll_interval), and where the
    /// manager announces releases
    /// ([`WakeOnRelease::Subscribe`](crate::WakeOnRelease::Subscribe)) also
    /// as soon as a node announces a change: a leader resigning, a new
    /// leader's value or a new value stored (on `<key>:released` and
    /// `<key>:elected`, heard on the manager's pub/sub connection to each
    /// node, which all its observers and waiters share).
    /// A leader whose lock expires is not announced: polling finds it.
    ///
    /// The stream never ends; drop it to stop observing.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use futures::StreamExt;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// let mut leaders = Box::pin(locks.election("scheduler").observe());
    /// while let Some(leader) = leaders.next().await {
    ///     match leader {
    ///         Some(leader) => println!("now led by {leader}"),
    ///         None => println!("no leader"),
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn observe(&self) -> impl Stream<Item = Option<Leader>> + Send + 'static + use<> {
        futures::stream::unfold(
            Observer {
                election: self.clone(),
                last: None,
                newest: None,
                changes: None,
            },
            |mut observer| async move {
                let this = observer.election.clone();
                if observer.changes.is_none()
                    && let Ok((key, _)) = this.keys()
                {
                    observer.changes = Changes::listen(this.locks.manager(), &key);
                }
                loop {
                    let now = match this.read().await {
                        Ok(Some(confirmed)) => {
                            let at = (confirmed.term, confirmed.rev);
                            // A read that reached only nodes a proclamation
                            // (or a new leader) has not reached yet is not
                            // news: the stream never goes back.
                            if observer.newest.is_some_and(|newest| at < newest) {
                                None
                            } else {
                                observer.newest = Some(at);
                                Some(Some(Leader {
                                    term: confirmed.term,
                                    value: confirmed.value,
                                }))
                            }
                        }
                        Ok(None) => Some(None),
                        Err(error) => {
                            tracing::debug!(election = %this.name, error = %error, "no quorum to observe");
                            Some(None)
                        }
                    };
                    if let Some(now) = now
                        && observer.last.as_ref() != Some(&now)
                    {
                        observer.last = Some(now.clone());
                        return Some((now, observer));
                    }
                    match &observer.changes {
                        Some(changes) => {
                            let _ = tokio::time::timeout(this.poll, changes.woken.notified()).await;
                        }
                        None => tokio::time::sleep(this.poll).await,
                    }
                }
            },
        )
    }

    /// Runs `work` only while leading: campaigns with `value` (see
    /// [`campaign`](Self::campaign)), runs the future `work` builds, and
    /// resigns when it completes — [`with_lock`](Redlock::with_lock) for
    /// leadership, with the same arguments (the election's `value` where
    /// `with_lock` takes the resource, then the ttl and `work`) and the
    /// same holding: one helper runs both.
    ///
    /// `work` receives the leadership's [`Lease`], whose
    /// [`fence`](Lease::fence) is the term. If leadership is lost while
    /// `work` runs, the future of `work` is dropped at once and the call
    /// returns [`Error::Lost`]. Resigning returns as soon as a quorum of
    /// nodes decided it, as [`Leadership::resign`] does.
    ///
    /// # Errors
    ///
    /// Those of [`campaign`](Self::campaign), and [`Error::Lost`] when
    /// leadership was lost before `work` completed. A failed resignation
    /// after `work` completed is not an error (the keys expire by ttl); it
    /// is logged — except [`Error::Incompatible`] (nodes that cannot run
    /// the release at all), which is returned instead of `work`'s output,
    /// as `with_lock` does.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: dropped, it drops `work` and resigns in
    /// the background.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn compact(term: u64) -> usize { 0 }
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// let compacted = locks
    ///     .election("compactor")
    ///     .with_leadership("worker-3", Duration::from_secs(10), |lease| async move {
    ///         compact(lease.fence().unwrap_or_default()).await
    ///     })
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn with_leadership<F, Fut, T>(
        &self,
        value: &str,
        ttl: Duration,
        work: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        // Resigning is releasing the leadership's lock: held and given up
        // exactly as `with_lock` holds and releases its guard.
        let Leadership { guard, .. } = self.campaign(value, ttl).await?;
        self.locks.hold_while(guard, work).await
    }
}

/// A call of [`Election::campaign`]: the fenced lock on the election's
/// name, and what the winner writes beside it.
struct Campaign {
    lock: Request,
    key: Arc<str>,
    leader_key: Arc<str>,
    value: Arc<str>,
    ttl: Duration,
}

impl Acquisition for Campaign {
    type Guard = Leadership;

    fn resource(&self) -> &str {
        &self.lock.target.resource
    }

    fn wake_keys(&self) -> Keys {
        self.lock.target.keys.clone()
    }

    fn span(&self, op: &'static str) -> tracing::Span {
        tracing::debug_span!("quorumlock", op, election = %self.lock.target.resource)
    }

    /// The lock, then the value beside it on a quorum; a failure of either
    /// is the attempt's (a half-won campaign gives the lock up).
    async fn attempt(&self, manager: &Arc<Manager>) -> Result<Leadership, Error> {
        let guard = manager.attempt(&self.lock).await?;
        let core = &manager.core;
        let state = State {
            key: self.key.clone(),
            leader_key: self.leader_key.clone(),
            current: Mutex::new((0, self.value.clone())),
            value_ttl: leader::value_ttl(self.lock.target.ttl, core.node_timeout()),
        };
        inaugurate(core, guard, state, self.ttl).await
    }
}

/// The state of an [`Election::observe`] stream.
struct Observer {
    election: Election,
    /// What the stream reported last.
    last: Option<Option<Leader>>,
    /// The newest term and revision reported: a read of an older one is
    /// not reported.
    newest: Option<(u64, u64)>,
    changes: Option<Changes>,
}

/// Wakes an observer when a node announces a change of the election — its
/// lock released, or a value stored — or starts listening (a change may
/// have gone unheard before), where the manager announces them
/// ([`WakeOnRelease::Subscribe`](crate::WakeOnRelease::Subscribe)). Heard
/// on the manager's pub/sub service, which observers and waiters share:
/// no connection of its own. Dropping it stops listening.
#[derive(Debug)]
struct Changes {
    woken: Arc<Notify>,
    _subscription: Subscription,
}

impl Changes {
    /// Listens on the election's channels, if the manager announces.
    fn listen(manager: &Manager, key: &str) -> Option<Self> {
        if !manager.core.announces() {
            return None;
        }
        let woken = Arc::new(Notify::new());
        let channels: [Arc<str>; 2] = [channel(key).into(), leader::elected_channel(key).into()];
        let subscription = manager.pubsub.subscribe(&channels, woken.clone());
        Some(Self {
            woken,
            _subscription: subscription,
        })
    }
}

/// What a leader keeps beside its lock: where, and the value it
/// proclaimed last (with its revision).
#[derive(Debug)]
struct State {
    key: Arc<str>,
    leader_key: Arc<str>,
    current: Mutex<(u64, Arc<str>)>,
    /// How long the value outlives its last write.
    value_ttl: Ttl,
}

impl State {
    fn current(&self) -> MutexGuard<'_, (u64, Arc<str>)> {
        // Consistent even if a holder of the lock panicked.
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn proclamation(&self, lease: &Lease) -> leader::Proclamation {
        let (rev, value) = self.current().clone();
        leader::Proclamation {
            key: self.key.clone(),
            leader_key: self.leader_key.clone(),
            token: lease.token().clone(),
            term: lease.fence().unwrap_or_default(),
            rev,
            value,
            ttl: self.value_ttl,
        }
    }
}

/// Completes a won campaign: the value goes beside the lock on a quorum,
/// auto-extension starts, and a task keeps the value on every node that
/// holds the lock. A failure gives the lock up.
async fn inaugurate(
    core: &Arc<Core>,
    guard: LockGuard,
    state: State,
    ttl: Duration,
) -> Result<Leadership, Error> {
    guard.auto_extend();
    let state = Arc::new(state);
    let round = leader::proclaim(core, &state.proclamation(&guard.lease()), guard.deadline()).await;
    if round.decision != crate::quorum::Decision::Reached || guard.loss_reason().is_some() {
        let error = round.failure(guard.resource());
        if let Err(release) = guard.release().await {
            tracing::debug!(error = %release, "giving up a half-won campaign");
        }
        return Err(error);
    }
    tracing::debug!(term = guard.fence(), "leading");
    spawn_keeper(core, &state, guard.lease(), ttl);
    Ok(Leadership {
        core: core.clone(),
        guard,
        state,
    })
}

/// Keeps the leader's value on every node that holds its lock: nodes that
/// granted it late, and nodes that restarted empty where renewal restored
/// the lock. First after a node timeout (late grants have answered by
/// then), then every third of the ttl, until leadership is lost.
fn spawn_keeper(core: &Arc<Core>, state: &Arc<State>, lease: Lease, ttl: Duration) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let (weak, state) = (Arc::downgrade(core), state.clone());
    let first = core.node_timeout();
    runtime.spawn(keep(weak, state, lease, first, ttl / 3));
}

async fn keep(core: Weak<Core>, state: Arc<State>, lease: Lease, first: Duration, every: Duration) {
    let lost = lease.lost();
    tokio::pin!(lost);
    let mut next = first;
    loop {
        tokio::select! {
            _ = &mut lost => return,
            _ = tokio::time::sleep(next) => {}
        }
        let Some(core) = core.upgrade() else {
            return;
        };
        let round = leader::proclaim(&core, &state.proclamation(&lease), lease.deadline()).await;
        tracing::debug!(
            op = "keep",
            kept = round.tally.yes(),
            "leader value refreshed"
        );
        next = every.max(Duration::from_millis(1));
    }
}

/// The handle of a leading candidate, from [`Election::campaign`].
///
/// Leadership is auto-extended while the handle lives;
/// [`lost`](Self::lost) resolves once it can no longer be trusted,
/// [`proclaim`](Self::proclaim) changes the value observers see, and
/// [`resign`](Self::resign) steps down. Dropping the handle resigns in the
/// background.
#[must_use = "dropping the leadership resigns in the background; bind it (`let leadership = …`) for as long as you lead"]
#[clippy::has_significant_drop]
pub struct Leadership {
    core: Arc<Core>,
    guard: LockGuard,
    state: Arc<State>,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("election", &self.guard.resource())
            .field("term", &self.term())
            .field("value", &self.value())
            .field("validity", &self.guard.validity())
            .finish_non_exhaustive()
    }
}

impl Leadership {
    /// The term: the campaign's fencing token, larger than every earlier
    /// leader's. Pass it with writes that must not come from two leaders,
    /// and have the store reject terms lower than one it has seen.
    pub fn term(&self) -> u64 {
        self.guard.fence().unwrap_or_default()
    }

    /// The value proclaimed last (by the campaign or by
    /// [`proclaim`](Self::proclaim), whether or not it reached a quorum).
    ///
    /// A copy: `proclaim` takes `&self` and may change the value while
    /// this handle is shared, so a borrowed `&str` would have to keep a
    /// lock held for as long as the caller kept it. [`Leader::value`]
    /// returns a `String` too, so that both read alike.
    pub fn value(&self) -> String {
        self.state.current().1.to_string()
    }

    /// The election's name.
    pub fn election(&self) -> &str {
        self.guard.resource()
    }

    /// An owned, cloneable view of the leadership's lock, for code running
    /// while leading: validity, deadline, [`lost`](Lease::lost), and the
    /// term as its [`fence`](Lease::fence).
    pub fn lease(&self) -> Lease {
        self.guard.lease()
    }

    /// How much longer leadership can be trusted; zero once it is lost.
    pub fn validity(&self) -> Duration {
        self.guard.validity()
    }

    /// Resolves once this candidate must assume it no longer leads, with
    /// the reason: renewal found the lock gone or could not reach a quorum
    /// in time, its deadline passed, or it resigned. The deadline is
    /// `start + ttl - drift` of the last renewal, earlier than the lock's
    /// keys can expire on any node within the drift allowance, and so
    /// earlier than any other candidate can be elected — unless this
    /// process is paused past it.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: it only observes.
    pub fn lost(&self) -> impl Future<Output = LossReason> + Send + 'static + use<> {
        self.guard.lost()
    }

    /// Changes the value the election reports for this leader: writes it
    /// beside the lock on every node that still holds this leader's token,
    /// and succeeds once a quorum did. Observers see it as a change with
    /// the same term.
    ///
    /// A proclamation that fails may still have reached some nodes, and is
    /// kept: the leader keeps sending the newest value to every node that
    /// holds its lock, so it takes effect once nodes are back.
    ///
    /// # Errors
    ///
    /// - [`Error::Lost`]: leadership is lost, or so many nodes hold another
    ///   token that no quorum holds this leader's.
    /// - [`Error::Unavailable`], [`Error::Contended`]: too few nodes stored
    ///   it; leadership itself may still hold.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe, in that the new value is kept either way
    /// (see above).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), quorumlock::Error> {
    /// # let locks = quorumlock::Redlock::new(["redis://127.0.0.1:6379"])?;
    /// let leadership = locks.election("gateway").campaign("starting", Duration::from_secs(5)).await?;
    /// // … bind the port …
    /// leadership.proclaim("10.0.0.7:8443").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn proclaim(&self, value: impl Into<String>) -> Result<(), Error> {
        let value: Arc<str> = value.into().into();
        let lease = self.guard.lease();
        let held = self.guard.held();
        if let Some(reason) = lease.loss_reason() {
            return Err(held.lost_error(reason, 0, self.core.quorum(), Vec::new()));
        }
        {
            let mut current = self.state.current();
            current.0 = current.0.saturating_add(1);
            current.1 = value;
        }
        let round = leader::proclaim(
            &self.core,
            &self.state.proclamation(&lease),
            lease.deadline(),
        )
        .await;
        match round.decision {
            crate::quorum::Decision::Reached => Ok(()),
            _ if round.tally.refused_by_quorum_complement() => Err(held.lost_error(
                LossReason::TokenGone,
                round.tally.yes(),
                self.core.quorum(),
                round.failures,
            )),
            _ => Err(round.failure(held.resource.as_ref())),
        }
    }

    /// Steps down: the leadership's lock is released on every node (its
    /// [`lost`](Self::lost) resolves first), so another candidate can be
    /// elected at once.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when leadership had already been lost (too few nodes
    /// still held it), as [`LockGuard::release`] reports.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe: dropped, it resigns in the background.
    pub async fn resign(self) -> Result<ReleaseSummary, Error> {
        self.guard.release().await
    }
}
