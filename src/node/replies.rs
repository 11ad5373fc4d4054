//! Where the group commit's queued requests get their answers: blocks of
//! answer slots shared by the requests that queue between two batches,
//! where a channel per request cost an allocation per request (nine of a
//! lock cycle's allocations on five nodes under load).
//!
//! A request's [`Reply`] is its caller's end, a future of its answer; its
//! [`Answer`] goes with the request into the queue, and answers it once.
//! Either end may be dropped first: a dropped `Reply` marks the request
//! [abandoned](Answer::is_abandoned) (its caller stopped waiting), and an
//! `Answer` dropped unanswered ends its `Reply` with an error.
//!
//! An answer is a status (a lock's request, as `batch.lua` answers it)
//! or a script's raw reply ([`Answered`]: a primitive's own script call,
//! which its caller decodes), or an error.
//!
//! Each slot is its own: its state is one atomic, its waker an
//! [`AtomicWaker`], and each fills a cache line of its own. A request's
//! two ends touch only their slot, so the callers of a node's requests on
//! every worker thread and the task answering them do not queue on one
//! lock: a caller's fan-out polls each of its requests every time any of
//! them answers, and a lock shared by the block was taken each time.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::task::AtomicWaker;
use redis::Value;

use crate::error::NodeError;

/// What a queued request got.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Answered {
    /// A lock's request: its status, as `batch.lua` answers it.
    Status(u8),
    /// A primitive's own script call: the script's reply, as it came.
    Value(Value),
}

type Outcome = Result<Answered, NodeError>;

/// A slot's state bits. An answer sets `ANSWERED` with its code in the low
/// bits, or with `CARRIED` when it is an error or a script's reply, kept
/// in the slot's `carried`.
const CODE: u8 = 0b0000_1111;
const ANSWERED: u8 = 0b0001_0000;
const CARRIED: u8 = 0b0010_0000;
/// The caller stopped waiting: its `Reply` was dropped.
const ABANDONED: u8 = 0b0100_0000;
/// The `Answer` was dropped without answering.
const UNANSWERED: u8 = 0b1000_0000;

/// A block of slots, for requests that queue for the same batches: as
/// many as it was made for, and no more (the queue starts another block
/// when one is full).
#[derive(Debug)]
pub(super) struct Slots {
    slots: Box<[Slot]>,
    /// How many requests took a slot (past the block's size once full).
    opened: AtomicUsize,
}

/// A cache line each: the slots of requests from different threads sit
/// side by side.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Slot {
    state: AtomicU8,
    /// The caller's task, while it waits.
    waker: AtomicWaker,
    /// An error answer, or a script's reply (rare on a lock's path:
    /// boxed, so that a slot stays one line).
    carried: Mutex<Option<Box<Result<Value, NodeError>>>>,
}

impl Slots {
    /// A block of `requests` slots.
    pub(super) fn with_capacity(requests: usize) -> Arc<Self> {
        Arc::new(Self {
            slots: (0..requests).map(|_| Slot::default()).collect(),
            opened: AtomicUsize::new(0),
        })
    }

    /// How many requests took a slot here.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.opened.load(Ordering::Relaxed).min(self.slots.len())
    }

    /// How many requests it has room for.
    pub(super) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// A new request's two ends; `None` when the block is full.
    pub(super) fn open(self: &Arc<Self>) -> Option<(Answer, Reply)> {
        let at = self.opened.fetch_add(1, Ordering::Relaxed);
        if at >= self.slots.len() {
            return None;
        }
        let answer = Answer {
            slots: self.clone(),
            at,
            answered: false,
        };
        let reply = Reply {
            slots: self.clone(),
            at,
            done: false,
        };
        Some((answer, reply))
    }

    fn slot(&self, at: usize) -> Option<&Slot> {
        self.slots.get(at)
    }
}

impl Slot {
    /// Sets `bits` in the state and wakes the caller's task, if it waits.
    fn finish(&self, bits: u8) {
        self.state.fetch_or(bits, Ordering::AcqRel);
        self.waker.wake();
    }

    /// The outcome `state` says the slot holds, if it holds one.
    fn outcome(&self, state: u8) -> Option<Outcome> {
        if state & ANSWERED != 0 {
            if state & CARRIED == 0 {
                return Some(Ok(Answered::Status(state & CODE)));
            }
            let carried = self
                .carried
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            return Some(match carried.map(|carried| *carried) {
                Some(Ok(value)) => Ok(Answered::Value(value)),
                Some(Err(error)) => Err(error),
                None => Err(dropped()),
            });
        }
        (state & UNANSWERED != 0).then(|| Err(dropped()))
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
        let Some(slot) = self.slots.slot(self.at) else {
            return;
        };
        let bits = match outcome {
            // Every code a request answers fits in `CODE`; one that does
            // not would read as another status, so it is sent as an error.
            Ok(Answered::Status(code)) if code & !CODE == 0 => ANSWERED | code,
            Ok(Answered::Status(code)) => {
                let error = NodeError::UnexpectedReply(format!("status {code}"));
                return self.carry(slot, Err(error));
            }
            Ok(Answered::Value(value)) => return self.carry(slot, Ok(value)),
            Err(error) => return self.carry(slot, Err(error)),
        };
        slot.finish(bits);
    }

    fn carry(&self, slot: &Slot, carried: Result<Value, NodeError>) {
        if slot.state.load(Ordering::Acquire) & ABANDONED == 0 {
            *slot.carried.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(carried));
        }
        slot.finish(ANSWERED | CARRIED);
    }

    /// Whether the caller stopped waiting for the answer.
    pub(super) fn is_abandoned(&self) -> bool {
        self.slots
            .slot(self.at)
            .is_none_or(|slot| slot.state.load(Ordering::Acquire) & ABANDONED != 0)
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        if !self.answered
            && let Some(slot) = self.slots.slot(self.at)
        {
            slot.finish(UNANSWERED);
        }
    }
}

/// The caller's end of a request: its answer, or an error if the request
/// was dropped unanswered (the runtime is shutting down).
#[derive(Debug)]
pub(super) struct Reply {
    slots: Arc<Slots>,
    at: usize,
    /// Its outcome was taken.
    done: bool,
}

impl Future for Reply {
    type Output = Outcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        let Some(slot) = self.slots.slot(self.at) else {
            return Poll::Ready(Err(dropped()));
        };
        let outcome = match slot.outcome(slot.state.load(Ordering::Acquire)) {
            Some(outcome) => outcome,
            None => {
                slot.waker.register(cx.waker());
                // Answered between the look and the registration: its
                // wake-up may have found no waker.
                match slot.outcome(slot.state.load(Ordering::Acquire)) {
                    Some(outcome) => outcome,
                    None => return Poll::Pending,
                }
            }
        };
        self.done = true;
        Poll::Ready(outcome)
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if !self.done
            && let Some(slot) = self.slots.slot(self.at)
        {
            slot.state.fetch_or(ABANDONED, Ordering::AcqRel);
            // Not kept until the block goes: its task may be long gone.
            drop(slot.waker.take());
            drop(
                slot.carried
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take(),
            );
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
        let slots = Slots::with_capacity(3);
        let (first, first_reply) = slots.open().expect("room");
        let (second, second_reply) = slots.open().expect("room");
        let (third, third_reply) = slots.open().expect("room");
        assert_eq!(slots.len(), 3);
        assert!(slots.open().is_none(), "a full block takes no more");
        assert_eq!(slots.len(), 3);
        let waiting = tokio::spawn(first_reply);
        second.send(Ok(Answered::Status(2)));
        third.send(Err(NodeError::Timeout(std::time::Duration::from_millis(5))));
        first.send(Ok(Answered::Status(1)));
        assert!(matches!(
            waiting.await.expect("task"),
            Ok(Answered::Status(1))
        ));
        assert!(matches!(second_reply.await, Ok(Answered::Status(2))));
        assert!(matches!(third_reply.await, Err(NodeError::Timeout(_))));
    }

    #[tokio::test]
    async fn a_caller_that_stops_waiting_is_seen_by_the_queue() {
        let slots = Slots::with_capacity(2);
        let (kept, kept_reply) = slots.open().expect("room");
        let (left, left_reply) = slots.open().expect("room");
        drop(left_reply);
        assert!(left.is_abandoned());
        assert!(!kept.is_abandoned());
        // Answering it anyway is harmless.
        left.send(Ok(Answered::Status(1)));
        kept.send(Ok(Answered::Status(0)));
        assert!(matches!(kept_reply.await, Ok(Answered::Status(0))));
    }

    #[tokio::test]
    async fn a_request_dropped_unanswered_ends_its_caller_with_an_error() {
        let slots = Slots::with_capacity(1);
        let (answer, reply) = slots.open().expect("room");
        let waiting = tokio::spawn(reply);
        tokio::task::yield_now().await;
        drop(answer);
        let outcome = waiting.await.expect("task");
        assert!(
            matches!(&outcome, Err(NodeError::UnexpectedReply(text)) if text.contains("shutting down")),
            "{outcome:?}"
        );
    }

    #[tokio::test]
    async fn an_answer_before_the_first_poll_is_not_missed() {
        let slots = Slots::with_capacity(2);
        let (answer, reply) = slots.open().expect("room");
        answer.send(Ok(Answered::Status(2)));
        assert!(matches!(reply.await, Ok(Answered::Status(2))));
        // An error, answered while its caller waits, reaches it whole.
        let (answer, reply) = slots.open().expect("room");
        let waiting = tokio::spawn(reply);
        tokio::task::yield_now().await;
        answer.send(Err(NodeError::UnexpectedReply("refused".to_owned())));
        let outcome = waiting.await.expect("task");
        assert!(
            matches!(&outcome, Err(NodeError::UnexpectedReply(text)) if text == "refused"),
            "{outcome:?}"
        );
    }

    #[test]
    fn a_status_out_of_range_is_an_error_not_another_status() {
        let slots = Slots::with_capacity(1);
        let (answer, reply) = slots.open().expect("room");
        answer.send(Ok(Answered::Status(0x11)));
        let outcome = futures::executor::block_on(reply);
        assert!(
            matches!(outcome, Err(NodeError::UnexpectedReply(_))),
            "{outcome:?}"
        );
    }

    #[tokio::test]
    async fn a_scripts_reply_reaches_its_caller_whole() {
        let slots = Slots::with_capacity(2);
        let (answer, reply) = slots.open().expect("room");
        let waiting = tokio::spawn(reply);
        tokio::task::yield_now().await;
        let value = Value::Array(vec![Value::Int(0), Value::Int(3)]);
        answer.send(Ok(Answered::Value(value.clone())));
        assert_eq!(
            waiting.await.expect("task").ok(),
            Some(Answered::Value(value))
        );
        // Its caller gone, nothing is kept for it.
        let (answer, reply) = slots.open().expect("room");
        drop(reply);
        answer.send(Ok(Answered::Value(Value::Int(1))));
        assert!(slots.slot(1).is_some_and(|slot| {
            slot.carried
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_none()
        }));
    }

    #[test]
    fn a_slot_is_a_cache_line() {
        assert_eq!(std::mem::size_of::<Slot>(), 64);
    }
}
