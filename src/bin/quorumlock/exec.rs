//! `quorumlock exec`: run a command while holding a lock, the way flock(1)
//! does on one machine — and stop the command if the lock is lost.

use std::ffi::OsString;
use std::future::Future;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use clap::Args;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use quorumlock::{Error, LockGuard, LossReason, Redlock, Retry, WakeOnRelease};
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::duration::{Wait, parse_duration, parse_wait, show};
use crate::exit;
use crate::nodes::{NodeArgs, straggler_grace, usage_error};
use crate::signals::{Signals, signal_status};

/// The environment variable carrying the fencing token to the command.
pub(crate) const FENCE_ENV: &str = "QUORUMLOCK_FENCE";
/// The environment variable carrying the resource name to the command.
pub(crate) const RESOURCE_ENV: &str = "QUORUMLOCK_RESOURCE";

#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    #[command(flatten)]
    pub(crate) nodes: NodeArgs,

    /// The lock's time-to-live. It is renewed in the background while the
    /// command runs; if quorumlock dies, the lock expires after this long.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub(crate) ttl: Duration,

    /// How long to retry while the resource is busy: a duration, or
    /// `forever`. It waits for a busy resource, not for unreachable nodes:
    /// after 10 attempts in a row that find too few nodes reachable (about
    /// 1.5 s), exec gives up with 69, as the library's `lock` does.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10s",
        value_parser = parse_wait,
        conflicts_with = "no_wait"
    )]
    pub(crate) wait: Wait,

    /// Make exactly one attempt; exit 75 at once if the resource is busy.
    #[arg(long)]
    pub(crate) no_wait: bool,

    /// Take a fenced lock and pass its fencing token to the command in
    /// QUORUMLOCK_FENCE.
    #[arg(long)]
    pub(crate) fence: bool,

    /// Wait in line: the callers of `exec --fair` on this resource get it
    /// in the order they asked, across hosts. Releases tell the next in
    /// line its turn (pub/sub). Not with --fence.
    #[arg(long, conflicts_with = "fence")]
    pub(crate) fair: bool,

    /// After the lock is lost, how long the command gets between SIGTERM
    /// and SIGKILL.
    #[arg(
        long,
        visible_alias = "kill-after",
        value_name = "DURATION",
        default_value = "5s",
        value_parser = parse_duration
    )]
    pub(crate) grace: Duration,

    /// The resource to lock (the Redis key, after --prefix).
    pub(crate) resource: String,

    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

/// How `exec` waits: for a busy resource as long as `wait` allows, for
/// unreachable nodes only as many attempts as the library's default `lock`
/// makes, so that an outage fails fast (69) instead of for the whole wait.
pub(crate) fn exec_retry(wait: Wait) -> Retry {
    let retry = match wait {
        Wait::For(wait) => Retry::default().unlimited_attempts().wait(wait),
        Wait::Forever => Retry::forever(),
    };
    retry.unavailable_attempts(Retry::DEFAULT_ATTEMPTS)
}

pub(crate) async fn run(args: ExecArgs) -> Result<u8, clap::Error> {
    let retry = match (args.no_wait, args.wait) {
        (true, _) => Retry::none(),
        (false, wait) => exec_retry(wait),
    };
    let locks = match args.fair {
        // The next in line is told its turn by the release.
        true => args
            .nodes
            .builder(retry)
            .wake_on_release(WakeOnRelease::Subscribe)
            .build()
            .map_err(|e| usage_error("exec", format!("--nodes: {e}")))?,
        false => args.nodes.manager("exec", retry)?,
    };
    let Some(mut signals) = Signals::install_or_report() else {
        return Ok(exit::INTERNAL);
    };

    let resource = args.resource.as_str();
    let acquire = acquire(
        &locks,
        resource,
        args.ttl,
        (args.fence, args.fair),
        args.no_wait,
    );
    let guard = tokio::select! {
        acquired = acquire => match acquired {
            Ok(guard) => guard,
            Err(e) => {
                let status = exit::acquire_failed(&format!("lock `{resource}`"), &e);
                locks.settle().await;
                return Ok(status);
            }
        },
        received = signals.recv() => {
            // Dropping the acquisition cleans up what it may have set.
            locks.settle().await;
            eprintln!("quorumlock: {received} while waiting for `{resource}`; gave up");
            return Ok(signal_status(received));
        }
    };
    guard.auto_extend();

    let environment = |command: &mut Command| {
        command.env(RESOURCE_ENV, guard.resource());
        match guard.fence() {
            Some(fence) => command.env(FENCE_ENV, fence.to_string()),
            None => command.env_remove(FENCE_ENV),
        };
    };
    let what = format!("the lock on `{resource}`");
    let status = run_command(
        &args.command,
        environment,
        &what,
        guard.lost(),
        &mut signals,
        args.grace,
    )
    .await;

    let releasing = Instant::now();
    let status = match status {
        Outcome::Exited(status) => match guard.release().await {
            Err(e @ Error::Lost { .. }) => {
                eprintln!(
                    "quorumlock: the lock on `{resource}` was lost before the command finished \
                     (it may not have run alone): {e}"
                );
                exit::LOST
            }
            Err(e) => {
                eprintln!("quorumlock: releasing `{resource}` failed: {e}");
                exit_status(status)
            }
            Ok(_) => exit_status(status),
        },
        Outcome::Lost => {
            // Token-checked: removes whatever is left of our grant.
            let _ = guard.release().await;
            exit::LOST
        }
        Outcome::NotRun(status) => {
            let _ = guard.release().await;
            status
        }
    };
    // The release was decided at the quorum. The nodes it did not need
    // are followed about as long again, not up to the node timeout: a
    // frozen node would hold the exit back for nothing (the release is on
    // its way to it, and its key expires).
    let grace = straggler_grace(releasing.elapsed());
    let _ = tokio::time::timeout(grace, locks.settle()).await;
    Ok(status)
}

async fn acquire(
    locks: &Redlock,
    resource: &str,
    ttl: Duration,
    (fence, fair): (bool, bool),
    no_wait: bool,
) -> Result<LockGuard, Error> {
    match (fence, fair, no_wait) {
        (true, _, false) => locks.lock_fenced(resource, ttl).await,
        (true, _, true) => locks.try_lock_fenced(resource, ttl).await,
        (false, true, false) => locks.fair_lock(resource, ttl).await,
        (false, true, true) => locks.try_fair_lock(resource, ttl).await,
        (false, false, false) => locks.lock(resource, ttl).await,
        (false, false, true) => locks.try_lock(resource, ttl).await,
    }
}

/// Starts `command` (the program, then its arguments) in its own process
/// group, with `environment` applied, and [`supervise`]s it; a command that
/// cannot be started is reported and not run.
pub(crate) async fn run_command(
    command: &[OsString],
    environment: impl FnOnce(&mut Command),
    what: &str,
    lost: impl Future<Output = LossReason>,
    signals: &mut Signals,
    grace: Duration,
) -> Outcome {
    match spawn(command, environment) {
        Ok(child) => supervise(child, what, lost, signals, grace).await,
        Err(e) => {
            let program = command
                .first()
                .map(|p| p.to_string_lossy())
                .unwrap_or_default();
            eprintln!("quorumlock: cannot run `{program}`: {e}");
            Outcome::NotRun(if e.kind() == io::ErrorKind::NotFound {
                exit::NOT_FOUND
            } else {
                exit::CANNOT_RUN
            })
        }
    }
}

fn spawn(command: &[OsString], environment: impl FnOnce(&mut Command)) -> io::Result<Child> {
    let (program, rest) = command
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no command given"))?;
    let mut command = Command::new(program);
    // Its own process group, so that stopping it reaches its children too
    // (as timeout(1) does).
    command.args(rest).process_group(0);
    environment(&mut command);
    command.spawn()
}

pub(crate) enum Outcome {
    /// The command ended by itself (or by a signal we passed on).
    Exited(ExitStatus),
    /// The lock was lost; the command has been stopped.
    Lost,
    /// The command could not be started.
    NotRun(u8),
}

/// Waits for the command, passing signals on to it, and stops it if `lost`
/// (of `what`: "the lock on `…`") resolves first.
pub(crate) async fn supervise(
    mut child: Child,
    what: &str,
    lost: impl Future<Output = LossReason>,
    signals: &mut Signals,
    grace: Duration,
) -> Outcome {
    let group = child.id().and_then(|id| i32::try_from(id).ok());
    tokio::pin!(lost);
    let reason = loop {
        tokio::select! {
            // A command that finished as the lock was lost still finished.
            biased;
            status = child.wait() => return match status {
                Ok(status) => Outcome::Exited(status),
                Err(e) => {
                    eprintln!("quorumlock: waiting for the command failed: {e}");
                    Outcome::NotRun(exit::INTERNAL)
                }
            },
            reason = &mut lost => break reason,
            received = signals.recv() => signal_group(group, received),
        }
    };
    eprintln!(
        "quorumlock: lost {what} while the command ran ({reason}); sending SIGTERM{}",
        if grace.is_zero() {
            String::new()
        } else {
            format!(", then SIGKILL after {}", show(grace))
        }
    );
    signal_group(group, Signal::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        eprintln!("quorumlock: the command outlived the grace period; sending SIGKILL");
        signal_group(group, Signal::SIGKILL);
        let _ = child.wait().await;
    }
    Outcome::Lost
}

/// Sends `signal` to the command's process group (it is its leader).
fn signal_group(group: Option<i32>, signal: Signal) {
    if let Some(group) = group {
        // Fails only if the group is already gone, which is what we want.
        let _ = killpg(Pid::from_raw(group), signal);
    }
}

/// A shell-style status: the exit code, or 128 + the signal that ended it.
pub(crate) fn exit_status(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(exit::INTERNAL),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(exit::INTERNAL),
        (None, None) => exit::INTERNAL,
    }
}
