//! Real `redis-server` processes on free loopback ports, for tests, examples
//! and demos (feature `testkit`).
//!
//! Each server runs in its own temporary directory, bound to 127.0.0.1,
//! without persistence unless asked: independent masters ([`RedisNodes`])
//! or members of a real Redis Cluster ([`RedisCluster`]). Servers can be
//! killed (SIGKILL), paused (SIGSTOP), resumed (SIGCONT) and restarted on
//! the same port.
//! Every process is killed when its handle drops — including when a test
//! fails or panics.
//!
//! The binary is `$QUORUMLOCK_REDIS_SERVER` if set (a `redis-server` or a
//! `valkey-server`), else `redis-server` on `PATH`, else `valkey-server`.
//! Its version is asked once ([`server_version`]), and a server is given
//! only options its version knows: Redis 6.2 and later, and Valkey.
//!
//! With the `tls` feature too, [`ServerOptions::tls`] starts servers that
//! speak TLS only, with certificates signed by [`test_ca`].
//!
//! [`history`] records what a test's lock holders believed, on one clock,
//! and checks it: no overlapping critical sections, no lost update, fences
//! increasing, no grant while a majority is down. Histories are saved as
//! JSON Lines and checked again offline, without servers. [`report`] draws
//! a history and its verdict as one self-contained HTML page.
//!
//! # Examples
//!
//! ```no_run
//! use quorumlock::{Redlock, testkit::RedisNodes};
//! # use std::time::Duration;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let nodes = RedisNodes::start(5)?;
//! let locks = Redlock::new(nodes.urls())?;
//! nodes[0].kill();
//! nodes[1].pause()?;
//! let guard = locks.lock("jobs:a", Duration::from_secs(5)).await?; // 3 of 5 still answer
//! nodes[1].resume()?;
//! nodes[0].restart()?;
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```

/// What a set of servers (a struct with a `servers: Vec<RedisServer>` field)
/// offers as a collection: `iter`, `len`, `is_empty`, `set[i]` and
/// `for server in &set`.
macro_rules! server_set {
    ($set:ty, $what:literal) => {
        impl $set {
            #[doc = concat!("The ", $what, ", in order.")]
            pub fn iter(&self) -> std::slice::Iter<'_, RedisServer> {
                self.servers.iter()
            }

            #[doc = concat!("How many ", $what, " there are.")]
            pub fn len(&self) -> usize {
                self.servers.len()
            }

            #[doc = concat!("Whether there are no ", $what, ".")]
            pub fn is_empty(&self) -> bool {
                self.servers.is_empty()
            }
        }

        impl std::ops::Index<usize> for $set {
            type Output = RedisServer;

            fn index(&self, i: usize) -> &RedisServer {
                &self.servers[i]
            }
        }

        impl<'a> IntoIterator for &'a $set {
            type Item = &'a RedisServer;
            type IntoIter = std::slice::Iter<'a, RedisServer>;

            fn into_iter(self) -> Self::IntoIter {
                self.servers.iter()
            }
        }
    };
}

mod clock;
mod cluster;
pub mod history;
mod ports;
mod proxy;
pub mod report;
mod server;
#[cfg(feature = "tls")]
mod tls;

pub use cluster::RedisCluster;

/// Switches owed releases off (`false`) or on again, for every manager of
/// this process: with them off, a release a node did not answer is
/// forgotten, as before they existed — the negative control of the chaos
/// checker's "nothing left behind" rule. Not for anything but tests. (The
/// switch itself is the node layer's, which imports nothing from here.)
#[doc(hidden)]
pub fn owed_releases(on: bool) {
    crate::node::keep_owed_releases(on);
}
pub use proxy::{FaultProxy, Faults};
pub use server::{
    RedisNodes, RedisServer, ServerOptions, ServerVersion, find_redis_server, server_version,
};
#[cfg(feature = "tls")]
pub use tls::{TestCa, test_ca};

/// The environment variable naming the `redis-server` binary to use.
pub const REDIS_SERVER_ENV: &str = "QUORUMLOCK_REDIS_SERVER";

/// What went wrong starting or controlling a server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestkitError {
    /// No `redis-server` binary could be found.
    #[error(
        "redis-server not found ({looked}); install it (Debian/Ubuntu: `apt-get install redis-server`, macOS: `brew install redis`) or set {REDIS_SERVER_ENV} to its path"
    )]
    NotFound {
        /// Where it was looked for.
        looked: String,
    },
    /// The server exited or did not become ready.
    #[error("redis-server on port {port} did not start: {reason}; last log lines:\n{log}")]
    StartFailed {
        /// The port it was started on.
        port: u16,
        /// Why it is considered failed.
        reason: String,
        /// The end of its log.
        log: String,
    },
    /// The server is not running (killed, or never started).
    #[error("redis-server on port {0} is not running")]
    NotRunning(u16),
    /// Spawning or signalling the process failed.
    #[error("i/o error controlling redis-server: {0}")]
    Io(#[from] std::io::Error),
    /// A command sent to a server (to form or inspect a cluster) failed.
    #[error("command to redis-server on port {port} failed: {source}")]
    Command {
        /// The server's port.
        port: u16,
        /// What the client or the server said.
        #[source]
        source: redis::RedisError,
    },
    /// A cluster did not form, or answered something unexpected.
    #[error("redis cluster: {0}")]
    Cluster(String),
    /// A TLS server was asked for, but the `redis-server` binary was built
    /// without TLS support.
    #[error("{binary} cannot serve TLS: {detail}")]
    TlsUnsupported {
        /// The binary.
        binary: String,
        /// What it said.
        detail: String,
    },
    /// A test certificate could not be generated.
    #[error("test certificate: {0}")]
    Tls(String),
}
