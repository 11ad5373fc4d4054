//! Every bad input gets its own typed error, before any I/O.

use std::time::Duration;

use quorumlock::{ArgumentError, ConfigError, Error, Redlock, Retry};

/// Nothing listens on port 1: none of these calls may reach the network.
const NOWHERE: &str = "redis://127.0.0.1:1";

fn config_error(result: Result<Redlock, Error>) -> ConfigError {
    match result {
        Err(Error::InvalidConfig(e)) => e,
        other => panic!("expected a config error, got {other:?}"),
    }
}

async fn argument_error(locks: &Redlock, resource: &str, ttl: Duration) -> ArgumentError {
    let from_try = match locks.try_lock(resource, ttl).await {
        Err(Error::InvalidArgument(e)) => e,
        other => panic!("try_lock: expected an argument error, got {other:?}"),
    };
    let from_lock = match locks.lock(resource, ttl).await {
        Err(Error::InvalidArgument(e)) => e,
        other => panic!("lock: expected an argument error, got {other:?}"),
    };
    assert_eq!(from_try, from_lock);
    from_try
}

#[test]
fn bad_configurations() {
    let one = || Redlock::builder().node(NOWHERE);
    assert_eq!(
        config_error(Redlock::builder().build()),
        ConfigError::NoNodes
    );
    assert_eq!(
        config_error(Redlock::new(Vec::<&str>::new())),
        ConfigError::NoNodes
    );
    for url in [
        "",
        "127.0.0.1:6379",
        "http://127.0.0.1:1",
        "redis://127.0.0.1:notaport",
    ] {
        assert!(
            matches!(
                config_error(Redlock::new([url])),
                ConfigError::MalformedUrl { .. }
            ),
            "{url:?}"
        );
    }
    assert!(matches!(
        config_error(Redlock::new([NOWHERE, "redis://127.0.0.1:2", NOWHERE])),
        ConfigError::DuplicateNode { .. }
    ));
    assert_eq!(
        config_error(one().node_timeout(Duration::ZERO).build()),
        ConfigError::ZeroNodeTimeout
    );
    for factor in [-0.01, f64::NAN, f64::NEG_INFINITY, f64::INFINITY, 1.0, 5.0] {
        assert!(
            matches!(
                config_error(one().drift_factor(factor).build()),
                ConfigError::DriftFactor(_)
            ),
            "{factor}"
        );
    }
    assert_eq!(
        config_error(one().retry(Retry::default().attempts(0)).build()),
        ConfigError::ZeroAttempts
    );
    // Edges that are fine.
    assert!(one().drift_factor(0.0).build().is_ok());
    assert!(one().retry(Retry::forever()).build().is_ok());
}

#[tokio::test]
async fn bad_arguments() {
    let locks =
        Redlock::new([NOWHERE, "redis://127.0.0.1:2", "redis://127.0.0.1:3"]).expect("valid");
    let ttl = Duration::from_secs(1);
    assert_eq!(
        argument_error(&locks, "", ttl).await,
        ArgumentError::EmptyResource
    );
    assert_eq!(
        argument_error(&locks, "r", Duration::ZERO).await,
        ArgumentError::ZeroTtl
    );
    assert_eq!(
        argument_error(&locks, "r", Duration::from_micros(999)).await,
        ArgumentError::ZeroTtl
    );
    assert!(matches!(
        argument_error(&locks, "r", Duration::from_millis(2)).await,
        ArgumentError::TtlNotAboveDrift { .. }
    ));
    assert!(matches!(
        argument_error(&locks, "r", Redlock::MAX_TTL + Duration::from_millis(1)).await,
        ArgumentError::TtlTooLong { .. }
    ));
    assert!(matches!(
        argument_error(&locks, "r", Duration::MAX).await,
        ArgumentError::TtlTooLong { .. }
    ));
}

#[test]
fn errors_are_lowercase_without_trailing_punctuation() {
    let errors: Vec<Error> = vec![
        ConfigError::NoNodes.into(),
        ConfigError::DriftFactor(f64::NAN).into(),
        ArgumentError::EmptyResource.into(),
        ArgumentError::ZeroTtl.into(),
    ];
    for e in errors {
        let text = e.to_string();
        assert!(text.starts_with(|c: char| c.is_lowercase()), "{text}");
        assert!(!text.ends_with('.'), "{text}");
    }
}

#[test]
fn a_server_that_refuses_to_start_says_why() {
    // An option no server knows: the server's own reason (on stderr, before
    // any log line) comes with the failure, not a bare "exited".
    let err = quorumlock::testkit::RedisServer::start_with(
        quorumlock::testkit::ServerOptions::new()
            .arg("--no-such-option-anywhere")
            .arg("x"),
    )
    .expect_err("an unknown option");
    let quorumlock::testkit::TestkitError::StartFailed { reason, log, .. } = &err else {
        panic!("expected StartFailed, got {err}");
    };
    assert!(reason.starts_with("exited: "), "{reason}");
    assert!(reason.contains("no-such-option-anywhere"), "{reason}");
    assert!(log.contains("no-such-option-anywhere"), "{log}");
}
