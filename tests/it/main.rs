//! The integration tests, as one test crate: a module per area, each
//! against real redis-server processes that the testkit starts. One test
//! binary links the library once, where a binary per file linked it 25
//! times. Run one area with e.g. `cargo test --all-features --test it
//! chaos::`.
//!
//! The tests share one process: what a test installs process-wide reaches
//! every other test's work. The metrics and secrets tests therefore scope
//! their recorder and their log capture to their own thread (a
//! current-thread runtime), as doctor's startup-check test already did.

// Helpers shared by the modules below.
#[cfg(feature = "cli")]
mod cli_support;
mod support;

mod async_send_sync;
mod auth;
mod bad_input;
mod chaos;
#[cfg(feature = "cli")]
mod cli;
#[cfg(feature = "cli")]
mod cli_election;
mod cluster;
mod coalesce;
mod counter;
mod degraded;
mod doctor;
mod election;
mod fair;
mod fault_tolerance;
mod faults;
mod fencing;
mod functions;
mod holding;
mod independence;
mod inspect;
mod layers;
mod left_behind;
#[cfg(feature = "metrics")]
mod metrics;
mod multi;
mod native;
mod no_scripting;
mod not_asked;
mod replica_sync;
mod report;
mod retry_policy;
mod rwlock;
mod secrets;
mod semaphore;
#[cfg(feature = "tls")]
mod tls;
mod tokens;
mod tracking;
mod wakeup;
