//! Distributed mutual exclusion over Redis: the **Redlock** algorithm across
//! N independent Redis masters, with a single Redis as the N = 1 case.
//!
//! ```no_run
//! use std::time::Duration;
//! use quorumlock::Redlock;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), quorumlock::Error> {
//! let locks = Redlock::new([
//!     "redis://127.0.0.1:7001",
//!     "redis://127.0.0.1:7002",
//!     "redis://127.0.0.1:7003",
//! ])?;
//! let guard = locks.lock("orders:42", Duration::from_secs(10)).await?;
//! // At most one holder at a time runs here, for guard.validity().
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # The algorithm
//!
//! With N nodes, quorum `Q = N/2 + 1` and a requested `ttl`, one attempt:
//!
//! 1. takes `start` from tokio's monotonic clock (never the wall clock);
//! 2. draws a token of 128 bits from the OS's secure random source;
//! 3. sends `SET key token NX PX ttl` to **all** nodes in parallel, each
//!    request bounded by the per-node timeout and by the validity budget;
//! 4. decides as soon as `Q` nodes granted, or as soon as `Q` grants have
//!    become impossible, without waiting for stragglers;
//! 5. computes `validity = ttl - (now - start) - drift`, with
//!    `drift = ttl * drift_factor + 2ms`; the lock is held only if a quorum
//!    granted **and** validity is positive. The guard's deadline is
//!    `start + ttl - drift`;
//! 6. on failure (or cancellation) removes its token from every node that
//!    may hold it — including nodes that timed out, since a timed-out `SET`
//!    may still have landed;
//! 7. [`Redlock::lock`] retries after `delay + U(0, jitter)`, up to an
//!    attempt limit and/or a wait deadline ([`Retry`]).
//!
//! Release runs a token-checked script on every node (`if GET key == token
//! then DEL`). Extension is a Redlock round with the holder's own token: per
//! node, atomically, a key holding the token gets the new ttl, an absent key
//! (the node restarted empty, or evicted it) is set again, and a key holding
//! another value is left alone and counts as a refusal. A lock is never
//! released or extended without its token, and never restored over another
//! value.
//!
//! # Holding
//!
//! A grant is decided at a quorum, but the requests still in flight are
//! followed to their answers, so the lock reaches every reachable node
//! ([`Lease::confirmed`] counts them) and survives the loss of any minority.
//! Because extensions restore the lock where it went missing, an
//! auto-extended lock ([`LockGuard::auto_extend`]) also lives through a
//! rolling restart of every node, one at a time, each down for longer than
//! the ttl or persisting its data.
//!
//! # Guarantees and their limits
//!
//! While the guard's deadline has not passed, no other client of these
//! nodes holds the same resource, **provided that**:
//!
//! - node clocks do not run faster than the client's by more than the drift
//!   allowance (`drift_factor`, default 1 %);
//! - the holder's process is not paused (GC, swap, SIGSTOP) past its
//!   deadline between checking [`Lease::validity`] and acting: no lock
//!   library can prevent that, so race critical work against
//!   [`Lease::lost`];
//! - a node that crashes either persists keys (`appendonly yes` with
//!   `appendfsync always`) or stays down for longer than the largest ttl
//!   before rejoining; a node that restarts empty at once can hand a second
//!   client a lock the first still holds.
//!
//! # Keys
//!
//! The Redis key is the resource name verbatim (an optional prefix can be
//! configured) and the value is the token, so quorumlock excludes, and is
//! excluded by, other Redlock clients locking the same names on the same
//! nodes.
//!
//! # Redis Cluster
//!
//! A node may be a whole Redis Cluster ([`RedlockBuilder::cluster`]): it
//! casts one vote, each key goes to the master owning its hash slot, and
//! the cluster client follows redirections and failovers. Keys that one
//! script touches together must share a slot, which only a hash tag
//! guarantees: `{lock_goods}:300` and `{lock_goods}:300:fence`.
//!
//! # Features
//!
//! - `testkit`: [`testkit`] spawns real `redis-server` processes on free
//!   loopback ports — independent masters or a real Redis Cluster — and
//!   kills, pauses, resumes and restarts them; [`testkit::FaultProxy`] adds
//!   latency, dropped connections, blackholes and held-back replies.
//! - `cli`: the `quorumlock` binary (`exec`, `status`, `demo`).
//! - `tls`: `rediss://` node URLs, over rustls (no OpenSSL). Server
//!   certificates and host names are always verified, against Mozilla's
//!   root CAs or the CA given to
//!   [`RedlockBuilder::tls_root_certificate`](RedlockBuilder::tls_root_certificate);
//!   `#insecure` URLs are refused. If the process has not installed a
//!   default rustls `CryptoProvider` by the first TLS connection, ring's is
//!   installed.
#![forbid(unsafe_code)]
#![deny(missing_docs, missing_debug_implementations)]
// Library code never panics and never prints; tests and examples may.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::print_stdout,
        clippy::print_stderr
    )
)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod builder;
mod calls;
mod error;
mod guard;
mod lease;
mod node;
mod quorum;
mod redlock;
mod renew;
mod retry;
mod scripts;
mod tasks;
mod token;
mod wakeup;

#[cfg(feature = "testkit")]
pub mod testkit;

pub use builder::{DEFAULT_DRIFT_FACTOR, DEFAULT_NODE_TIMEOUT, MAX_TTL, RedlockBuilder};
pub use error::{ArgumentError, ConfigError, Error, NodeError, NodeFailure};
pub use guard::{LockGuard, ReleaseSummary};
pub use lease::{Lease, LossReason};
pub use redlock::{FENCE_SUFFIX, Redlock};
pub use retry::{DEFAULT_RETRY_ATTEMPTS, DEFAULT_RETRY_DELAY, DEFAULT_RETRY_JITTER, Retry};
pub use scripts::{FUNCTIONS_LIBRARY, ScriptMode};
pub use token::Token;
pub use wakeup::{RELEASED_SUFFIX, WakeOnRelease};

// Compiles the README's examples as doctests, so they cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
