//! The manager's one pub/sub service: one connection per node, subscribed
//! to the channels someone listens on — tasks waiting for a release
//! (`wakeup`), election observers — and handing each message to the
//! listeners of its channel. It connects the first time someone listens,
//! reconnects [`RECONNECT_DELAY`] after a failure, and stops with the
//! manager. A connection that is down only means its listeners hear less:
//! each of them polls as well.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{Notify, watch};

use crate::error::NodeError;
use crate::node::Node;

/// How long a node's pub/sub connection waits before connecting again
/// after failing to connect, or to subscribe, or losing the connection:
/// one policy for every listener, and no busy loop against a node that
/// accepts connections and then refuses them.
const RECONNECT_DELAY: Duration = Duration::from_millis(500);

/// What the service needs of its manager, which it holds weakly: the
/// nodes, and how long a request to one may take. The round's `Core` is
/// it; passed in, so the node layer imports nothing from the round.
pub(crate) trait Nodes: Send + Sync {
    /// Node `i` (an error if there is none).
    fn node(&self, i: usize) -> Result<&Node, NodeError>;
    /// How long one request to a node may take.
    fn node_timeout(&self) -> Duration;
}

/// What a [`Listener`] hears on one of its channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Heard<'a> {
    /// A node subscribed to the channel, for the first time or again:
    /// whatever it published there before may have gone unheard. `missed`
    /// when that may matter: no other node had the channel subscribed for
    /// this listener (a listener that joins a channel already subscribed
    /// hears that as its first subscription, at once), or this node had it
    /// subscribed before and lost it with its connection — a message
    /// published on this node alone meanwhile (a failed attempt's cleanup
    /// there) was heard by nobody.
    Subscribed { missed: bool },
    /// A message published on the channel, as one node delivered it (a
    /// message published on several nodes arrives once from each).
    Message(&'a [u8]),
}

/// Someone listening on channels. Called from a node's task, outside the
/// service's lock: keep it short, never block, and never subscribe or
/// unsubscribe from within.
pub(crate) trait Listener: Send + Sync + fmt::Debug {
    /// An event of `channel`, one of the channels it subscribed to.
    fn hear(&self, channel: &str, heard: Heard<'_>);
}

/// A listener that only needs waking: everything it hears wakes it (once,
/// if nobody waits on it yet).
impl Listener for Notify {
    fn hear(&self, _channel: &str, _heard: Heard<'_>) {
        self.notify_one();
    }
}

/// A manager's pub/sub service: who listens on which channel, and the
/// tasks that keep one connection per node subscribed to all of them.
#[derive(Debug)]
pub(crate) struct PubSub {
    /// Held weakly, as the renewer does: the tasks stop once the manager
    /// and its holders are gone, even if nobody called [`stop`](Self::stop).
    core: Weak<dyn Nodes>,
    nodes: usize,
    registry: Mutex<Registry>,
    /// Bumped whenever the set of channels with listeners changes, and on
    /// [`stop`](Self::stop).
    changes: watch::Sender<u64>,
    started: AtomicBool,
    stopped: AtomicBool,
}

#[derive(Debug, Default)]
struct Registry {
    channels: HashMap<Arc<str>, Channel>,
    /// The id of the next [`Subscription`].
    next: u64,
}

#[derive(Debug)]
struct Channel {
    /// By subscription id.
    listeners: Vec<(u64, Arc<dyn Listener>)>,
    /// Per node: whether the channel is subscribed there.
    subscribed: Vec<bool>,
    /// Per node: whether it was subscribed there and the connection was
    /// lost since (until it is subscribed again).
    lost: Vec<bool>,
}

/// Listening on some channels, until dropped.
#[derive(Debug)]
pub(crate) struct Subscription {
    pubsub: Arc<PubSub>,
    id: u64,
    channels: Vec<Arc<str>>,
}

impl PubSub {
    /// The service of the manager whose core is `core`, over its `nodes`
    /// nodes. No I/O: the connections open on the first subscription.
    pub(crate) fn new(core: Weak<dyn Nodes>, nodes: usize) -> Self {
        Self {
            core,
            nodes,
            registry: Mutex::default(),
            changes: watch::Sender::new(0),
            started: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
        }
    }

    fn registry(&self) -> MutexGuard<'_, Registry> {
        // The registry stays consistent even if a holder of the lock panicked.
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn changed(&self) {
        self.changes
            .send_modify(|version| *version = version.wrapping_add(1));
    }

    /// Has `listener` hear `channels` on every node, until the returned
    /// subscription is dropped; starts the per-node tasks the first time
    /// (on the current runtime: without one, the next call tries again).
    pub(crate) fn subscribe(
        self: &Arc<Self>,
        channels: &[Arc<str>],
        listener: Arc<dyn Listener>,
    ) -> Subscription {
        let subscription = self.register(channels, listener);
        self.start();
        subscription
    }

    fn register(
        self: &Arc<Self>,
        channels: &[Arc<str>],
        listener: Arc<dyn Listener>,
    ) -> Subscription {
        let mut added = false;
        let mut live = Vec::new();
        let id = {
            let mut guard = self.registry();
            let registry = &mut *guard;
            let id = registry.next;
            registry.next = registry.next.wrapping_add(1);
            for name in channels {
                let channel = registry.channels.entry(name.clone()).or_insert_with(|| {
                    added = true;
                    Channel {
                        listeners: Vec::new(),
                        subscribed: vec![false; self.nodes],
                        lost: vec![false; self.nodes],
                    }
                });
                channel.listeners.push((id, listener.clone()));
                if channel.subscribed.iter().any(|&on| on) {
                    live.push(name.clone());
                }
            }
            id
        };
        if added {
            self.changed();
        }
        // Already subscribed for someone else: for this listener, the
        // subscription starts now, and what was published before went
        // unheard as if the channel had just been subscribed.
        for name in live {
            listener.hear(&name, Heard::Subscribed { missed: true });
        }
        Subscription {
            pubsub: self.clone(),
            id,
            channels: channels.to_vec(),
        }
    }

    /// Starts the per-node tasks, once.
    fn start(self: &Arc<Self>) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.started.store(false, Ordering::Release);
            return;
        };
        for node in 0..self.nodes {
            runtime.spawn(follow_node(self.clone(), node));
        }
    }

    /// Stops the tasks, closing the connections: the manager is gone.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.changed();
    }

    fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    /// The channels someone listens on.
    fn wanted(&self) -> HashSet<Arc<str>> {
        self.registry().channels.keys().cloned().collect()
    }

    fn idle(&self) -> bool {
        self.registry().channels.is_empty()
    }

    /// Records that `node` subscribed to `channels` (or still is), and tells
    /// the listeners of each channel it was not subscribed to there: as
    /// missed, if no other node has it subscribed or this node had lost it.
    fn subscribed(&self, node: usize, channels: &[Arc<str>]) {
        let mut heard = Vec::new();
        {
            let mut registry = self.registry();
            for name in channels {
                let Some(channel) = registry.channels.get_mut(name) else {
                    continue;
                };
                let first = !channel.subscribed.iter().any(|&on| on);
                let lost = channel.lost.get_mut(node).is_some_and(std::mem::take);
                let Some(on) = channel.subscribed.get_mut(node) else {
                    continue;
                };
                if !std::mem::replace(on, true) {
                    heard.push((name.clone(), first || lost, listeners(channel)));
                }
            }
        }
        for (name, missed, listeners) in heard {
            for listener in listeners {
                listener.hear(&name, Heard::Subscribed { missed });
            }
        }
    }

    /// Records that `node` no longer listens on any channel.
    fn disconnected(&self, node: usize) {
        for channel in self.registry().channels.values_mut() {
            if let Some(on) = channel.subscribed.get_mut(node)
                && std::mem::take(on)
                && let Some(lost) = channel.lost.get_mut(node)
            {
                *lost = true;
            }
        }
    }

    /// A message arrived on `name`: every listener of it hears it.
    fn deliver(&self, name: &str, payload: &[u8]) {
        let listeners = match self.registry().channels.get(name) {
            Some(channel) => listeners(channel),
            None => return,
        };
        for listener in listeners {
            listener.hear(name, Heard::Message(payload));
        }
    }
}

/// A channel's listeners, to call outside the registry's lock.
fn listeners(channel: &Channel) -> Vec<Arc<dyn Listener>> {
    channel
        .listeners
        .iter()
        .map(|(_, listener)| listener.clone())
        .collect()
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut gone = Vec::new();
        let mut removed = false;
        {
            let mut registry = self.pubsub.registry();
            for name in &self.channels {
                let Some(channel) = registry.channels.get_mut(name) else {
                    continue;
                };
                let (mine, others) = std::mem::take(&mut channel.listeners)
                    .into_iter()
                    .partition(|(id, _)| *id == self.id);
                channel.listeners = others;
                gone.push(mine);
                if channel.listeners.is_empty() {
                    registry.channels.remove(name);
                    removed = true;
                }
            }
        }
        // The listeners are dropped outside the lock, whatever they hold.
        drop(gone);
        if removed {
            self.pubsub.changed();
        }
    }
}

/// Keeps one node's pub/sub connection subscribed to the channels with
/// listeners, until the service stops or the manager is gone. Connects
/// only once someone listens; after a failure, or a lost connection, it
/// waits [`RECONNECT_DELAY`] before connecting again.
async fn follow_node(pubsub: Arc<PubSub>, node: usize) {
    let mut changes = pubsub.changes.subscribe();
    loop {
        // Seen before the state is read, never after: a stop (or a new
        // listener) that comes between the two then still wakes the wait
        // below. The other order lost a stop that came in between, and the
        // task and its connection outlived the manager.
        changes.borrow_and_update();
        if pubsub.stopped() {
            return;
        }
        if pubsub.idle() {
            if changes.changed().await.is_err() {
                return;
            }
            continue;
        }
        let (connection, timeout) = {
            let Some(core) = pubsub.core.upgrade() else {
                return;
            };
            let Ok(server) = core.node(node) else {
                return;
            };
            let timeout = core.node_timeout();
            (server.pubsub(timeout).await, timeout)
        };
        match connection {
            Ok(connection) => {
                listen(connection, &pubsub, node, timeout, &mut changes).await;
                pubsub.disconnected(node);
                tracing::debug!(op = "subscribe", node, "pub/sub connection closed");
            }
            Err(error) => {
                tracing::debug!(op = "subscribe", node, error = %error, "pub/sub connection failed");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(RECONNECT_DELAY) => {}
            _ = wait_stopped(&pubsub, &mut changes) => return,
        }
    }
}

/// Resolves once the service stopped.
async fn wait_stopped(pubsub: &PubSub, changes: &mut watch::Receiver<u64>) {
    while !pubsub.stopped() {
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// Subscribes and unsubscribes as listeners come and go, and hands them
/// what the node publishes; returns when the connection is lost, a
/// subscription fails, or the service stops.
async fn listen(
    connection: redis::aio::PubSub,
    pubsub: &PubSub,
    node: usize,
    timeout: Duration,
    changes: &mut watch::Receiver<u64>,
) {
    let (mut sink, mut messages) = connection.split();
    let mut subscribed: HashSet<Arc<str>> = HashSet::new();
    loop {
        // Seen first, then the state read (see `follow_node`).
        changes.borrow_and_update();
        if pubsub.stopped() {
            return;
        }
        let wanted = pubsub.wanted();
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
        // Also for channels subscribed before a listener came back to them.
        let current: Vec<Arc<str>> = wanted.intersection(&subscribed).cloned().collect();
        pubsub.subscribed(node, &current);

        // Until the listeners change: hand them each message.
        loop {
            tokio::select! {
                message = messages.next() => match message {
                    Some(message) => {
                        pubsub.deliver(message.get_channel_name(), message.get_payload_bytes());
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

    /// Records what it hears.
    #[derive(Debug, Default)]
    struct Recorder {
        heard: Mutex<Vec<String>>,
    }

    impl Recorder {
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut *self.heard.lock().expect("recorder"))
        }
    }

    impl Listener for Recorder {
        fn hear(&self, channel: &str, heard: Heard<'_>) {
            let event = match heard {
                Heard::Subscribed { missed } => format!("{channel} subscribed missed={missed}"),
                Heard::Message(payload) => {
                    format!("{channel} {}", String::from_utf8_lossy(payload))
                }
            };
            self.heard.lock().expect("recorder").push(event);
        }
    }

    /// No manager: the service's manager is gone, as it is here, and no
    /// node is reached.
    struct NoManager;

    impl Nodes for NoManager {
        fn node(&self, _: usize) -> Result<&Node, NodeError> {
            Err(NodeError::UnexpectedReply("no such node".to_owned()))
        }

        fn node_timeout(&self) -> Duration {
            Duration::from_secs(1)
        }
    }

    fn service(nodes: usize) -> Arc<PubSub> {
        Arc::new(PubSub::new(Weak::<NoManager>::new(), nodes))
    }

    fn names(names: &[&str]) -> Vec<Arc<str>> {
        names.iter().map(|&name| Arc::from(name)).collect()
    }

    #[test]
    fn channels_are_wanted_while_someone_listens() {
        let pubsub = service(3);
        let mut changes = pubsub.changes.subscribe();
        let a = pubsub.register(&names(&["r"]), Arc::new(Recorder::default()));
        let b = pubsub.register(&names(&["r", "s"]), Arc::new(Recorder::default()));
        assert!(changes.has_changed().expect("sender"));
        changes.borrow_and_update();
        assert_eq!(pubsub.wanted(), names(&["r", "s"]).into_iter().collect());
        drop(a);
        assert!(!changes.has_changed().expect("sender"), "r is still wanted");
        drop(b);
        assert!(changes.has_changed().expect("sender"));
        assert!(pubsub.idle());
    }

    #[test]
    fn every_listener_of_a_channel_hears_its_messages_and_nobody_else() {
        let pubsub = service(3);
        let (first, second, other) = (
            Arc::new(Recorder::default()),
            Arc::new(Recorder::default()),
            Arc::new(Recorder::default()),
        );
        let _first = pubsub.register(&names(&["e:released", "e:elected"]), first.clone());
        let second_subscription = pubsub.register(&names(&["e:released"]), second.clone());
        let _other = pubsub.register(&names(&["x:released"]), other.clone());
        pubsub.deliver("e:released", b"1");
        pubsub.deliver("e:elected", b"2");
        pubsub.deliver("unknown", b"3");
        assert_eq!(first.take(), ["e:released 1", "e:elected 2"]);
        assert_eq!(second.take(), ["e:released 1"]);
        assert!(other.take().is_empty());
        // Gone: it hears nothing more, the others still do.
        drop(second_subscription);
        pubsub.deliver("e:released", b"4");
        assert_eq!(first.take(), ["e:released 4"]);
        assert!(second.take().is_empty());
    }

    #[test]
    fn each_new_subscription_on_a_node_is_heard_the_first_one_marked() {
        let pubsub = service(3);
        let listener = Arc::new(Recorder::default());
        let _subscription = pubsub.register(&names(&["r"]), listener.clone());
        let channels = names(&["r"]);
        pubsub.subscribed(1, &channels);
        pubsub.subscribed(0, &channels);
        // Still subscribed: nothing new.
        pubsub.subscribed(1, &channels);
        assert_eq!(
            listener.take(),
            ["r subscribed missed=true", "r subscribed missed=false"]
        );
        // Every node lost: the next subscription is a first one again.
        for node in 0..3 {
            pubsub.disconnected(node);
        }
        pubsub.subscribed(2, &channels);
        assert_eq!(listener.take(), ["r subscribed missed=true"]);

        // A listener joining a channel subscribed for someone else hears
        // its own first subscription at once; the first one hears nothing.
        let late = Arc::new(Recorder::default());
        let _late = pubsub.register(&names(&["r"]), late.clone());
        assert_eq!(late.take(), ["r subscribed missed=true"]);
        assert!(listener.take().is_empty());
        // Node 0 comes back after losing its connection: both missed what
        // it alone published meanwhile.
        pubsub.subscribed(0, &channels);
        assert_eq!(late.take(), ["r subscribed missed=true"]);
        assert_eq!(listener.take(), ["r subscribed missed=true"]);
    }

    #[test]
    fn a_node_subscribed_again_after_losing_its_connection_may_have_missed_messages() {
        let pubsub = service(3);
        let listener = Arc::new(Recorder::default());
        let _subscription = pubsub.register(&names(&["r"]), listener.clone());
        let channels = names(&["r"]);
        for node in 0..3 {
            pubsub.subscribed(node, &channels);
        }
        listener.take();
        // Node 1's connection drops and comes back while the others stay
        // subscribed: a cleanup's release published on node 1 alone went
        // unheard, and no other node has a copy of it.
        pubsub.disconnected(1);
        pubsub.subscribed(1, &channels);
        assert_eq!(listener.take(), ["r subscribed missed=true"]);
        // Lost only once: subscribed still, nothing new.
        pubsub.subscribed(1, &channels);
        assert!(listener.take().is_empty());
        // A connection that had nothing subscribed lost nothing.
        let other = Arc::new(Recorder::default());
        let _other = pubsub.register(&names(&["s"]), other.clone());
        pubsub.disconnected(2);
        let s = names(&["s"]);
        pubsub.subscribed(0, &s);
        pubsub.subscribed(2, &s);
        assert_eq!(
            other.take(),
            ["s subscribed missed=true", "s subscribed missed=false"]
        );
    }

    #[tokio::test]
    async fn a_stopped_service_ends_its_tasks() {
        let pubsub = service(2);
        let mut changes = pubsub.changes.subscribe();
        changes.borrow_and_update();
        pubsub.stop();
        assert!(changes.has_changed().expect("sender"));
        // Both resolve (the hang guard is not a timing assertion).
        let ended = async {
            wait_stopped(&pubsub, &mut changes).await;
            follow_node(pubsub.clone(), 0).await;
        };
        tokio::time::timeout(Duration::from_secs(60), ended)
            .await
            .expect("the task ends");
    }
}
