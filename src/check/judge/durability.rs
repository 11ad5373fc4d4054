//! Durability: what can make a node forget a lock it granted. Eviction,
//! a restart without durable persistence (and one too recent), and
//! replicas a failover may promote.

use super::facts::Info;
use crate::check::{Aspect, CheckOptions, Finding, Severity};
use std::collections::HashMap;
use std::time::Duration;

/// Replicas behind the voter, which a failover may promote.
pub(super) fn replicas(info: Info<'_>) -> Option<Finding> {
    let replicas = info.number("connected_slaves").filter(|n| *n > 0)?;
    Some(Finding::new(
        Severity::Degraded,
        Aspect::Replicas,
        format!("{replicas} replica(s) attached"),
        "a failover can promote a replica that never received a lock key, and the node forgets the lock: run without automatic failover, or turn on replica sync (RedlockBuilder::replica_sync, standalone nodes)",
    ))
}

/// Eviction: an evicted lock key lets a second client in.
pub(super) fn eviction(info: Info<'_>) -> Option<Finding> {
    let maxmemory = info.number("maxmemory").unwrap_or(0);
    let policy = info.get("maxmemory_policy").unwrap_or("noeviction");
    Some(match (maxmemory > 0, policy == "noeviction") {
        (true, true) => Finding::new(
            Severity::Note,
            Aspect::Eviction,
            format!("maxmemory {maxmemory} bytes with noeviction"),
            "when memory is full, lock writes fail (the node refuses to vote) but no lock is lost",
        ),
        (true, false) => Finding::new(
            Severity::Unsafe,
            Aspect::Eviction,
            format!("maxmemory {maxmemory} bytes with maxmemory-policy {policy}"),
            "use maxmemory-policy noeviction (or no maxmemory): an evicted lock key lets a second client in",
        ),
        (false, false) => Finding::new(
            Severity::Note,
            Aspect::Eviction,
            format!("maxmemory-policy {policy} (no maxmemory set)"),
            "nothing is evicted today; setting maxmemory would evict lock keys: prefer noeviction",
        ),
        (false, true) => return None,
    })
}

/// Persistence: what a restart keeps of the locks and fence counters, and
/// whether a node that may have restarted empty has been up for longer
/// than the longest ttl.
pub(super) fn persistence(
    info: Info<'_>,
    config: &Result<HashMap<String, String>, String>,
    options: &CheckOptions,
) -> Vec<Finding> {
    let aof = info.get("aof_enabled") == Some("1");
    let fsync = config
        .as_ref()
        .ok()
        .and_then(|c| c.get("appendfsync").cloned());
    let durable = aof && fsync.as_deref() == Some("always");
    let mut out: Vec<Finding> = (!durable)
        .then(|| not_durable(aof, fsync.as_deref(), config, options.fenced))
        .into_iter()
        .collect();
    if let (Some(longest), Some(uptime), false) = (
        options.longest_ttl,
        info.number("uptime_in_seconds"),
        durable,
    ) {
        let uptime = Duration::from_secs(uptime);
        if uptime < longest {
            out.push(Finding::new(
                Severity::Unsafe,
                Aspect::Persistence,
                format!(
                    "up for {uptime:?}, less than the longest ttl {longest:?}, without durable persistence"
                ),
                "if it restarted empty, locks it granted before may be granted again until it has been up for the longest ttl: delay restarts by the longest ttl",
            ));
        }
    }
    out
}

/// A server without durable persistence (`appendonly yes` with
/// `appendfsync always`): what a restart or a crash loses.
fn not_durable(
    aof: bool,
    fsync: Option<&str>,
    config: &Result<HashMap<String, String>, String>,
    fenced: bool,
) -> Finding {
    if !aof {
        return if fenced {
            Finding::new(
                Severity::Unsafe,
                Aspect::Persistence,
                "appendonly no".to_owned(),
                "set appendonly yes and appendfsync always: a restart loses the fence counters, and fences repeat",
            )
        } else {
            Finding::new(
                Severity::Note,
                Aspect::Persistence,
                "appendonly no".to_owned(),
                "after a crash, keep the node down for longer than the longest ttl before it rejoins (or persist with appendfsync always)",
            )
        };
    }
    let seen = match (fsync, config) {
        (Some(fsync), _) => format!("appendonly yes, appendfsync {fsync}"),
        (None, Err(e)) => format!("appendonly yes, appendfsync unknown ({e})"),
        (None, Ok(_)) => "appendonly yes, appendfsync unknown".to_owned(),
    };
    Finding::new(
        if fenced {
            Severity::Degraded
        } else {
            Severity::Note
        },
        Aspect::Persistence,
        seen,
        if fsync == Some("everysec") {
            // aof.c: under everysec, a write is postponed (for up to 2 s)
            // while a background fsync is still running, and the replies go
            // out before it.
            "on a busy disk Redis replies before it writes the AOF (for up to 2 s), so even a killed process can lose acknowledged lock writes, and a machine crash the last second or more: use appendfsync always"
        } else {
            "a machine crash can lose the writes not yet synced (locks, fence counters): use appendfsync always"
        },
    )
}

#[cfg(test)]
mod tests {
    use crate::check::judge::testing::{findings, healthy, options, with};
    use crate::check::{Aspect, Severity};
    use std::time::Duration;

    #[test]
    fn attached_replicas_are_a_risk() {
        let found = findings(with(healthy("1"), "connected_slaves", "2"), &options());
        assert_eq!(found, [(Severity::Degraded, Aspect::Replicas)]);
    }

    #[test]
    fn eviction_policies() {
        let limited = with(healthy("1"), "maxmemory", "1048576");
        for policy in [
            "allkeys-lru",
            "volatile-ttl",
            "allkeys-random",
            "volatile-lru",
        ] {
            let found = findings(
                with(limited.clone(), "maxmemory_policy", policy),
                &options(),
            );
            assert_eq!(found, [(Severity::Unsafe, Aspect::Eviction)], "{policy}");
        }
        assert_eq!(
            findings(limited, &options()),
            [(Severity::Note, Aspect::Eviction)]
        );
        assert_eq!(
            findings(
                with(healthy("1"), "maxmemory_policy", "allkeys-lru"),
                &options()
            ),
            [(Severity::Note, Aspect::Eviction)]
        );
    }

    #[test]
    fn persistence_depends_on_fencing_and_uptime() {
        let no_aof = with(healthy("1"), "aof_enabled", "0");
        assert_eq!(
            findings(no_aof.clone(), &options()),
            [(Severity::Note, Aspect::Persistence)]
        );
        assert_eq!(
            findings(no_aof.clone(), &options().fenced_locks()),
            [(Severity::Unsafe, Aspect::Persistence)]
        );
        let mut everysec = healthy("1");
        everysec.config = Ok([("appendfsync".to_owned(), "everysec".to_owned())].into());
        assert_eq!(
            findings(everysec.clone(), &options().fenced_locks()),
            [(Severity::Degraded, Aspect::Persistence)]
        );
        // Up for less than the longest ttl without durable persistence.
        let young = with(no_aof, "uptime_in_seconds", "5");
        let long = options().longest_ttl(Duration::from_secs(60));
        assert_eq!(
            findings(young.clone(), &long),
            [
                (Severity::Unsafe, Aspect::Persistence),
                (Severity::Note, Aspect::Persistence)
            ]
        );
        // Durable: the uptime does not matter.
        assert_eq!(
            findings(with(healthy("1"), "uptime_in_seconds", "5"), &long),
            []
        );
    }

    #[test]
    fn a_refused_config_get_is_a_note_and_leaves_fsync_unknown() {
        let mut s = healthy("1");
        s.config = Err("NOPERM".into());
        let found = findings(s, &options());
        assert!(found.contains(&(Severity::Note, Aspect::Persistence)));
        assert!(found.contains(&(Severity::Note, Aspect::Capability)));
    }
}
