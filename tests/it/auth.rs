//! Credentials in node URLs: a password, an ACL user; and that neither
//! leaks into errors or `Debug` output.

use crate::support;

use std::time::Duration;

use quorumlock::testkit::{RedisServer, ServerOptions};
use quorumlock::{Error, NodeError, Redlock, Retry};
use support::{
    ELECTION_COMMANDS, FAIR_COMMANDS, LOCK_COMMANDS, RWLOCK_COMMANDS, SEMAPHORE_COMMANDS,
};

const PASSWORD: &str = "s3cret-pw-7f1e";
const USER_PASSWORD: &str = "alice-pw-91c2";

fn secured() -> RedisServer {
    secured_with(&LOCK_COMMANDS)
}

fn secured_with(commands: &[&str]) -> RedisServer {
    let mut options = ServerOptions::new()
        .arg("--requirepass")
        .arg(PASSWORD)
        // An ACL user confined to lock keys, with only what the library needs.
        .arg("--user")
        .arg("alice")
        .arg("on")
        .arg(format!(">{USER_PASSWORD}"))
        .arg("~locks:*");
    for command in commands {
        options = options.arg(*command);
    }
    RedisServer::start_with(options).expect("server")
}

/// A server with the user `locker` confined to keys under `myapp:lock:`
/// and allowed only `commands` (the ACL line of docs/security.md), and a
/// manager that connects as that user (at the URL returned), without
/// retries.
fn confined_locker(commands: &[&str]) -> (RedisServer, String, Redlock) {
    let mut options = ServerOptions::new()
        .arg("--requirepass")
        .arg(PASSWORD)
        .arg("--user")
        .arg("locker")
        .arg("on")
        .arg(format!(">{USER_PASSWORD}"))
        .arg("resetkeys")
        .arg("~myapp:lock:*")
        .arg("resetchannels")
        .arg("-@all");
    for command in commands {
        options = options.arg(*command);
    }
    let server = RedisServer::start_with(options).expect("server");
    let user_url = format!("redis://locker:{USER_PASSWORD}@127.0.0.1:{}", server.port());
    let locks = Redlock::builder()
        .node(&user_url)
        .key_prefix("myapp:lock:")
        .retry(Retry::none())
        .build()
        .expect("config");
    (server, user_url, locks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_and_acl_user_in_the_url_work() {
    let server = secured();
    let port = server.port();
    for url in [
        format!("redis://:{PASSWORD}@127.0.0.1:{port}"),
        format!("redis://alice:{USER_PASSWORD}@127.0.0.1:{port}"),
    ] {
        let locks = Redlock::new([url]).expect("config");
        let guard = locks
            .lock("locks:a", Duration::from_secs(5))
            .await
            .expect("lock");
        guard.extend(Duration::from_secs(5)).await.expect("extend");
        assert_eq!(support::release_settled(guard).await, 1);
    }
}

/// `err` is a refusal of `user`'s credentials on every node: a
/// configuration error, not an outage.
fn assert_refused(err: &Error, user: &str) {
    assert!(matches!(err, Error::Incompatible { .. }), "{err}");
    assert!(!err.is_retryable(), "{err}");
    for failure in err.node_failures() {
        assert!(
            matches!(&failure.error, NodeError::AuthRefused { user: u, .. } if u == user),
            "{failure}"
        );
    }
    assert!(err.to_string().contains(&format!("user `{user}`")), "{err}");
}

/// Wrong credentials are not an outage: however patient the retry policy,
/// the call fails at once, naming the user that was refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_fail_at_once_naming_the_user() {
    let servers = [secured(), secured(), secured()];
    let port = |i: usize| servers[i].port();
    // A lock on every node with the credentials `userinfo`, with a retry
    // policy that would wait forever for an outage.
    let refused = async |userinfo: &str| {
        let locks = Redlock::builder()
            .nodes((0..3).map(|i| format!("redis://{userinfo}@127.0.0.1:{}", port(i))))
            .retry(Retry::forever())
            .build()
            .expect("config");
        support::no_hang(
            "a refused lock",
            locks.lock("locks:r", Duration::from_secs(5)),
        )
        .await
        .expect_err("refused credentials")
    };
    // The default user with a wrong password, on every node.
    let err = refused(":nope-0").await;
    assert_refused(&err, "default");
    assert!(!format!("{err} {err:?}").contains("nope-0"), "{err:?}");
    // A user that does not exist is refused the same way.
    let err = refused("mallory:pw").await;
    assert_refused(&err, "mallory");
    // One node of three refusing is one node fewer, not an error.
    let locks = Redlock::builder()
        .node(format!("redis://alice:wrong@127.0.0.1:{}", port(0)))
        .nodes((1..3).map(|i| format!("redis://alice:{USER_PASSWORD}@127.0.0.1:{}", port(i))))
        .build()
        .expect("config");
    let guard = locks
        .lock("locks:r", Duration::from_secs(5))
        .await
        .expect("a quorum accepts alice");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_never_appear_in_errors_or_debug_output() {
    let server = secured();
    let port = server.port();
    let wrong = "wrong-pw-3d9a";
    let locks = Redlock::builder()
        .node(format!("redis://alice:{wrong}@127.0.0.1:{port}"))
        .retry(Retry::none())
        .build()
        .expect("config");
    let err = locks
        .lock("locks:a", Duration::from_secs(5))
        .await
        .expect_err("bad password");
    assert_refused(&err, "alice");
    let shown = format!("{err} {err:?} {locks:?}");
    assert!(!shown.contains(wrong), "{shown}");
    assert!(shown.contains(&port.to_string()), "names the node: {shown}");

    let good = Redlock::new([format!("redis://:{PASSWORD}@127.0.0.1:{port}")]).expect("config");
    let guard = good
        .lock("locks:b", Duration::from_secs(5))
        .await
        .expect("lock");
    let token = guard.token().as_str().to_owned();
    let shown = format!("{good:?} {guard:?} {:?}", guard.token());
    assert!(!shown.contains(PASSWORD), "{shown}");
    assert!(!shown.contains(&token), "{shown}");
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_permission_is_reported_not_mistaken_for_a_lost_lock() {
    // Without GET the release script cannot check the token.
    let server = secured_with(&["+set", "+evalsha", "+eval", "+script|load"]);
    let locks = Redlock::builder()
        .node(format!(
            "redis://alice:{USER_PASSWORD}@127.0.0.1:{}",
            server.port()
        ))
        .retry(Retry::none())
        .build()
        .expect("config");
    let guard = locks
        .lock("locks:p", Duration::from_secs(5))
        .await
        .expect("SET is allowed");
    let err = guard
        .extend(Duration::from_secs(5))
        .await
        .expect_err("GET is not allowed");
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    support::assert_acl_refusals(&err);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_confined_to_the_key_prefix_can_use_every_kind_of_lock() {
    // The ACL line of docs/security.md: keys under the prefix, only
    // LOCK_COMMANDS.
    let (server, user_url, locks) = confined_locker(&LOCK_COMMANDS);
    let port = server.port();
    let ttl = Duration::from_secs(5);

    let guard = locks.lock("orders:1", ttl).await.expect("lock");
    guard.extend(ttl).await.expect("extend");
    guard.release().await.expect("release");

    // An empty script cache (a restarted node) takes the NOSCRIPT
    // fallback, which needs no further permission.
    let mut admin = support::conn(&format!("redis://:{PASSWORD}@127.0.0.1:{port}")).await;
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut admin)
        .await
        .expect("SCRIPT FLUSH");

    // The fence counter `myapp:lock:ledger:fence` is under the prefix too.
    let guard = locks.lock_fenced("ledger", ttl).await.expect("fenced");
    assert_eq!(guard.fence(), Some(1));
    guard.extend(ttl).await.expect("extend fenced");
    guard.release().await.expect("release fenced");

    let guard = locks
        .lock_many(&["stock:berlin", "stock:paris"], ttl)
        .await
        .expect("multi");
    guard.extend(ttl).await.expect("extend multi");
    assert_eq!(support::release_settled(guard).await, 1);

    let out = locks
        .with_lock("jobs:a", ttl, |lease| async move { lease.fence() })
        .await
        .expect("with_lock");
    assert_eq!(out, None);

    // Without the prefix the same user is refused: the ACL confines it.
    let unprefixed = Redlock::builder()
        .node(&user_url)
        .retry(Retry::none())
        .build()
        .expect("config");
    let err = unprefixed
        .try_lock("orders:1", ttl)
        .await
        .expect_err("outside the prefix");
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    support::assert_acl_refusals(&err);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_serves_semaphores_rwlocks_elections_and_fair_locks() {
    // docs/security.md: LOCK_COMMANDS, plus what each other primitive's
    // scripts run. Each primitive is tried with exactly the commands the
    // docs list for it, so a script that starts calling another command
    // fails here before it fails a locked-down user.
    let ttl = Duration::from_secs(5);
    let primitives: [(&str, &[&str]); 4] = [
        ("semaphore", &SEMAPHORE_COMMANDS),
        ("rwlock", &RWLOCK_COMMANDS),
        ("election", &ELECTION_COMMANDS),
        ("fair", &FAIR_COMMANDS),
    ];
    for (primitive, extra) in primitives {
        let commands: Vec<&str> = LOCK_COMMANDS.iter().chain(extra).copied().collect();
        let (_server, _, locks) = confined_locker(&commands);
        match primitive {
            "semaphore" => {
                let permits = locks.semaphore("pool", 2);
                let permit = permits.try_acquire(ttl).await.expect("permit");
                permit.extend(ttl).await.expect("extend permit");
                assert_eq!(support::release_settled(permit).await, 1);
            }
            "rwlock" => {
                let rw = locks.rwlock("doc");
                let reader = rw.try_read(ttl).await.expect("read");
                reader.extend(ttl).await.expect("extend read");
                assert_eq!(support::release_settled(reader).await, 1);
                let writer = rw.try_write(ttl).await.expect("write");
                writer.extend(ttl).await.expect("extend write");
                assert_eq!(support::release_settled(writer).await, 1);
            }
            "fair" => {
                let holder = locks.fair_lock("printer", ttl).await.expect("fair_lock");
                holder.extend(ttl).await.expect("extend fair");
                // Busy: it queues, tries once first in line, and leaves
                // (no retries): refused for being busy, not for an ACL.
                let err = locks.fair_lock("printer", ttl).await.expect_err("held");
                assert!(matches!(err, Error::Contended { .. }), "{err}");
                assert_eq!(support::release_settled(holder).await, 1);
                locks.settle().await;
            }
            _ => {
                let election = locks.election("scheduler");
                let leadership =
                    tokio::time::timeout(support::HANG_GUARD, election.campaign("node-a", ttl))
                        .await
                        .expect("campaign hung")
                        .expect("campaign");
                leadership.proclaim("node-a v2").await.expect("proclaim");
                let leader = election.leader().await.expect("leader").expect("a leader");
                assert_eq!(leader.value(), "node-a v2");
                leadership.resign().await.expect("resign");
            }
        }
    }
}
