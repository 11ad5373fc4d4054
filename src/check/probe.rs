//! The node check's probes: what one node shows over the wire — `INFO`,
//! `CONFIG GET appendfsync`, timed `PING`s, two readings of `TIME`, the
//! Functions library, a cluster's slot map — and the access probe, a
//! short-lived lock on a key of its own. Read-only apart from that probe
//! key; the judgement of what was seen is in `check`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Value};
use tokio::time::Instant;

use crate::check::{CheckOptions, ClockSample, Library, NodeFacts, ServerFacts, SlotMap};
use crate::contract::{Extension, ShapeRef};
use crate::node::{HeldKeyTracking, Node};
use crate::request::Ttl;
use crate::scripts::ScriptMode;
use crate::token::Token;

/// How many `TIME` readings are taken at each end of the clock interval;
/// the one with the shortest round trip bounds the node's time best.
const CLOCK_READINGS: usize = 3;

/// The ttl of the access probe's lock: it is released at once, and expires
/// by itself if a refused release leaves it behind.
const PROBE_TTL: Ttl = Ttl::from_millis(2000);

/// What one configured node's servers show (a cluster's masters, found
/// through its slot map), over connections of the check's own: the first
/// part of [`node_facts`]. Never fails: what could not be probed is
/// recorded as such.
pub(crate) async fn servers_of(node: &Node, options: &CheckOptions, mode: ScriptMode) -> Seen {
    let functions = mode == ScriptMode::Functions;
    if node.is_cluster() {
        let slots = slot_map(node, options).await;
        let servers = match &slots {
            Ok(map) => {
                let probes = map.masters().into_iter().map(|master| async move {
                    let facts = match split_address(&master).and_then(|(h, p)| node.member(h, p)) {
                        Some(client) => server_facts(&client, &master, options, functions).await,
                        None => Err(format!("cannot address {master}")),
                    };
                    (master, facts)
                });
                futures::future::join_all(probes).await
            }
            Err(_) => Vec::new(),
        };
        Seen {
            servers,
            slots: Some(slots),
        }
    } else {
        let address = node.addresses().first().cloned().unwrap_or_default();
        let facts = match node.servers().first() {
            Some(client) => server_facts(client, &address, options, functions).await,
            None => Err("no server".to_owned()),
        };
        Seen {
            servers: vec![(address, facts)],
            slots: None,
        }
    }
}

/// What [`servers_of`] found of a node.
pub(crate) struct Seen {
    servers: Vec<(String, Result<ServerFacts, String>)>,
    slots: Option<Result<SlotMap, String>>,
}

impl Seen {
    /// Whether the node's servers answered: a server that answered
    /// nothing is not asked more, as each probe would wait the probe
    /// timeout again.
    pub(crate) fn answered(&self, options: &CheckOptions) -> bool {
        !silent(&self.servers, options)
    }
}

/// Everything one configured node shows: what [`servers_of`] saw, then
/// how the node's own connection releases and extends, whether it
/// watches held keys, and the access probe's refusals. Never fails: what
/// could not be probed is recorded as such.
pub(crate) async fn node_facts(
    node: &Node,
    seen: Seen,
    prefix: &str,
    options: &CheckOptions,
    tracking: HeldKeyTracking,
) -> NodeFacts {
    let asked = seen.answered(options);
    let Seen { servers, slots } = seen;
    // How the library itself releases and extends plain locks there: asked
    // over the node's own connection, as a lock would ask it.
    let path = if asked {
        let deadline = Instant::now() + options.probe_timeout;
        let caps = node.capabilities_within(deadline.into()).await;
        caps.map(|caps| caps.describe())
    } else {
        None
    };
    // Its own connection, as the manager's tracking makes one.
    let tracking = match (asked, tracking) {
        (false, _) => None,
        (true, HeldKeyTracking::Off) => Some(Err("turned off (held_key_tracking)".to_owned())),
        (true, _) => {
            let key = format!("{prefix}quorumlock:doctor:tracking");
            Some(node.tracking_probe(&key, options.probe_timeout).await)
        }
    };
    let refused = if asked && options.probe_access {
        access(node, prefix, options, path.as_deref()).await
    } else {
        Ok(Vec::new())
    };
    NodeFacts {
        node: node.label().to_string(),
        servers,
        slots,
        refused,
        path,
        not_asked_for: node.not_asked_for(),
        tracking,
    }
}

/// `host:port` split at its last colon.
fn split_address(address: &str) -> Option<(&str, u16)> {
    let (host, port) = address.rsplit_once(':')?;
    Some((host, port.parse().ok()?))
}

/// A fresh connection of the check's own, so that probing neither waits
/// behind nor disturbs the lock traffic on the node's shared connection.
async fn connect(
    client: &redis::Client,
    options: &CheckOptions,
) -> Result<MultiplexedConnection, String> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(options.probe_timeout))
        .set_response_timeout(Some(options.probe_timeout));
    tokio::time::timeout(
        options.probe_timeout,
        client.get_multiplexed_async_connection_with_config(&config),
    )
    .await
    .map_err(|_| silence(options))?
    .map_err(|e| {
        if e.is_timeout() {
            silence(options)
        } else {
            e.to_string()
        }
    })
}

/// Whether every server of a node answered nothing (see [`silence`]).
fn silent(servers: &[(String, Result<ServerFacts, String>)], options: &CheckOptions) -> bool {
    let silence = silence(options);
    !servers.is_empty()
        && servers
            .iter()
            .all(|(_, facts)| facts.as_ref().err() == Some(&silence))
}

/// What a server that answers nothing within the probe timeout is
/// reported as; the node's other probes are then not run (each would wait
/// as long again).
fn silence(options: &CheckOptions) -> String {
    format!(
        "none within {:?}: a frozen or overloaded server, or a network that drops packets",
        options.probe_timeout
    )
}

async fn query<T: redis::FromRedisValue>(
    conn: &mut MultiplexedConnection,
    cmd: &redis::Cmd,
) -> Result<T, String> {
    cmd.query_async(conn).await.map_err(|e| e.to_string())
}

/// What one server shows; an `Err` when it cannot be reached or refuses
/// `INFO`.
async fn server_facts(
    client: &redis::Client,
    address: &str,
    options: &CheckOptions,
    functions: bool,
) -> Result<ServerFacts, String> {
    if address.is_empty() {
        return Err("no address".to_owned());
    }
    let mut conn = connect(client, options).await?;
    // A lock user may lack INFO (or TIME, CONFIG): that is a finding, not
    // an unreachable node. Other errors mean the server cannot be probed.
    let info = match redis::cmd("INFO").query_async::<String>(&mut conn).await {
        Ok(text) => Ok(parse_info(&text)),
        Err(e) if e.is_timeout() => return Err(silence(options)),
        Err(e) if is_refusal(&e.to_string()) => Err(e.to_string()),
        Err(e) => return Err(e.to_string()),
    };

    let config = query::<HashMap<String, String>>(
        &mut conn,
        redis::cmd("CONFIG").arg("GET").arg("appendfsync"),
    )
    .await;

    let mut rtts = Vec::with_capacity(options.latency_samples);
    for _ in 0..options.latency_samples {
        let sent = Instant::now();
        match query::<Value>(&mut conn, &redis::cmd("PING")).await {
            Ok(_) => rtts.push(sent.elapsed()),
            Err(e) if is_refusal(&e) => break,
            Err(e) => return Err(e),
        }
    }

    let clock = clock(&mut conn, options.clock_interval).await;

    let library = if functions {
        Some(library(&mut conn).await)
    } else {
        None
    };
    Ok(ServerFacts {
        address: address.to_owned(),
        info,
        config,
        clock,
        rtts,
        library,
    })
}

/// Whether a command failed for lack of permission.
fn is_refusal(error: &str) -> bool {
    let error = error.to_lowercase();
    error.contains("noperm") || error.contains("no permissions")
}

/// `field:value` lines of an `INFO` reply; section headers and blank lines
/// skipped.
fn parse_info(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.trim().split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// One `TIME` reading: the node's time in microseconds, and the client's
/// monotonic clock before sending and after the answer.
async fn time(conn: &mut MultiplexedConnection) -> Result<(u128, Instant, Instant), String> {
    let sent = Instant::now();
    let (secs, micros): (u64, u64) = query(conn, &redis::cmd("TIME")).await?;
    let answered = Instant::now();
    Ok((
        u128::from(secs) * 1_000_000 + u128::from(micros),
        sent,
        answered,
    ))
}

/// The best of [`CLOCK_READINGS`] readings: the shortest round trip.
async fn best_time(conn: &mut MultiplexedConnection) -> Result<(u128, Instant, Instant), String> {
    let mut best: Option<(u128, Instant, Instant)> = None;
    for _ in 0..CLOCK_READINGS {
        let reading = time(conn).await?;
        if best.is_none_or(|b| reading.2 - reading.1 < b.2 - b.1) {
            best = Some(reading);
        }
    }
    best.ok_or_else(|| "no reading".to_owned())
}

/// Two readings of the node's clock `interval` apart, against the client's
/// monotonic clock, and the wall-clock offset at the first.
async fn clock(
    conn: &mut MultiplexedConnection,
    interval: Duration,
) -> Result<ClockSample, String> {
    let (first, sent0, answered0) = best_time(conn).await?;
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_micros();
    // The client's wall clock at the first reading's midpoint.
    let wall = wall.saturating_sub((answered0.elapsed() + (answered0 - sent0) / 2).as_micros());
    tokio::time::sleep(interval).await;
    let (second, sent1, answered1) = best_time(conn).await?;
    let micros = |m: u128| Duration::from_micros(u64::try_from(m).unwrap_or(u64::MAX));
    let offset_us = i128::try_from(first).unwrap_or(i128::MAX) - i128::try_from(wall).unwrap_or(0);
    Ok(ClockSample {
        node_elapsed: micros(second.saturating_sub(first)),
        client_min: sent1.saturating_duration_since(answered0),
        client_max: answered1 - sent0,
        offset_ms: i64::try_from(offset_us / 1000).unwrap_or(i64::MAX),
    })
}

/// How the library `quorumlock` looks on this server.
async fn library(conn: &mut MultiplexedConnection) -> Library {
    let reply: Result<Value, String> = query(
        conn,
        redis::cmd("FUNCTION")
            .arg("LIST")
            .arg("LIBRARYNAME")
            .arg("quorumlock")
            .arg("WITHCODE"),
    )
    .await;
    match reply {
        Err(e) => Library::Unknown(e),
        Ok(Value::Array(libraries)) => {
            // Each library is a map (RESP3) or a flat list of field, value.
            for library in libraries {
                let fields: Vec<(Value, Value)> = match library {
                    Value::Map(pairs) => pairs,
                    Value::Array(items) => {
                        let mut items = items.into_iter();
                        let mut pairs = Vec::new();
                        while let (Some(k), Some(v)) = (items.next(), items.next()) {
                            pairs.push((k, v));
                        }
                        pairs
                    }
                    _ => continue,
                };
                let text = |v: &Value| redis::from_redis_value::<String>(v.clone()).ok();
                let field = |name: &str| {
                    fields
                        .iter()
                        .find(|(k, _)| text(k).as_deref() == Some(name))
                        .and_then(|(_, v)| text(v))
                };
                if field("library_name").as_deref() == Some("quorumlock") {
                    return Library::Loaded {
                        code: field("library_code").unwrap_or_default(),
                    };
                }
            }
            Library::Missing
        }
        Ok(other) => Library::Unknown(format!("unexpected reply {other:?}")),
    }
}

/// A cluster node's slot map, from the first seed that gives one.
async fn slot_map(node: &Node, options: &CheckOptions) -> Result<SlotMap, String> {
    let mut last = "no seeds".to_owned();
    for (seed, address) in node.servers().iter().zip(node.addresses()) {
        let reply = async {
            let mut conn = connect(seed, options).await?;
            query::<Value>(&mut conn, redis::cmd("CLUSTER").arg("SLOTS")).await
        }
        .await;
        match reply.and_then(|v| parse_slots(&v, address)) {
            Ok(map) => return Ok(map),
            Err(e) => last = format!("{address}: {e}"),
        }
    }
    Err(last)
}

/// `CLUSTER SLOTS`: `[[first, last, [host, port, id, …], replicas…], …]`.
/// An empty host means the seed's own.
fn parse_slots(value: &Value, seed: &str) -> Result<SlotMap, String> {
    let bad = || format!("unexpected CLUSTER SLOTS reply {value:?}");
    let Value::Array(ranges) = value else {
        return Err(bad());
    };
    let seed_host = split_address(seed).map_or("127.0.0.1", |(h, _)| h);
    let mut map = SlotMap::default();
    for range in ranges {
        let Value::Array(items) = range else {
            return Err(bad());
        };
        let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(master))) =
            (items.first(), items.get(1), items.get(2))
        else {
            return Err(bad());
        };
        let host = master
            .first()
            .and_then(|h| redis::from_redis_value::<String>(h.clone()).ok())
            .filter(|h| !h.is_empty() && h != "?")
            .unwrap_or_else(|| seed_host.to_owned());
        let Some(Value::Int(port)) = master.get(1) else {
            return Err(bad());
        };
        let (Ok(first), Ok(last)) = (u16::try_from(*first), u16::try_from(*last)) else {
            return Err(bad());
        };
        map.ranges.push((first, last, format!("{host}:{port}")));
    }
    Ok(map)
}

/// The access probe: on `<prefix>quorumlock:doctor:<random>`, the
/// operations every lock goes through — acquire (`SET NX PX`), extend and
/// release (scripts, or functions), and a multi-resource acquire — through
/// the node's own connection, as the user configured. Returns the refused
/// operations with the node's error. The key lives for at most
/// [`PROBE_TTL`] and is released at once.
async fn access(
    node: &Node,
    prefix: &str,
    options: &CheckOptions,
    path: Option<&str>,
) -> Result<Vec<(String, String)>, String> {
    let (release, extend) = step_names(path);
    // The key's name is random too, but not the token: a key name may
    // appear in logs, a token never.
    let name = Token::generate().map_err(|e| e.to_string())?;
    let token = Token::generate().map_err(|e| e.to_string())?;
    let key: Arc<str> = format!("{prefix}quorumlock:doctor:{}", name.as_str()).into();
    let keys = std::slice::from_ref(&key);
    let token = token.as_str();
    let deadline = || Instant::now() + options.probe_timeout;
    let mut refused = Vec::new();
    let mut note = |operation: &str, error: crate::error::NodeError| {
        refused.push((operation.to_owned(), error.to_string()));
    };
    match node.acquire(&key, token, PROBE_TTL, deadline()).await {
        Ok(_) => {}
        // Not a refusal: the node cannot be reached at all.
        Err(e @ crate::error::NodeError::Timeout(_)) => return Err(e.to_string()),
        Err(e) if matches!(&e, crate::error::NodeError::Redis(r) if r.is_io_error() || r.is_connection_refusal()) =>
        {
            return Err(e.to_string());
        }
        Err(e) => note("acquire (SET NX PX)", e),
    }
    let extension = Extension {
        keys,
        token,
        ttl: PROBE_TTL,
        shape: &*ShapeRef::LOCK,
    };
    if let Err(e) = node.extend(extension, deadline()).await {
        note(extend, e);
    }
    if let Err(e) = node
        .release(keys, &*ShapeRef::LOCK, token, None, deadline())
        .await
    {
        note(release, e);
    }
    match node.acquire_many(keys, token, PROBE_TTL, deadline()).await {
        Ok(_) => {
            if let Err(e) = node
                .release(keys, &*ShapeRef::LOCK, token, None, deadline())
                .await
            {
                note(release, e);
            }
        }
        Err(e) => note("acquire_many (script: GET, SET)", e),
    }
    refused.dedup();
    Ok(refused)
}

/// How the probe names the release and the extension: with what each
/// sends on a node whose `path` is this (see `Capabilities::describe`).
fn step_names(path: Option<&str>) -> (&'static str, &'static str) {
    let native =
        |step: &str, command: &str| path.is_some_and(|p| p.contains(&format!("{step} {command}")));
    let release = if native("release", "DELIFEQ") {
        "release (DELIFEQ, PUBLISH)"
    } else if native("release", "DELEX") {
        "release (DELEX IFEQ, PUBLISH)"
    } else {
        "release (script: GET, DEL, PUBLISH)"
    };
    let extend = if native("extend", "SET IFEQ") {
        "extend (SET NX PX, SET IFEQ PX)"
    } else {
        "extend (script: GET, PEXPIRE, SET)"
    };
    (release, extend)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_lines_become_fields() {
        let info = parse_info(
            "# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\n\r\n# Replication\r\nrole:master\r\nslave0:ip=127.0.0.1,port=1,state=online\r\n",
        );
        assert_eq!(info["redis_version"], "7.0.15");
        assert_eq!(info["role"], "master");
        assert_eq!(info["slave0"], "ip=127.0.0.1,port=1,state=online");
        assert!(!info.keys().any(|k| k.starts_with('#')));
    }

    #[test]
    fn cluster_slots_become_a_slot_map() {
        let master = |host: &str, port| {
            Value::Array(vec![
                Value::BulkString(host.into()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(100),
                master("10.0.0.1", 7000),
                master("10.0.0.2", 7001),
            ]),
            Value::Array(vec![Value::Int(101), Value::Int(16383), master("", 7002)]),
        ]);
        let map = parse_slots(&reply, "10.0.0.9:7002").expect("parses");
        assert_eq!(
            map.ranges,
            [
                (0, 100, "10.0.0.1:7000".to_owned()),
                (101, 16383, "10.0.0.9:7002".to_owned())
            ]
        );
        assert!(parse_slots(&Value::Int(1), "h:1").is_err());
    }

    #[test]
    fn addresses_split_at_the_last_colon() {
        assert_eq!(split_address("127.0.0.1:7000"), Some(("127.0.0.1", 7000)));
        assert_eq!(split_address("::1:7000"), Some(("::1", 7000)));
        assert_eq!(split_address("nohost"), None);
    }
}
