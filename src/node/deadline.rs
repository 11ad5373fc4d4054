//! The per-call deadline: each request is bounded by the node timeout and
//! by its caller's own deadline, whichever comes first.

use std::future::Future;
use std::time::Duration;

use futures::FutureExt;
use futures::future::Either;
use tokio::time::Instant;

use crate::error::NodeError;

/// When a node call must have answered, how long that gave it, and whose
/// timer says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadline {
    at: Instant,
    /// From when the deadline was made to `at`, for the call's timeout
    /// error: read from the clock once, not again by every call that
    /// shares it (a fan-out's, or the requests that queue for a batch).
    given: Duration,
    /// The caller times the call out (a fan-out, with one timer for all of
    /// its calls): the call sets no timer of its own.
    timed_by_caller: bool,
}

impl Deadline {
    /// When the call must have answered.
    pub(crate) fn at(&self) -> Instant {
        self.at
    }

    /// How long the call was given when the deadline was made.
    pub(crate) fn given(&self) -> Duration {
        self.given
    }

    /// A deadline that the caller enforces, e.g. with one timer for all the
    /// calls of a fan-out ([`Requests`](crate::round::calls::Requests)). A
    /// call given it runs unbounded unless its caller stops polling it.
    pub(crate) fn timed_by_caller(at: Instant) -> Self {
        Self {
            timed_by_caller: true,
            ..Self::from(at)
        }
    }
}

/// A deadline that the call enforces with a timer of its own.
impl From<Instant> for Deadline {
    fn from(at: Instant) -> Self {
        Self {
            at,
            given: at.saturating_duration_since(Instant::now()),
            timed_by_caller: false,
        }
    }
}

/// Bounds a node call by `deadline` (unless its caller does), reporting how
/// long it was given. Not an `async fn`, which would hold `call` twice (as
/// its argument, and inside the timeout): a node request is moved whole
/// into its fan-out, so its size is paid on every request.
pub(crate) fn within<T, F>(
    deadline: Deadline,
    call: F,
) -> impl Future<Output = Result<T, NodeError>>
where
    F: Future<Output = Result<T, NodeError>>,
{
    if deadline.timed_by_caller {
        return Either::Left(call);
    }
    let given = deadline.given;
    Either::Right(
        tokio::time::timeout_at(deadline.at, call)
            .map(move |answer| answer.unwrap_or(Err(NodeError::Timeout(given)))),
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_call_keeps_its_own_time_unless_its_caller_does() {
        let never = |deadline| within(deadline, std::future::pending::<Result<(), NodeError>>());
        let at = Instant::now() + Duration::from_secs(1);
        let answer = never(Deadline::from(at)).await;
        assert!(
            matches!(answer, Err(NodeError::Timeout(given)) if given == Duration::from_secs(1))
        );
        assert_eq!(Instant::now(), at);

        // Timed by its caller, it sets no timer: long past its deadline, it
        // still waits (the caller's timer would have ended it).
        let call = never(Deadline::timed_by_caller(Instant::now()));
        tokio::pin!(call);
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(futures::poll!(call.as_mut()).is_pending());
    }
}
