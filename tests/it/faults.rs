//! Node faults: killed, restarted, paused, or down when the manager starts.

use crate::support;

use std::time::Duration;

use quorumlock::testkit::{FaultProxy, Faults, RedisNodes};
use quorumlock::{Error, NodeError, Redlock, Retry};
use support::{builder, no_hang, warm};

const TTL: Duration = Duration::from_secs(10);

fn failed_ports(err: &Error) -> Vec<u16> {
    let mut ports: Vec<u16> = err
        .node_failures()
        .iter()
        .map(|f| {
            f.node
                .rsplit(':')
                .next()
                .and_then(|p| p.parse().ok())
                .expect("host:port")
        })
        .collect();
    ports.sort_unstable();
    ports
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minority_down_works_majority_down_fails_fast_restart_recovers() {
    let nodes = RedisNodes::start(5).expect("nodes");
    let locks = builder(&nodes).build().expect("config");

    nodes[0].kill();
    nodes[1].kill();
    let guard = no_hang("lock", locks.lock("jobs:a", TTL))
        .await
        .expect("3 of 5 suffice");
    let summary = guard.release().await.expect("release").settled().await;
    assert_eq!(summary.released(), 3);
    assert_eq!(summary.failures().len(), 2);

    nodes[2].kill();
    let err = no_hang("lock without a majority", locks.lock("jobs:a", TTL))
        .await
        .expect_err("2 of 5 cannot grant");
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    let mut down: Vec<u16> = (0..3).map(|i| nodes[i].port()).collect();
    down.sort_unstable();
    assert_eq!(
        failed_ports(&err),
        down,
        "names exactly the unreachable nodes: {err}"
    );
    for port in &down {
        assert!(err.to_string().contains(&port.to_string()), "{err}");
    }

    for i in 0..3 {
        nodes[i].restart().expect("restart");
    }
    // The same manager, no rebuild: connections come back on their own.
    let guard = no_hang("lock after restart", async {
        loop {
            match locks.lock("jobs:a", TTL).await {
                Ok(guard) => break guard,
                Err(e) => assert!(e.is_retryable(), "{e}"),
            }
        }
    })
    .await;
    // Every restarted node takes part again (a fresh script cache too).
    let mut summary = guard.release().await.expect("release").settled().await;
    no_hang("every node back", async {
        while summary.released() < 5 {
            let guard = locks.lock("jobs:a", TTL).await.expect("lock");
            summary = guard.release().await.expect("release").settled().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_down_at_start_is_used_once_it_comes_up() {
    let nodes = RedisNodes::start(3).expect("nodes");
    nodes[2].kill();
    let locks = builder(&nodes)
        .build()
        .expect("builds while a node is down");
    let guard = locks.lock("late", TTL).await.expect("2 of 3");
    assert_eq!(support::release_settled(guard).await, 2);

    nodes[2].restart().expect("restart");
    let released = no_hang("late node joins", async {
        loop {
            let guard = locks.lock("late", TTL).await.expect("lock");
            let summary = guard.release().await.expect("release").settled().await;
            let released = summary.released();
            if released == 3 {
                break released;
            }
        }
    })
    .await;
    assert_eq!(released, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_node_does_not_stall_the_decision() {
    let nodes = RedisNodes::start(3).expect("nodes");
    let node_timeout = Duration::from_secs(2);
    let locks = builder(&nodes)
        .node_timeout(node_timeout)
        .build()
        .expect("config");
    let ttl = Duration::from_secs(30);
    // Connect to every node first, so the pause hits an open connection.
    warm(&locks, ttl).await;

    nodes[2].pause().expect("pause");
    let guard = no_hang("lock with a paused node", locks.try_lock("p", ttl))
        .await
        .expect("2 of 3");
    // validity = ttl - elapsed - drift: had the decision waited for the paused
    // node, at least `node_timeout` would be gone.
    let drift =
        ttl.mul_f64(quorumlock::RedlockBuilder::DEFAULT_DRIFT_FACTOR) + Duration::from_millis(2);
    assert!(
        guard.validity() > ttl - drift - node_timeout,
        "decision waited for the paused node: validity {:?}",
        guard.validity()
    );
    let summary = guard.release().await.expect("release").settled().await;
    assert_eq!(summary.released(), 2);
    assert!(matches!(summary.failures()[0].error, NodeError::Timeout(_)));

    // With a majority paused, the attempt fails on the per-node timeout
    // instead of waiting for the nodes to wake up (node 2, which timed out
    // twice in a row above, is not even asked).
    nodes[1].pause().expect("pause");
    let err = no_hang("lock with a majority paused", locks.try_lock("p", ttl))
        .await
        .expect_err("1 of 3 cannot grant");
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    assert!(
        err.node_failures().iter().all(|f| matches!(
            f.error,
            NodeError::Timeout(_) | NodeError::Unresponsive | NodeError::NotAsked { .. }
        )),
        "{err}"
    );

    nodes[1].resume().expect("resume");
    nodes[2].resume().expect("resume");
    let guard = no_hang("lock after resume", locks.lock("p", ttl))
        .await
        .expect("lock");
    // A quorum at least: the resumed nodes may still be working through
    // their backlog, so one of them can be a straggler.
    assert!(guard.release().await.expect("release").released() >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_sent_again_after_its_connection_dropped_is_not_called_lost() {
    // The release lands on two of three nodes, but their answers are held
    // back and then their connections drop: sent again, it finds the token
    // gone there — deleted by its first sending. Taken as "not held
    // there", those two answers called a lock held to its end lost (a
    // node restarting under a release does the same).
    let nodes = RedisNodes::start(3).expect("nodes");
    let proxies = support::proxies(&nodes).await;
    let locks = Redlock::builder()
        .nodes(proxies.iter().map(FaultProxy::url))
        .node_timeout(Duration::from_secs(30))
        .retry(Retry::none())
        .build()
        .expect("config");
    warm(&locks, TTL).await;
    let guard = locks.lock("resent", TTL).await.expect("lock");
    let token = guard.token().as_str().to_owned();
    for proxy in &proxies[..2] {
        proxy.set(Faults::hold_replies(Duration::from_secs(3600)));
    }
    let release = tokio::spawn(guard.release());
    // The release ran everywhere (node 2 answered; 0 and 1 owe it).
    no_hang("the release to land", async {
        while support::holding(&nodes, "resent", &token).await > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    for proxy in &proxies[..2] {
        // Healed first, for the new connections; the held answers stay
        // held until their connections close.
        proxy.heal();
        proxy.drop_connections();
    }
    let summary = no_hang("the release", release)
        .await
        .expect("task")
        .expect("held to its end: not lost");
    assert_eq!(summary.released(), 1, "{summary}");
    let resent: Vec<_> = summary
        .failures()
        .iter()
        .filter(|f| matches!(f.error, NodeError::ReleaseResent))
        .collect();
    assert_eq!(resent.len(), 2, "{:?}", summary.failures());
}

// ------------------------------------------------------- the proxy's faults

/// `SET key value` as RESP, as a client sends it.
fn set_command(key: &str, value: &str) -> Vec<u8> {
    format!(
        "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n{value}\r\n",
        key.len(),
        value.len()
    )
    .into_bytes()
}

/// The value of `key` on the server at `url`, read past any proxy.
async fn value(url: &str, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut support::conn(url).await)
        .await
        .expect("GET")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_whose_reply_is_lost_ran_and_its_client_sees_a_reset() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let nodes = RedisNodes::start(1).expect("node");
    let proxy = FaultProxy::start(nodes[0].port()).await.expect("proxy");
    proxy.set(Faults::lose_replies());
    let mut client = tokio::net::TcpStream::connect(("127.0.0.1", proxy.port()))
        .await
        .expect("connect");
    client
        .write_all(&set_command("lost:reply", "landed"))
        .await
        .expect("write");
    let mut reply = [0u8; 64];
    let read = no_hang("the reset", client.read(&mut reply)).await;
    assert!(
        matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "the client sees its connection reset, not an answer: {read:?}"
    );
    // The command ran all the same.
    assert_eq!(
        value(&nodes[0].url(), "lost:reply").await.as_deref(),
        Some("landed")
    );
    // Healed, the proxy answers again.
    proxy.heal();
    let mut again = support::conn(&proxy.url()).await;
    let pong: String = redis::cmd("PING")
        .query_async(&mut again)
        .await
        .expect("PING");
    assert_eq!(pong, "PONG");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_holds_what_was_sent_and_delivers_it_when_healed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let nodes = RedisNodes::start(1).expect("node");
    let url = nodes[0].url();
    let proxy = FaultProxy::start(nodes[0].port()).await.expect("proxy");
    // A client connected before the partition keeps its connection.
    let mut stays = tokio::net::TcpStream::connect(("127.0.0.1", proxy.port()))
        .await
        .expect("connect");
    proxy.set(Faults::partition());
    // One client sends a write and leaves; another sends one and waits.
    let mut leaves = tokio::net::TcpStream::connect(("127.0.0.1", proxy.port()))
        .await
        .expect("connect");
    leaves
        .write_all(&set_command("held:write", "late"))
        .await
        .expect("write");
    leaves.shutdown().await.expect("shutdown");
    drop(leaves);
    stays
        .write_all(&set_command("held:reply", "late"))
        .await
        .expect("write");
    // The lock moves on meanwhile: written on the server directly, after
    // both writes were sent.
    let mut direct = support::conn(&url).await;
    let _: () = redis::cmd("SET")
        .arg("held:write")
        .arg("moved on")
        .query_async(&mut direct)
        .await
        .expect("SET");
    assert_eq!(value(&url, "held:reply").await, None, "held, not delivered");
    proxy.heal();
    // Delivered once healed, after the direct write: the late write wins,
    // though its client had closed its connection.
    no_hang("the held write of the client that left", async {
        while value(&url, "held:write").await.as_deref() != Some("late") {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let mut reply = [0u8; 5];
    no_hang("the held reply", stays.read_exact(&mut reply))
        .await
        .expect("the reply");
    assert_eq!(&reply, b"+OK\r\n");
    assert_eq!(value(&url, "held:reply").await.as_deref(), Some("late"));
}
