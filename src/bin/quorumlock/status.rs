//! `quorumlock status`: what each node holds for a resource, and whether a
//! quorum of them agrees that it is held.

use std::collections::HashMap;
use std::time::Duration;

use clap::Args;
use quorumlock::{FENCE_SUFFIX, Retry};

use crate::duration::show;
use crate::exit;
use crate::nodes::{NodeArgs, usage_error};

/// How long one node may take to connect and answer, unless
/// `--node-timeout` says otherwise. Longer than the locking default: a
/// status probe also pays for a fresh connection.
pub(crate) const DEFAULT_PROBE_TIMEOUT: Duration = crate::nodes::READ_NODE_TIMEOUT;

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub(crate) nodes: NodeArgs,

    /// Look at a semaphore of this many permits instead of a lock: the
    /// permits each node holds.
    #[arg(long, value_name = "PERMITS", conflicts_with = "rwlock")]
    pub(crate) semaphore: Option<u32>,

    /// Look at a reader-writer lock instead of a lock: the writer and the
    /// readers each node holds.
    #[arg(long)]
    pub(crate) rwlock: bool,

    /// The resource to look at.
    pub(crate) resource: String,
}

/// What one node said.
enum Probe {
    /// The key is absent.
    Free { fence: Option<String> },
    /// The key holds a string: a lock token (ours or another client's).
    Held {
        token: String,
        ttl: Option<Duration>,
        fence: Option<String>,
    },
    /// The key holds something that is not a lock (a hash, a list, …).
    OtherType(String),
    /// No answer in time, or an error.
    Unreachable(String),
}

pub(crate) async fn run(args: StatusArgs) -> Result<u8, clap::Error> {
    if args.resource.is_empty() {
        return Err(usage_error(
            "status",
            "the resource name is empty".to_owned(),
        ));
    }
    // Validates the URLs exactly as `exec` would, and gives the quorum.
    let locks = args.nodes.manager("status", Retry::none())?;
    let quorum = locks.quorum();
    let key = format!("{}{}", args.nodes.prefix, args.resource);
    if let Some(permits) = args.semaphore {
        return crate::status_many::semaphore(&args, &locks, &key, permits).await;
    }
    if args.rwlock {
        return crate::status_many::rwlock(&args, &locks, &key).await;
    }
    let fence_key = format!("{key}{FENCE_SUFFIX}");
    let timeout = args.nodes.node_timeout.unwrap_or(DEFAULT_PROBE_TIMEOUT);

    let urls = args.nodes.urls();
    let probes =
        futures::future::join_all(urls.iter().map(|url| probe(url, &key, &fence_key, timeout)))
            .await;
    let labels: Vec<&str> = locks.nodes().collect();
    let width = labels.iter().map(|l| l.len()).max().unwrap_or(0);

    println!(
        "resource `{}` (key `{key}`) on {} nodes, quorum {quorum}",
        args.resource,
        labels.len()
    );
    for (label, probe) in labels.iter().zip(&probes) {
        println!("  {label:<width$}  {}", describe(probe));
    }

    let mut holders: HashMap<&str, Vec<Option<Duration>>> = HashMap::new();
    let mut unreachable = 0;
    for probe in &probes {
        match probe {
            Probe::Held { token, ttl, .. } => holders.entry(token).or_default().push(*ttl),
            Probe::Unreachable(_) => unreachable += 1,
            Probe::Free { .. } | Probe::OtherType(_) => {}
        }
    }
    let top = holders.iter().max_by_key(|(_, ttls)| ttls.len());
    let most = top.map_or(0, |(_, ttls)| ttls.len());
    if let Some((token, ttls)) = top.filter(|_| most >= quorum) {
        println!(
            "verdict: held — token {} confirmed on {most} of {} nodes (quorum {quorum}; {}){}",
            short(token),
            probes.len(),
            tolerance(most, quorum),
            quorum_ttl(ttls, quorum)
                .map(|ttl| format!(", for at most another {}", show(ttl)))
                .unwrap_or_default()
        );
        Ok(0)
    } else if most + unreachable < quorum {
        println!(
            "verdict: free — no token is on {quorum} nodes{}",
            if unreachable > 0 {
                format!(" (even counting the {unreachable} unreachable)")
            } else {
                String::new()
            }
        );
        Ok(exit::FREE)
    } else {
        println!(
            "verdict: unknown — {unreachable} of {} nodes unreachable; the largest agreement is {most}, \
             quorum {quorum}",
            probes.len()
        );
        Ok(exit::UNAVAILABLE)
    }
}

/// How many more of the nodes holding a lock may fail before it is lost.
fn tolerance(holding: usize, quorum: usize) -> String {
    match holding.saturating_sub(quorum) {
        0 => "one more node lost loses it".to_owned(),
        1 => "survives the loss of 1 of them".to_owned(),
        n => format!("survives the loss of {n} of them"),
    }
}

/// How long a quorum keeps holding the token: the quorum-th longest ttl
/// among the nodes that hold it. `None` if some hold it without a ttl.
fn quorum_ttl(ttls: &[Option<Duration>], quorum: usize) -> Option<Duration> {
    let mut known: Vec<Duration> = ttls.iter().copied().collect::<Option<_>>()?;
    known.sort_unstable_by(|a, b| b.cmp(a));
    known.get(quorum.checked_sub(1)?).copied()
}

async fn probe(url: &str, key: &str, fence_key: &str, timeout: Duration) -> Probe {
    let query = async {
        let client = redis::Client::open(url)?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        // Plain single-key reads (no script, so no EVAL permission needed and
        // no shared hash slot): the key's type and ttl, the counter's type,
        // then the values that are strings. Not atomic; fine for a display.
        let (kind, pttl, fence_kind): (String, i64, String) = redis::pipe()
            .cmd("TYPE")
            .arg(key)
            .cmd("PTTL")
            .arg(key)
            .cmd("TYPE")
            .arg(fence_key)
            .query_async(&mut conn)
            .await?;
        let value: Option<String> = match kind.as_str() {
            "string" => redis::cmd("GET").arg(key).query_async(&mut conn).await?,
            _ => None,
        };
        let fence: Option<String> = match fence_kind.as_str() {
            "string" => {
                redis::cmd("GET")
                    .arg(fence_key)
                    .query_async(&mut conn)
                    .await?
            }
            _ => None,
        };
        Ok::<_, redis::RedisError>((kind, value, pttl, fence))
    };
    match tokio::time::timeout(timeout, query).await {
        Err(_) => Probe::Unreachable(format!("no answer within {}", show(timeout))),
        Ok(Err(e)) => Probe::Unreachable(e.to_string()),
        Ok(Ok((kind, value, pttl, fence))) => match (kind.as_str(), value) {
            ("none", _) => Probe::Free { fence },
            ("string", Some(token)) => Probe::Held {
                token,
                ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
                fence,
            },
            (other, _) => Probe::OtherType(other.to_owned()),
        },
    }
}

fn describe(probe: &Probe) -> String {
    let fence = |f: &Option<String>| {
        f.as_deref()
            .map(|f| format!("  fence {f}"))
            .unwrap_or_default()
    };
    match probe {
        Probe::Free { fence: f } => format!("free{}", fence(f)),
        Probe::Held {
            token,
            ttl,
            fence: f,
        } => format!(
            "held  token {}  {}{}",
            short(token),
            ttl.map(|t| format!("ttl {}", show(t)))
                .unwrap_or_else(|| "no ttl".to_owned()),
            fence(f)
        ),
        Probe::OtherType(kind) => format!("not a lock: the key holds a {kind}"),
        Probe::Unreachable(why) => format!("unreachable: {why}"),
    }
}

/// The first four characters of a token: enough to tell grants apart,
/// too little to release or extend someone else's lock.
pub(crate) fn short(token: &str) -> String {
    let prefix: String = token.chars().take(4).collect();
    format!("{prefix}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_cut_to_four_characters() {
        assert_eq!(short("0123456789abcdef"), "0123…");
        assert_eq!(short("ab"), "ab…");
        assert_eq!(short("äöüßx"), "äöüß…");
    }

    #[test]
    fn tolerance_counts_the_nodes_beyond_the_quorum() {
        assert_eq!(tolerance(3, 3), "one more node lost loses it");
        assert_eq!(tolerance(4, 3), "survives the loss of 1 of them");
        assert_eq!(tolerance(5, 3), "survives the loss of 2 of them");
    }

    #[test]
    fn quorum_ttl_is_the_quorum_th_longest() {
        let ms = |v: u64| Some(Duration::from_millis(v));
        assert_eq!(
            quorum_ttl(&[ms(900), ms(500), ms(700)], 2),
            Some(Duration::from_millis(700))
        );
        assert_eq!(quorum_ttl(&[ms(900), None], 1), None);
        assert_eq!(quorum_ttl(&[ms(900)], 2), None);
        assert_eq!(quorum_ttl(&[ms(900)], 0), None);
    }
}
