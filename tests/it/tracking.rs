//! Held keys watched by the nodes (`CLIENT TRACKING`): a held lock hears
//! of a change to its keys at once, not at its next renewal; and a node
//! that refuses tracking still serves, renewing on schedule.
//!
//! The locks here have a long ttl (10 minutes), so a scheduled renewal
//! cannot begin before about five minutes have passed (half the validity
//! window left: the renewer never takes a lock earlier). Each test shows
//! that what it saw came before that: the lease's `started()` moves only
//! when a renewal succeeds, and the time the test saw it happen is before
//! the first moment the renewer would have scheduled one. Those are not
//! speed bounds: a run that took five minutes would be a hang.

use crate::support;

use std::time::Duration;

use quorumlock::testkit::{RedisNodes, ServerOptions};
use quorumlock::{HeldKeyTracking, Lease, LossReason, Redlock, Retry};
use redis::Value;
use support::{LOCK_COMMANDS, builder, conn, no_hang, values};
use tokio::time::Instant;

const LONG_TTL: Duration = Duration::from_secs(600);

/// The first instant the renewer would take `guard` for a scheduled
/// renewal: half its validity window before its deadline.
fn first_scheduled_renewal(lease: &Lease) -> Instant {
    let window = lease.deadline() - lease.started();
    lease.deadline() - window / 2
}

/// Another owner takes `key` on `servers`: its value deleted and another
/// token set in one transaction per node, as an operator's `DEL` (or an
/// eviction) followed by another manager's grant there, with no moment in
/// between for the holder's restore to land.
async fn taken(nodes: &RedisNodes, which: &[usize], key: &str, other: &str) {
    for &i in which {
        let mut c = conn(&nodes[i].url()).await;
        let () = redis::pipe()
            .atomic()
            .del(key)
            .ignore()
            .set(key, other)
            .ignore()
            .query_async(&mut c)
            .await
            .expect("take the key");
    }
}

/// `key` deleted on `which` servers, as an operator's `DEL`: it was there.
async fn deleted(nodes: &RedisNodes, which: &[usize], key: &str) {
    for &i in which {
        let deleted: i64 = redis::cmd("DEL")
            .arg(key)
            .query_async(&mut conn(&nodes[i].url()).await)
            .await
            .expect("DEL");
        assert_eq!(deleted, 1);
    }
}

/// When a renewal moved `lease` on from `granted`. Renewals announce
/// nothing: polls the lease.
async fn renewed_after(lease: &Lease, granted: Instant) -> Instant {
    no_hang("the restoring renewal", async {
        while lease.started() == granted {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    Instant::now()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_taken_on_a_majority_is_lost_before_its_renewal_was_due() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes).build().expect("config");
    let guard = locks.lock("tracked", LONG_TTL).await.expect("lock");
    guard.auto_extend();
    let scheduled = first_scheduled_renewal(&guard.lease());

    // (Node 0 is taken before node 1: a renewal heard of node 0 may still
    // succeed on nodes 1 and 2 in between; node 1's change ends it.)
    taken(&nodes, &[0, 1], "tracked", "another-owner").await;

    let reason = no_hang("lost() after the key was taken", guard.lost()).await;
    let seen = Instant::now();
    assert_eq!(reason, LossReason::TokenGone);
    assert!(
        seen < scheduled,
        "the loss was found before any scheduled renewal could run"
    );
    // The other owner's keys are left alone.
    let after = values(&nodes, "tracked").await;
    assert_eq!(after[0].as_deref(), Some("another-owner"));
    assert_eq!(after[1].as_deref(), Some("another-owner"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_whose_keys_were_deleted_but_not_taken_is_restored_at_once() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes).build().expect("config");
    let guard = locks.lock("restored", LONG_TTL).await.expect("lock");
    guard.auto_extend();
    let granted = guard.started();
    let scheduled = first_scheduled_renewal(&guard.lease());
    let token = guard.token().as_str().to_owned();

    deleted(&nodes, &[0, 1], "restored").await;
    let seen = renewed_after(&guard.lease(), granted).await;
    assert!(
        seen < scheduled,
        "restored by a renewal that was not the scheduled one"
    );
    assert_eq!(guard.loss_reason(), None, "still held");
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut conn(&nodes[0].url()).await)
        .await
        .expect("CLIENT LIST");
    assert_eq!(
        clients.lines().filter(|c| tracks(c)).count(),
        1,
        "one connection per node tracks: {clients}"
    );
    let on_nodes = values(&nodes, "restored").await;
    assert!(
        on_nodes
            .iter()
            .all(|v| v.as_deref() == Some(token.as_str())),
        "the key is back on every node: {on_nodes:?}"
    );
    assert!(support::release_settled(guard).await >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turned_off_a_held_lock_hears_nothing_until_its_renewal() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes)
        .held_key_tracking(HeldKeyTracking::Off)
        .build()
        .expect("config");
    // A short ttl: the scheduled renewal finds the loss.
    let guard = locks
        .lock("untracked", Duration::from_secs(3))
        .await
        .expect("lock");
    guard.auto_extend();
    let scheduled = first_scheduled_renewal(&guard.lease());
    taken(&nodes, &[0, 1], "untracked", "another-owner").await;
    let reason = no_hang("lost() at the renewal", guard.lost()).await;
    assert_eq!(reason, LossReason::TokenGone);
    assert!(
        Instant::now() >= scheduled,
        "found by the scheduled renewal, not before it"
    );
}

/// The first key on node `i` for which `read` (a command on that key)
/// answers what `holds` accepts.
async fn key_where(
    nodes: &RedisNodes,
    i: usize,
    read: impl Fn(&str) -> redis::Cmd,
    holds: impl Fn(Value) -> bool,
) -> Option<String> {
    let mut c = conn(&nodes[i].url()).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut c)
        .await
        .expect("KEYS");
    for key in keys {
        let answer: redis::RedisResult<Value> = read(&key).query_async(&mut c).await;
        if answer.is_ok_and(&holds) {
            return Some(key);
        }
    }
    None
}

/// The key on node `i` whose value is `token`: where a holding of another
/// primitive keeps it.
async fn key_holding(nodes: &RedisNodes, i: usize, token: &str) -> String {
    let get = |key: &str| redis::cmd("GET").arg(key).clone();
    let is_token = |value| value == Value::BulkString(token.as_bytes().to_vec());
    key_where(nodes, i, get, is_token)
        .await
        .unwrap_or_else(|| panic!("no key holds the token on node {i}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_permit_and_a_held_writer_taken_on_a_majority_are_lost_before_their_renewal() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes).build().expect("config");

    let permit = locks
        .semaphore("pool", 2)
        .try_acquire(LONG_TTL)
        .await
        .expect("permit");
    permit.auto_extend();
    let writer = locks
        .rwlock("table")
        .try_write(LONG_TTL)
        .await
        .expect("writer");
    writer.auto_extend();

    for (lease, what) in [(permit.lease(), "permit"), (writer.lease(), "writer")] {
        let scheduled = first_scheduled_renewal(&lease);
        let key = key_holding(&nodes, 0, lease.token().as_str()).await;
        taken(&nodes, &[0, 1], &key, "another-owner").await;
        let reason = no_hang(what, lease.lost()).await;
        assert_eq!(reason, LossReason::TokenGone, "{what}");
        assert!(
            Instant::now() < scheduled,
            "{what}: found before any scheduled renewal could run"
        );
    }
}

/// The sorted set on node `i` that has `token` as a member: a reader's.
async fn set_holding(nodes: &RedisNodes, i: usize, token: &str) -> String {
    let score = |key: &str| redis::cmd("ZSCORE").arg(key).arg(token).clone();
    key_where(nodes, i, score, |score| score != Value::Nil)
        .await
        .unwrap_or_else(|| panic!("no sorted set has the token on node {i}"))
}

/// Whether `token` is a member of the set `key` on each node.
async fn members(nodes: &RedisNodes, key: &str, token: &str) -> Vec<bool> {
    let mut found = Vec::new();
    for server in nodes.iter() {
        let score: Option<f64> = redis::cmd("ZSCORE")
            .arg(key)
            .arg(token)
            .query_async(&mut conn(&server.url()).await)
            .await
            .expect("ZSCORE");
        found.push(score.is_some());
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_read_whose_set_a_writer_took_on_a_majority_is_lost_before_its_renewal() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes).build().expect("config");
    let reader = locks
        .rwlock("table")
        .try_read(LONG_TTL)
        .await
        .expect("reader");
    reader.auto_extend();
    let scheduled = first_scheduled_renewal(&reader.lease());
    let token = reader.token().as_str().to_owned();
    let readers = set_holding(&nodes, 0, &token).await;
    let writer = format!(
        "{}:writer",
        readers.strip_suffix(":readers").expect("a readers' key")
    );

    // On two nodes the readers go and a writer comes in, in one
    // transaction each: no moment for the reader's restore between.
    for i in [0, 1] {
        let mut c = conn(&nodes[i].url()).await;
        let () = redis::pipe()
            .atomic()
            .del(&readers)
            .ignore()
            .set(&writer, "another-writer")
            .ignore()
            .query_async(&mut c)
            .await
            .expect("take the lock for a writer");
    }

    let reason = no_hang("the reader's lost()", reader.lost()).await;
    assert_eq!(reason, LossReason::TokenGone);
    assert!(
        Instant::now() < scheduled,
        "found before any scheduled renewal could run"
    );
    let writers = values(&nodes, &writer).await;
    assert_eq!(writers[0].as_deref(), Some("another-writer"));
    assert_eq!(writers[1].as_deref(), Some("another-writer"));
    assert_eq!(
        &members(&nodes, &readers, &token).await[..2],
        [false, false],
        "no reader restored beside the writer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_read_whose_set_was_deleted_but_not_taken_is_restored_at_once() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let locks = builder(&nodes).build().expect("config");
    let reader = locks
        .rwlock("table")
        .try_read(LONG_TTL)
        .await
        .expect("reader");
    reader.auto_extend();
    // Another reader beside it, through another manager: its arrival and
    // departure change the set too, and cost the watched reader nothing.
    let others = builder(&nodes).build().expect("config");
    let other = others
        .rwlock("table")
        .try_read(LONG_TTL)
        .await
        .expect("another reader");
    other.release().await.expect("release");
    let granted = reader.started();
    let scheduled = first_scheduled_renewal(&reader.lease());
    let token = reader.token().as_str().to_owned();
    let readers = set_holding(&nodes, 0, &token).await;

    deleted(&nodes, &[0, 1], &readers).await;
    assert!(
        renewed_after(&reader.lease(), granted).await < scheduled,
        "restored by a renewal that was not the scheduled one"
    );
    assert_eq!(reader.loss_reason(), None, "still held");
    assert_eq!(
        members(&nodes, &readers, &token).await,
        [true, true, true],
        "the reader is back in the set on every node"
    );
}

/// Whether a `CLIENT LIST` line is a connection with tracking on (flag `t`).
fn tracks(client: &str) -> bool {
    client
        .split(' ')
        .find_map(|field| field.strip_prefix("flags="))
        .is_some_and(|flags| flags.contains('t'))
}

/// Three servers whose user `locker` may run only what the lock needs (the
/// ACL line of docs/security.md), not `CLIENT`: tracking is refused on
/// every node.
fn nodes_refusing_tracking() -> (RedisNodes, Vec<String>) {
    const PASSWORD: &str = "locker-pw-5e1a";
    let mut options = ServerOptions::new()
        .arg("--user")
        .arg("locker")
        .arg("on")
        .arg(format!(">{PASSWORD}"))
        .arg("~*")
        .arg("-@all");
    for command in LOCK_COMMANDS {
        options = options.arg(command);
    }
    let nodes = RedisNodes::start_with(3, options).expect("nodes");
    let urls = nodes
        .iter()
        .map(|server| format!("redis://locker:{PASSWORD}@127.0.0.1:{}", server.port()))
        .collect();
    (nodes, urls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_refusing_tracking_still_serves_and_renews_on_schedule() {
    let (nodes, urls) = nodes_refusing_tracking();
    let locks = Redlock::builder()
        .nodes(&urls)
        .retry(Retry::none())
        .build()
        .expect("config");
    let ttl = Duration::from_secs(3);

    // Held through renewals, although no node tracks.
    let guard = locks.lock("refused", ttl).await.expect("lock");
    guard.auto_extend();
    support::until_renewed_on(&guard.lease(), 3).await;
    for server in &nodes {
        let clients: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut conn(&server.url()).await)
            .await
            .expect("CLIENT LIST");
        assert!(
            !clients.lines().any(tracks),
            "no connection tracks keys: {clients}"
        );
    }

    // A deleted key is put back by the scheduled renewal.
    let token = guard.token().as_str().to_owned();
    let mut c = conn(&nodes[0].url()).await;
    let deleted: i64 = redis::cmd("DEL")
        .arg("refused")
        .query_async(&mut c)
        .await
        .expect("DEL");
    assert_eq!(deleted, 1);
    support::until_renewed_on(&guard.lease(), 3).await;
    assert_eq!(
        values(&nodes, "refused").await[0].as_deref(),
        Some(token.as_str())
    );

    // Taken on a majority: lost at the next renewal.
    let scheduled = first_scheduled_renewal(&guard.lease());
    taken(&nodes, &[0, 1], "refused", "another-owner").await;
    let reason = no_hang("lost() at the renewal", guard.lost()).await;
    assert_eq!(reason, LossReason::TokenGone);
    assert!(
        Instant::now() >= scheduled,
        "found by the scheduled renewal"
    );

    // Short cycles are unaffected.
    let short = locks.lock("short", ttl).await.expect("lock");
    short.release().await.expect("release");

    // The node check says which nodes watch, and why these do not.
    let report = locks.check().await;
    for node in &report.nodes {
        let watches = node.watches.as_deref().unwrap_or_default();
        assert!(
            // `client|tracking` as Redis 7 and Valkey name it; Redis 6.2
            // names the `client` command.
            watches.starts_with("no: ")
                && (watches.contains("client|tracking") || watches.contains("'client' command")),
            "{}: {watches}",
            node.node
        );
    }
}
