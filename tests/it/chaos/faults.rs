//! The faults a run injects, and the cluster of nodes and proxies it
//! injects them into.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Fault {
    KillRestart,
    Pause,
    Slow,
    MajorityLoss,
    Latency,
    DropConnections,
    Blackhole,
    HoldReplies,
    RollingRestart,
    SlowMinority,
    FrozenMinority,
    FlappingMinority,
    MajorityPause,
    MajorityPartition,
    LostReplies,
    KeysDeleted,
    Eviction,
}

pub(super) const FAULTS: [Fault; 17] = [
    Fault::KillRestart,
    Fault::Pause,
    Fault::Slow,
    Fault::MajorityLoss,
    Fault::Latency,
    Fault::DropConnections,
    Fault::Blackhole,
    Fault::HoldReplies,
    Fault::RollingRestart,
    Fault::SlowMinority,
    Fault::FrozenMinority,
    Fault::FlappingMinority,
    Fault::MajorityPause,
    Fault::MajorityPartition,
    Fault::LostReplies,
    Fault::KeysDeleted,
    Fault::Eviction,
];

/// The most filler keys written to one node to push its lock keys out.
const FILLERS: usize = 4000;
/// Each filler key's size.
const FILLER: usize = 4096;
/// How far above what a node uses its `maxmemory` is set while it evicts.
const HEADROOM: u64 = 512 * 1024;

/// How long a flapping node stays frozen, and then thawed, each time.
const FLAP: Duration = Duration::from_secs(1);

pub(super) struct Cluster {
    pub(super) nodes: Arc<RedisNodes>,
    pub(super) proxies: Vec<FaultProxy>,
}

impl Cluster {
    pub(super) async fn start(options: ServerOptions) -> Self {
        let nodes = Arc::new(RedisNodes::start_with(NODES, options).expect("nodes"));
        let proxies = support::proxies(&*nodes).await;
        Self { nodes, proxies }
    }

    pub(super) fn urls(&self) -> Vec<String> {
        self.proxies.iter().map(FaultProxy::url).collect()
    }

    pub(super) async fn restart(&self, i: usize) {
        let nodes = self.nodes.clone();
        tokio::task::spawn_blocking(move || nodes[i].restart())
            .await
            .expect("restart task")
            .expect("restart");
    }

    /// Applies one fault episode and heals it; returns the nodes it hit.
    pub(super) async fn inject(
        &self,
        fault: Fault,
        rng: &mut rand::rngs::StdRng,
        recorder: &Recorder,
    ) -> Vec<usize> {
        let victim = rng.random_range(0..NODES);
        let hold = Duration::from_millis(rng.random_range(50..400));
        match fault {
            Fault::KillRestart => {
                let before = self.keys_on(victim).await;
                let from = self.kill(victim);
                tokio::time::sleep(hold).await;
                self.restart(victim).await;
                self.back(victim, from, before, recorder).await;
                vec![victim]
            }
            Fault::Pause => {
                self.nodes[victim].pause().expect("pause");
                let from = Instant::now();
                tokio::time::sleep(hold).await;
                self.nodes[victim].resume().expect("resume");
                recorder.down(victim, from, Instant::now());
                vec![victim]
            }
            Fault::Slow => {
                // The node itself stalls (DEBUG SLEEP), connections stay up.
                let mut admin = support::conn(&self.nodes[victim].url()).await;
                let from = Instant::now();
                let _: redis::RedisResult<()> = redis::cmd("DEBUG")
                    .arg("SLEEP")
                    .arg(hold.as_secs_f64())
                    .query_async(&mut admin)
                    .await;
                recorder.down(victim, from, Instant::now());
                vec![victim]
            }
            Fault::MajorityLoss => {
                let mut all: Vec<usize> = (0..NODES).collect();
                all.shuffle(rng);
                let majority = &all[..NODES / 2 + 1];
                let mut before = Vec::new();
                for &i in majority {
                    before.push(self.keys_on(i).await);
                }
                let mut killed = Vec::new();
                for &i in majority {
                    killed.push(self.kill(i));
                }
                let from = Instant::now();
                tokio::time::sleep(hold + Duration::from_millis(300)).await;
                // A quorum is certainly missing until the restart that
                // brings it back begins (that node may answer before
                // `restart` returns: it waits for the server to be ready,
                // and for this task to be scheduled), and certainly back
                // once it returned.
                let survivors = NODES - majority.len();
                for (k, (&i, before)) in majority.iter().zip(before).enumerate() {
                    let to = Instant::now();
                    self.restart(i).await;
                    self.back(i, killed[k], before, recorder).await;
                    if survivors + k + 1 == NODES / 2 + 1 {
                        let back = Instant::now();
                        recorder.outage(from, to, back);
                    }
                }
                majority.to_vec()
            }
            Fault::Latency => {
                self.proxies[victim].set(Faults::latency(
                    Duration::from_millis(rng.random_range(1..30)),
                    Duration::from_millis(rng.random_range(1..30)),
                    Duration::from_millis(rng.random_range(0..20)),
                ));
                tokio::time::sleep(hold).await;
                self.proxies[victim].heal();
                vec![victim]
            }
            Fault::DropConnections => {
                self.proxies[victim].drop_connections();
                tokio::time::sleep(hold).await;
                vec![victim]
            }
            Fault::Blackhole => {
                self.proxies[victim].set(Faults::blackhole());
                let from = Instant::now();
                tokio::time::sleep(hold + NODE_TIMEOUT).await;
                self.proxies[victim].heal();
                recorder.down(victim, from, Instant::now());
                vec![victim]
            }
            Fault::HoldReplies => {
                // Requests land, replies come back after the ttl: on a
                // majority, no grant may be believed, and cleanup (whose
                // requests still land) must remove what the SETs wrote.
                let mut all: Vec<usize> = (0..NODES).collect();
                all.shuffle(rng);
                let from = Instant::now();
                let majority = &all[..NODES / 2 + 1];
                for &i in majority {
                    self.proxies[i].set(Faults::hold_replies(TTL + Duration::from_millis(100)));
                }
                tokio::time::sleep(hold).await;
                for proxy in &self.proxies {
                    proxy.heal();
                }
                // No grant can be believed meanwhile, and a holder may lose
                // its lock (replies held past its renewal's timeout).
                let to = Instant::now();
                recorder.outage(from, to, to);
                for &i in majority {
                    recorder.down(i, from, to);
                }
                majority.to_vec()
            }
            Fault::SlowMinority => {
                // One node slow (+10 ms each way: a far zone, an fsync
                // stall) for longer than a holder's ttl: it must cost
                // nobody a lock, and no call may wait for it.
                let ms = Duration::from_millis(10);
                self.proxies[victim].set(Faults::latency(ms, ms, Duration::ZERO));
                tokio::time::sleep(HOLD_TTL + hold).await;
                self.proxies[victim].heal();
                vec![victim]
            }
            Fault::FrozenMinority => {
                // One node frozen (SIGSTOP: a hung host) for longer than a
                // holder's ttl, with requests piling up behind it: renewals
                // and releases decide without it.
                self.nodes[victim].pause().expect("pause");
                let from = Instant::now();
                tokio::time::sleep(HOLD_TTL + hold).await;
                self.nodes[victim].resume().expect("resume");
                recorder.down(victim, from, Instant::now());
                vec![victim]
            }
            Fault::FlappingMinority => {
                // One node frozen for a second, thawed for a second, three
                // times: it keeps becoming unresponsive and answering
                // again, with a backlog each time. Holders keep their locks
                // through it, and nobody waits for it while it is frozen.
                for _ in 0..3 {
                    self.nodes[victim].pause().expect("pause");
                    let from = Instant::now();
                    tokio::time::sleep(FLAP).await;
                    self.nodes[victim].resume().expect("resume");
                    recorder.down(victim, from, Instant::now());
                    tokio::time::sleep(FLAP).await;
                }
                vec![victim]
            }
            Fault::MajorityPause => {
                // A majority frozen, then thawed: they run their backlogs,
                // and the quorum that is back grants at once.
                let majority = majority(rng);
                let servers = &self.nodes;
                outage(
                    &majority,
                    hold,
                    recorder,
                    |i| servers[i].pause().expect("pause"),
                    |i| {
                        servers[i].resume().expect("resume");
                    },
                )
                .await;
                majority
            }
            Fault::MajorityPartition => {
                // A majority cut off with delayed delivery: what is sent
                // either way is held, and delivered when the partition
                // heals — requests of attempts long given up run late,
                // after the lock moved on.
                let majority = majority(rng);
                let proxies = &self.proxies;
                outage(
                    &majority,
                    hold + NODE_TIMEOUT,
                    recorder,
                    |i| proxies[i].set(Faults::partition()),
                    |i| proxies[i].heal(),
                )
                .await;
                majority
            }
            Fault::LostReplies => {
                // On a majority, every command runs and its reply is lost
                // with the connection (reset): acquires, releases and
                // cleanups land without an answer — etcd's 2026 unlock bug
                // class, where a release sent again deleted the next
                // holder's lock. Nothing may be granted meanwhile, and what
                // is owed must delete only its own token.
                let majority = majority(rng);
                let proxies = &self.proxies;
                outage(
                    &majority,
                    hold,
                    recorder,
                    |i| proxies[i].set(Faults::lose_replies()),
                    |i| proxies[i].heal(),
                )
                .await;
                majority
            }
            Fault::RollingRestart => {
                // Every node, one at a time, back at once with its data
                // (the nodes persist), a renewal period apart.
                for i in 0..NODES {
                    let before = self.keys_on(i).await;
                    let from = self.kill(i);
                    self.restart(i).await;
                    self.back(i, from, before, recorder).await;
                    tokio::time::sleep(HOLD_TTL / 2).await;
                }
                (0..NODES).collect()
            }
            Fault::KeysDeleted => {
                // An operator removes our lock keys (`DEL` of them) or
                // every key (`FLUSHALL`), on a minority or a majority,
                // past the proxies. Each node's keys are read and removed
                // in one transaction: what was removed is known exactly.
                let hit = some_nodes(rng);
                let flush = rng.random_bool(0.5);
                let kept = self.lock_keys(&hit).await;
                let from = Instant::now();
                let mut removed = Vec::new();
                for &i in &hit {
                    let mut admin = support::conn(&self.nodes[i].url()).await;
                    let mut pipe = redis::pipe();
                    pipe.atomic().cmd("MGET").arg(&RESOURCES[..]);
                    if flush {
                        pipe.cmd("FLUSHALL").ignore();
                    } else {
                        pipe.cmd("DEL").arg(&RESOURCES[..]).ignore();
                    }
                    let (before,): (Vec<Option<String>>,) =
                        pipe.query_async(&mut admin).await.expect("wipe");
                    for (resource, token) in RESOURCES.iter().zip(before) {
                        removed.push((i, (*resource).to_owned(), token.unwrap_or_default()));
                    }
                }
                let kind = if flush { "flushall" } else { "del" };
                recorder.wipe(kind, flush, from, Instant::now(), removed, kept);
                hit
            }
            Fault::Eviction => {
                // A minority or a majority briefly at a tiny `maxmemory`
                // with `allkeys-lru`, filler keys written beside ours until
                // ours are evicted; then their settings restored and the
                // fillers deleted.
                let hit = some_nodes(rng);
                let kept = self.lock_keys(&hit).await;
                let from = Instant::now();
                let mut pressed = Vec::new();
                for &i in &hit {
                    pressed.push(self.press(i).await);
                }
                let mut removed = Vec::new();
                for (&i, pressed) in hit.iter().zip(pressed) {
                    removed.extend(pressed.restore(i).await);
                }
                recorder.wipe("eviction", true, from, Instant::now(), removed, kept);
                hit
            }
        }
    }

    /// The lock keys of the nodes not in `hit`, read past their proxies:
    /// (node, resource, token or empty, when it expires).
    pub(super) async fn lock_keys(
        &self,
        hit: &[usize],
    ) -> Vec<(usize, String, String, Option<Instant>)> {
        let mut keys = Vec::new();
        for i in (0..NODES).filter(|i| !hit.contains(i)) {
            let mut c = support::conn(&self.nodes[i].url()).await;
            let mut pipe = redis::pipe();
            pipe.atomic().cmd("MGET").arg(&RESOURCES[..]);
            for resource in RESOURCES {
                pipe.cmd("PTTL").arg(resource);
            }
            let read = Instant::now();
            let reply: Vec<redis::Value> = pipe.query_async(&mut c).await.expect("MGET");
            let (tokens, ttls) = reply.split_first().expect("MGET");
            let tokens: Vec<Option<String>> =
                redis::from_redis_value(tokens.clone()).expect("MGET");
            for ((resource, token), ttl) in RESOURCES.iter().zip(tokens).zip(ttls) {
                let ms: i64 = redis::from_redis_value(ttl.clone()).unwrap_or(-1);
                let expires = u64::try_from(ms)
                    .ok()
                    .map(|ms| read + Duration::from_millis(ms));
                keys.push((
                    i,
                    (*resource).to_owned(),
                    token.unwrap_or_default(),
                    expires,
                ));
            }
        }
        keys
    }

    /// Puts node `i` under memory pressure (past its proxy): `allkeys-lru`
    /// at a `maxmemory` just above what it uses, filler keys written until
    /// every lock key it held is evicted (or `FILLERS` written). Returns
    /// what [`Pressed::restore`] needs.
    pub(super) async fn press(&self, i: usize) -> Pressed {
        let mut c = support::conn(&self.nodes[i].url()).await;
        let setting = |name: &'static str| redis::cmd("CONFIG").arg("GET").arg(name).clone();
        let get = |reply: Vec<String>| reply.get(1).cloned().expect("a setting");
        let maxmemory = get(setting("maxmemory")
            .query_async(&mut c)
            .await
            .expect("CONFIG"));
        let policy = get(setting("maxmemory-policy")
            .query_async(&mut c)
            .await
            .expect("CONFIG"));
        let read = || redis::cmd("MGET").arg(&RESOURCES[..]).clone();
        let before: Vec<Option<String>> = read().query_async(&mut c).await.expect("MGET");
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut c)
            .await
            .expect("INFO");
        let used: u64 = info
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("used_memory");
        let set = |name: &str, value: String| {
            redis::cmd("CONFIG").arg("SET").arg(name).arg(value).clone()
        };
        let _: () = set("maxmemory-policy", "allkeys-lru".into())
            .query_async(&mut c)
            .await
            .expect("CONFIG SET");
        let _: () = set("maxmemory", (used + HEADROOM).to_string())
            .query_async(&mut c)
            .await
            .expect("CONFIG SET");
        let filler = "x".repeat(FILLER);
        // A lock key counts as evicted once absent or holding another
        // token than before at some read.
        let mut gone = vec![false; RESOURCES.len()];
        let mut written = 0;
        while written < FILLERS {
            let mut pipe = redis::pipe();
            for n in written..written + 16 {
                pipe.cmd("SET")
                    .arg(format!("chaos:filler:{n}"))
                    .arg(&filler)
                    .ignore();
            }
            written += 16;
            let wrote: redis::RedisResult<()> = pipe.query_async(&mut c).await;
            let now: Vec<Option<String>> = read().query_async(&mut c).await.expect("MGET");
            for (k, (was, is)) in before.iter().zip(&now).enumerate() {
                gone[k] |= is.is_none() || is != was;
            }
            if wrote.is_err() || gone.iter().all(|&g| g) {
                break;
            }
        }
        Pressed {
            conn: c,
            maxmemory,
            policy,
            before,
            gone,
            written,
        }
    }

    /// Reads every lock key the nodes hold, past their proxies, as the
    /// run's leftovers (see `Run::finish`).
    pub(super) async fn leftovers(&self, recorder: &Recorder) {
        for i in 0..NODES {
            let keys = self.keys_on(i).await;
            let at = Instant::now();
            for (resource, token) in keys {
                recorder.leftover(i, resource, &token, at);
            }
        }
    }

    /// Kills node `i`; returns when.
    pub(super) fn kill(&self, i: usize) -> Instant {
        self.nodes[i].kill();
        Instant::now()
    }

    /// The lock keys node `i` holds now, read past its proxy: (resource,
    /// token). A node that cannot be read holds none we could lose track of.
    pub(super) async fn keys_on(&self, i: usize) -> Vec<(&'static str, String)> {
        let Ok(client) = redis::Client::open(self.nodes[i].url()) else {
            return Vec::new();
        };
        let Ok(mut c) = client.get_multiplexed_async_connection().await else {
            return Vec::new();
        };
        let mut keys = Vec::new();
        for resource in RESOURCES {
            let value: redis::RedisResult<Option<String>> =
                redis::cmd("GET").arg(resource).query_async(&mut c).await;
            if let Ok(Some(token)) = value {
                keys.push((resource, token));
            }
        }
        keys
    }

    /// Node `i`, killed at `from` while holding `before`, is back: records
    /// it down meanwhile, and each key it came back without (restarted
    /// later than the key's remaining ttl). A key a renewal set again
    /// before this read does not count as lost.
    pub(super) async fn back(
        &self,
        i: usize,
        from: Instant,
        before: Vec<(&'static str, String)>,
        recorder: &Recorder,
    ) {
        recorder.down(i, from, Instant::now());
        let after = self.keys_on(i).await;
        for (resource, token) in before {
            if !after.iter().any(|(r, t)| *r == resource && *t == token) {
                recorder.key_lost(i, resource, &token, from);
            }
        }
    }

    /// Heals every proxy and brings every node back.
    pub(super) async fn heal_all(&self) {
        for proxy in &self.proxies {
            proxy.heal();
        }
        for i in 0..NODES {
            if self.nodes[i].is_running() {
                let _ = self.nodes[i].resume();
            } else {
                self.restart(i).await;
            }
        }
    }

    /// How many of `RESOURCES` still have a lock key on some node.
    pub(super) async fn leaked_keys(&self) -> usize {
        let mut leaked = 0;
        for resource in RESOURCES {
            leaked += support::values(&self.nodes, resource)
                .await
                .iter()
                .filter(|v| v.is_some())
                .count();
        }
        leaked
    }
}

/// A node under memory pressure (see [`Cluster::press`]).
pub(super) struct Pressed {
    pub(super) conn: redis::aio::MultiplexedConnection,
    pub(super) maxmemory: String,
    pub(super) policy: String,
    /// Its lock keys' tokens before.
    pub(super) before: Vec<Option<String>>,
    /// Which of them were evicted (or replaced) meanwhile.
    pub(super) gone: Vec<bool>,
    /// How many fillers were written.
    pub(super) written: usize,
}

impl Pressed {
    /// Restores node `i`'s settings and deletes the fillers; returns each
    /// lock key the pressure removed, or that was absent when it ended:
    /// (node, resource, token before).
    pub(super) async fn restore(mut self, i: usize) -> Vec<(usize, String, String)> {
        let c = &mut self.conn;
        let after: Vec<Option<String>> = redis::cmd("MGET")
            .arg(&RESOURCES[..])
            .query_async(c)
            .await
            .expect("MGET");
        for (name, value) in [
            ("maxmemory", &self.maxmemory),
            ("maxmemory-policy", &self.policy),
        ] {
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg(name)
                .arg(value)
                .query_async(c)
                .await
                .expect("CONFIG SET");
        }
        for chunk in (0..self.written).collect::<Vec<_>>().chunks(500) {
            let keys: Vec<String> = chunk.iter().map(|n| format!("chaos:filler:{n}")).collect();
            let _: () = redis::cmd("DEL")
                .arg(keys)
                .query_async(c)
                .await
                .expect("DEL");
        }
        RESOURCES
            .iter()
            .zip(self.before)
            .zip(self.gone.iter().zip(after))
            .filter(|(_, (gone, after))| **gone || after.is_none())
            .map(|((resource, before), _)| (i, (*resource).to_owned(), before.unwrap_or_default()))
            .collect()
    }
}

/// Some nodes, by index: a minority (one or two) or a majority (three to
/// all), as likely.
fn some_nodes(rng: &mut rand::rngs::StdRng) -> Vec<usize> {
    let mut all: Vec<usize> = (0..NODES).collect();
    all.shuffle(rng);
    let n = if rng.random_bool(0.5) {
        rng.random_range(1..=NODES / 2)
    } else {
        rng.random_range(NODES / 2 + 1..=NODES)
    };
    all.truncate(n);
    all
}

/// A random majority of the nodes, by index.
pub(super) fn majority(rng: &mut rand::rngs::StdRng) -> Vec<usize> {
    let mut all: Vec<usize> = (0..NODES).collect();
    all.shuffle(rng);
    all.truncate(NODES / 2 + 1);
    all
}
