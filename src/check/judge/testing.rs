//! Fixtures shared by the tests of every rule family: the settings, a
//! healthy master as `INFO` shows it, a node around one server, and the
//! findings one server gets.

use super::{ClockSample, NodeFacts, ServerFacts, Settings, judge};
use crate::check::{Aspect, CheckOptions, Severity};
use std::time::Duration;

pub(super) fn options() -> CheckOptions {
    CheckOptions::default()
}

pub(super) fn settings(options: &CheckOptions) -> Settings<'_> {
    Settings {
        drift_factor: 0.01,
        node_timeout: Duration::from_millis(250),
        options,
        library: "#!lua name=quorumlock\n",
        quorum: 1,
    }
}

/// A healthy master as INFO shows it.
pub(super) fn healthy(run_id: &str) -> ServerFacts {
    let info = [
        ("redis_version", "7.0.15"),
        ("run_id", run_id),
        ("master_replid", run_id),
        ("uptime_in_seconds", "100000"),
        ("role", "master"),
        ("connected_slaves", "0"),
        ("maxmemory", "0"),
        ("maxmemory_policy", "noeviction"),
        ("aof_enabled", "1"),
    ];
    ServerFacts {
        address: "h:1".into(),
        info: Ok(info
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()),
        config: Ok([("appendfsync".to_owned(), "always".to_owned())].into()),
        clock: Ok(ClockSample {
            node_elapsed: Duration::from_millis(1000),
            client_min: Duration::from_millis(999),
            client_max: Duration::from_millis(1001),
            offset_ms: 3,
        }),
        rtts: vec![Duration::from_millis(1); 10],
        library: None,
    }
}

pub(super) fn node(name: &str, server: ServerFacts) -> NodeFacts {
    NodeFacts {
        node: name.into(),
        servers: vec![(server.address.clone(), Ok(server))],
        slots: None,
        refused: Ok(Vec::new()),
        path: Some("release DELIFEQ, extend SET IFEQ".into()),
        not_asked_for: None,
        tracking: None,
    }
}

pub(super) fn findings(server: ServerFacts, options: &CheckOptions) -> Vec<(Severity, Aspect)> {
    judge(&[node("n", server)], settings(options)).nodes[0]
        .findings
        .iter()
        .map(|f| (f.severity, f.aspect))
        .collect()
}

pub(super) fn with(mut s: ServerFacts, k: &str, v: &str) -> ServerFacts {
    if let Ok(info) = &mut s.info {
        info.insert(k.into(), v.into());
    }
    s
}
