//! `RedlockBuilder`: the configuration of a manager, its defaults, and its
//! validation. Building is pure: no I/O, no runtime needed.

use std::collections::HashSet;
use std::fmt;
use std::time::Duration;

use crate::node::{Node, redact_url};
use crate::redlock::{Config, Redlock};
use crate::{ConfigError, Error, Retry, WakeOnRelease};

/// Default per-node timeout for one request.
///
/// Large enough that a loaded but healthy node is not declared down (a
/// fixed 50 ms was seen failing healthy nodes with 256 concurrent lockers on
/// 2 cores), small against typical lock TTLs. A lock attempt never waits
/// longer than its validity budget, whatever this is set to.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(250);

/// Default clock drift factor: nodes' clocks may run up to 1 % fast
/// against the client's.
pub const DEFAULT_DRIFT_FACTOR: f64 = 0.01;

/// The largest accepted lock time-to-live. Hold longer with
/// [`LockGuard::extend`](crate::LockGuard::extend).
pub const MAX_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// Builds a [`Redlock`] manager.
///
/// Every setter returns the builder; [`build`](Self::build) validates the
/// whole configuration and returns a typed [`ConfigError`] for anything
/// nonsensical. Building does no I/O: it succeeds while every node is
/// down, and connections are made on first use.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use quorumlock::{Redlock, Retry};
///
/// # fn main() -> Result<(), quorumlock::Error> {
/// let locks = Redlock::builder()
///     .nodes(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
///     .node_timeout(Duration::from_millis(100))
///     .drift_factor(0.01)
///     .retry(Retry::default().wait(Duration::from_secs(5)))
///     .key_prefix("myapp:lock:")
///     .build()?;
/// assert_eq!(locks.quorum(), 2);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
#[must_use = "a builder does nothing until build() is called"]
pub struct RedlockBuilder {
    urls: Vec<String>,
    node_timeout: Duration,
    drift_factor: f64,
    retry: Retry,
    key_prefix: String,
    wake_on_release: WakeOnRelease,
}

impl Default for RedlockBuilder {
    fn default() -> Self {
        Self {
            urls: Vec::new(),
            node_timeout: DEFAULT_NODE_TIMEOUT,
            drift_factor: DEFAULT_DRIFT_FACTOR,
            retry: Retry::default(),
            key_prefix: String::new(),
            wake_on_release: WakeOnRelease::default(),
        }
    }
}

impl fmt::Debug for RedlockBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let urls: Vec<String> = self.urls.iter().map(|u| redact_url(u)).collect();
        f.debug_struct("RedlockBuilder")
            .field("urls", &urls)
            .field("node_timeout", &self.node_timeout)
            .field("drift_factor", &self.drift_factor)
            .field("retry", &self.retry)
            .field("key_prefix", &self.key_prefix)
            .field("wake_on_release", &self.wake_on_release)
            .finish()
    }
}

impl RedlockBuilder {
    /// Adds nodes, one independent Redis master each, as URLs:
    /// `redis://[[user]:password@]host:port[/db]`. Password and ACL user in
    /// the URL are used to authenticate. Calls accumulate.
    pub fn nodes<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.urls
            .extend(urls.into_iter().map(|u| u.as_ref().to_owned()));
        self
    }

    /// Adds one node; see [`nodes`](Self::nodes).
    pub fn node(self, url: impl AsRef<str>) -> Self {
        self.nodes([url])
    }

    /// How long one request to one node may take before the node counts as
    /// failed for that request. A lock attempt additionally never waits
    /// past its validity budget (`ttl - drift`). Must be greater than zero.
    /// Defaults to [`DEFAULT_NODE_TIMEOUT`].
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// The clock drift factor: the allowance subtracted from every validity
    /// is `ttl * drift_factor + 2ms`. Must be finite and in `[0, 1)`.
    /// Defaults to [`DEFAULT_DRIFT_FACTOR`].
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = factor;
        self
    }

    /// The retry policy of [`Redlock::lock`]. Defaults to
    /// [`Retry::default()`].
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// A prefix put in front of every resource name to form the Redis key,
    /// e.g. `"myapp:lock:"`. Defaults to none: the key is the resource name
    /// verbatim, so other Redlock clients locking the same names on the
    /// same nodes exclude and are excluded by quorumlock.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// How [`Redlock::lock`] waits while a resource is held: by polling
    /// after the retry delay, or woken by the release (see
    /// [`WakeOnRelease`]). Defaults to [`WakeOnRelease::Never`].
    pub fn wake_on_release(mut self, wake: WakeOnRelease) -> Self {
        self.wake_on_release = wake;
        self
    }

    /// Validates the configuration and builds the manager. No I/O.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConfig`] with a [`ConfigError`] for: no nodes, a
    /// malformed URL (shown with credentials masked), the same node twice,
    /// a zero node timeout, a drift factor that is negative, NaN, infinite
    /// or not below 1, and a retry policy allowing zero attempts.
    pub fn build(self) -> Result<Redlock, Error> {
        if self.urls.is_empty() {
            return Err(ConfigError::NoNodes.into());
        }
        if self.node_timeout.is_zero() {
            return Err(ConfigError::ZeroNodeTimeout.into());
        }
        if !(self.drift_factor.is_finite() && (0.0..1.0).contains(&self.drift_factor)) {
            return Err(ConfigError::DriftFactor(self.drift_factor).into());
        }
        self.retry.validate()?;

        let mut seen = HashSet::new();
        let mut nodes = Vec::with_capacity(self.urls.len());
        for url in &self.urls {
            let node = Node::parse(url)?;
            if !seen.insert(node.label().clone()) {
                return Err(ConfigError::DuplicateNode {
                    node: node.label().to_string(),
                }
                .into());
            }
            nodes.push(node);
        }
        Ok(Redlock::from_config(Config {
            nodes,
            node_timeout: self.node_timeout,
            drift_factor: self.drift_factor,
            retry: self.retry,
            key_prefix: self.key_prefix,
            renewer: Default::default(),
            background: Default::default(),
            wakeups: match self.wake_on_release {
                WakeOnRelease::Never => None,
                WakeOnRelease::Subscribe => Some(Default::default()),
            },
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_error(result: Result<Redlock, Error>) -> ConfigError {
        match result {
            Err(Error::InvalidConfig(e)) => e,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn builds_without_io_or_runtime() {
        // Nothing listens on port 1; building must not care.
        let locks = Redlock::new(["redis://127.0.0.1:1", "redis://127.0.0.1:2"]).expect("valid");
        assert_eq!(locks.quorum(), 2);
    }

    #[test]
    fn different_databases_are_different_nodes() {
        assert!(Redlock::new(["redis://127.0.0.1:1/0", "redis://127.0.0.1:1/1"]).is_ok());
    }

    #[test]
    fn debug_output_masks_credentials() {
        let builder = Redlock::builder().node("redis://user:hunter2@127.0.0.1:1");
        assert!(!format!("{builder:?}").contains("hunter2"));
        let locks = builder.build().expect("valid");
        assert!(!format!("{locks:?}").contains("hunter2"));
        let err = config_error(Redlock::new(["redis://user:hunter2@h:notaport"]));
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
}
