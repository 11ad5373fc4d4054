//! `quorumlock status`: what each node holds for a resource, and whether a
//! quorum of them agrees that it is held.

use std::collections::HashMap;
use std::time::Duration;

use clap::Args;
use quorumlock::{FENCE_SUFFIX, LEADER_SUFFIX, Retry};

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

/// What a node keeps of an election's leader (`NAME:leader`, a hash), when
/// the key is an election's.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Proclaimed {
    token: String,
    term: String,
    value: String,
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
    let leader_key = format!("{key}{LEADER_SUFFIX}");
    let timeout = args.nodes.node_timeout.unwrap_or(DEFAULT_PROBE_TIMEOUT);

    let urls = args.nodes.urls();
    let answers = futures::future::join_all(
        urls.iter()
            .map(|url| probe(url, &key, &fence_key, &leader_key, timeout)),
    )
    .await;
    let (probes, proclaimed): (Vec<Probe>, Vec<Option<Proclaimed>>) = answers.into_iter().unzip();
    let labels: Vec<&str> = locks.nodes().collect();
    let width = labels.iter().map(|l| l.len()).max().unwrap_or(0);
    // A leader's value beside the key on any node: the name is an election's.
    let election = proclaimed.iter().any(Option::is_some);

    if election {
        println!(
            "election `{}` (keys `{key}`, `{fence_key}`, `{leader_key}`) on {} nodes, quorum {quorum}",
            args.resource,
            labels.len()
        );
    } else {
        println!(
            "resource `{}` (key `{key}`) on {} nodes, quorum {quorum}",
            args.resource,
            labels.len()
        );
    }
    for ((label, probe), seen) in labels.iter().zip(&probes).zip(&proclaimed) {
        println!(
            "  {label:<width$}  {}{}",
            describe(probe),
            seen.as_ref()
                .map(|seen| describe_leader(probe, seen))
                .unwrap_or_default()
        );
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
    if election {
        return Ok(election_verdict(
            &probes,
            &proclaimed,
            top.filter(|_| most >= quorum)
                .map(|(token, ttls)| (*token, ttls.as_slice())),
            most,
            unreachable,
            quorum,
        ));
    }
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

/// The verdict on an election: who leads (the token on a quorum, with the
/// term and value its nodes keep), no leader, or unknown; its exit status.
fn election_verdict(
    probes: &[Probe],
    proclaimed: &[Option<Proclaimed>],
    held: Option<(&str, &[Option<Duration>])>,
    most: usize,
    unreachable: usize,
    quorum: usize,
) -> u8 {
    if let Some((token, ttls)) = held {
        let seen = proclaimed.iter().flatten().find(|seen| seen.token == token);
        let who = match seen {
            Some(seen) => format!("term {}, value `{}`", seen.term, seen.value),
            None => "its value not written yet".to_owned(),
        };
        println!(
            "verdict: led — {who}; token {} confirmed on {most} of {} nodes (quorum {quorum}; {}){}",
            short(token),
            probes.len(),
            tolerance(most, quorum),
            quorum_ttl(ttls, quorum)
                .map(|ttl| format!(", for at most another {}", show(ttl)))
                .unwrap_or_default()
        );
        0
    } else if most + unreachable < quorum {
        let last = proclaimed
            .iter()
            .flatten()
            .filter_map(|seen| Some((seen.term.parse::<u64>().ok()?, seen)))
            .max_by_key(|(term, _)| *term)
            .map(|(_, seen)| format!(" (the last leader: term {}, `{}`)", seen.term, seen.value))
            .unwrap_or_default();
        println!("verdict: no leader — no token is on {quorum} nodes{last}");
        exit::FREE
    } else {
        println!(
            "verdict: unknown — {unreachable} of {} nodes unreachable; the largest agreement is {most}, \
             quorum {quorum}",
            probes.len()
        );
        exit::UNAVAILABLE
    }
}

/// A node's line about an election's leader: the value the lock's holder
/// keeps, or a value left by a former leader (until it expires).
fn describe_leader(probe: &Probe, seen: &Proclaimed) -> String {
    match probe {
        Probe::Held { token, .. } if *token == seen.token => {
            format!("  leader term {}  value `{}`", seen.term, seen.value)
        }
        _ => format!(
            "  former leader's value: term {}  `{}`",
            seen.term, seen.value
        ),
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

async fn probe(
    url: &str,
    key: &str,
    fence_key: &str,
    leader_key: &str,
    timeout: Duration,
) -> (Probe, Option<Proclaimed>) {
    let query = async {
        let client = redis::Client::open(url)?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        // Plain single-key reads (no script, so no EVAL permission needed and
        // no shared hash slot): the key's type and ttl, the counter's type,
        // then the values that are strings. Not atomic; fine for a display.
        let (kind, pttl, fence_kind, leader_kind): (String, i64, String, String) = redis::pipe()
            .cmd("TYPE")
            .arg(key)
            .cmd("PTTL")
            .arg(key)
            .cmd("TYPE")
            .arg(fence_key)
            .cmd("TYPE")
            .arg(leader_key)
            .query_async(&mut conn)
            .await?;
        // An election keeps its leader's value in a hash beside the key.
        let proclaimed = match leader_kind.as_str() {
            "hash" => {
                let fields: Vec<Option<String>> = redis::cmd("HMGET")
                    .arg(leader_key)
                    .arg(&["token", "term", "value"][..])
                    .query_async(&mut conn)
                    .await?;
                match &fields[..] {
                    [Some(token), Some(term), Some(value)] => Some(Proclaimed {
                        token: token.clone(),
                        term: term.clone(),
                        value: value.clone(),
                    }),
                    _ => None,
                }
            }
            _ => None,
        };
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
        Ok::<_, redis::RedisError>((kind, value, pttl, fence, proclaimed))
    };
    match tokio::time::timeout(timeout, query).await {
        Err(_) => (
            Probe::Unreachable(format!("no answer within {}", show(timeout))),
            None,
        ),
        Ok(Err(e)) => (Probe::Unreachable(e.to_string()), None),
        Ok(Ok((kind, value, pttl, fence, proclaimed))) => {
            let probe = match (kind.as_str(), value) {
                ("none", _) => Probe::Free { fence },
                ("string", Some(token)) => Probe::Held {
                    token,
                    ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
                    fence,
                },
                (other, _) => Probe::OtherType(other.to_owned()),
            };
            (probe, proclaimed)
        }
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
