//! A real Redis Cluster on loopback ports: `redis-server` processes in
//! cluster mode, joined with `CLUSTER ADDSLOTSRANGE` (`ADDSLOTS` before
//! 7.0) / `MEET` / `REPLICATE`, and queried for which master owns a key.

use std::time::{Duration, Instant};

use redis::Value;

use super::{RedisServer, ServerOptions, TestkitError};

/// The number of hash slots of a Redis Cluster.
const SLOTS: u16 = 16384;
/// `cluster-node-timeout` of every member: small, so that a killed master
/// is marked failed (and, with replicas, failed over) within seconds.
const NODE_TIMEOUT: Duration = Duration::from_millis(1000);
/// How long a cluster may take to form (or to heal in `wait_ready`).
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Redis pushes no "cluster is ready" signal, so readiness is polled.
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// Bounds every setup command, so a paused member cannot hang a test.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// A Redis Cluster of `redis-server` processes on free loopback ports, every
/// process killed on drop (also when a test panics).
///
/// Servers `0..masters` start as masters, each owning an equal, contiguous
/// range of the 16384 slots; replicas follow. Index it to reach one server
/// and kill, pause, resume or restart it: `cluster[1].kill()`.
///
/// Members run with `cluster-node-timeout 1000` and
/// `cluster-require-full-coverage no`, so a killed master takes down only
/// the slots it owns; pass `--cluster-require-full-coverage yes` through
/// [`ServerOptions::arg`] to get Redis' default back.
///
/// # Examples
///
/// ```no_run
/// use quorumlock::{Redlock, testkit::RedisCluster};
/// # use std::time::Duration;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let cluster = RedisCluster::start(3)?;
/// let locks = Redlock::builder().cluster(cluster.seed_urls()).build()?;
/// let guard = locks.lock("{lock_goods}:300", Duration::from_secs(5)).await?;
/// guard.release().await?;
///
/// // Keys in the dead master's slots now fail; the others still work.
/// cluster.kill_master_owning("{lock_goods}:300")?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    servers: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts a cluster of `masters` masters without replicas or persistence
    /// and waits until every member reports `cluster_state:ok`.
    ///
    /// # Errors
    ///
    /// As [`RedisCluster::start_with`].
    pub fn start(masters: usize) -> Result<Self, TestkitError> {
        Self::start_with(masters, 0, ServerOptions::new())
    }

    /// Starts a cluster of `masters` masters with `replicas_per_master`
    /// replicas each, every server started with `options`, and waits until
    /// every member reports `cluster_state:ok` (and every replica is in sync
    /// with its master).
    ///
    /// # Errors
    ///
    /// [`TestkitError::Cluster`] for zero or more than 16384 masters, or
    /// when the cluster does not form within 30 s; otherwise as
    /// [`RedisServer::start`]. Servers already started are killed.
    pub fn start_with(
        masters: usize,
        replicas_per_master: usize,
        options: ServerOptions,
    ) -> Result<Self, TestkitError> {
        if masters == 0 || masters > usize::from(SLOTS) {
            return Err(TestkitError::Cluster(format!(
                "a cluster needs between 1 and {SLOTS} masters, got {masters}"
            )));
        }
        let total = masters * (1 + replicas_per_master);
        let options = options.cluster_member(NODE_TIMEOUT);
        let servers = (0..total)
            .map(|_| RedisServer::start_with(options.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let cluster = Self { servers };
        cluster.form(masters)?;
        Ok(cluster)
    }

    /// Assigns slots, introduces every member to the first one, attaches
    /// replicas, and waits for the result.
    fn form(&self, masters: usize) -> Result<(), TestkitError> {
        for (i, server) in self.servers.iter().enumerate() {
            // Distinct config epochs, as `redis-cli --cluster create` sets
            // them, so that no epoch collision has to be resolved first.
            command(
                server,
                redis::cmd("CLUSTER").arg("SET-CONFIG-EPOCH").arg(i + 1),
            )?;
        }
        for (i, server) in self.servers.iter().take(masters).enumerate() {
            let (first, last) = slot_range(i, masters);
            let mut add = redis::cmd("CLUSTER");
            if server.version().at_least(7, 0) {
                add.arg("ADDSLOTSRANGE").arg(first).arg(last);
            } else {
                // No ADDSLOTSRANGE before 7.0: every slot by name.
                add.arg("ADDSLOTS").arg((first..=last).collect::<Vec<_>>());
            }
            command(server, &add)?;
        }
        let first = &self.servers[0];
        let bus = first.bus_port().ok_or_else(|| not_a_member(first))?;
        for server in &self.servers[1..] {
            command(
                server,
                redis::cmd("CLUSTER")
                    .arg("MEET")
                    .arg("127.0.0.1")
                    .arg(first.port())
                    .arg(bus),
            )?;
        }
        // A replica can only follow a master it has heard of.
        self.wait_until("every member knows every other member", |info| {
            field(info, "cluster_known_nodes") == Some(self.servers.len().to_string().as_str())
        })?;
        for (i, replica) in self.servers.iter().enumerate().skip(masters) {
            let master = &self.servers[i % masters];
            let id = text(command(master, redis::cmd("CLUSTER").arg("MYID"))?)?;
            command(replica, redis::cmd("CLUSTER").arg("REPLICATE").arg(id))?;
        }
        self.wait_ready()?;
        for replica in &self.servers[masters..] {
            wait_for(replica, "replica in sync with its master", || {
                let info = text(command(replica, redis::cmd("INFO").arg("replication"))?)?;
                Ok(field(&info, "master_link_status") == Some("up"))
            })?;
        }
        Ok(())
    }

    /// Waits until every running member reports `cluster_state:ok` with all
    /// 16384 slots assigned. Useful after restarting a member.
    ///
    /// # Errors
    ///
    /// [`TestkitError::Cluster`] if that does not happen within 30 s (a
    /// paused member never answers, so pause after waiting, not before).
    pub fn wait_ready(&self) -> Result<(), TestkitError> {
        let slots = SLOTS.to_string();
        self.wait_until("cluster_state:ok", |info| {
            field(info, "cluster_state") == Some("ok")
                && field(info, "cluster_slots_assigned") == Some(slots.as_str())
        })
    }

    /// Polls `CLUSTER INFO` on every running member until `ready` holds.
    fn wait_until(&self, what: &str, ready: impl Fn(&str) -> bool) -> Result<(), TestkitError> {
        for server in self.servers.iter().filter(|s| s.is_running()) {
            wait_for(server, what, || {
                let info = text(command(server, redis::cmd("CLUSTER").arg("INFO"))?)?;
                Ok(ready(&info))
            })?;
        }
        Ok(())
    }

    /// Every member's URL, masters first: the seed list for a cluster node
    /// of a [`Redlock`](crate::Redlock), see
    /// [`RedlockBuilder::cluster`](crate::RedlockBuilder::cluster).
    pub fn seed_urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    /// The members that currently own slots (after a failover, that
    /// includes promoted replicas), in slot order.
    ///
    /// Members can disagree for a moment after a failover; the claim with
    /// the highest config epoch wins, as it does in the cluster itself.
    ///
    /// # Errors
    ///
    /// [`TestkitError::Cluster`] if no running member answers (a paused
    /// member costs a 2 s timeout).
    pub fn masters(&self) -> Result<Vec<&RedisServer>, TestkitError> {
        let claims = self.claims()?;
        let mut masters: Vec<&RedisServer> = Vec::new();
        for slot in 0..SLOTS {
            if let Some(server) = owner(&claims, slot).and_then(|port| self.by_port(port))
                && !masters.iter().any(|m| m.port() == server.port())
            {
                masters.push(server);
            }
        }
        Ok(masters)
    }

    /// The hash slot of `key`, as the cluster computes it (`CLUSTER KEYSLOT`).
    ///
    /// # Errors
    ///
    /// [`TestkitError::Cluster`] if no running member answers.
    pub fn key_slot(&self, key: &str) -> Result<u16, TestkitError> {
        let reply = self.ask(redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))?;
        match reply {
            Value::Int(slot) => u16::try_from(slot)
                .map_err(|_| TestkitError::Cluster(format!("slot {slot} out of range"))),
            other => Err(unexpected("CLUSTER KEYSLOT", &other)),
        }
    }

    /// The member that the cluster says owns `slot` (even if it was
    /// killed), resolved as in [`masters`](Self::masters).
    ///
    /// # Errors
    ///
    /// [`TestkitError::Cluster`] if no running member answers, or the slot
    /// is not assigned to one of this cluster's servers.
    pub fn master_for_slot(&self, slot: u16) -> Result<&RedisServer, TestkitError> {
        owner(&self.claims()?, slot)
            .and_then(|port| self.by_port(port))
            .ok_or_else(|| TestkitError::Cluster(format!("no member owns slot {slot}")))
    }

    /// The member that owns `key`'s slot.
    ///
    /// # Errors
    ///
    /// As [`key_slot`](Self::key_slot) and
    /// [`master_for_slot`](Self::master_for_slot).
    pub fn master_for_key(&self, key: &str) -> Result<&RedisServer, TestkitError> {
        self.master_for_slot(self.key_slot(key)?)
    }

    /// Kills (SIGKILL) the master that owns `key`'s slot, and returns it (it
    /// can be restarted).
    ///
    /// # Errors
    ///
    /// As [`master_for_key`](Self::master_for_key).
    pub fn kill_master_owning(&self, key: &str) -> Result<&RedisServer, TestkitError> {
        let master = self.master_for_key(key)?;
        master.kill();
        Ok(master)
    }

    fn by_port(&self, port: u16) -> Option<&RedisServer> {
        self.servers.iter().find(|s| s.port() == port)
    }

    /// Every running member's view of which master owns which slots.
    fn claims(&self) -> Result<Vec<Claim>, TestkitError> {
        let mut claims = Vec::new();
        let mut answered = false;
        let mut last = None;
        for server in self.servers.iter().filter(|s| s.is_running()) {
            match command(server, redis::cmd("CLUSTER").arg("NODES")).and_then(text) {
                Ok(nodes) => {
                    answered = true;
                    claims.extend(nodes.lines().filter_map(Claim::parse));
                }
                Err(e) => last = Some(e),
            }
        }
        if answered {
            Ok(claims)
        } else {
            Err(last.unwrap_or_else(|| TestkitError::Cluster("no member is running".into())))
        }
    }

    /// Sends `cmd` to the first running member that answers.
    fn ask(&self, cmd: &redis::Cmd) -> Result<Value, TestkitError> {
        let mut last = None;
        for server in self.servers.iter().filter(|s| s.is_running()) {
            match command(server, cmd) {
                Ok(value) => return Ok(value),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| TestkitError::Cluster("no member is running".into())))
    }
}

// Members in order: masters first.
server_set!(RedisCluster, "members");

/// The slots of master `i` of `masters`: equal contiguous shares.
fn slot_range(i: usize, masters: usize) -> (usize, usize) {
    let slots = usize::from(SLOTS);
    (i * slots / masters, (i + 1) * slots / masters - 1)
}

/// Sends one command to one server over a fresh, time-bounded connection.
fn command(server: &RedisServer, cmd: &redis::Cmd) -> Result<Value, TestkitError> {
    let failed = |source| TestkitError::Command {
        port: server.port(),
        source,
    };
    let client = server.client().map_err(failed)?;
    let mut conn = client
        .get_connection_with_timeout(COMMAND_TIMEOUT)
        .map_err(failed)?;
    conn.set_read_timeout(Some(COMMAND_TIMEOUT))
        .map_err(failed)?;
    conn.set_write_timeout(Some(COMMAND_TIMEOUT))
        .map_err(failed)?;
    cmd.query(&mut conn).map_err(failed)
}

/// Polls `check` on `server` until it holds, for at most [`READY_TIMEOUT`].
/// Errors count as "not yet": a member may still be loading.
fn wait_for(
    server: &RedisServer,
    what: &str,
    mut check: impl FnMut() -> Result<bool, TestkitError>,
) -> Result<(), TestkitError> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let last = match check() {
            Ok(true) => return Ok(()),
            Ok(false) => "not yet".to_owned(),
            Err(e) => e.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(TestkitError::Cluster(format!(
                "member on port {} not ready within {READY_TIMEOUT:?} ({what}): {last}; last log lines:\n{}",
                server.port(),
                server.log_tail()
            )));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// A `key:value` line of an `INFO`-style reply.
fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .filter_map(|line| line.trim_end().split_once(':'))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

fn text(value: Value) -> Result<String, TestkitError> {
    match value {
        Value::BulkString(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        Value::SimpleString(s) | Value::VerbatimString { text: s, .. } => Ok(s),
        other => Err(unexpected("a text reply", &other)),
    }
}

fn unexpected(what: &str, value: &Value) -> TestkitError {
    TestkitError::Cluster(format!("unexpected reply to {what}: {value:?}"))
}

/// One member's statement that a master owns some slots.
#[derive(Debug, PartialEq)]
struct Claim {
    config_epoch: u64,
    port: u16,
    slots: Vec<(u16, u16)>,
}

impl Claim {
    /// A `CLUSTER NODES` line: `id ip:port@bus[,host] flags master ping pong
    /// config-epoch link slot…`, where a slot is `n` or `first-last` (and
    /// `[…]` marks a migration, ignored). Only masters with slots claim.
    fn parse(line: &str) -> Option<Self> {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [_, address, flags, _, _, _, epoch, _, slots @ ..] = fields.as_slice() else {
            return None;
        };
        if !flags.split(',').any(|f| f == "master") {
            return None;
        }
        let port = address.split(['@', ',']).next()?.rsplit(':').next()?;
        let slots: Vec<(u16, u16)> = slots
            .iter()
            .filter(|s| !s.starts_with('['))
            .map(|s| match s.split_once('-') {
                Some((first, last)) => Some((first.parse().ok()?, last.parse().ok()?)),
                None => s.parse().ok().map(|slot| (slot, slot)),
            })
            .collect::<Option<_>>()?;
        (!slots.is_empty()).then_some(Self {
            config_epoch: epoch.parse().ok()?,
            port: port.parse().ok()?,
            slots,
        })
    }
}

/// The port of the master that owns `slot` by the newest claim.
fn owner(claims: &[Claim], slot: u16) -> Option<u16> {
    claims
        .iter()
        .filter(|c| {
            c.slots
                .iter()
                .any(|&(first, last)| (first..=last).contains(&slot))
        })
        .max_by_key(|c| c.config_epoch)
        .map(|c| c.port)
}

fn not_a_member(server: &RedisServer) -> TestkitError {
    TestkitError::Cluster(format!(
        "redis-server on port {} is not a cluster member",
        server.port()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_ranges_cover_every_slot_once() {
        for masters in [1, 2, 3, 5, 7] {
            let mut next = 0;
            for i in 0..masters {
                let (first, last) = slot_range(i, masters);
                assert_eq!(first, next);
                assert!(last >= first);
                next = last + 1;
            }
            assert_eq!(next, usize::from(SLOTS));
        }
    }

    #[test]
    fn cluster_nodes_lines_become_claims() {
        let line = "e2df54f3b825e60065d563ddb299fb59b7b56fa0 127.0.0.1:37713@40419 myself,master - 0 1795222721000 1 connected 0-8191 9000 [9001->-58bc]";
        assert_eq!(
            Claim::parse(line),
            Some(Claim {
                config_epoch: 1,
                port: 37713,
                slots: vec![(0, 8191), (9000, 9000)],
            })
        );
        let replica = "fefe09758653aeabf0db001ba4ebd27ddf9a6bec 127.0.0.1:40797@37147 slave e2df54f3b825e60065d563ddb299fb59b7b56fa0 0 1795222721964 1 connected";
        assert_eq!(Claim::parse(replica), None);
        let failed_without_slots =
            "58bc 127.0.0.1:40421@35189,host master,fail - 0 1 2 disconnected";
        assert_eq!(Claim::parse(failed_without_slots), None);
    }

    #[test]
    fn the_newest_claim_owns_a_slot() {
        let claims = [
            Claim {
                config_epoch: 1,
                port: 1000,
                slots: vec![(0, 99)],
            },
            // A promoted replica, seen by an up-to-date member.
            Claim {
                config_epoch: 4,
                port: 1003,
                slots: vec![(0, 99)],
            },
            Claim {
                config_epoch: 2,
                port: 1001,
                slots: vec![(100, 199)],
            },
        ];
        assert_eq!(owner(&claims, 50), Some(1003));
        assert_eq!(owner(&claims, 100), Some(1001));
        assert_eq!(owner(&claims, 200), None);
    }

    #[test]
    fn info_fields() {
        let info = "# Cluster\r\ncluster_state:ok\r\ncluster_slots_assigned:16384\r\n";
        assert_eq!(field(info, "cluster_state"), Some("ok"));
        assert_eq!(field(info, "cluster_slots_assigned"), Some("16384"));
        assert_eq!(field(info, "cluster_size"), None);
    }
}
