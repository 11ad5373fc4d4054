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
//! # Decide, then follow
//!
//! No call waits for a node its result does not need. Acquire, release,
//! extension, renewal, the cleanup of a failed attempt, and every primitive
//! built on them return as soon as a quorum has decided; the engine follows
//! the remaining nodes in the background, each bounded by the node timeout,
//! so a slow or frozen minority costs the holder nothing. A release goes out
//! behind whatever is in flight on each node's connection, where Redis runs
//! it after a straggling acquire; where that order is not certain, the two
//! answers tell whether the release must go out again (see
//! [`LockGuard::release`]). [`ReleaseSummary::settled`] and
//! [`Redlock::settle`] wait for every node, for those who want to know.
//!
//! # Holding
//!
//! A grant is decided at a quorum, but the requests still in flight are
//! followed to their answers, so the lock reaches every reachable node
//! ([`Lease::confirmed`] counts them) and survives the loss of any minority.
//! Because extensions restore the lock where it went missing, an
//! auto-extended lock ([`LockGuard::auto_extend`]) also lives through a
//! rolling restart of every node, one at a time, each down for longer than
//! the ttl or persisting its data. Where the nodes offer it, they also
//! watch an auto-extended lock's keys ([`HeldKeyTracking`]): a key deleted
//! or taken on a node makes the holder renew at once, so a lock taken over
//! on a majority resolves [`Lease::lost`] within a round trip, not at its
//! next renewal.
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
//! # Leader election
//!
//! [`Redlock::election`] gives an [`Election`] over the same nodes:
//! candidates [`campaign`](Election::campaign), one leads at a time with a
//! term — a fencing token that grows with every new leader — and
//! [`leader`](Election::leader) and [`observe`](Election::observe) report
//! the leader a quorum of nodes confirms. A campaign is a fenced lock's
//! attempt, and leadership an auto-extended lock, so leadership guarantees
//! what the lock does, under the same assumptions; see [`Election`].
//!
//! # A fair lock
//!
//! [`Redlock::fair_lock`] grants a resource in the order the callers asked,
//! across every manager: waiters stand in one line kept on every node (a
//! ticket drawn from a quorum), only the first in line attempts, and a
//! release tells just that waiter its turn came. The lock key still
//! decides who holds, exactly as for [`Redlock::lock`], and it returns the
//! same [`LockGuard`]. See [`Redlock::fair_lock`] and `docs/fair.md`.
//!
//! # Semaphores and reader-writer locks
//!
//! [`Redlock::semaphore`] gives a [`Semaphore`]: at most `L` holders at
//! once, each permit a Redlock mutex on a slot of its own (a majority-
//! counting semaphore would admit more than `L`; see [`Semaphore`] for why
//! this one does not). [`Redlock::rwlock`] gives an [`RwLock`]: readers
//! share, a writer is alone, and a waiting writer holds new readers back.
//! They hand out a [`Permit`], a [`ReadGuard`] or a [`WriteGuard`], held,
//! extended and released like a lock's [`LockGuard`].
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
//!   latency, dropped connections, blackholes, held-back replies and a node
//!   clock that runs fast.
//! - `cli`: the `quorumlock` binary (`exec`, `status`, `doctor`, `demo`).
//! - `tls`: `rediss://` node URLs, over rustls (no OpenSSL). Server
//!   certificates and host names are always verified, against Mozilla's
//!   root CAs or the CA given to
//!   [`RedlockBuilder::tls_root_certificate`](RedlockBuilder::tls_root_certificate);
//!   `#insecure` URLs are refused. If the process has not installed a
//!   default rustls `CryptoProvider` by the first TLS connection, ring's is
//!   installed.
//! - `metrics`: counters, gauges and histograms through the
//!   [`metrics`](https://docs.rs/metrics) facade; see [Metrics](#metrics).
//!
//! # Metrics
//!
//! With the `metrics` feature, quorumlock records through the `metrics`
//! facade: install any recorder or exporter (Prometheus, StatsD, …) and
//! these appear. Labels carry outcomes, reasons, operations and node
//! addresses (`host:port`) only, never a token, a password or a resource
//! name. Without the feature the calls compile to nothing.
//!
//! | name | kind | labels | what |
//! | --- | --- | --- | --- |
//! | `quorumlock_acquisitions_total` | counter | `outcome` | an acquiring call ended — `lock`/`try_lock` (any form), a semaphore's `acquire`/`try_acquire`, a reader-writer lock's `read`/`write` (and `try_` forms), an election's `campaign` (`with_…` included; a call dropped before it ended is not counted): `granted`, `contended`, `unavailable`, `validity_expired`, `fence_unconfirmed`, `wait_timeout`, `invalid_argument`, `error` |
//! | `quorumlock_acquire_attempts` | histogram | `outcome` | attempts that call made (0 for bad input; a campaign's attempts until it won or gave up on an outage) |
//! | `quorumlock_acquire_seconds` | histogram | `outcome` | how long the call took, waiting included |
//! | `quorumlock_extensions_total` | counter | `outcome` | an explicit `extend`: `extended`, `lost`, `failed` (too few nodes answered; still held) |
//! | `quorumlock_renewals_total` | counter | `outcome` | one auto-extended lock's renewal: `renewed`, `failed` (retried), `lost` |
//! | `quorumlock_renewal_calls_total` | counter | `node` | calls the renewer made to a node (one call carries every lock due) |
//! | `quorumlock_releases_total` | counter | `outcome` | `release()`: `released` (decided with no node failed so far; the rest are followed), `partial` (some nodes failed; their keys expire), `lost` (the token was gone), `incompatible` (the nodes cannot run the release: see `Error::Incompatible`); `dropped`: a guard dropped unreleased (released in the background) |
//! | `quorumlock_locks_held` | gauge | — | guards granted and not yet released or lost |
//! | `quorumlock_locks_lost_total` | counter | `reason` | held locks lost: `expired`, `token_gone`, `unreachable`, `incompatible` |
//! | `quorumlock_node_errors_total` | counter | `node`, `op`, `kind` | a node failed a request; `op` is `acquire`, `fence`, `extend`, `release`, `renew`, `proclaim`, `leader` (a leader read) or `inspect`; `kind` is `timeout` or `error` |
//! | `quorumlock_wakeups_total` | counter | — | waiters woken by an announced release (with `WakeOnRelease::Subscribe`) |
//! | `quorumlock_renewals_woken_total` | counter | — | an auto-extended lock renewed at once because a node told it its key changed (see [`HeldKeyTracking`]) |
//! | `quorumlock_followed_total` | counter | `op`, `outcome` | a request answered (`answered`) or failed (`failed`) after its call had returned: followed in the background; `op` as for node errors |
//! | `quorumlock_releases_resent_total` | counter | — | a release sent once more to a node where a late grant may have overtaken it |
//! | `quorumlock_shed_total` | counter | `node`, `op` | background work dropped unsent behind a node far behind: a release queued past its node timeout (its key expires by ttl) |
//!
//! # How the code is organised
//!
//! Five layers; a module imports only from its own layer or the ones above
//! it in this list, and no modules, nor files, import one another in a
//! circle (a test of the integration-test crate, `tests/it/layers/`, reads
//! the sources and checks them against its `LAYERS` table, which says
//! where each module is meant to stand). Data flows one way: request →
//! fan-out → votes → decision → guard. Each folder is a room with one job,
//! said in the first line of its `mod.rs`; a folder may have parts on
//! other levels than the rest of it: `lock::node` is `src/lock/node.rs`,
//! listed where it stands, and `lock` the rest of `src/lock/`.
//!
//! 1. **Pure** (no I/O)
//!    - `error` — [`Error`], [`NodeError`], [`LossReason`]: what went wrong, per node.
//!    - `token` — [`Token`]: 128 random bits, hex.
//!    - `quorum` — pure decisions: votes in, decision out; validity and
//!      drift math; and in `quorum::decide` the decision rules a fan-out
//!      runs: one lock's tally, a renewal round's batch of them, when an
//!      unresponsive node is not waited for.
//!    - `keys` — the key layout: every key and channel named after a
//!      resource's key, in one place.
//!    - `request` — a caller's resources and ttl validated into keys, before any I/O.
//!    - `contract` — what a primitive describes so that the engine, the
//!      guards and `inspect` serve it without knowing which it is, in one
//!      file: its entry in the list of primitives (`Primitive`: its
//!      scripts, its keys, its reads), what a held one is on a node
//!      (`Shape`: how a node extends, restores and releases it, and data
//!      it carries, as a fenced lock's fence), what `inspect` reads of it
//!      (`Reads`, decoding into the public [`Stored`], kept beside it in
//!      `contract/stored.rs` with the rest of an inspection's data); and
//!      where the two engine-side traits it implements stand.
//!    - `metrics` — what the `metrics` feature records (see [Metrics](#metrics)),
//!      in one place; nothing without the feature.
//!    - `scripts` — a Lua script as the nodes run it ([`ScriptMode`]), and
//!      the Functions library of every primitive's scripts (each in its
//!      primitive's folder).
//!    - `check` — the node doctor's room: its public types
//!      ([`Report`](check::Report), …) and its judgement of what the nodes
//!      showed (`check/judge/`, a file per rule family); its probe and its
//!      entry point are on their own levels below.
//! 2. **Wire**
//!    - `node` — one node, split by job: its shared connection, URLs and
//!      TLS, redaction, per-call deadlines, the request runner (scripts
//!      with their fallbacks), the release and extension of any holding by
//!      its `Shape` (the contract's trait a primitive implements), the
//!      tracking of held keys on a connection of its own
//!      (`node/tracking.rs`, [`HeldKeyTracking`]), and the
//!      manager's pub/sub connection per node (`node/pubsub.rs`),
//!      subscribed to the channels anyone listens on (waiters, election
//!      observers), handing each message to the channel's listeners; and
//!      group commit per node (`node/group/`): under heavy load, the
//!      acquires, releases and extensions of one-key holdings whose `Shape`
//!      allows it that meet a call in flight go out together as one call
//!      (`batch.lua`, or native commands) once it answers; under light
//!      load, and always for a lone request, at once.
//!    - `lock::node` — a lock's commands on one node (fenced,
//!      multi-resource), its scripts beside it, and the lock's `Shape`.
//!    - `check::probe` — what a node shows the node check: `INFO`, `TIME`,
//!      round trips, slot maps, an access probe.
//! 3. **Round**
//!    - `round::calls` — the poller of one fan-out's requests, under one timer.
//!    - `round::tasks` — background work that outlives a caller, for [`Redlock::settle`].
//!    - `round::follower` — requests still in flight after their call
//!      returned, followed by one task per node under one timer.
//!    - `round` — the engine: the one fan-out (one request to every node,
//!      decided by a rule from `quorum::decide`: a lock's votes, a
//!      renewal's batch, a leader read), the requests still in flight,
//!      releases, cleanup; the `Core` that holders share.
//!    - `lock` — the lock kinds (plain, fenced, multi-resource) as
//!      descriptions the engine runs: what a node is asked, how it votes,
//!      the fenced lock's second phase; and what `inspect` reads of a lock
//!      (`lock/inspect.rs`).
//! 4. **Holding**
//!    - `holding` — what a holder owns: [`LockGuard`]: extend, release,
//!      drop, and `typed_guard!`, with which each primitive declares its
//!      typed guard in its folder ([`Permit`], [`ReadGuard`],
//!      [`WriteGuard`]) (`guard.rs`); [`Lease`]: deadline, loss, where the token is
//!      confirmed (`lease.rs`); auto-extension, one task per manager,
//!      batched per node (`renew.rs`).
//! 5. **Entry points**
//!    - `acquire` — around an acquiring call: [`Retry`] (delays with
//!      jitter, attempt limits, wait deadlines), waiting for a release by
//!      pub/sub instead of polling (`wakeup.rs`), whether the
//!      manager's node check on first use has started, and what a
//!      primitive keeps per manager without the manager knowing it
//!      (`Singletons`: a fair lock's waiters told their turn).
//!    - `acquire::call` — one acquiring call, for every primitive: the
//!      manager's shared state (`Manager`, the inner half of [`Redlock`])
//!      and its one path: the startup check on first use, the attempts a
//!      primitive describes (`Acquisition`), the retry policy's delays and
//!      the wake-ups between them, metrics. Its own level, above
//!      `check::run`, which it runs.
//!    - `check::run` — the node check over a manager's nodes: every node
//!      probed at once, judged, and logged for the check on first use.
//!    - `redlock` — [`Redlock`], the public face: `lock`, `try_lock` and
//!      their forms, `with_lock`, and [`Redlock::check`] (each delegating
//!      to `acquire::call`).
//!    - `builder` — [`RedlockBuilder`]: configuration, defaults, validation.
//!    - `election` — [`Election`], [`Leadership`]: campaign, leader,
//!      observe; and on the engine (`election/leader.rs`), the leader's
//!      value beside a fenced lock, proclaimed token-checked, read by a
//!      quorum; its commands on a node (`node.rs`) and its scripts.
//!    - `fair` — [`Redlock::fair_lock`], in its own folder as `semaphore`
//!      is: its API, the waiter's loop (a ticket, then attempts first in
//!      line) and its descriptions on the engine (`mod.rs`), what it asks a
//!      node and the fair lock's `Shape` (`node.rs`), its waiters told
//!      their turn (`turns.rs`), its scripts.
//!    - `semaphore` — [`Semaphore`], in its own folder: its API and its
//!      description on the engine (`mod.rs`), what it asks a node and the
//!      permit's `Shape` (`node.rs`), its scripts (`*.lua`).
//!    - `rwlock` — [`RwLock`], in its own folder as `semaphore` is: its
//!      API and its description on the engine, a hold's `Shape` and the
//!      acquire it sends a node (`node.rs`), its scripts.
//!    - `primitives` — the list of primitives, each one line: how the
//!      crate finds every one (their reads, scripts and keys).
//!    - `inspect` — [`Redlock::inspect`], [`Inspection`]: what every node
//!      keeps under a name, read through the engine (the reads each
//!      primitive describes, listed once in `inspect/read.rs`) and judged
//!      at a quorum.
//!
//! A new primitive is its folder, one line in the list of primitives
//! (`primitives.rs`) and its `pub use` here: what it implements is the
//! contract (`contract/mod.rs`), and docs/contributing.md walks through
//! the fair lock as the worked example. Guards, renewal, releases, owed
//! releases, the group commit and wake-ups serve it without knowing which
//! primitive it is; the engine imports nothing from a primitive's folder
//! (the layers test checks it). Its folder is one module in the layers,
//! unless lower modules use a part of it: the lock's commands
//! (`lock::node`), which the node check uses, are listed on their own
//! level.
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

// The layers, each importing only from the ones above it in this list
// (checked by the `layers` test of the integration-test crate, tests/it/):
// see "How the code is organised".
//
// 1. pure: no I/O
pub mod check;
mod contract;
mod error;
mod keys;
mod metrics;
mod quorum;
mod request;
mod scripts;
mod token;
// 2. wire: one node (and the lock's commands, lock::node, in src/lock/,
// and what a node shows the node check, check::probe, in src/check/)
mod node;
// 3. round: one request to every node, and the primitives on it (the
// lock's acquisitions, lock)
mod lock;
mod round;
// 4. holding
mod holding;
// 5. entry points: the manager and its faces (and the node check's entry
// point, check::run, in src/check/)
mod acquire;
mod builder;
mod election;
mod fair;
mod inspect;
mod primitives;
mod redlock;
mod rwlock;
mod semaphore;

#[cfg(feature = "testkit")]
pub mod testkit;

pub use acquire::retry::Retry;
pub use acquire::wakeup::WakeOnRelease;
pub use builder::RedlockBuilder;
pub use election::{Election, Leader, Leadership};
pub use error::{ArgumentError, ConfigError, Error, LossReason, NodeError, NodeFailure};
pub use fair::FAIR_QUEUE_LEASE;
pub use holding::guard::{LockGuard, ReleaseSummary};
pub use holding::lease::Lease;
pub use inspect::{
    Claim, Claimed, HeldPermit, Holder, InspectedNode, Inspection, NodeState, Proclaimed,
    ResourceKind, SeenToken, Stored, Verdict,
};
pub use node::HeldKeyTracking;
pub use redlock::Redlock;
pub use rwlock::RwLock;
pub use rwlock::{ReadGuard, WriteGuard};
pub use scripts::{FUNCTIONS_LIBRARY, NativeCommands, ScriptMode};
pub use semaphore::Permit;
pub use semaphore::Semaphore;
pub use token::Token;

// Compiles the examples of the README and of every docs/ chapter as
// doctests, so they cannot rot (docs/check.py checks that each chapter has
// its line here).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/cli.md")]
struct CliDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/contributing.md")]
struct ContributingDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/election.md")]
struct ElectionDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/fair.md")]
struct FairDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/guide.md")]
struct GuideDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/how-it-works.md")]
struct HowItWorksDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/operations.md")]
struct OperationsDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/primitives.md")]
struct PrimitivesDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/safety.md")]
struct SafetyDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/security.md")]
struct SecurityDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/speed.md")]
struct SpeedDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/testing.md")]
struct TestingDoctests;
