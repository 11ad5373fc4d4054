//! The round engine's poller, for every fan-out (acquire, extend, release,
//! renewal, leader read): the requests to the nodes polled together, with
//! the polling task's own waker, under one timer for their common
//! deadline. (`FuturesUnordered` polls only woken futures, but it
//! reschedules its task each time it has polled all of them once — on
//! every fan-out's first poll — which on a multi-thread runtime wakes
//! another worker thread: two futex wake-ups per lock+release. A waker of
//! each request's own, to poll only the woken one, costs an allocation per
//! request: more than polling a handful of requests, one per node, that
//! are not ready yet — a check of a channel each.)

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use crate::error::NodeError;
use crate::node::Deadline;

/// Requests to nodes, each with its node's index: all of a fan-out's, then
/// those still in flight when it decided. A concrete type (not
/// `impl Future`), so that it does not capture the request-building
/// closure and can outlive it.
pub(crate) struct Requests<Fut> {
    calls: Vec<Call<Fut>>,
    /// The requests' common deadline, enforced here with one timer for all
    /// of them (made with [`Deadline::timed_by_caller`], they set none of
    /// their own).
    ///
    /// [`Deadline::timed_by_caller`]: crate::node::Deadline::timed_by_caller
    deadline: Option<Timer>,
}

/// When requests in flight time out, and how long they were given then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Due {
    pub(crate) at: Instant,
    pub(crate) given: Duration,
}

struct Timer {
    /// How long the requests were given, for their timeout errors.
    given: Duration,
    timer: Pin<Box<Sleep>>,
}

struct Call<Fut> {
    node: usize,
    /// Boxed by the caller (a fan-out boxes each request anyway): not
    /// boxed again here.
    request: Fut,
}

impl<Fut> Requests<Fut> {
    /// No requests at all.
    pub(crate) fn none() -> Self {
        Self {
            calls: Vec::new(),
            deadline: None,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.calls.is_empty()
    }

    /// How many requests are in flight.
    pub(crate) fn len(&self) -> usize {
        self.calls.len()
    }

    /// The indices of the nodes whose requests are in flight.
    pub(crate) fn nodes(&self) -> impl Iterator<Item = usize> + '_ {
        self.calls.iter().map(|call| call.node)
    }

    /// The requests still in flight, each with its node, and when their
    /// common deadline times them out: for whoever follows them apart.
    pub(crate) fn into_parts(self) -> (impl Iterator<Item = (usize, Fut)>, Option<Due>) {
        let due = self.deadline.map(|deadline| Due {
            at: deadline.timer.deadline(),
            given: deadline.given,
        });
        let calls = self.calls.into_iter().map(|call| (call.node, call.request));
        (calls, due)
    }
}

impl<T, Fut: Future<Output = Result<T, NodeError>> + Unpin> Requests<Fut> {
    /// Starts nothing: the requests run when polled through [`next`](Self::next).
    /// With a `deadline` (common to every request), one timer enforces it
    /// for all: a request still in flight then fails with
    /// [`NodeError::Timeout`], as it would on a timer of its own.
    pub(crate) fn new(
        requests: impl IntoIterator<Item = (usize, Fut)>,
        deadline: Option<Deadline>,
    ) -> Self {
        let calls = requests
            .into_iter()
            .map(|(node, request)| Call { node, request })
            .collect();
        let deadline = deadline.map(|deadline| Timer {
            given: deadline.given(),
            timer: Box::pin(tokio::time::sleep_until(deadline.at())),
        });
        Self { calls, deadline }
    }

    /// The next answer, with its node's index; `None` once all answered.
    pub(crate) async fn next(&mut self) -> Option<(usize, Fut::Output)> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<(usize, Fut::Output)>> {
        if self.calls.is_empty() {
            return Poll::Ready(None);
        }
        for k in 0..self.calls.len() {
            if let Poll::Ready(answer) = Pin::new(&mut self.calls[k].request).poll(cx) {
                // Requests not looked at in this round are polled by the
                // next call.
                let call = self.calls.swap_remove(k);
                return Poll::Ready(Some((call.node, answer)));
            }
        }
        if let Some(deadline) = &mut self.deadline
            && deadline.timer.as_mut().poll(cx).is_ready()
            && let Some(call) = self.calls.pop()
        {
            // Past the deadline: what is still in flight timed out.
            return Poll::Ready(Some((call.node, Err(NodeError::Timeout(deadline.given)))));
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn answers_come_in_completion_order_with_their_node() {
        let delays = [30u64, 10, 20];
        let mut calls = Requests::new(
            delays.iter().enumerate().map(|(i, &ms)| {
                (
                    i,
                    Box::pin(async move {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        Ok::<_, NodeError>(ms)
                    }),
                )
            }),
            None,
        );
        assert_eq!(calls.nodes().collect::<Vec<_>>(), [0, 1, 2]);
        assert!(matches!(calls.next().await, Some((1, Ok(10)))));
        assert!(matches!(calls.next().await, Some((2, Ok(20)))));
        assert!(!calls.is_empty());
        assert!(matches!(calls.next().await, Some((0, Ok(30)))));
        assert!(calls.next().await.is_none());
        assert!(calls.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn the_rest_can_be_polled_by_another_task() {
        let mut calls = Requests::new(
            (0..3u64).map(|i| {
                (
                    i as usize,
                    Box::pin(async move {
                        tokio::time::sleep(Duration::from_millis(10 * i)).await;
                        Ok::<_, NodeError>(i)
                    }),
                )
            }),
            None,
        );
        assert!(matches!(calls.next().await, Some((0, Ok(0)))));
        let rest = tokio::spawn(async move {
            let mut answers = Vec::new();
            while let Some((node, _)) = calls.next().await {
                answers.push(node);
            }
            answers
        });
        assert_eq!(rest.await.expect("task"), [1, 2]);
    }

    #[tokio::test(start_paused = true)]
    async fn one_timer_times_out_every_request_still_in_flight() {
        let start = Instant::now();
        let deadline = start + Duration::from_millis(100);
        let mut calls = Requests::new(
            [10u64, 500, 1000].into_iter().enumerate().map(|(i, ms)| {
                (
                    i,
                    Box::pin(async move {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        Ok::<_, NodeError>(ms)
                    }),
                )
            }),
            Some(Deadline::timed_by_caller(deadline)),
        );
        assert!(matches!(calls.next().await, Some((0, Ok(10)))));
        let mut late = Vec::new();
        while let Some((node, answer)) = calls.next().await {
            assert!(
                matches!(answer, Err(NodeError::Timeout(given)) if given == Duration::from_millis(100))
            );
            late.push(node);
        }
        late.sort_unstable();
        assert_eq!(late, [1, 2]);
        assert_eq!(Instant::now(), deadline, "at the deadline, not later");
    }
}
