//! `quorumlock status --semaphore L` and `--rwlock`: what each node holds
//! of a semaphore (its permits) or of a reader-writer lock (its writer and
//! readers), and what a quorum of them confirms. Plain reads, never full
//! tokens.

use std::collections::HashMap;
use std::time::Duration;

use quorumlock::{
    PERMIT_INFIX, PERMITS_SUFFIX, READERS_SUFFIX, Redlock, Semaphore, WRITER_SUFFIX,
    WRITER_WAITING_SUFFIX,
};

use crate::duration::show;
use crate::exit;
use crate::nodes::usage_error;
use crate::status::{DEFAULT_PROBE_TIMEOUT, StatusArgs, short};

/// Runs `query` against the node at `url` within `timeout`.
async fn ask<T>(
    url: &str,
    timeout: Duration,
    query: impl AsyncFnOnce(&mut redis::aio::MultiplexedConnection) -> redis::RedisResult<T>,
) -> Result<T, String> {
    let run = async {
        let client = redis::Client::open(url)?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        query(&mut conn).await
    };
    match tokio::time::timeout(timeout, run).await {
        Err(_) => Err(format!("no answer within {}", show(timeout))),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(value)) => Ok(value),
    }
}

/// How many tokens a quorum of nodes confirms, and how many nodes failed.
fn confirmed<'a>(per_node: impl Iterator<Item = &'a [String]>, quorum: usize) -> Vec<&'a str> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for tokens in per_node {
        for token in tokens {
            *seen.entry(token).or_default() += 1;
        }
    }
    let mut out: Vec<&str> = seen
        .into_iter()
        .filter(|&(_, n)| n >= quorum)
        .map(|(t, _)| t)
        .collect();
    out.sort_unstable();
    out
}

fn listed(tokens: &[String]) -> String {
    tokens
        .iter()
        .map(|t| short(t))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The exit status of a look: held (0), free, or unknown when too many
/// nodes did not answer to tell.
fn verdict(held: usize, unreachable: usize, nodes: usize, quorum: usize) -> u8 {
    if held > 0 {
        0
    } else if unreachable > nodes - quorum {
        exit::UNAVAILABLE
    } else {
        exit::FREE
    }
}

pub(crate) async fn semaphore(
    args: &StatusArgs,
    locks: &Redlock,
    key: &str,
    permits: u32,
) -> Result<u8, clap::Error> {
    if permits == 0 || permits > Semaphore::MAX_PERMITS {
        return Err(usage_error(
            "status",
            format!(
                "--semaphore: between 1 and {} permits",
                Semaphore::MAX_PERMITS
            ),
        ));
    }
    let quorum = locks.quorum();
    let timeout = args.nodes.node_timeout.unwrap_or(DEFAULT_PROBE_TIMEOUT);
    let slots: Vec<String> = (0..permits)
        .map(|i| format!("{key}{PERMIT_INFIX}{i}"))
        .collect();
    let limit_key = format!("{key}{PERMITS_SUFFIX}");
    let urls = args.nodes.urls();
    let answers = futures::future::join_all(urls.iter().map(|url| {
        ask(url, timeout, async |conn| {
            let mut pipe = redis::pipe();
            for slot in &slots {
                pipe.cmd("GET").arg(slot);
            }
            pipe.cmd("GET").arg(&limit_key);
            let mut values: Vec<Option<String>> = pipe.query_async(conn).await?;
            let limit = values.pop().flatten();
            Ok((values, limit))
        })
    }))
    .await;
    let labels: Vec<&str> = locks.nodes().collect();
    let width = labels.iter().map(|l| l.len()).max().unwrap_or(0);
    println!(
        "semaphore `{}` of {permits} permits (keys `{key}{PERMIT_INFIX}0..{}`) on {} nodes, quorum {quorum}",
        args.resource,
        permits - 1,
        labels.len()
    );
    // Per node, "slot:token" of each held permit.
    let mut held: Vec<Vec<String>> = Vec::new();
    let mut unreachable = 0;
    for (label, answer) in labels.iter().zip(&answers) {
        match answer {
            Ok((values, limit)) => {
                let taken: Vec<(usize, &String)> = values
                    .iter()
                    .enumerate()
                    .filter_map(|(i, v)| v.as_ref().map(|t| (i, t)))
                    .collect();
                let shown: Vec<String> = taken
                    .iter()
                    .map(|(i, t)| format!("{i}:{}", short(t)))
                    .collect();
                println!(
                    "  {label:<width$}  {} held{}{}",
                    taken.len(),
                    if shown.is_empty() {
                        String::new()
                    } else {
                        format!("  {}", shown.join(" "))
                    },
                    limit
                        .as_ref()
                        .map(|l| format!("  (count {l})"))
                        .unwrap_or_default()
                );
                held.push(taken.iter().map(|(i, t)| format!("{i}:{t}")).collect());
            }
            Err(why) => {
                println!("  {label:<width$}  unreachable: {why}");
                unreachable += 1;
                held.push(Vec::new());
            }
        }
    }
    let confirmed = confirmed(held.iter().map(Vec::as_slice), quorum);
    println!(
        "verdict: {} of {permits} permits held, each confirmed on a quorum of {quorum}{}",
        confirmed.len(),
        if unreachable > 0 {
            format!(" ({unreachable} nodes unreachable)")
        } else {
            String::new()
        }
    );
    Ok(verdict(confirmed.len(), unreachable, labels.len(), quorum))
}

pub(crate) async fn rwlock(
    args: &StatusArgs,
    locks: &Redlock,
    key: &str,
) -> Result<u8, clap::Error> {
    let quorum = locks.quorum();
    let timeout = args.nodes.node_timeout.unwrap_or(DEFAULT_PROBE_TIMEOUT);
    let (writer_key, readers_key, waiting_key) = (
        format!("{key}{WRITER_SUFFIX}"),
        format!("{key}{READERS_SUFFIX}"),
        format!("{key}{WRITER_WAITING_SUFFIX}"),
    );
    let urls = args.nodes.urls();
    let answers = futures::future::join_all(urls.iter().map(|url| {
        ask(url, timeout, async |conn| {
            type Read = ((u64, u64), Option<String>, Vec<(String, f64)>, bool);
            let (time, writer, readers, waiting): Read = redis::pipe()
                .cmd("TIME")
                .cmd("GET")
                .arg(&writer_key)
                .cmd("ZRANGE")
                .arg(&readers_key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .cmd("EXISTS")
                .arg(&waiting_key)
                .query_async(conn)
                .await?;
            // Readers whose expiry (by this node's clock) has passed are gone.
            let now = time.0.saturating_mul(1000) + time.1 / 1000;
            let live: Vec<String> = readers
                .into_iter()
                .filter(|(_, expiry)| *expiry > now as f64)
                .map(|(token, _)| token)
                .collect();
            Ok((writer, live, waiting))
        })
    }))
    .await;
    let labels: Vec<&str> = locks.nodes().collect();
    let width = labels.iter().map(|l| l.len()).max().unwrap_or(0);
    println!(
        "reader-writer lock `{}` (keys `{writer_key}`, `{readers_key}`) on {} nodes, quorum {quorum}",
        args.resource,
        labels.len()
    );
    let (mut writers, mut readers) = (Vec::new(), Vec::new());
    let mut unreachable = 0;
    for (label, answer) in labels.iter().zip(&answers) {
        match answer {
            Ok((writer, live, waiting)) => {
                println!(
                    "  {label:<width$}  writer {}  readers {}{}{}",
                    writer.as_deref().map_or("-".to_owned(), short),
                    live.len(),
                    if live.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", listed(live))
                    },
                    if *waiting { "  a writer waits" } else { "" }
                );
                writers.push(writer.iter().cloned().collect::<Vec<_>>());
                readers.push(live.clone());
            }
            Err(why) => {
                println!("  {label:<width$}  unreachable: {why}");
                unreachable += 1;
                writers.push(Vec::new());
                readers.push(Vec::new());
            }
        }
    }
    let writer = confirmed(writers.iter().map(Vec::as_slice), quorum);
    let reading = confirmed(readers.iter().map(Vec::as_slice), quorum);
    match writer.first() {
        Some(token) => println!(
            "verdict: written — writer {} confirmed on a quorum",
            short(token)
        ),
        None if !reading.is_empty() => println!(
            "verdict: read — {} readers confirmed on a quorum ({})",
            reading.len(),
            reading
                .iter()
                .map(|t| short(t))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        None => println!("verdict: free — no writer or reader on a quorum"),
    }
    Ok(verdict(
        writer.len() + reading.len(),
        unreachable,
        labels.len(),
        quorum,
    ))
}
