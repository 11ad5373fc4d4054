//! One server, one vote: two nodes that reach one server — behind a second
//! address (an alias, a proxy) and another database, where the URLs cannot
//! show it — are found by the server's `run_id` at the first connection,
//! and one server's answer never counts twice. Two databases of one
//! address are refused when the manager is built (`builder.rs`' tests).

use crate::support;

use std::time::Duration;

use quorumlock::testkit::{FaultProxy, RedisNodes};
use quorumlock::{ConfigError, Error, Redlock, Retry};
use redis::AsyncCommands;
use support::{conn, no_hang};

const TTL: Duration = Duration::from_secs(10);

fn same_server(error: Error) -> (String, String) {
    match error {
        Error::InvalidConfig(ConfigError::SameServer { first, second, why }) => {
            assert_eq!(why, "same run_id");
            (first, second)
        }
        other => panic!("expected SameServer, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_behind_two_names_does_not_vote_twice() {
    let nodes = RedisNodes::start(2).expect("nodes");
    // A second address of server 0 (as a host alias would be), on another
    // database so that the two names do not meet on the key itself.
    let alias = FaultProxy::start(nodes[0].port()).await.expect("proxy");
    // Another owner holds the resource on the other server.
    let _: () = conn(&nodes[1].url())
        .await
        .set("orders:42", "another owner")
        .await
        .expect("SET");
    let urls = [nodes[0].url(), format!("{}/1", alias.url()), nodes[1].url()];
    let locks = Redlock::builder()
        .nodes(urls)
        .node_timeout(Duration::from_secs(2))
        .retry(Retry::default().attempts(3))
        .build()
        .expect("the URLs alone do not show it");

    // Server 0 alone would be two votes of three: the lock must not be
    // granted, and the error says why.
    let error = no_hang("lock", locks.lock("orders:42", TTL))
        .await
        .expect_err("one server voted twice");
    let (first, second) = same_server(error);
    assert_eq!(first, format!("127.0.0.1:{}", nodes[0].port()));
    assert_eq!(second, format!("127.0.0.1:{}/1", alias.port()));
    let value: Option<String> = conn(&nodes[1].url())
        .await
        .get("orders:42")
        .await
        .expect("GET");
    assert_eq!(value.as_deref(), Some("another owner"));

    // Every later acquisition is refused the same way, also of a free
    // resource (which two distinct servers of the three would grant), and
    // leaves nothing behind.
    let error = no_hang("try_lock", locks.try_lock("free", TTL))
        .await
        .expect_err("still one server named twice");
    assert_eq!(same_server(error), (first.clone(), second.clone()));
    no_hang("settle", locks.settle()).await;
    for (url, db) in [
        (nodes[0].url(), 0),
        (nodes[0].url(), 1),
        (nodes[1].url(), 0),
    ] {
        let mut c = conn(&format!("{url}/{db}")).await;
        let held: Option<String> = c.get("free").await.expect("GET");
        assert_eq!(held, None, "{url}/{db} holds the refused grant");
    }

    // A call that reports every node says what the refused one is.
    let inspection = no_hang("inspect", locks.inspect("free"))
        .await
        .expect("inspect");
    let shown = format!("{inspection:?}");
    assert!(
        shown.contains("SameServer"),
        "the refused node's answer says so: {shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn independent_servers_behind_proxies_are_not_refused() {
    // Three servers, each behind a proxy: distinct run_ids, whatever the
    // addresses look like.
    let nodes = RedisNodes::start(3).expect("nodes");
    let proxies = support::proxies(&nodes).await;
    let locks = Redlock::builder()
        .nodes(proxies.iter().map(FaultProxy::url))
        .retry(Retry::default().attempts(3))
        .build()
        .expect("config");
    for _ in 0..3 {
        let guard = no_hang("lock", locks.lock("r", TTL)).await.expect("lock");
        no_hang("release", guard.release()).await.expect("release");
    }
}
