//! `quorumlock`: run a command under a Redlock lock, inspect a lock, check
//! the nodes, or watch a demo on local nodes. Build with `--features cli`.
// Bad input gets an exit status and a message, never a panic; tests may.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod demo;
mod doctor;
mod duration;
mod elect;
mod exec;
mod exit;
mod nodes;
mod signals;
mod status;
mod status_many;
mod status_nodes;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Distributed locks over N independent Redis masters (Redlock), from the
/// shell.
#[derive(Debug, Parser)]
#[command(name = "quorumlock", version, propagate_version = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Commands,
}

#[derive(Debug, Subcommand)]
enum Commands {
    /// Run a command while holding a lock; exit with its status.
    ///
    /// Acquires RESOURCE on a quorum of --nodes (retrying for up to --wait),
    /// runs COMMAND with the lock renewed in the background, and releases
    /// the lock when COMMAND exits. If the lock is lost while COMMAND runs,
    /// COMMAND's process group gets SIGTERM, then SIGKILL after --grace.
    /// SIGINT, SIGTERM and SIGHUP sent to quorumlock are passed on to
    /// COMMAND.
    #[command(
        after_help = exit::EXEC_HELP,
        after_long_help = exit::EXEC_HELP,
        override_usage = "quorumlock exec [OPTIONS] --nodes <URLS> RESOURCE -- COMMAND [ARGS]..."
    )]
    Exec(exec::ExecArgs),

    /// Show, per node, what holds RESOURCE, and whether a quorum holds it.
    ///
    /// A lock, an election, a semaphore or a reader-writer lock: whichever
    /// the nodes keep under the name (--semaphore and --rwlock show it as
    /// one). Read-only; tokens are shown by their first four characters
    /// only.
    #[command(
        after_help = exit::STATUS_HELP,
        after_long_help = exit::STATUS_HELP,
        mut_arg("node_timeout", |a| a.help(nodes::READ_NODE_TIMEOUT_HELP))
    )]
    Status(status::StatusArgs),

    /// Check the nodes against what Redlock's safety rests on; print one
    /// table of findings per node.
    ///
    /// Independent masters (not one server twice, not replicas), no
    /// eviction, persistence, clock rate within the drift allowance, the
    /// user's permissions, latency, cluster slot coverage, attached
    /// replicas.
    #[command(after_help = exit::DOCTOR_HELP, after_long_help = exit::DOCTOR_HELP)]
    Doctor(doctor::DoctorArgs),

    /// Start 5 local redis-server nodes and narrate a lock surviving a node
    /// kill, then failing clearly without a majority.
    Demo(demo::DemoArgs),

    /// Where the benchmark lives.
    Bench,

    /// Run a command only while this instance leads an election.
    ///
    /// Campaigns for NAME on a quorum of --nodes until this instance leads
    /// (waiting while another does; exit 69 if too few nodes are reachable
    /// for 10 attempts in a row), then runs COMMAND with the leadership
    /// renewed in the background, and resigns when COMMAND exits. If the
    /// leadership is lost while COMMAND runs, COMMAND's process group gets
    /// SIGTERM, then SIGKILL after --grace; with --again, quorumlock then
    /// campaigns again and reruns COMMAND once it leads.
    #[command(
        after_help = exit::ELECT_HELP,
        after_long_help = exit::ELECT_HELP,
        override_usage = "quorumlock elect [OPTIONS] --nodes <URLS> NAME -- COMMAND [ARGS]...",
        mut_arg("prefix", |a| a.help(nodes::ELECTION_PREFIX_HELP))
    )]
    Elect(elect::ElectArgs),

    /// Print the leader of an election: TERM<TAB>VALUE, as a quorum of
    /// nodes confirms it.
    #[command(
        after_help = exit::LEADER_HELP,
        after_long_help = exit::LEADER_HELP,
        mut_arg("node_timeout", |a| a.help(nodes::READ_NODE_TIMEOUT_HELP)),
        mut_arg("prefix", |a| a.help(nodes::ELECTION_PREFIX_HELP))
    )]
    Leader(elect::LeaderArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Commands::Bench = cli.command {
        println!(
            "The benchmark is an example: cargo run --release --example bench --features testkit"
        );
        return ExitCode::SUCCESS;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("quorumlock: cannot start the async runtime: {e}");
            return exit::code(exit::INTERNAL);
        }
    };
    let outcome = runtime.block_on(async {
        match cli.command {
            Commands::Exec(args) => exec::run(args).await,
            Commands::Status(args) => status::run(args).await,
            Commands::Doctor(args) => doctor::run(args).await,
            Commands::Demo(args) => demo::run(args).await,
            Commands::Bench => Ok(0),
            Commands::Elect(args) => elect::run(args).await,
            Commands::Leader(args) => elect::leader(args).await,
        }
    });
    match outcome {
        Ok(status) => exit::code(status),
        Err(usage) => {
            let _ = usage.print();
            exit::code(exit::USAGE)
        }
    }
}
