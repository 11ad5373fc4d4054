//! `quorumlock status`: what each node holds for a resource, and whether a
//! quorum of them agrees that it is held. The reading and the verdict are
//! the library's (`Redlock::inspect`); this shows a lock or an election,
//! and `status_many` a semaphore or a reader-writer lock.

use tokio::time::Instant;

use clap::Args;
use quorumlock::{Claimed, Inspection, ResourceKind, Retry, Semaphore, Stored, Verdict};

use crate::duration::show;
use crate::nodes::{NodeArgs, READ_NODE_TIMEOUT, straggler_grace, usage_error};
use crate::status_nodes::{Waits, held_otherwise, listed, print_nodes, status_of, unreachable};

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub(crate) nodes: NodeArgs,

    /// Show it as a semaphore of this many permits: the permits each node
    /// holds. (Without it, a semaphore the nodes keep is shown as one.)
    #[arg(long, value_name = "PERMITS", conflicts_with = "rwlock")]
    pub(crate) semaphore: Option<u32>,

    /// Show it as a reader-writer lock: the writer and the readers each
    /// node holds. (Without it, one the nodes keep is shown as one.)
    #[arg(long)]
    pub(crate) rwlock: bool,

    /// Wait for every node's answer, each up to --node-timeout. Without
    /// it, status answers once a quorum has decided the verdict, and
    /// waits for the other nodes only about as long again: a frozen node
    /// is shown as not answering instead of costing the node timeout.
    #[arg(long)]
    pub(crate) every_node: bool,

    /// The resource to look at.
    pub(crate) resource: String,
}

/// How `status` shows a resource.
enum View {
    Lock,
    Election,
    Semaphore(Option<u32>),
    RwLock,
}

pub(crate) async fn run(args: StatusArgs) -> Result<u8, clap::Error> {
    if args.resource.is_empty() {
        return Err(usage_error(
            "status",
            "the resource name is empty".to_owned(),
        ));
    }
    if let Some(permits) = args.semaphore
        && (permits == 0 || permits > Semaphore::MAX_PERMITS)
    {
        return Err(usage_error(
            "status",
            format!(
                "--semaphore: between 1 and {} permits",
                Semaphore::MAX_PERMITS
            ),
        ));
    }
    let mut nodes = args.nodes.clone();
    // Reading needs no hurry: give a loaded node, and a first connection,
    // time to answer.
    let timeout = nodes.node_timeout.unwrap_or(READ_NODE_TIMEOUT);
    nodes.node_timeout = Some(timeout);
    // Validates the URLs exactly as `exec` would.
    let locks = nodes.manager("status", Retry::none())?;
    let started = Instant::now();
    // What each node serves, asked beside the reads (it reads only), and
    // shown if every node said by the time they are shown.
    let mut serves = Box::pin(locks.serves());
    let mut served = None;
    let inspection = beside(locks.inspect(&args.resource), &mut serves, &mut served)
        .await
        .map_err(|e| usage_error("status", e.to_string()))?;
    // The verdict is decided; the other nodes are shown as far as they
    // answer in about as long again (every node, with --every-node).
    let inspection = if args.every_node {
        beside(inspection.settled(), &mut serves, &mut served).await
    } else {
        let grace = straggler_grace(started.elapsed());
        beside(inspection.settled_within(grace), &mut serves, &mut served).await
    };
    // Every node answered: what they serve comes as soon (a script, and
    // on a server without Lua, its version asked to name it).
    let served = match served {
        Some(served) => served,
        None if unreachable(&inspection) == 0 => {
            tokio::time::timeout(straggler_grace(started.elapsed()), serves)
                .await
                .unwrap_or_default()
        }
        None => Vec::new(),
    };
    let waits = Waits {
        node_timeout: timeout,
        waited: started.elapsed(),
        serves: &served,
    };
    let view = match (args.semaphore, args.rwlock, inspection.kind()) {
        (Some(permits), _, _) => View::Semaphore(Some(permits)),
        (None, true, _) => View::RwLock,
        (None, false, Some(ResourceKind::Semaphore)) => View::Semaphore(None),
        (None, false, Some(ResourceKind::RwLock)) => View::RwLock,
        (None, false, Some(ResourceKind::Election)) => View::Election,
        (None, false, _) => View::Lock,
    };
    match view {
        View::Lock => lock(&inspection, waits, false),
        View::Election => lock(&inspection, waits, true),
        View::Semaphore(permits) => crate::status_many::semaphore(&inspection, waits, permits),
        View::RwLock => crate::status_many::rwlock(&inspection, waits),
    }
    Ok(status_of(&inspection))
}

/// Awaits `main`, polling `side` meanwhile until it is done (into `done`).
async fn beside<T, S>(
    main: impl Future<Output = T>,
    side: &mut std::pin::Pin<Box<impl Future<Output = S>>>,
    done: &mut Option<S>,
) -> T {
    tokio::pin!(main);
    loop {
        tokio::select! {
            out = &mut main => return out,
            answer = side.as_mut(), if done.is_none() => *done = Some(answer),
        }
    }
}

/// A lock, or an election (a lock with its leader's value beside it).
fn lock(inspection: &Inspection, waits: Waits<'_>, election: bool) {
    let (quorum, nodes) = (inspection.quorum(), inspection.nodes().len());
    if election {
        println!(
            "election `{}` (keys {}) on {nodes} nodes, quorum {quorum}",
            inspection.resource(),
            listed(&inspection.keys_for(ResourceKind::Election)),
        );
    } else {
        println!(
            "resource `{}` (key `{}`) on {nodes} nodes, quorum {quorum}",
            inspection.resource(),
            inspection.key()
        );
    }
    print_nodes(inspection, waits, describe);
    let unreachable = unreachable(inspection);
    match (inspection.verdict(), inspection.holder()) {
        (Verdict::Held, Some(holder)) => {
            let lead = if election {
                let who = match inspection.leader() {
                    Some(leader) => format!("term {}, value `{}`", leader.term(), leader.value()),
                    None => "its value not seen on any node yet".to_owned(),
                };
                format!("led — {who};")
            } else {
                "held —".to_owned()
            };
            println!(
                "verdict: {lead} token {} confirmed on {} of {nodes} nodes (quorum {quorum}; {}){}",
                holder.token(),
                holder.nodes(),
                tolerance(holder.nodes(), quorum),
                holder
                    .ttl()
                    .map(|ttl| format!(", for at most another {}", show(ttl)))
                    .unwrap_or_default()
            );
        }
        (Verdict::Held, None) => held_otherwise(inspection),
        (Verdict::Free, _) if election => {
            let last = inspection
                .last_leader()
                .map(|l| format!(" (the last leader: term {}, `{}`)", l.term(), l.value()))
                .unwrap_or_default();
            println!("verdict: no leader — no token is on {quorum} nodes{last}");
        }
        (Verdict::Free, _) => println!(
            "verdict: free — no token is on {quorum} nodes{}",
            if unreachable > 0 {
                format!(" (even counting the {unreachable} unreachable)")
            } else {
                String::new()
            }
        ),
        _ => {
            let most = inspection
                .claims()
                .iter()
                .filter(|c| c.what() == Claimed::Lock)
                .map(|c| c.nodes())
                .max()
                .unwrap_or(0);
            println!(
                "verdict: unknown — {unreachable} of {nodes} nodes unreachable; the largest \
                 agreement is {most}, quorum {quorum}"
            );
        }
    }
}

/// A node's line about a lock: held, free or not a lock; its fence
/// counter; a fair lock's waiters in line; and an election's leader value (the holder's, or a former
/// leader's until it expires).
fn describe(stored: &Stored) -> String {
    let fence = stored
        .fence()
        .map(|f| format!("  fence {f}"))
        .unwrap_or_default();
    let lock = if let Some(kind) = stored.other_type() {
        format!("not a lock: the key holds a {kind}")
    } else if let Some(holder) = stored.lock() {
        format!(
            "held  token {}  {}{fence}",
            holder.token(),
            holder
                .ttl()
                .map(|t| format!("ttl {}", show(t)))
                .unwrap_or_else(|| "no ttl".to_owned()),
        )
    } else {
        format!("free{fence}")
    };
    let leader = stored.leader().map(|seen| {
        if stored.lock().is_some_and(|h| h.token() == seen.token()) {
            format!("  leader term {}  value `{}`", seen.term(), seen.value())
        } else {
            format!(
                "  former leader's value: term {}  `{}`",
                seen.term(),
                seen.value()
            )
        }
    });
    let line = match stored.in_line() {
        0 => String::new(),
        1 => "  1 waiting in line".to_owned(),
        n => format!("  {n} waiting in line"),
    };
    format!("{lock}{}{line}", leader.unwrap_or_default())
}

/// How many more of the nodes holding a lock may fail before it is lost.
fn tolerance(holding: usize, quorum: usize) -> String {
    match holding.saturating_sub(quorum) {
        0 => "one more node lost loses it".to_owned(),
        1 => "survives the loss of 1 of them".to_owned(),
        n => format!("survives the loss of {n} of them"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerance_counts_the_nodes_beyond_the_quorum() {
        assert_eq!(tolerance(3, 3), "one more node lost loses it");
        assert_eq!(tolerance(4, 3), "survives the loss of 1 of them");
        assert_eq!(tolerance(5, 3), "survives the loss of 2 of them");
    }
}
