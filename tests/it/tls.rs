//! `rediss://` nodes: locks over TLS with a private CA trusted, and
//! certificate verification that is on by default and cannot be skipped.

use crate::support;

use std::time::Duration;

use quorumlock::testkit::{RedisCluster, RedisNodes, ServerOptions, TestCa, TestkitError, test_ca};
use quorumlock::{ConfigError, Error, NodeError, Redlock, RedlockBuilder, Retry};
use support::no_hang;

const TTL: Duration = Duration::from_secs(10);

/// A builder whose node timeout leaves room for TLS handshakes: these
/// tests make single attempts on fresh connections and assert what each
/// node said (a certificate error, a grant), so a loaded machine must not
/// turn a handshake into a timeout.
fn tls_builder() -> RedlockBuilder {
    Redlock::builder().node_timeout(Duration::from_secs(2))
}

/// TLS servers for `test` (its name in this module), or `None`, with the
/// skip said, when the server was built without TLS: the test cannot run
/// there.
fn tls_nodes(test: &str, n: usize) -> Option<RedisNodes> {
    tls_nodes_with(test, n, ServerOptions::new())
}

fn tls_nodes_with(test: &str, n: usize, options: ServerOptions) -> Option<RedisNodes> {
    match RedisNodes::start_with(n, options.tls()) {
        Ok(nodes) => Some(nodes),
        Err(e @ TestkitError::TlsUnsupported { .. }) => {
            skip_no_tls(test, &e);
            None
        }
        Err(e) => panic!("TLS servers: {e}"),
    }
}

fn skip_no_tls(test: &str, e: &TestkitError) {
    support::skip(&format!("tls::{test}"), support::Skip::NoTls, e);
}

fn ca_pem() -> &'static str {
    test_ca().expect("test CA").cert_pem()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_extend_release_over_tls_with_the_ca_trusted() {
    let Some(nodes) = tls_nodes("lock_extend_release_over_tls_with_the_ca_trusted", 3) else {
        return;
    };
    assert!(nodes.urls().iter().all(|url| url.starts_with("rediss://")));
    let locks = tls_builder()
        .nodes(nodes.urls())
        .tls_root_certificate(ca_pem())
        .retry(Retry::none())
        .build()
        .expect("config");

    let guard = no_hang("lock", locks.lock("tls:plain", TTL))
        .await
        .expect("lock");
    guard.extend(TTL).await.expect("extend");
    // A fresh lock is on a quorum, maybe not yet on every node.
    assert!(guard.release().await.expect("release").released() >= 2);

    let fenced = locks.lock_fenced("tls:fenced", TTL).await.expect("fenced");
    assert!(fenced.fence().is_some_and(|f| f >= 1));
    fenced.release().await.expect("release");

    let many = locks
        .lock_many(&["tls:a", "tls:b"], TTL)
        .await
        .expect("multi");
    assert!(many.release().await.expect("release").released() >= 2);
}

/// Node errors saying the certificate was refused, on enough of the three
/// nodes to decide the attempt.
fn assert_certificate_refused(err: &Error) {
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    let failures = err.node_failures();
    assert!(failures.len() >= 2, "{err}");
    for failure in failures {
        assert!(
            matches!(failure.error, NodeError::Redis(_)),
            "{}",
            failure.error
        );
        let text = failure.error.to_string().to_lowercase();
        assert!(text.contains("certificate"), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_are_verified_by_default() {
    let Some(nodes) = tls_nodes("certificates_are_verified_by_default", 3) else {
        return;
    };
    // The system's trust store does not know the test CA.
    let untrusting = tls_builder()
        .nodes(nodes.urls())
        .retry(Retry::none())
        .build()
        .expect("config");
    let err = no_hang("lock", untrusting.try_lock("tls:v", TTL))
        .await
        .expect_err("the server's CA is not trusted");
    assert_certificate_refused(&err);

    // Trusting another CA does not help either.
    let other = TestCa::generate().expect("CA");
    let wrong_ca = tls_builder()
        .nodes(nodes.urls())
        .tls_root_certificate(other.cert_pem())
        .retry(Retry::none())
        .build()
        .expect("config");
    let err = no_hang("lock", wrong_ca.try_lock("tls:v", TTL))
        .await
        .expect_err("signed by another CA");
    assert_certificate_refused(&err);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_name_is_verified() {
    // The certificate names 127.0.0.1 and localhost, not 127.0.0.2, where
    // the server listens too.
    let options = ServerOptions::new()
        .arg("--bind")
        .arg("127.0.0.1")
        .arg("127.0.0.2");
    let Some(nodes) = tls_nodes_with("the_host_name_is_verified", 1, options) else {
        return;
    };
    let url = nodes[0].url().replace("127.0.0.1", "127.0.0.2");
    let locks = tls_builder()
        .node(&url)
        .tls_root_certificate(ca_pem())
        .retry(Retry::none())
        .build()
        .expect("config");
    let err = no_hang("lock", locks.try_lock("tls:h", TTL))
        .await
        .expect_err("wrong name");
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    let text = err.to_string().to_lowercase();
    assert!(text.contains("certificate"), "{text}");

    // localhost is named: the same server is accepted under that name.
    let by_name = tls_builder()
        .node(nodes[0].url().replace("127.0.0.1", "localhost"))
        .tls_root_certificate(ca_pem())
        .build()
        .expect("config");
    let guard = no_hang("lock", by_name.try_lock("tls:h", TTL))
        .await
        .expect("lock by name");
    guard.release().await.expect("release");
}

#[test]
fn verification_cannot_be_turned_off_by_the_url() {
    for url in [
        "rediss://127.0.0.1:6380/#insecure",
        "rediss://:hunter2@127.0.0.1:6380/#insecure",
    ] {
        match Redlock::new([url]) {
            Err(Error::InvalidConfig(ConfigError::InsecureTls { url: shown })) => {
                assert!(!shown.contains("hunter2"), "{shown}");
            }
            other => panic!("{url}: expected InsecureTls, got {other:?}"),
        }
    }
    // Also for cluster seeds.
    let err = tls_builder()
        .cluster(["rediss://127.0.0.1:7000/#insecure"])
        .build()
        .expect_err("insecure seed");
    assert!(
        matches!(err, Error::InvalidConfig(ConfigError::InsecureTls { .. })),
        "{err}"
    );
}

#[test]
fn unusable_root_certificates_are_config_errors() {
    let build = |pem: &str, url: &str| tls_builder().node(url).tls_root_certificate(pem).build();
    for pem in [
        "",
        "not a certificate",
        "-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----\n",
    ] {
        match build(pem, "rediss://127.0.0.1:6380") {
            Err(Error::InvalidConfig(ConfigError::TlsRootCertificate { .. })) => {}
            other => panic!("{pem:?}: expected TlsRootCertificate, got {other:?}"),
        }
    }
    // A CA without any TLS node means the traffic would be plain text.
    assert!(matches!(
        build(ca_pem(), "redis://127.0.0.1:6379"),
        Err(Error::InvalidConfig(ConfigError::TlsWithoutTlsNode))
    ));
    assert!(build(ca_pem(), "rediss://127.0.0.1:6380").is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_is_one_node() {
    let cluster = match RedisCluster::start_with(3, 0, ServerOptions::new().tls()) {
        Ok(cluster) => cluster,
        Err(e @ TestkitError::TlsUnsupported { .. }) => {
            skip_no_tls("a_tls_cluster_is_one_node", &e);
            return;
        }
        Err(e) => panic!("TLS cluster: {e}"),
    };
    let locks = tls_builder()
        .cluster(cluster.seed_urls())
        .tls_root_certificate(ca_pem())
        .retry(Retry::none())
        .build()
        .expect("config");
    // Keys spread over all three masters: every one is reached over TLS.
    for resource in ["{a}:1", "{b}:1", "{c}:1", "{d}:1"] {
        let guard = no_hang("lock", locks.lock_fenced(resource, TTL))
            .await
            .expect("lock");
        guard.extend(TTL).await.expect("extend");
        assert_eq!(support::release_settled(guard).await, 1);
    }

    let untrusting = tls_builder()
        .cluster(cluster.seed_urls())
        .retry(Retry::none())
        .build()
        .expect("config");
    let err = no_hang("lock", untrusting.try_lock("{a}:1", TTL))
        .await
        .expect_err("CA not trusted");
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
}
