//! Fair lock waiters told their turn (opt-in, with wake-ups): a fair
//! lock's release publishes the id of the waiter now first in line on the
//! lock's turn channel (`<key>:turn`), and only that waiter, wherever it
//! is, tries at once. A manager listens on a turn channel while one of its
//! tasks waits in that line; a message for another manager's waiter is
//! ignored. A lost message only means waiting for the next poll.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::metrics;
use crate::node::pubsub::{Heard, Listener, PubSub, Subscription};

/// A manager's fair lock waiters, by turn channel.
#[derive(Debug)]
pub(crate) struct Turns {
    pubsub: Arc<PubSub>,
    channels: Mutex<HashMap<Arc<str>, Line>>,
}

/// One turn channel some of the manager's tasks wait on.
#[derive(Debug)]
struct Line {
    waiters: Arc<Waiters>,
    /// Listening on the channel for as long as someone waits.
    _subscription: Subscription,
}

/// The waiters of one channel, by id.
#[derive(Debug, Default)]
struct Waiters {
    by_id: Mutex<HashMap<Arc<str>, Arc<Notify>>>,
}

impl Waiters {
    fn by_id(&self) -> MutexGuard<'_, HashMap<Arc<str>, Arc<Notify>>> {
        // The map stays consistent even if a holder of the lock panicked.
        self.by_id.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Listener for Waiters {
    /// A turn wakes the waiter it names, if it is one of ours; a
    /// subscription that may have missed one wakes them all (each tries
    /// once, and the ones not first in line wait again).
    fn hear(&self, _channel: &str, heard: Heard<'_>) {
        match heard {
            Heard::Message(id) => {
                let id = String::from_utf8_lossy(id);
                if let Some(notify) = self.by_id().get(&*id) {
                    metrics::wakeup();
                    notify.notify_one();
                }
            }
            Heard::Subscribed { missed: true } => {
                for notify in self.by_id().values() {
                    notify.notify_one();
                }
            }
            Heard::Subscribed { missed: false } => {}
        }
    }
}

impl Turns {
    /// The fair waiters of a manager, listening on its `pubsub` service.
    pub(crate) fn new(pubsub: Arc<PubSub>) -> Self {
        Self {
            pubsub,
            channels: Mutex::default(),
        }
    }

    fn channels(&self) -> MutexGuard<'_, HashMap<Arc<str>, Line>> {
        // The map stays consistent even if a holder of the lock panicked.
        self.channels.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers waiter `id` on the turn channel `channel`, listening on it
    /// from its first waiter to its last.
    pub(crate) fn waiter(self: &Arc<Self>, channel: &Arc<str>, id: &Arc<str>) -> TurnWaiter {
        let notify = Arc::new(Notify::new());
        let mut channels = self.channels();
        let line = channels.entry(channel.clone()).or_insert_with(|| {
            let waiters = Arc::new(Waiters::default());
            Line {
                _subscription: self
                    .pubsub
                    .subscribe(std::slice::from_ref(channel), waiters.clone()),
                waiters,
            }
        });
        line.waiters.by_id().insert(id.clone(), notify.clone());
        TurnWaiter {
            turns: self.clone(),
            channel: channel.clone(),
            id: id.clone(),
            notify,
        }
    }
}

/// One task's place among the waiters told their turn, for as long as it
/// waits in line.
#[derive(Debug)]
pub(crate) struct TurnWaiter {
    turns: Arc<Turns>,
    channel: Arc<str>,
    id: Arc<str>,
    notify: Arc<Notify>,
}

impl TurnWaiter {
    /// Resolves when a release (or a leaving waiter) said this waiter's
    /// turn came, or did so while it was not waiting.
    pub(crate) async fn told(&self) {
        self.notify.notified().await;
    }
}

impl Drop for TurnWaiter {
    fn drop(&mut self) {
        let gone = {
            let mut channels = self.turns.channels();
            let empty = channels.get(&self.channel).is_some_and(|line| {
                let mut by_id = line.waiters.by_id();
                by_id.remove(&self.id);
                by_id.is_empty()
            });
            if empty {
                channels.remove(&self.channel)
            } else {
                None
            }
        };
        // Unsubscribed outside the lock.
        drop(gone);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Weak;

    use futures::FutureExt;

    use super::*;
    use crate::round::Core;

    fn turns() -> Arc<Turns> {
        Arc::new(Turns::new(Arc::new(PubSub::new(Weak::<Core>::new(), 3))))
    }

    fn told(waiter: &TurnWaiter) -> bool {
        waiter.told().now_or_never().is_some()
    }

    fn hear(turns: &Turns, channel: &str, heard: Heard<'_>) {
        let channels = turns.channels();
        let line = channels.get(channel).expect("listened on");
        line.waiters.hear(channel, heard);
    }

    #[tokio::test]
    async fn a_turn_wakes_only_the_waiter_it_names() {
        let turns = turns();
        let channel: Arc<str> = Arc::from("k:turn");
        let a = turns.waiter(&channel, &Arc::from("a"));
        let b = turns.waiter(&channel, &Arc::from("b"));
        hear(&turns, "k:turn", Heard::Message(b"b"));
        assert!(!told(&a));
        assert!(told(&b));
        // Another manager's waiter: nobody here.
        hear(&turns, "k:turn", Heard::Message(b"c"));
        assert!(!told(&a) && !told(&b));
    }

    #[tokio::test]
    async fn a_subscription_that_may_have_missed_a_turn_wakes_every_waiter() {
        let turns = turns();
        let channel: Arc<str> = Arc::from("k:turn");
        let a = turns.waiter(&channel, &Arc::from("a"));
        let b = turns.waiter(&channel, &Arc::from("b"));
        hear(&turns, "k:turn", Heard::Subscribed { missed: false });
        assert!(!told(&a) && !told(&b));
        hear(&turns, "k:turn", Heard::Subscribed { missed: true });
        assert!(told(&a) && told(&b));
    }

    #[tokio::test]
    async fn the_channel_is_left_with_its_last_waiter() {
        let turns = turns();
        let channel: Arc<str> = Arc::from("k:turn");
        let a = turns.waiter(&channel, &Arc::from("a"));
        let b = turns.waiter(&channel, &Arc::from("b"));
        drop(a);
        assert!(turns.channels().contains_key("k:turn"));
        drop(b);
        assert!(!turns.channels().contains_key("k:turn"));
    }
}
