//! The exit statuses of `quorumlock`, and how lock errors map onto them.
//!
//! `exec` passes its command's status through, so its own statuses avoid
//! the ones commands commonly use (0–2, and 128+N for a signal), and follow
//! existing conventions: sysexits.h for "busy, try later" (75) and "service
//! unavailable" (69), and timeout(1)/env(1) for "the command was stopped"
//! (124), "the tool itself failed" (125), "cannot execute" (126) and "not
//! found" (127).

use std::process::ExitCode;

use quorumlock::{Error, NodeError};

use crate::duration::show;

/// Bad arguments or configuration (clap's own status for usage errors).
pub(crate) const USAGE: u8 = 2;
/// `status`: the resource is not held by a quorum.
pub(crate) const FREE: u8 = 1;
/// `doctor`: a node is unsafe for Redlock.
pub(crate) const UNSAFE: u8 = 1;
/// Too few nodes answered to lock (or, for `status`, to tell).
pub(crate) const UNAVAILABLE: u8 = 69;
/// A quorum of nodes refused the credentials in their URLs (sysexits.h's
/// "permission denied"): not an outage, so nothing was retried.
pub(crate) const AUTH_REFUSED: u8 = 77;
/// Too many nodes cannot serve what the command needs (sysexits.h's
/// "configuration error"): the user may not run its scripts and the server
/// has no native form, the server has no scripting engine, Functions are
/// not loaded; not an outage, so nothing was retried.
pub(crate) const INCOMPATIBLE: u8 = 78;
/// The resource is held by someone else (and stayed held for `--wait`).
pub(crate) const BUSY: u8 = 75;
/// The lock was lost before the command finished; a running command was
/// terminated.
pub(crate) const LOST: u8 = 124;
/// quorumlock itself failed (no runtime, no signal handler, …).
pub(crate) const INTERNAL: u8 = 125;
/// The command was found but could not be started.
pub(crate) const CANNOT_RUN: u8 = 126;
/// The command was not found.
pub(crate) const NOT_FOUND: u8 = 127;

/// The exit-status table shown by `exec --help` (`elect`'s has the same
/// rows, but 75: a campaign waits for another leader).
pub(crate) const EXEC_HELP: &str = "\
Exit status:
  N        the command's own status (128+N if a signal N ended it)
  2        bad arguments or node URLs
  69       too few nodes reachable to lock (one line per failed node on
           stderr): 10 attempts in a row found too many nodes unreachable
  75       the resource is busy: held by another owner, with --no-wait or
           until --wait ran out
  77       too many nodes refused the credentials in their URLs (the user
           is named on stderr, never the password); nothing was retried
  78       too many nodes cannot serve it: scripts refused with no native
           form, no scripting engine, or Functions not loaded (stderr says
           which, per node); nothing was retried
  124      the lock was lost before the command finished; if it was still
           running it got SIGTERM, then SIGKILL after --grace
  125      quorumlock itself failed
  126/127  the command could not be run / was not found
  128+N    signal N arrived while waiting for the lock

Environment of the command:
  QUORUMLOCK_RESOURCE  the resource name
  QUORUMLOCK_FENCE     the fencing token (with --fence)";

/// The exit-status table shown by `status --help`.
pub(crate) const STATUS_HELP: &str = "\
Exit status:
  0   held: a token is on a quorum of nodes: a lock's, a permit's, a
      writer's or a reader's (for an election: a leader)
  1   free: no token can be on a quorum (for an election: no leader)
  2   bad arguments or node URLs
  69  unknown: too many nodes unreachable to tell
  77  unknown: nodes refused the credentials in their URLs";

/// The exit-status table shown by `doctor --help`.
pub(crate) const DOCTOR_HELP: &str = "\
Exit status:
  0   nothing unsafe (degraded nodes and notes may still be listed)
  1   some node is unsafe for Redlock (mutual exclusion can break), or
      fewer nodes answered than a quorum (no lock can be taken)
  2   bad arguments or node URLs

Severities:
  UNSAFE    two clients can hold the same lock
  degraded  locks stay exclusive, but the node may miss votes, or a failure
            it survives today would cost safety
  note      worth knowing

The check reads INFO, CONFIG GET appendfsync, TIME, PING and, with
--functions, FUNCTION LIST; unless --no-probe, it takes and releases a lock
on <prefix>quorumlock:doctor:<random> (2s ttl). It changes no configuration
and prints no token or password.";

/// The exit-status table shown by `elect --help`: `exec`'s rows, but 75.
pub(crate) const ELECT_HELP: &str = "\
Exit status:
  N        the command's own status (128+N if a signal N ended it)
  2        bad arguments or node URLs
  69       too few nodes reachable to campaign (one line per failed node on
           stderr): 10 attempts in a row found too many nodes unreachable;
           another instance leading is waited for, not an exit
  77       too many nodes refused the credentials in their URLs (the user
           is named on stderr, never the password); nothing was retried
  78       too many nodes cannot serve it: scripts refused with no native
           form, no scripting engine, or Functions not loaded (stderr says
           which, per node); nothing was retried
  124      the leadership was lost before the command finished (without
           --again); if it was still running it got SIGTERM, then SIGKILL
           after --grace
  125      quorumlock itself failed
  126/127  the command could not be run / was not found
  128+N    signal N arrived while campaigning

Environment of the command:
  QUORUMLOCK_ELECTION  the election's name
  QUORUMLOCK_TERM      the leader's term: a fencing token, larger for every
                       new leader";

/// The exit-status table shown by `leader --help`.
pub(crate) const LEADER_HELP: &str = "\
Exit status:
  0   a leader is confirmed by a quorum of nodes (printed as TERM<TAB>VALUE)
  1   no leader is confirmed
  2   bad arguments or node URLs
  69  unknown: too many nodes unreachable to tell
  77  unknown: nodes refused the credentials in their URLs
  78  unknown: nodes cannot serve the read (scripts refused, no
      scripting engine, Functions not loaded)";

pub(crate) fn code(status: u8) -> ExitCode {
    ExitCode::from(status)
}

/// Prints why `attempt` (what was tried: "lock `orders`", "campaign for
/// `scheduler`") failed — one line, then one line per failed node — and
/// returns the matching status: `exec` and `elect` report alike.
pub(crate) fn acquire_failed(attempt: &str, err: &Error) -> u8 {
    let status = classify(err);
    let what = match status {
        BUSY => "busy",
        UNAVAILABLE => "nodes unavailable",
        AUTH_REFUSED => "credentials refused",
        USAGE => "invalid request",
        _ => "failed",
    };
    eprintln!(
        "quorumlock: could not {attempt} ({what}): {}",
        describe(err)
    );
    print_failures(err);
    status
}

/// One line per failed node, after a line made with [`describe`].
pub(crate) fn print_failures(err: &Error) {
    for failure in err.node_failures() {
        eprintln!("quorumlock:   node {failure}");
    }
}

/// What `err` says, for a line that already names the resource: without
/// the resource, and without the per-node failures, which
/// [`print_failures`] prints on lines of their own.
pub(crate) fn describe(err: &Error) -> String {
    match err {
        Error::Contended {
            granted, quorum, ..
        } => format!("held by another owner: {granted} of {quorum} required nodes granted it"),
        Error::Unavailable {
            nodes,
            quorum,
            failures,
            ..
        } => format!(
            "too few nodes reachable: {} of {nodes} failed, a quorum of {quorum} tolerates {}",
            failures.len(),
            nodes.saturating_sub(*quorum)
        ),
        Error::FenceUnconfirmed {
            confirmed, quorum, ..
        } => format!(
            "fence not confirmed: {confirmed} of the {quorum} required granting nodes raised their counter"
        ),
        Error::ValidityExpired { elapsed, ttl, .. } => format!(
            "a quorum granted it but its validity was used up: {} of a {} ttl spent acquiring",
            show(*elapsed),
            show(*ttl)
        ),
        Error::WaitTimeout {
            waited,
            attempts,
            last,
            ..
        } => format!(
            "{}; gave up after waiting {} ({attempts} attempts)",
            describe(last),
            show(*waited)
        ),
        other => without_failures(other),
    }
}

/// `err`'s message without the `; node: error` list its `Display` ends with.
fn without_failures(err: &Error) -> String {
    let message = err.to_string();
    let list: String = err
        .node_failures()
        .iter()
        .map(|failure| format!("; {failure}"))
        .collect();
    match message.strip_suffix(&list) {
        Some(rest) if !list.is_empty() => rest.to_owned(),
        _ => message,
    }
}

/// Which status an acquisition error maps to.
pub(crate) fn classify(err: &Error) -> u8 {
    match err {
        Error::Contended { .. } => BUSY,
        Error::Unavailable { .. }
        | Error::FenceUnconfirmed { .. }
        | Error::ValidityExpired { .. } => UNAVAILABLE,
        Error::WaitTimeout { last, .. } => classify(last),
        Error::Incompatible { failures, .. }
            if failures
                .iter()
                .any(|f| matches!(f.error, NodeError::AuthRefused { .. })) =>
        {
            AUTH_REFUSED
        }
        Error::Incompatible { .. } => INCOMPATIBLE,
        Error::InvalidArgument(_) | Error::InvalidConfig(_) => USAGE,
        _ => INTERNAL,
    }
}
