//! `quorumlock doctor`: checks the nodes against what Redlock's safety
//! rests on (`Redlock::check`) and prints one table.

use std::time::Duration;

use clap::Args;
use quorumlock::Retry;
use quorumlock::check::CheckOptions;

use crate::duration::parse_duration;
use crate::exit;
use crate::nodes::{NodeArgs, usage_error};

#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    #[command(flatten)]
    pub(crate) nodes: NodeArgs,

    /// The longest ttl the application locks with: a node without durable
    /// persistence that has been up for less is unsafe.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) ttl: Option<Duration>,

    /// The application takes fenced locks: nodes must persist their fence
    /// counters (appendonly yes).
    #[arg(long)]
    pub(crate) fenced: bool,

    /// How long to watch each node's clock against this machine's.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub(crate) clock_interval: Duration,

    /// Do not take the short-lived probe lock that shows whether the user
    /// may run every command: write nothing at all.
    #[arg(long)]
    pub(crate) no_probe: bool,
}

pub(crate) async fn run(args: DoctorArgs) -> Result<u8, clap::Error> {
    let locks = args
        .nodes
        .builder(Retry::none())
        .build()
        .map_err(|e| usage_error("doctor", format!("--nodes: {e}")))?;
    let mut options = CheckOptions::new().clock_interval(args.clock_interval);
    if let Some(ttl) = args.ttl {
        options = options.longest_ttl(ttl);
    }
    if args.fenced {
        options = options.fenced_locks();
    }
    if args.no_probe {
        options = options.skip_access_probe();
    }
    let report = locks.check_with(&options).await;
    println!("{report}");
    Ok(if report.is_unsafe() { exit::UNSAFE } else { 0 })
}
