//! `quorumlock elect`: run a command only while this instance leads an
//! election (and, when asked, campaign again after losing it); `quorumlock
//! leader`: who leads now.

use std::ffi::OsString;
use std::time::Duration;

use clap::Args;
use quorumlock::Retry;
use tokio::process::Command;

use crate::duration::parse_duration;
use crate::exec::{Outcome, exit_status, run_command};
use crate::exit;
use crate::nodes::{NodeArgs, READ_NODE_TIMEOUT};
use crate::signals::{Signals, signal_status};

/// The environment variable carrying the election's name to the command.
pub(crate) const ELECTION_ENV: &str = "QUORUMLOCK_ELECTION";
/// The environment variable carrying the leader's term to the command.
pub(crate) const TERM_ENV: &str = "QUORUMLOCK_TERM";

#[derive(Debug, Args)]
pub(crate) struct ElectArgs {
    #[command(flatten)]
    pub(crate) nodes: NodeArgs,

    /// The leadership's time-to-live. It is renewed in the background while
    /// the command runs; if quorumlock dies, another instance can lead
    /// after this long.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub(crate) ttl: Duration,

    /// The value this instance proclaims while it leads (what `quorumlock
    /// leader` prints) [default: pid:<this process's pid>].
    #[arg(long, value_name = "VALUE")]
    pub(crate) value: Option<String>,

    /// After leadership is lost (and the command stopped), campaign again
    /// and run the command again once leading; without it, exit 124.
    #[arg(long)]
    pub(crate) again: bool,

    /// After leadership is lost, how long the command gets between SIGTERM
    /// and SIGKILL.
    #[arg(
        long,
        visible_alias = "kill-after",
        value_name = "DURATION",
        default_value = "5s",
        value_parser = parse_duration
    )]
    pub(crate) grace: Duration,

    /// The election's name. Its Redis keys (after --prefix) are NAME (the
    /// leadership's lock), NAME:fence (the term counter) and NAME:leader
    /// (the leader's value).
    pub(crate) name: String,

    /// The command to run while leading, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

pub(crate) async fn run(args: ElectArgs) -> Result<u8, clap::Error> {
    // A campaign waits for another leader without limit, but gives up on an
    // outage after the policy's attempt limit in a row (10), as `exec` does.
    let locks = args.nodes.manager("elect", Retry::default())?;
    let Some(mut signals) = Signals::install_or_report() else {
        return Ok(exit::INTERNAL);
    };
    let election = locks.election(&args.name);
    let value = args
        .value
        .clone()
        .unwrap_or_else(|| format!("pid:{}", std::process::id()));
    let name = args.name.as_str();
    let status = loop {
        let campaign = election.campaign(&value, args.ttl);
        let leadership = tokio::select! {
            won = campaign => match won {
                Ok(leadership) => leadership,
                Err(e) => break exit::acquire_failed(&format!("campaign for `{name}`"), &e),
            },
            received = signals.recv() => {
                eprintln!("quorumlock: {received} while campaigning for `{name}`; gave up");
                break signal_status(received);
            }
        };
        let term = leadership.term();
        let environment = |command: &mut Command| {
            command
                .env(ELECTION_ENV, &args.name)
                .env(TERM_ENV, term.to_string());
        };
        let what = format!("the leadership of `{name}` (term {term})");
        let outcome = run_command(
            &args.command,
            environment,
            &what,
            leadership.lost(),
            &mut signals,
            args.grace,
        )
        .await;
        match outcome {
            Outcome::Exited(status) => {
                if let Err(e) = leadership.resign().await {
                    eprintln!(
                        "quorumlock: the leadership of `{name}` was lost before the command \
                         finished (another instance may have led meanwhile): {e}"
                    );
                    break exit::LOST;
                }
                break exit_status(status);
            }
            Outcome::Lost => {
                // Token-checked: removes whatever is left of it.
                let _ = leadership.resign().await;
                if !args.again {
                    break exit::LOST;
                }
                eprintln!("quorumlock: campaigning for `{name}` again");
            }
            Outcome::NotRun(status) => {
                let _ = leadership.resign().await;
                break status;
            }
        }
    };
    locks.settle().await;
    Ok(status)
}

#[derive(Debug, Args)]
pub(crate) struct LeaderArgs {
    #[command(flatten)]
    pub(crate) nodes: NodeArgs,

    /// The election's name. Its Redis keys (after --prefix) are NAME (the
    /// leadership's lock), NAME:fence (the term counter) and NAME:leader
    /// (the leader's value).
    pub(crate) name: String,
}

/// Prints `TERM<TAB>VALUE` of the leader a quorum confirms.
pub(crate) async fn leader(args: LeaderArgs) -> Result<u8, clap::Error> {
    let mut nodes = args.nodes.clone();
    // Reading needs no hurry: give a loaded node time to answer.
    nodes.node_timeout = nodes.node_timeout.or(Some(READ_NODE_TIMEOUT));
    let locks = nodes.manager("leader", Retry::none())?;
    match locks.election(&args.name).leader().await {
        Ok(Some(leader)) => {
            println!("{}\t{}", leader.term(), leader.value());
            Ok(0)
        }
        Ok(None) => {
            eprintln!("quorumlock: no leader of `{}` is confirmed", args.name);
            Ok(exit::FREE)
        }
        Err(e) => {
            eprintln!(
                "quorumlock: cannot tell who leads `{}`: {}",
                args.name,
                exit::describe(&e)
            );
            exit::print_failures(&e);
            Ok(exit::classify(&e))
        }
    }
}
