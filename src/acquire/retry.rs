//! The retry policy of `lock`: randomized delays, an attempt limit and an
//! optional overall wait deadline.

use std::num::NonZeroU32;
use std::time::Duration;

use tokio::time::Instant;

/// How [`Redlock::lock`](crate::Redlock::lock) retries a failed attempt.
///
/// Between two attempts it sleeps `delay + U(0, jitter)`: a fixed base plus
/// full jitter, drawn uniformly at random, so that competing clients do not
/// retry in lockstep. It stops after `attempts` attempts, or once the
/// overall `wait` deadline (measured from the call) has passed, whichever
/// comes first; the last attempt starts no later than the deadline.
///
/// **The rule for `wait`:** a policy given a [`wait`](Retry::wait)
/// deadline and no attempt limit of its own retries until that deadline:
/// `Retry::default().wait(30 s)` waits up to 30 s for a busy resource,
/// however many attempts that takes. The default limit of
/// [`Self::DEFAULT_ATTEMPTS`] applies only to a policy without a deadline;
/// a limit set with [`attempts`](Retry::attempts) (or [`Retry::none`])
/// applies beside the deadline, whichever ends first.
/// Only transient failures are retried (see
/// [`Error::is_retryable`](crate::Error::is_retryable)).
///
/// A busy resource and unreachable nodes are different waits: with
/// [`Retry::unavailable_attempts`], `lock` gives up after that many
/// attempts in a row failed with [`Error::Unavailable`](crate::Error::Unavailable)
/// (too few nodes reachable), however long it may wait for a busy
/// resource. The command line's `exec --wait` waits this way, with
/// [`Self::DEFAULT_ATTEMPTS`]. A campaign
/// ([`Election::campaign`](crate::Election::campaign)) waits for another
/// leader without limit, but for unreachable nodes only as long as this
/// policy lets `lock` wait for them: `unavailable_attempts` in a row (else
/// the attempt limit), or the `wait`.
///
/// # Examples
///
/// Wait up to five seconds for a busy resource, however many attempts that
/// takes:
///
/// ```
/// use std::time::Duration;
/// use quorumlock::Retry;
///
/// let retry = Retry::default()
///     .wait(Duration::from_secs(5))
///     .delay(Duration::from_millis(20))
///     .jitter(Duration::from_millis(30));
/// # let _ = retry;
/// ```
///
/// Wait for as long as it takes (the blog-era `-1`):
///
/// ```
/// let retry = quorumlock::Retry::forever();
/// # let _ = retry;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Retry {
    /// `None`: unlimited. `Some(0)` is representable so that `build()` can
    /// reject it with a typed error instead of this setter panicking.
    attempts: Option<u32>,
    /// Whether `attempts` was chosen (a setter, `none`, `forever`) rather
    /// than left at its default, which a `wait` deadline lifts.
    chosen: bool,
    /// Attempts in a row that may fail with `Unavailable`; `None`: as many
    /// as `attempts` and `wait` allow.
    unavailable: Option<u32>,
    delay: Duration,
    jitter: Duration,
    wait: Option<Duration>,
}

impl Default for Retry {
    /// [`Self::DEFAULT_ATTEMPTS`] attempts, [`Self::DEFAULT_DELAY`] plus up to
    /// [`Self::DEFAULT_JITTER`] between them, no overall deadline.
    fn default() -> Self {
        Self {
            attempts: Some(Retry::DEFAULT_ATTEMPTS),
            chosen: false,
            unavailable: None,
            delay: Retry::DEFAULT_DELAY,
            jitter: Retry::DEFAULT_JITTER,
            wait: None,
        }
    }
}

impl Retry {
    /// Default number of attempts `lock` makes, the first included.
    pub const DEFAULT_ATTEMPTS: u32 = 10;
    /// Default fixed part of the delay between attempts.
    pub const DEFAULT_DELAY: Duration = Duration::from_millis(100);
    /// Default upper bound of the random part of the delay between attempts.
    pub const DEFAULT_JITTER: Duration = Duration::from_millis(100);

    /// A single attempt, no retry: `lock` then behaves like `try_lock`.
    pub fn none() -> Self {
        Self::default().attempts(1)
    }

    /// Unlimited attempts and no deadline: wait until the lock is free.
    pub fn forever() -> Self {
        Self {
            attempts: None,
            chosen: true,
            unavailable: None,
            wait: None,
            ..Self::default()
        }
    }

    /// At most `attempts` attempts, the first included, also with a
    /// [`wait`](Retry::wait) deadline (whichever ends first). Zero is
    /// rejected by `build()`. Defaults to [`Self::DEFAULT_ATTEMPTS`] without
    /// a deadline, and to no limit with one.
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = Some(attempts);
        self.chosen = true;
        self
    }

    /// No limit on the number of attempts; combine with [`Retry::wait`] to
    /// bound the time instead (which a deadline alone already does).
    pub fn unlimited_attempts(mut self) -> Self {
        self.attempts = None;
        self.chosen = true;
        self
    }

    /// The attempt limit in force: the default one is lifted by a `wait`
    /// deadline (see the type's docs).
    fn attempt_limit(&self) -> Option<u32> {
        match (self.chosen, self.wait) {
            (false, Some(_)) => None,
            _ => self.attempts,
        }
    }

    /// Give up after `attempts` attempts in a row that found too few nodes
    /// reachable ([`Error::Unavailable`](crate::Error::Unavailable)), with
    /// that error, even while [`Retry::wait`] or unlimited attempts would
    /// go on: wait for a busy resource, not for an outage. An attempt that
    /// fails otherwise (the resource is busy) starts the count again. Zero
    /// is rejected by `build()`. By default there is no such limit: only
    /// the attempt limit and the deadline apply.
    pub fn unavailable_attempts(mut self, attempts: u32) -> Self {
        self.unavailable = Some(attempts);
        self
    }

    /// A campaign's schedule under this policy, for a campaign started at
    /// `started`: attempts that find another candidate leading are retried
    /// without limit or deadline, but an outage ends it as it ends `lock`.
    /// A run of attempts in a row that found too few nodes reachable stops
    /// after [`Retry::unavailable_attempts`] of them (or, without that
    /// limit, the policy's attempt limit), or once it has lasted the
    /// policy's [`wait`](Retry::wait) (counted from the campaign's start or
    /// from the last attempt that failed otherwise). A policy with neither
    /// limit nor deadline ([`Retry::forever`]) campaigns through an outage.
    pub(crate) fn campaign(&self, started: Instant) -> Schedule {
        Schedule {
            attempts: None,
            unavailable: self
                .unavailable
                .or(self.attempt_limit())
                .and_then(NonZeroU32::new),
            deadline: None,
            outage: self.wait,
            ..self.schedule(started)
        }
    }

    /// The fixed part of the delay between attempts. Defaults to
    /// [`Self::DEFAULT_DELAY`].
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// The upper bound of the uniformly random part of the delay. Defaults
    /// to [`Self::DEFAULT_JITTER`].
    pub fn jitter(mut self, jitter: Duration) -> Self {
        self.jitter = jitter;
        self
    }

    /// Stop retrying once `wait` has passed since `lock` was called; `lock`
    /// then fails with [`Error::WaitTimeout`](crate::Error::WaitTimeout).
    /// Without an attempt limit of its own ([`attempts`](Retry::attempts)),
    /// the policy retries until then, however many attempts that takes.
    /// Defaults to no deadline.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Remove the overall deadline (the default).
    pub fn wait_forever(mut self) -> Self {
        self.wait = None;
        self
    }

    /// Checks the policy; `build()` calls this.
    pub(crate) fn validate(&self) -> Result<(), crate::ConfigError> {
        match (self.attempts, self.unavailable) {
            (Some(0), _) | (_, Some(0)) => Err(crate::ConfigError::ZeroAttempts),
            _ => Ok(()),
        }
    }

    /// A fresh schedule for one call of `lock` that started at `started`.
    pub(crate) fn schedule(&self, started: Instant) -> Schedule {
        Schedule {
            attempts: self.attempt_limit().and_then(NonZeroU32::new),
            unavailable: self.unavailable.and_then(NonZeroU32::new),
            unavailable_in_a_row: 0,
            delay: self.delay,
            jitter: self.jitter,
            deadline: self.wait.map(|w| started + w),
            outage: None,
            available_at: started,
            made: 0,
            started,
        }
    }
}

/// The state of one `lock` call's retries.
#[derive(Debug)]
pub(crate) struct Schedule {
    attempts: Option<NonZeroU32>,
    unavailable: Option<NonZeroU32>,
    unavailable_in_a_row: u32,
    delay: Duration,
    jitter: Duration,
    deadline: Option<Instant>,
    /// How long a run of unavailable attempts may last (a campaign's).
    outage: Option<Duration>,
    /// Since when the current run of unavailable attempts has lasted: the
    /// start, or the last failure that was not for want of nodes.
    available_at: Instant,
    made: u32,
    /// When the call started.
    started: Instant,
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Sleep this long, then try again.
    RetryAfter(Duration),
    /// The attempt limit is used up, or the limit of unavailable attempts
    /// in a row (of their number, or for a campaign, of how long they
    /// lasted).
    AttemptsExhausted,
    /// The wait deadline has passed.
    DeadlinePassed,
}

impl Schedule {
    /// Records a failed attempt at `now` and decides what comes next.
    /// `unit` is a uniform sample in `[0, 1)` that scales the jitter;
    /// `unavailable` says the attempt found too few nodes reachable.
    pub(crate) fn after_failure(&mut self, now: Instant, unit: f64, unavailable: bool) -> Next {
        self.made = self.made.saturating_add(1);
        self.unavailable_in_a_row = match unavailable {
            true => self.unavailable_in_a_row.saturating_add(1),
            false => {
                self.available_at = now;
                0
            }
        };
        if let Some(limit) = self.attempts
            && self.made >= limit.get()
        {
            return Next::AttemptsExhausted;
        }
        if let Some(limit) = self.unavailable
            && self.unavailable_in_a_row >= limit.get()
        {
            return Next::AttemptsExhausted;
        }
        if let Some(outage) = self.outage
            && unavailable
            && now.saturating_duration_since(self.available_at) >= outage
        {
            return Next::AttemptsExhausted;
        }
        let wanted = self.delay(unit);
        match self.deadline {
            Some(deadline) if now >= deadline => Next::DeadlinePassed,
            // The last attempt starts at the deadline at the latest.
            Some(deadline) => Next::RetryAfter(wanted.min(deadline - now)),
            None => Next::RetryAfter(wanted),
        }
    }

    pub(crate) fn attempts_made(&self) -> u32 {
        self.made
    }

    /// The policy's delay between attempts, its jitter scaled by `unit` (a
    /// uniform sample in `[0, 1)`), without counting an attempt.
    pub(crate) fn delay(&self, unit: f64) -> Duration {
        self.delay + self.jitter.mul_f64(unit.clamp(0.0, 1.0))
    }

    /// When the call stops waiting, if the policy says.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// How long the call has waited so far.
    pub(crate) fn waited(&self) -> Duration {
        self.started.elapsed()
    }
}

/// A uniform sample in `[0, 1)` for the jitter.
pub(crate) fn jitter_unit() -> f64 {
    rand::random::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test(start_paused = true)]
    async fn attempts_limit_counts_the_first_attempt() {
        let now = Instant::now();
        let mut s = Retry::default()
            .attempts(3)
            .jitter(Duration::ZERO)
            .schedule(now);
        assert_eq!(
            s.after_failure(now, 0.5, false),
            Next::RetryAfter(Retry::DEFAULT_DELAY)
        );
        assert_eq!(
            s.after_failure(now, 0.5, false),
            Next::RetryAfter(Retry::DEFAULT_DELAY)
        );
        assert_eq!(s.after_failure(now, 0.5, false), Next::AttemptsExhausted);
        assert_eq!(s.attempts_made(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn none_means_exactly_one_attempt() {
        let now = Instant::now();
        let mut s = Retry::none().schedule(now);
        assert_eq!(s.after_failure(now, 0.0, false), Next::AttemptsExhausted);
    }

    #[tokio::test(start_paused = true)]
    async fn delay_is_base_plus_scaled_jitter() {
        let now = Instant::now();
        let retry = Retry::forever().delay(10 * MS).jitter(100 * MS);
        let mut s = retry.schedule(now);
        assert_eq!(s.after_failure(now, 0.0, false), Next::RetryAfter(10 * MS));
        assert_eq!(s.after_failure(now, 0.5, false), Next::RetryAfter(60 * MS));
        // Out-of-range samples are clamped, never producing a huge delay.
        assert_eq!(s.after_failure(now, 7.0, false), Next::RetryAfter(110 * MS));
    }

    #[tokio::test(start_paused = true)]
    async fn forever_never_gives_up() {
        let now = Instant::now();
        let mut s = Retry::forever().schedule(now);
        for _ in 0..10_000 {
            assert!(matches!(
                s.after_failure(now, 0.3, false),
                Next::RetryAfter(_)
            ));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn wait_deadline_clamps_the_last_sleep_then_stops() {
        let start = Instant::now();
        let retry = Retry::forever()
            .delay(100 * MS)
            .jitter(Duration::ZERO)
            .wait(250 * MS);
        let mut s = retry.schedule(start);
        assert_eq!(
            s.after_failure(start, 0.0, false),
            Next::RetryAfter(100 * MS)
        );
        tokio::time::advance(200 * MS).await;
        // 50ms are left: sleep only that long, so the last attempt starts at
        // the deadline rather than after it.
        assert_eq!(
            s.after_failure(Instant::now(), 0.0, false),
            Next::RetryAfter(50 * MS)
        );
        tokio::time::advance(50 * MS).await;
        assert_eq!(
            s.after_failure(Instant::now(), 0.0, false),
            Next::DeadlinePassed
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_alone_retries_until_it_passes() {
        let start = Instant::now();
        let mut s = Retry::default()
            .wait(Duration::from_secs(8))
            .jitter(Duration::ZERO)
            .schedule(start);
        // Far past the default attempt limit: still retrying.
        for _ in 0..(10 * Retry::DEFAULT_ATTEMPTS) {
            assert!(matches!(
                s.after_failure(Instant::now(), 0.0, false),
                Next::RetryAfter(_)
            ));
        }
        tokio::time::advance(Duration::from_secs(8)).await;
        assert_eq!(
            s.after_failure(Instant::now(), 0.0, false),
            Next::DeadlinePassed
        );
        // Without a deadline, the default limit holds.
        let mut s = Retry::default().schedule(start);
        for _ in 1..Retry::DEFAULT_ATTEMPTS {
            assert!(matches!(
                s.after_failure(start, 0.0, false),
                Next::RetryAfter(_)
            ));
        }
        assert_eq!(s.after_failure(start, 0.0, false), Next::AttemptsExhausted);
    }

    #[tokio::test(start_paused = true)]
    async fn attempts_and_deadline_whichever_first() {
        let start = Instant::now();
        let mut s = Retry::default()
            .attempts(2)
            .wait(Duration::from_secs(60))
            .schedule(start);
        assert!(matches!(
            s.after_failure(start, 0.0, false),
            Next::RetryAfter(_)
        ));
        assert_eq!(s.after_failure(start, 0.0, false), Next::AttemptsExhausted);
    }

    #[tokio::test(start_paused = true)]
    async fn unavailable_attempts_in_a_row_end_an_unlimited_wait() {
        let start = Instant::now();
        let mut s = Retry::default()
            .unlimited_attempts()
            .wait(Duration::from_secs(60))
            .unavailable_attempts(3)
            .schedule(start);
        // Busy attempts are not counted; a busy one restarts the count.
        for _ in 0..100 {
            assert!(matches!(
                s.after_failure(start, 0.0, false),
                Next::RetryAfter(_)
            ));
        }
        assert!(matches!(
            s.after_failure(start, 0.0, true),
            Next::RetryAfter(_)
        ));
        assert!(matches!(
            s.after_failure(start, 0.0, true),
            Next::RetryAfter(_)
        ));
        assert!(matches!(
            s.after_failure(start, 0.0, false),
            Next::RetryAfter(_)
        ));
        assert!(matches!(
            s.after_failure(start, 0.0, true),
            Next::RetryAfter(_)
        ));
        assert!(matches!(
            s.after_failure(start, 0.0, true),
            Next::RetryAfter(_)
        ));
        assert_eq!(s.after_failure(start, 0.0, true), Next::AttemptsExhausted);
        assert_eq!(s.attempts_made(), 106);

        // Without the limit, unavailable attempts go on until the deadline.
        let mut s = Retry::forever().schedule(start);
        for _ in 0..1000 {
            assert!(matches!(
                s.after_failure(start, 0.0, true),
                Next::RetryAfter(_)
            ));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_campaign_waits_for_a_leader_but_not_through_an_outage() {
        let start = Instant::now();
        // The default policy: busy without limit; 10 unavailable in a row
        // (its attempt limit) end the campaign.
        let mut s = Retry::default().campaign(start);
        for _ in 0..1000 {
            assert!(matches!(
                s.after_failure(start, 0.0, false),
                Next::RetryAfter(_)
            ));
        }
        for _ in 1..Retry::DEFAULT_ATTEMPTS {
            assert!(matches!(
                s.after_failure(start, 0.0, true),
                Next::RetryAfter(_)
            ));
        }
        assert_eq!(s.after_failure(start, 0.0, true), Next::AttemptsExhausted);

        // An explicit limit of unavailable attempts is kept.
        let mut s = Retry::default().unavailable_attempts(1).campaign(start);
        assert_eq!(s.after_failure(start, 0.0, true), Next::AttemptsExhausted);

        // With only a wait deadline, an outage may last that long; busy
        // attempts are not bounded by it, and one restarts the outage's clock.
        let mut s = Retry::default()
            .unlimited_attempts()
            .wait(250 * MS)
            .jitter(Duration::ZERO)
            .campaign(start);
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(
            s.after_failure(Instant::now(), 0.0, false),
            Next::RetryAfter(Retry::DEFAULT_DELAY)
        );
        tokio::time::advance(200 * MS).await;
        assert_eq!(
            s.after_failure(Instant::now(), 0.0, true),
            Next::RetryAfter(Retry::DEFAULT_DELAY)
        );
        tokio::time::advance(50 * MS).await;
        assert_eq!(
            s.after_failure(Instant::now(), 0.0, true),
            Next::AttemptsExhausted
        );

        // Without limit or deadline, a campaign goes on through an outage.
        let mut s = Retry::forever().campaign(start);
        for _ in 0..1000 {
            assert!(matches!(
                s.after_failure(start, 0.0, true),
                Next::RetryAfter(_)
            ));
        }
    }

    #[test]
    fn zero_attempts_is_a_config_error() {
        assert_eq!(
            Retry::default().attempts(0).validate(),
            Err(crate::ConfigError::ZeroAttempts)
        );
        assert_eq!(
            Retry::default().unavailable_attempts(0).validate(),
            Err(crate::ConfigError::ZeroAttempts)
        );
        assert_eq!(Retry::forever().validate(), Ok(()));
    }

    #[test]
    fn jitter_unit_is_in_range() {
        for _ in 0..1000 {
            let u = jitter_unit();
            assert!((0.0..1.0).contains(&u));
        }
    }
}
