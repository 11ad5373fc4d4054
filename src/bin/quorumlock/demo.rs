//! `quorumlock demo`: a narrated tour on five local redis-server nodes — a
//! lock taken, a node killed and the lock still working, then a majority
//! killed and the error that says so.

use std::time::Duration;

use clap::Args;
use quorumlock::testkit::RedisNodes;
use quorumlock::{Error, Redlock, Retry};

use crate::duration::show;
use crate::exit;
use crate::nodes::usage_error;
use crate::signals::{Signals, signal_status};

const RESOURCE: &str = "demo:nightly-report";
const TTL: Duration = Duration::from_secs(10);
const LOCAL_NODES: usize = 5;

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// Run the non-destructive part against these nodes instead of starting
    /// local ones (nodes you give are never killed).
    #[arg(long, value_delimiter = ',', value_parser = crate::nodes::node_entry, value_name = "URLS")]
    pub(crate) nodes: Vec<String>,
}

pub(crate) async fn run(args: DemoArgs) -> Result<u8, clap::Error> {
    let given = args.nodes;
    if given.is_empty() {
        local().await
    } else {
        let locks = manager(&given)?;
        let status = match tour(&locks, None).await {
            Ok(()) => 0,
            Err(e) => failed(&e),
        };
        locks.settle().await;
        Ok(status)
    }
}

async fn local() -> Result<u8, clap::Error> {
    // Caught from before the first server starts: interrupted or not, the
    // demo returns normally, so `nodes` drops and stops every server.
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(e) => {
            eprintln!("quorumlock: cannot install signal handlers: {e}");
            return Ok(exit::INTERNAL);
        }
    };
    println!("Starting {LOCAL_NODES} independent redis-server nodes on free local ports…");
    // Every server is killed when `nodes` drops, on every path out of here.
    let nodes = match RedisNodes::start(LOCAL_NODES) {
        Ok(nodes) => nodes,
        Err(e) => {
            eprintln!("quorumlock: cannot start the demo's nodes: {e}");
            return Ok(exit::INTERNAL);
        }
    };
    for (i, server) in nodes.iter().enumerate() {
        println!("  node {i}: {}", server.url());
    }
    let locks = manager(&nodes.urls())?;
    let status = tokio::select! {
        toured = tour(&locks, Some(&nodes)) => match toured {
            Ok(()) => 0,
            Err(e) => failed(&e),
        },
        received = signals.recv() => {
            eprintln!("quorumlock: {received}; stopping the demo");
            signal_status(received)
        }
    };
    locks.settle().await;
    println!("\nStopping the local nodes. Done.");
    Ok(status)
}

fn manager(urls: &[String]) -> Result<Redlock, clap::Error> {
    Redlock::builder()
        .nodes(urls)
        .retry(Retry::none())
        .build()
        .map_err(|e| usage_error("demo", format!("--nodes: {e}")))
}

/// The narrated steps; the destructive ones only on nodes the demo owns.
async fn tour(locks: &Redlock, nodes: Option<&RedisNodes>) -> Result<(), Error> {
    let n = locks.nodes().len();
    println!(
        "\n1. Lock `{RESOURCE}` for {} on {n} nodes (a quorum is {}).",
        show(TTL),
        locks.quorum()
    );
    let guard = locks.try_lock(RESOURCE, TTL).await?;
    println!(
        "   Held: a majority granted it; trust it for another {}.",
        show(guard.validity())
    );

    println!("\n2. A second client asks for the same resource.");
    match locks.try_lock(RESOURCE, TTL).await {
        Ok(_) => println!("   BUG: it got the lock too."),
        Err(e) => println!("   Refused, as it should be: {e}"),
    }

    let Some(nodes) = nodes else {
        guard.release().await?;
        println!("\n3. Released. (Node kills are shown only on nodes the demo starts itself.)");
        return Ok(());
    };

    println!("\n3. Kill node 0 (SIGKILL) while the lock is held.");
    nodes[0].kill();
    guard.extend(TTL).await?;
    println!(
        "   {} of {n} nodes are up: extending still works (valid for another {}).",
        n - 1,
        show(guard.validity())
    );
    let summary = guard.release().await?;
    println!(
        "   Released on {} of {n} nodes; the dead one would have expired it anyway.",
        summary.released()
    );
    let guard = locks.try_lock(RESOURCE, TTL).await?;
    println!("   And a new lock is granted with one node down.");
    guard.release().await?;

    println!(
        "\n4. Kill nodes 1 and 2 as well: {} of {n} are left.",
        n - 3
    );
    nodes[1].kill();
    nodes[2].kill();
    match locks.try_lock(RESOURCE, TTL).await {
        Ok(_) => println!("   BUG: a lock without a majority."),
        Err(e) => {
            println!("   No lock without a majority; the error says why:");
            println!("   could not lock `{RESOURCE}`: {}", exit::describe(&e));
            for failure in e.node_failures() {
                println!("     - {failure}");
            }
        }
    }
    Ok(())
}

fn failed(e: &Error) -> u8 {
    eprintln!("quorumlock: the demo failed: {}", exit::describe(e));
    exit::print_failures(e);
    exit::classify(e).max(1)
}
