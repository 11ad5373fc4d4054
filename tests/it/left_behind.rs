//! Nothing left behind: a node that comes back from a freeze or a restart
//! holds no lock that was released while it did not answer. Its owed
//! releases (`node::owed`) are delivered before it is asked anything
//! again, so the quorum that is back grants at once.
//!
//! The ttl is longer than any bound of these tests: a key left behind
//! could only go by being deleted, never by expiring while a test waits.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use quorumlock::testkit::{RedisNodes, ServerOptions};
use quorumlock::{NodeError, Redlock, Retry};
use support::{Paused, holding, keys_on, no_hang, restart, values, warm};

const TTL: Duration = Duration::from_secs(600);

fn manager(nodes: &RedisNodes, node_timeout: Duration) -> Redlock {
    Redlock::builder()
        .nodes(nodes.urls())
        .node_timeout(node_timeout)
        .retry(
            Retry::default()
                .attempts(200)
                .delay(Duration::from_millis(10))
                .jitter(Duration::from_millis(10)),
        )
        .build()
        .expect("config")
}

/// Waits until `server` holds no key starting with `prefix`.
async fn until_clean(server: &quorumlock::testkit::RedisServer, prefix: &str) {
    let what = format!("node :{} to be given what it was owed", server.port());
    no_hang(&what, async {
        while !keys_on(server, prefix).await.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// Waits until a call finds node `port` not asked.
async fn until_not_asked(locks: &Redlock, port: u16) {
    let port = format!(":{port}");
    no_hang("the paused node to be left unasked", async {
        loop {
            let skipped = |failures: &[quorumlock::NodeFailure]| {
                failures.iter().any(|f| {
                    f.node.ends_with(&port) && matches!(f.error, NodeError::NotAsked { .. })
                })
            };
            let skipped = match locks.try_lock("left:scratch", TTL).await {
                Ok(guard) => skipped(guard.release().await.expect("release").failures()),
                Err(error) => skipped(error.node_failures()),
            };
            if skipped {
                return;
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_paused_while_locks_are_held_holds_none_of_them_once_it_answers() {
    let nodes = RedisNodes::start(5).expect("nodes");
    // Short enough that the paused node soon stops being asked; under load
    // a healthy node that times out once is asked again at its next answer.
    let locks = manager(&nodes, Duration::from_millis(300));
    warm(&locks, TTL).await;
    {
        let _paused = Paused::new(&nodes[4]);
        // Eight locks taken while the node is paused: their requests to it
        // wait in its socket, and run when it resumes. They are released
        // once it is judged silent, so their releases never reach it.
        let mut guards = Vec::new();
        for r in 0..8 {
            let resource = format!("left:paused:{r}");
            guards.push(locks.lock(&resource, TTL).await.expect("4 of 5 up"));
        }
        until_not_asked(&locks, nodes[4].port()).await;
        for guard in guards {
            guard.release().await.expect("release");
        }
    }
    // Resumed: it runs what waited in its socket, then what it is owed
    // (the scratch locks' releases too). Every other node is given its
    // releases too: at once, or, for a healthy node that timed out once
    // under load (300 ms here), by its prober, which pays what it is owed.
    for server in &nodes {
        until_clean(server, "left:").await;
    }
    // The quorum that is back grants at once: with two other nodes gone,
    // the paused one is the third vote for each of the eight resources.
    nodes[0].kill();
    nodes[1].kill();
    for r in 0..8 {
        let resource = format!("left:paused:{r}");
        let guard = no_hang("lock", locks.lock(&resource, TTL))
            .await
            .expect("3 of 5 grant");
        guard.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_with_its_data_holds_no_lock_released_while_it_was_down() {
    let nodes =
        Arc::new(RedisNodes::start_with(3, ServerOptions::new().persistent()).expect("nodes"));
    let locks = manager(&nodes, Duration::from_secs(1));
    warm(&locks, TTL).await;
    let guard = locks.lock("left:restart", TTL).await.expect("lock");
    let token = guard.token().as_str().to_owned();
    // On all three (the grant is decided at two; the third follows).
    no_hang("the third node's grant", async {
        while holding(&nodes, "left:restart", &token).await < 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    nodes[2].kill();
    let summary = guard.release().await.expect("release").settled().await;
    assert_eq!(summary.released(), 2, "{summary:?}");
    // It comes back with the key it persisted, of a lock released since.
    restart(&nodes, 2).await;
    until_clean(&nodes[2], "left:restart").await;
    // And it is a vote at once: with another node gone, it grants.
    nodes[0].kill();
    let again = no_hang("lock", locks.lock("left:restart", TTL))
        .await
        .expect("2 of 3 grant");
    assert_eq!(
        values(&nodes, "left:restart").await[1..],
        [
            Some(again.token().as_str().to_owned()),
            Some(again.token().as_str().to_owned())
        ]
    );
    again.release().await.expect("release");
}

/// Calls of the commands a token-checked delete is made of on `url`
/// (a script, or a native compare-and-delete).
async fn deletes(url: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut support::conn(url).await)
        .await
        .expect("INFO");
    info.lines()
        .filter(|line| {
            [
                "cmdstat_eval",
                "cmdstat_evalsha",
                "cmdstat_delifeq",
                "cmdstat_delex",
                "cmdstat_fcall",
            ]
            .iter()
            .any(|name| line.starts_with(&format!("{name}:")))
        })
        .filter_map(|line| {
            let calls = line.split("calls=").nth(1)?;
            calls.split(',').next()?.parse::<u64>().ok()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owed_release_never_deletes_the_holders_new_lock() {
    let nodes = Arc::new(RedisNodes::start(3).expect("nodes"));
    let locks = manager(&nodes, Duration::from_secs(1));
    warm(&locks, TTL).await;
    let first = locks.lock("left:again", TTL).await.expect("lock");
    let old = first.token().as_str().to_owned();
    nodes[2].kill();
    first.release().await.expect("release");
    // Back empty: the node is owed the old token's release, and the
    // holder takes the resource again, on all three nodes.
    restart(&nodes, 2).await;
    let second = no_hang("lock", locks.lock("left:again", TTL))
        .await
        .expect("lock");
    let new = second.token().as_str().to_owned();
    no_hang("the new grant on the restarted node", async {
        while holding(&nodes, "left:again", &new).await < 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    // The owed release (the old token) reaches the node; the new lock,
    // another token, stays.
    no_hang("the owed release", async {
        while deletes(&nodes[2].url()).await == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert_eq!(holding(&nodes, "left:again", &new).await, 3);
    assert_eq!(holding(&nodes, "left:again", &old).await, 0);
    second.release().await.expect("release");
}
