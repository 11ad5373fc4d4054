//! Group commit: concurrent plain-lock requests bound for one node go out
//! together in one call, and every request still behaves as if it
//! had gone alone — granted or refused on its own, in order, with its own
//! errors, and nothing left behind by callers that gave up.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::join_all;
use quorumlock::testkit::{RedisNodes, RedisServer, ServerOptions};
use quorumlock::{Error, NativeCommands, Redlock, RedlockBuilder, Retry};
use support::{builder, conn, keys_left, keys_on, no_hang, until_no_keys_left, values};

const TTL: Duration = Duration::from_secs(30);

async fn reset_stats(nodes: &RedisNodes) {
    for url in nodes.urls() {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut conn(&url).await)
            .await
            .expect("CONFIG RESETSTAT");
    }
}

/// Read events a node processed since the last `CONFIG RESETSTAT` (one
/// per request sent alone; one for many in a pipeline or a script call).
async fn reads_processed(url: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(&mut conn(url).await)
        .await
        .expect("INFO stats");
    info.lines()
        .find_map(|line| line.strip_prefix("total_reads_processed:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("total_reads_processed in INFO stats")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_locks_share_calls_and_every_one_holds_and_releases() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes).build().expect("config");
    support::warm(&locks, TTL).await;
    reset_stats(&nodes).await;

    const TASKS: usize = 64;
    const CYCLES: usize = 20;
    let held = Arc::new(AtomicUsize::new(0));
    let tasks = (0..TASKS).map(|t| {
        let (locks, held) = (locks.clone(), held.clone());
        tokio::spawn(async move {
            // (node, key) of every release a node did not answer: on a
            // machine stalled past the node timeout, such a key is left
            // to expire by its ttl, and the summary says so.
            let mut failed = Vec::new();
            for c in 0..CYCLES {
                let key = format!("batch:{t}:{c}");
                let guard = locks.try_lock(&key, TTL).await.expect("distinct keys");
                assert!(guard.confirmed() >= locks.quorum());
                held.fetch_add(1, Ordering::Relaxed);
                let summary = guard.release().await.expect("release").settled().await;
                assert!(summary.released() >= locks.quorum(), "{summary:?}");
                for failure in summary.failures() {
                    failed.push((failure.node.to_string(), key.clone()));
                }
            }
            failed
        })
    });
    let mut failed = Vec::new();
    for task in join_all(tasks).await {
        failed.extend(task.expect("task"));
    }
    assert_eq!(held.load(Ordering::Relaxed), TASKS * CYCLES);
    locks.settle().await;
    // Every key still on a node is one whose release the summary reported
    // failed there; none is left where a release said it deleted it.
    for server in &nodes {
        // As a failure names its node.
        let node = format!("127.0.0.1:{}", server.port());
        for key in keys_on(server, "batch:").await {
            assert!(
                failed.contains(&(node.clone(), key.clone())),
                "{key} left on {node}, whose release did not fail there (failures: {failed:?})"
            );
        }
    }

    // Every node was sent an acquire and a release per cycle: alone, each
    // is a read of its own on the node (and with `batch.lua`, a script
    // call of its own). Sixty-four tasks at once must have shared them.
    let requests = 2 * (TASKS * CYCLES) as u64;
    for url in nodes.urls() {
        // A script-path node's batches are pipelines of the holdings' own
        // commands and scripts: `batch.lua` (which only a plain lock's
        // extension runs, alone or batched) never ran.
        if crate::native::best_path_here().starts_with("release script") {
            assert!(
                !batch_script_cached(&url).await,
                "{url}: a script-path node ran batch.lua: its batches were not pipelined"
            );
        }
        let reads = reads_processed(&url).await;
        assert!(
            reads < requests,
            "{url}: {reads} reads for {requests} acquires and releases: nothing was coalesced"
        );
    }
}

/// Many tasks asking for one key at once land in one batch: each is
/// granted or refused as if it had gone alone, in order — exactly one
/// holder per round, its token on the nodes, and the losers' cleanup
/// leaves the winner's key alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_in_one_batch_is_granted_once() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes)
        .retry(Retry::none())
        .build()
        .expect("config");
    support::warm(&locks, TTL).await;
    reset_stats(&nodes).await;

    const ROUNDS: usize = 30;
    const CONTENDERS: usize = 8;
    for round in 0..ROUNDS {
        let key = format!("same:{round}");
        let attempts = (0..CONTENDERS).map(|_| locks.try_lock(&key, TTL));
        let results = no_hang("contenders", join_all(attempts)).await;
        let mut winners = Vec::new();
        for result in results {
            match result {
                Ok(guard) => winners.push(guard),
                Err(Error::Contended { .. }) => {}
                Err(other) => panic!("unexpected: {other}"),
            }
        }
        // One winner at most (a split vote may leave none).
        assert!(
            winners.len() <= 1,
            "round {round}: {} holders",
            winners.len()
        );
        locks.settle().await;
        if let Some(winner) = winners.pop() {
            let token = winner.token().as_str().to_owned();
            let held = values(&nodes, &key)
                .await
                .into_iter()
                .filter(|v| v.as_deref() == Some(token.as_str()))
                .count();
            assert!(
                held >= locks.quorum(),
                "round {round}: the losers' cleanup took the winner's key"
            );
            winner.release().await.expect("release");
        }
    }
    locks.settle().await;
    assert!(keys_left(&nodes, "same:").await.is_empty());
}

/// Callers that give up mid-flight (dropped futures) stop waiting at once;
/// whatever they may have set is removed, and the node's queue keeps going.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_callers_leave_nothing_behind_and_the_queue_keeps_going() {
    let nodes = RedisNodes::start(3).expect("nodes");
    // Attempts are cut short by their own budgets, not by node timeouts (a
    // loaded machine can take longer than the default 250 ms to answer).
    let locks = builder(&nodes)
        .node_timeout(Duration::from_secs(5))
        .build()
        .expect("config");
    support::warm(&locks, TTL).await;

    let mut dropped = 0;
    for wave in 0..20u64 {
        let attempts: Vec<_> = (0..32u64)
            .map(|i| {
                let locks = locks.clone();
                tokio::spawn(async move {
                    let key = format!("dropped:{wave}:{i}");
                    // Cut short somewhere in flight (or not at all).
                    let budget = Duration::from_micros((wave * 31 + i * 17) % 400);
                    match tokio::time::timeout(budget, locks.try_lock(&key, TTL)).await {
                        Ok(guard) => {
                            guard
                                .expect("distinct keys")
                                .release()
                                .await
                                .expect("release");
                            false
                        }
                        Err(_) => true,
                    }
                })
            })
            .collect();
        for attempt in attempts {
            dropped += usize::from(attempt.await.expect("task"));
        }
    }
    println!("{dropped} of 640 attempts were dropped mid-flight");
    locks.settle().await;
    until_no_keys_left(&nodes, "dropped:").await;
    // Every node's queue is idle again: a lone lock goes through.
    let guard = no_hang("lock after", locks.try_lock("after", TTL))
        .await
        .expect("lock");
    assert_eq!(support::release_settled(guard).await, 3);
}

/// An entry refused by the server (an ACL without its key) gets its own
/// error; the entries batched with it are served as if alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_refused_entry_does_not_fail_its_batch() {
    let options = ServerOptions::new()
        .arg("--user")
        .arg("app")
        .arg("on")
        .arg(">app-pw-5d1")
        .arg("~ok:*");
    let options = support::LOCK_COMMANDS
        .into_iter()
        .fold(options, |options, command| options.arg(command));
    let server = RedisServer::start_with(options).expect("server");
    // The user of the scripted ACL line: without a scripting engine it
    // can release nothing (it may not ask for the native commands either).
    if !crate::native::scripting_or_skip(
        "coalesce::one_refused_entry_does_not_fail_its_batch",
        &server.url(),
    )
    .await
    {
        return;
    }
    let url = server.url().replace("redis://", "redis://app:app-pw-5d1@");
    let locks = Redlock::builder()
        .node(url)
        .retry(Retry::none())
        .build()
        .expect("config");
    locks
        .try_lock("ok:warm", TTL)
        .await
        .expect("lock")
        .release()
        .await
        .expect("release");

    for round in 0..20 {
        let attempts = (0..16).map(|i| {
            let locks = locks.clone();
            let key = if i % 2 == 0 {
                format!("ok:{round}:{i}")
            } else {
                format!("denied:{round}:{i}")
            };
            async move { (key.clone(), locks.try_lock(&key, TTL).await) }
        });
        for (key, result) in join_all(attempts).await {
            match (key.starts_with("ok:"), result) {
                (true, Ok(guard)) => {
                    guard.release().await.expect("release");
                }
                (false, Err(error)) => support::assert_acl_refusals(&error),
                (allowed, result) => panic!("{key} (allowed: {allowed}): {:?}", result.err()),
            }
        }
    }
    locks.settle().await;
}

/// Held locks extended while others lock and release around them: the
/// extensions ride in the same batches and every holder keeps its lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extensions_batched_with_others_keep_every_holder() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes).build().expect("config");
    support::warm(&locks, TTL).await;
    let holders = (0..16).map(|h| {
        let locks = locks.clone();
        tokio::spawn(async move {
            let guard = locks
                .try_lock(&format!("held:{h}"), TTL)
                .await
                .expect("lock");
            for c in 0..20 {
                guard.extend(TTL).await.expect("extend");
                let other = locks
                    .try_lock(&format!("passing:{h}:{c}"), TTL)
                    .await
                    .expect("lock");
                other.release().await.expect("release");
            }
            assert_eq!(guard.loss_reason(), None);
            assert!(guard.confirmed() >= locks.quorum());
            support::release_settled(guard).await
        })
    });
    for released in join_all(holders).await {
        assert_eq!(released.expect("task"), 3);
    }
    locks.settle().await;
    assert!(keys_left(&nodes, "held:").await.is_empty());
    assert!(keys_left(&nodes, "passing:").await.is_empty());
}

/// A refused attempt returns at its decision: its requests still in flight
/// are not waited for, and the cleanup queued behind them goes out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_attempt_does_not_wait_for_its_stragglers() {
    let nodes = RedisNodes::start(3).expect("nodes");
    // A node timeout far past the hang guard: waiting for it fails the test.
    let client = || {
        builder(&nodes)
            .retry(Retry::none())
            .node_timeout(Duration::from_secs(600))
            .build()
            .expect("config")
    };
    let (a, b) = (client(), client());
    support::warm(&a, TTL).await;
    support::warm(&b, TTL).await;
    let held = a.try_lock("taken", TTL).await.expect("lock");
    for _ in 0..20 {
        let refused = no_hang("a refused attempt", b.try_lock("taken", TTL)).await;
        assert!(
            matches!(refused, Err(Error::Contended { .. })),
            "{refused:?}"
        );
    }
    held.release().await.expect("release");
    b.settle().await;
}

/// Whether `batch.lua` is cached on `url`: a node whose batches are
/// pipelines of the holdings' own commands never runs it.
async fn batch_script_cached(url: &str) -> bool {
    let hash = redis::Script::new(include_str!("../../src/node/batch.lua"))
        .get_hash()
        .to_owned();
    let exists: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(hash)
        .query_async(&mut conn(url).await)
        .await
        .expect("SCRIPT EXISTS");
    exists.first().copied().unwrap_or(false)
}

/// On one node, acquires, releases and extensions in the same batches,
/// each answered as if it had gone alone: a held key's contender refused,
/// its holder's extension granted — restoring the key where the node lost
/// it — and every passing lock granted and released. On a node without
/// native commands (Redis 7.0, the default server) the batches are
/// pipelines of `SET NX PX GET` and the lock's own scripts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_requests_in_one_nodes_batches_are_each_answered() {
    let server = RedisServer::start().expect("server");
    let url = server.url();
    if !crate::native::scripting_or_skip(
        "coalesce::mixed_requests_in_one_nodes_batches_are_each_answered",
        &url,
    )
    .await
    {
        return;
    }
    let locks = Redlock::builder()
        .node(url.clone())
        .retry(Retry::none())
        .build()
        .expect("config");
    support::warm(&locks, TTL).await;
    // Three requests each in flight: more than a one-node manager sends
    // side by side (32) before its requests batch.
    const HOLDERS: usize = 32;
    const ROUNDS: usize = 20;
    let holders = (0..HOLDERS).map(|h| {
        let (locks, url) = (locks.clone(), url.clone());
        tokio::spawn(async move {
            let key = format!("mixed:held:{h}");
            let guard = locks.try_lock(&key, TTL).await.expect("lock");
            let token = guard.token().as_str().to_owned();
            for c in 0..ROUNDS {
                if c % 5 == h % 5 {
                    // The node loses the key: the extension restores it.
                    let _: () = redis::cmd("DEL")
                        .arg(&key)
                        .query_async(&mut conn(&url).await)
                        .await
                        .expect("DEL");
                }
                let (extended, contended, passing) = tokio::join!(
                    guard.extend(TTL),
                    locks.try_lock(&key, TTL),
                    locks.try_lock(&format!("mixed:passing:{h}:{c}"), TTL),
                );
                extended.expect("extend");
                assert!(
                    matches!(contended, Err(Error::Contended { .. })),
                    "{key}: a contender was not refused: {:?}",
                    contended.map(|g| g.token().as_str().to_owned())
                );
                let passing = passing.expect("a free key");
                assert_eq!(support::release_settled(passing).await, 1);
                let held: Option<String> = redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut conn(&url).await)
                    .await
                    .expect("GET");
                assert_eq!(held.as_deref(), Some(token.as_str()), "{key} round {c}");
            }
            assert_eq!(guard.loss_reason(), None);
            support::release_settled(guard).await
        })
    });
    for released in no_hang("holders", join_all(holders)).await {
        assert_eq!(released.expect("task"), 1);
    }
    locks.settle().await;
    for prefix in ["mixed:held:", "mixed:passing:"] {
        let left: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{prefix}*"))
            .query_async(&mut conn(&url).await)
            .await
            .expect("KEYS");
        assert!(left.is_empty(), "left behind: {left:?}");
    }
}

/// A script-path node's cache flushed (`SCRIPT FLUSH`) again and again
/// while batches of releases and extensions go to it: an `EVALSHA` that
/// finds no script goes again alone, and every request is answered right —
/// every lock granted, extended, and released, nothing left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_survive_a_flushed_script_cache() {
    let server = RedisServer::start().expect("server");
    let url = server.url();
    if !crate::native::scripting_or_skip("coalesce::batches_survive_a_flushed_script_cache", &url)
        .await
    {
        return;
    }
    // Scripts on every server: a native one (Valkey 9, Redis 8.4 on)
    // would release and extend without them, and no flush would be felt.
    let locks = Redlock::builder()
        .node(url.clone())
        .retry(Retry::none())
        .native_commands(NativeCommands::Never)
        .build()
        .expect("config");
    support::warm(&locks, TTL).await;
    // In waves: the cache is flushed between two, while nothing is in
    // flight, so every wave's batches find their scripts gone from a
    // connection that knows them cached. (A flush at any moment could also
    // land between a lone call's `SCRIPT LOAD` and its `EVALSHA`, which
    // fails that call alone as it always has.)
    // More than a one-node manager sends side by side (32) before its
    // requests batch.
    const TASKS: usize = 64;
    const WAVES: usize = 10;
    let wave = Arc::new(tokio::sync::Barrier::new(TASKS + 1));
    let tasks = (0..TASKS).map(|t| {
        let (locks, wave) = (locks.clone(), wave.clone());
        tokio::spawn(async move {
            for c in 0..WAVES {
                wave.wait().await;
                let key = format!("flushed:{t}:{c}");
                let guard = locks.try_lock(&key, TTL).await.expect("a free key");
                guard.extend(TTL).await.expect("extend");
                assert_eq!(guard.loss_reason(), None);
                assert_eq!(support::release_settled(guard).await, 1, "{key}");
                wave.wait().await;
            }
        })
    });
    let tasks: Vec<_> = tasks.collect();
    flush_between_waves(&url, &wave, WAVES).await;
    for task in no_hang("tasks", join_all(tasks)).await {
        task.expect("task");
    }
    locks.settle().await;
    let left = keys_on(&server, "flushed:").await;
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Drives `waves` waves of tasks that meet at `wave` before and after
/// each: between two, while nothing is in flight, the node at `url`
/// flushes its script cache (`SCRIPT FLUSH`). Then asserts the flushes
/// were felt: calls answered `NOSCRIPT`, and went again.
async fn flush_between_waves(url: &str, wave: &tokio::sync::Barrier, waves: usize) {
    let mut admin = conn(url).await;
    for _ in 0..waves {
        no_hang("a wave", async {
            wave.wait().await;
            wave.wait().await;
        })
        .await;
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut admin)
            .await
            .expect("SCRIPT FLUSH");
    }
    let errors: String = redis::cmd("INFO")
        .arg("errorstats")
        .query_async(&mut admin)
        .await
        .expect("INFO errorstats");
    assert!(
        errors.contains("errorstat_NOSCRIPT"),
        "no call found its script flushed: {errors}"
    );
}

/// A manager of one node, warmed (its commands known: a node whose
/// scripts run by `EVALSHA` then batches the primitives' own scripts in
/// its pipelines); `None` where the server runs no scripts.
async fn scripting_node(test: &str, url: &str, builder: RedlockBuilder) -> Option<Redlock> {
    if !crate::native::scripting_or_skip(test, url).await {
        return None;
    }
    let locks = builder.retry(Retry::none()).build().expect("config");
    support::warm(&locks, TTL).await;
    Some(locks)
}

/// Sixty-four tasks taking, extending and giving back permits and reads,
/// each on a semaphore and a reader-writer lock of its own, on one node:
/// with the lane batching them (the node's pipelines carry their
/// scripts), every one is granted, extended and released, and nothing is
/// left behind. (That they shared pipelines is checked beside the
/// pipeline, in `scripted.rs`: a node's counts cannot tell a pipeline
/// from the connection's own writes of concurrent calls.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_permits_and_reads_are_each_answered() {
    let server = RedisServer::start().expect("server");
    let url = server.url();
    let test = "coalesce::concurrent_permits_and_reads_are_each_answered";
    let Some(locks) = scripting_node(test, &url, Redlock::builder().node(url.clone())).await else {
        return;
    };
    const TASKS: usize = 64;
    const CYCLES: usize = 10;
    let tasks = (0..TASKS).map(|t| {
        let locks = locks.clone();
        tokio::spawn(async move {
            let (semaphore, rwlock) = (
                locks.semaphore(&format!("prim:s:{t}"), 4),
                locks.rwlock(&format!("prim:rw:{t}")),
            );
            for c in 0..CYCLES {
                let permit = semaphore.try_acquire(TTL).await.expect("a free permit");
                let read = rwlock.try_read(TTL).await.expect("no writer");
                if c % 2 == 0 {
                    permit.extend(TTL).await.expect("extend a permit");
                    read.extend(TTL).await.expect("extend a read");
                }
                assert_eq!(support::release_settled(permit).await, 1, "permit {t}/{c}");
                assert_eq!(support::release_settled(read).await, 1, "read {t}/{c}");
            }
        })
    });
    for task in no_hang("tasks", join_all(tasks)).await {
        task.expect("task");
    }
    locks.settle().await;
    let left = keys_on(&server, "prim:").await;
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Permits and reads taken, extended and released in waves, the node's
/// script cache flushed (`SCRIPT FLUSH`) between two: the batches' calls
/// answered `NOSCRIPT` go again alone, and every permit and read is
/// granted, extended and released, nothing left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_and_reads_survive_a_flushed_script_cache() {
    let server = RedisServer::start().expect("server");
    let url = server.url();
    let test = "coalesce::permits_and_reads_survive_a_flushed_script_cache";
    let Some(locks) = scripting_node(test, &url, Redlock::builder().node(url.clone())).await else {
        return;
    };
    // More than a one-node manager sends side by side (32) before its
    // requests batch.
    const TASKS: usize = 64;
    const WAVES: usize = 8;
    let wave = Arc::new(tokio::sync::Barrier::new(TASKS + 1));
    let tasks = (0..TASKS).map(|t| {
        let (locks, wave) = (locks.clone(), wave.clone());
        tokio::spawn(async move {
            for c in 0..WAVES {
                wave.wait().await;
                let name = format!("flushed-prim:{t}:{c}");
                let permit = locks
                    .semaphore(&name, 2)
                    .try_acquire(TTL)
                    .await
                    .expect("a free permit");
                let read = locks.rwlock(&name).try_read(TTL).await.expect("no writer");
                permit.extend(TTL).await.expect("extend a permit");
                read.extend(TTL).await.expect("extend a read");
                assert_eq!(permit.loss_reason(), None);
                assert_eq!(support::release_settled(permit).await, 1, "{name}");
                assert_eq!(support::release_settled(read).await, 1, "{name}");
                wave.wait().await;
            }
        })
    });
    let tasks: Vec<_> = tasks.collect();
    flush_between_waves(&url, &wave, WAVES).await;
    for task in no_hang("tasks", join_all(tasks)).await {
        task.expect("task");
    }
    locks.settle().await;
    let left = keys_on(&server, "flushed-prim:").await;
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// A user denied some semaphores' keys: in the batches its permits share
/// with allowed ones, each refused permit fails alone, with the ACL's
/// refusal, and every allowed one is granted and released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_permit_fails_only_itself() {
    let options = ServerOptions::new()
        .arg("--user")
        .arg("app")
        .arg("on")
        .arg(">app-pw-5d1")
        .arg("~ok*")
        .arg("~warm*");
    let options = support::LOCK_COMMANDS
        .into_iter()
        .chain(support::SEMAPHORE_COMMANDS)
        .fold(options, |options, command| options.arg(command));
    let server = RedisServer::start_with(options).expect("server");
    let url = server.url().replace("redis://", "redis://app:app-pw-5d1@");
    let test = "coalesce::a_refused_permit_fails_only_itself";
    let builder = Redlock::builder().node(url.clone());
    let Some(locks) = scripting_node(test, &server.url(), builder).await else {
        return;
    };
    for round in 0..10 {
        let attempts = (0..32).map(|i| {
            let locks = locks.clone();
            let name = if i % 2 == 0 {
                format!("ok:{round}:{i}")
            } else {
                format!("denied:{round}:{i}")
            };
            async move {
                let permit = locks.semaphore(&name, 2).try_acquire(TTL).await;
                (name, permit)
            }
        });
        for (name, permit) in join_all(attempts).await {
            match (name.starts_with("ok:"), permit) {
                (true, Ok(permit)) => {
                    assert_eq!(support::release_settled(permit).await, 1, "{name}");
                }
                (false, Err(error)) => support::assert_acl_refusals(&error),
                (allowed, permit) => panic!("{name} (allowed: {allowed}): {:?}", permit.err()),
            }
        }
    }
    locks.settle().await;
}

/// Permit and read callers that give up mid-flight (dropped futures) on
/// three nodes: their queued acquires are not sent, whatever they may
/// have set is removed, and every node's queue keeps going.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_permit_and_read_callers_leave_nothing_behind() {
    let nodes = RedisNodes::start(3).expect("nodes");
    if !crate::native::scripting_or_skip(
        "coalesce::dropped_permit_and_read_callers_leave_nothing_behind",
        &nodes.urls()[0],
    )
    .await
    {
        return;
    }
    // Attempts are cut short by their own budgets, not by node timeouts.
    let locks = builder(&nodes)
        .node_timeout(Duration::from_secs(5))
        .build()
        .expect("config");
    support::warm(&locks, TTL).await;
    for wave in 0..10u64 {
        let attempts: Vec<_> = (0..32u64)
            .map(|i| {
                let locks = locks.clone();
                tokio::spawn(async move {
                    let name = format!("dropped-prim:{wave}:{i}");
                    // Cut short somewhere in flight (or not at all).
                    let budget = Duration::from_micros((wave * 37 + i * 23) % 600);
                    let attempt = async {
                        if i % 2 == 0 {
                            let permit = locks.semaphore(&name, 2).try_acquire(TTL).await;
                            permit.expect("a free permit").release().await
                        } else {
                            let read = locks.rwlock(&name).try_read(TTL).await;
                            read.expect("no writer").release().await
                        }
                    };
                    if let Ok(released) = tokio::time::timeout(budget, attempt).await {
                        released.expect("release");
                    }
                })
            })
            .collect();
        for attempt in attempts {
            attempt.await.expect("task");
        }
    }
    locks.settle().await;
    until_no_keys_left(&nodes, "dropped-prim:").await;
    // Every node's queue is idle again: a permit goes through.
    let permit = no_hang(
        "a permit after",
        locks.semaphore("after-prim", 1).try_acquire(TTL),
    )
    .await
    .expect("permit");
    assert_eq!(support::release_settled(permit).await, 3);
}
