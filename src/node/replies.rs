//! Where the group commit's queued requests get their answers: one shared
//! block of answer slots for all the requests that queue between two
//! batches, where a channel per request cost an allocation per request
//! (nine of a lock cycle's allocations on five nodes under load).
//!
//! A request's [`Reply`] is its caller's end, a future of its answer; its
//! [`Answer`] goes with the request into the queue, and answers it once.
//! Either end may be dropped first: a dropped `Reply` marks the request
//! [abandoned](Answer::is_abandoned) (its caller stopped waiting), and an
//! `Answer` dropped unanswered ends its `Reply` with an error.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use crate::error::NodeError;

type Outcome = Result<u8, NodeError>;

/// The slots of the requests that queued for the same batches.
#[derive(Debug, Default)]
pub(super) struct Slots {
    slots: Mutex<Vec<Slot>>,
}

#[derive(Debug, Default)]
struct Slot {
    answer: Option<Outcome>,
    /// The caller's task, while it waits.
    waker: Option<Waker>,
    /// The caller stopped waiting: its `Reply` was dropped.
    abandoned: bool,
    /// The `Answer` was dropped without answering.
    unanswered: bool,
}

impl Slots {
    /// Room for `requests` requests before the vector must grow.
    pub(super) fn with_capacity(requests: usize) -> Arc<Self> {
        Arc::new(Self {
            slots: Mutex::new(Vec::with_capacity(requests)),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Slot>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many requests took a slot here.
    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }

    /// A new request's two ends.
    pub(super) fn open(self: &Arc<Self>) -> (Answer, Reply) {
        let at = {
            let mut slots = self.lock();
            slots.push(Slot::default());
            slots.len() - 1
        };
        let answer = Answer {
            slots: self.clone(),
            at,
            answered: false,
        };
        let reply = Reply {
            slots: self.clone(),
            at,
        };
        (answer, reply)
    }

    /// Runs `f` on slot `at`, and wakes the waker it takes out.
    fn finish(&self, at: usize, f: impl FnOnce(&mut Slot)) {
        let waker = {
            let mut slots = self.lock();
            let Some(slot) = slots.get_mut(at) else {
                return;
            };
            f(slot);
            slot.waker.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// The queue's end of a request: answers it once.
#[derive(Debug)]
pub(super) struct Answer {
    slots: Arc<Slots>,
    at: usize,
    answered: bool,
}

impl Answer {
    /// Answers the request (nothing happens if its caller stopped waiting).
    pub(super) fn send(mut self, outcome: Outcome) {
        self.answered = true;
        self.slots.finish(self.at, |slot| {
            if !slot.abandoned {
                slot.answer = Some(outcome);
            }
        });
    }

    /// Whether the caller stopped waiting for the answer.
    pub(super) fn is_abandoned(&self) -> bool {
        self.slots
            .lock()
            .get(self.at)
            .is_none_or(|slot| slot.abandoned)
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        if !self.answered {
            self.slots.finish(self.at, |slot| slot.unanswered = true);
        }
    }
}

/// The caller's end of a request: its answer, or an error if the request
/// was dropped unanswered (the runtime is shutting down).
#[derive(Debug)]
pub(super) struct Reply {
    slots: Arc<Slots>,
    at: usize,
}

impl Future for Reply {
    type Output = Outcome;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        let mut slots = self.slots.lock();
        let Some(slot) = slots.get_mut(self.at) else {
            return Poll::Ready(Err(dropped()));
        };
        if let Some(outcome) = slot.answer.take() {
            return Poll::Ready(outcome);
        }
        if slot.unanswered {
            return Poll::Ready(Err(dropped()));
        }
        match &mut slot.waker {
            Some(waker) => waker.clone_from(cx.waker()),
            None => slot.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if let Some(slot) = self.slots.lock().get_mut(self.at) {
            slot.abandoned = true;
            slot.answer = None;
            slot.waker = None;
        }
    }
}

fn dropped() -> NodeError {
    NodeError::UnexpectedReply("request dropped: the runtime is shutting down".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_request_gets_its_own_answer_in_any_order() {
        let slots = Slots::with_capacity(1);
        let (first, first_reply) = slots.open();
        let (second, second_reply) = slots.open();
        let (third, third_reply) = slots.open();
        assert_eq!(slots.len(), 3, "grows past its capacity");
        let waiting = tokio::spawn(first_reply);
        second.send(Ok(2));
        third.send(Err(NodeError::Timeout(std::time::Duration::from_millis(5))));
        first.send(Ok(1));
        assert!(matches!(waiting.await.expect("task"), Ok(1)));
        assert!(matches!(second_reply.await, Ok(2)));
        assert!(matches!(third_reply.await, Err(NodeError::Timeout(_))));
    }

    #[tokio::test]
    async fn a_caller_that_stops_waiting_is_seen_by_the_queue() {
        let slots = Slots::with_capacity(2);
        let (kept, kept_reply) = slots.open();
        let (left, left_reply) = slots.open();
        drop(left_reply);
        assert!(left.is_abandoned());
        assert!(!kept.is_abandoned());
        // Answering it anyway is harmless.
        left.send(Ok(1));
        kept.send(Ok(0));
        assert!(matches!(kept_reply.await, Ok(0)));
    }

    #[tokio::test]
    async fn a_request_dropped_unanswered_ends_its_caller_with_an_error() {
        let slots = Slots::with_capacity(1);
        let (answer, reply) = slots.open();
        let waiting = tokio::spawn(reply);
        tokio::task::yield_now().await;
        drop(answer);
        let outcome = waiting.await.expect("task");
        assert!(
            matches!(&outcome, Err(NodeError::UnexpectedReply(text)) if text.contains("shutting down")),
            "{outcome:?}"
        );
    }
}
