//! The node options every subcommand shares, and the manager built from
//! them.

use std::time::Duration;

use clap::Args;
use quorumlock::{Redlock, RedlockBuilder, Retry, ScriptMode};

use crate::duration::parse_duration;

/// Where the lock lives.
#[derive(Debug, Clone, Args)]
pub(crate) struct NodeArgs {
    /// The Redis masters, comma-separated:
    /// redis://[[user]:password@]host:port[/db],…
    #[arg(
        long,
        env = "QUORUMLOCK_NODES",
        // URLs may carry passwords: never echo the variable in --help.
        hide_env_values = true,
        value_delimiter = ',',
        value_parser = node_entry,
        required_unless_present = "cluster",
        value_name = "URLS"
    )]
    pub(crate) nodes: Vec<String>,

    /// A Redis Cluster as one node: some of its members' URLs,
    /// comma-separated (keys route to the master owning their slot). Give
    /// it once per cluster; with --nodes or alone.
    #[arg(long, value_parser = cluster_seeds, value_name = "SEEDS")]
    pub(crate) cluster: Vec<Seeds>,

    /// A prefix put before the resource name to form the Redis key.
    #[arg(long, value_name = "PREFIX", default_value = "")]
    pub(crate) prefix: String,

    /// How long one request to one node may take [default: 250ms].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) node_timeout: Option<Duration>,

    /// Run the scripts as Redis Functions (FCALL of quorumlock's library,
    /// loaded once per node, see docs/security.md), for a lock user who may
    /// not run EVAL; `doctor` also checks that the library is loaded, in
    /// this version.
    #[arg(long)]
    pub(crate) functions: bool,
}

/// One entry of a comma-separated `--nodes` list, trimmed. An empty one
/// (`a,,b`, or a comma at an end) is a usage error: taken as nothing, it
/// would leave the lock on fewer nodes than the user listed, and with them
/// a smaller quorum.
pub(crate) fn node_entry(entry: &str) -> Result<String, String> {
    let url = entry.trim();
    if url.is_empty() {
        return Err(
            "an empty entry in the comma-separated list (two commas in a row, or one at \
             an end): give each node's URL once"
                .to_owned(),
        );
    }
    Ok(url.to_owned())
}

/// One cluster's seed URLs, as `--cluster` gives them.
#[derive(Debug, Clone)]
pub(crate) struct Seeds(Vec<String>);

/// A `--cluster` value: its seeds, each checked as a `--nodes` entry.
pub(crate) fn cluster_seeds(value: &str) -> Result<Seeds, String> {
    value
        .split(',')
        .map(node_entry)
        .collect::<Result<Vec<_>, _>>()
        .map(Seeds)
}

impl NodeArgs {
    /// The URLs, as given (each checked by [`node_entry`]).
    pub(crate) fn urls(&self) -> Vec<String> {
        self.nodes.clone()
    }

    /// A manager over these nodes, or a usage error naming what is wrong
    /// (with any password masked by the library).
    pub(crate) fn manager(&self, subcommand: &str, retry: Retry) -> Result<Redlock, clap::Error> {
        self.builder(retry)
            .build()
            .map_err(|e| usage_error(subcommand, format!("--nodes: {e}")))
    }

    /// A builder over these nodes, for a subcommand with options of its own.
    pub(crate) fn builder(&self, retry: Retry) -> RedlockBuilder {
        let mut builder = Redlock::builder()
            .nodes(self.urls())
            .key_prefix(self.prefix.clone())
            .retry(retry);
        for Seeds(seeds) in &self.cluster {
            builder = builder.cluster(seeds);
        }
        if let Some(timeout) = self.node_timeout {
            builder = builder.node_timeout(timeout);
        }
        if self.functions {
            builder = builder.script_mode(ScriptMode::Functions);
        }
        builder
    }
}

/// The help of `--node-timeout` for the subcommands that only read, and
/// give a loaded node more time ([`READ_NODE_TIMEOUT`]).
pub(crate) const READ_NODE_TIMEOUT_HELP: &str =
    "How long one request to one node may take [default: 1s]";

/// The node timeout of the subcommands that only read (`status`, `leader`).
pub(crate) const READ_NODE_TIMEOUT: Duration = Duration::from_secs(1);

/// The help of `--prefix` for the election subcommands.
pub(crate) const ELECTION_PREFIX_HELP: &str =
    "A prefix put before the election's name to form its Redis keys";

/// A clap-formatted usage error of `subcommand` (exit status 2), for
/// problems clap cannot see, such as a malformed node URL.
pub(crate) fn usage_error(subcommand: &str, message: String) -> clap::Error {
    use clap::CommandFactory;
    let mut command = crate::Cli::command();
    command.build();
    let kind = clap::error::ErrorKind::ValueValidation;
    match command.find_subcommand_mut(subcommand) {
        Some(sub) => sub.error(kind, message),
        None => command.error(kind, message),
    }
}

/// The least a command waits for the nodes a decision did not need.
const LEAST_GRACE: Duration = Duration::from_millis(10);

/// How long a command waits, after a quorum decided in `decided_in`, for
/// the other nodes: about as long again (at least [`LEAST_GRACE`]; each
/// request ends within the node timeout anyway). A healthy node answers
/// in about the time the quorum did; a frozen one would cost the node
/// timeout, and its answer is not needed: what was sent to it is on its
/// way, and its keys expire.
pub(crate) fn straggler_grace(decided_in: Duration) -> Duration {
    decided_in.max(LEAST_GRACE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stragglers_get_about_the_decisions_time_and_at_least_the_least() {
        let ms = Duration::from_millis;
        assert_eq!(straggler_grace(ms(3)), LEAST_GRACE);
        assert_eq!(straggler_grace(ms(40)), ms(40));
    }
}
