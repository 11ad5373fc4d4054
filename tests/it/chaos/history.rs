//! What a run writes and watches: its history file and report, the stalls
//! of the client process, and the nodes' answers.

use super::*;

/// Names a directory every chaos run writes its history to, one file per
/// seed (`chaos-<seed>.jsonl`).
pub(super) const HISTORY_ENV: &str = "QUORUMLOCK_CHAOS_HISTORY";
/// Names a history file for `chaos_replay` to check again.
pub(super) const REPLAY_ENV: &str = "QUORUMLOCK_CHAOS_REPLAY";

/// Writes `history` as `chaos-<seed>.jsonl` in `dir`, and returns its path.
pub(super) fn write_history(dir: &Path, seed: u64, history: &History) -> Result<PathBuf, String> {
    let path = dir.join(format!("chaos-{seed}.jsonl"));
    let file = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    history
        .write_jsonl(std::io::BufWriter::new(file))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// Writes the report of `history` as `chaos-<seed>.html` in `dir`, and
/// returns its path.
pub(super) fn write_report(
    dir: &Path,
    seed: u64,
    history: &History,
    verdict: &HistoryCheck,
) -> Result<PathBuf, String> {
    let path = dir.join(format!("chaos-{seed}.html"));
    Page::new(history, verdict)
        .title(format!("chaos run, seed {seed}"))
        .replay(format!(
            "QUORUMLOCK_CHAOS_SEED={seed} cargo test --all-features --test it chaos_ci_profile -- --nocapture"
        ))
        .write(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// The command that checks a saved history again, without servers.
pub(super) fn replay_command(path: &Path) -> String {
    format!(
        "{REPLAY_ENV}={} cargo test --all-features --test it chaos_replay -- --ignored --nocapture",
        path.display()
    )
}

/// Records every tick of a 10 ms interval that ran `STALL` or more late:
/// the runtime (and so the renewer) could not run meanwhile.
pub(super) async fn watch_stalls(shared: Arc<Shared>) {
    let period = Duration::from_millis(10);
    let mut due = Instant::now() + period;
    while !shared.watching_stop.load(Ordering::Relaxed) {
        tokio::time::sleep_until(due).await;
        let ran = Instant::now();
        if ran.saturating_duration_since(due) >= STALL {
            shared.recorder.stall(due, ran);
        }
        due = ran + period;
    }
}

/// Pings every node every 50 ms on direct connections (past the proxies,
/// so no injected fault but a frozen or killed node shows) and records
/// when a majority answered only after the node timeout: a machine so
/// loaded that the servers (or this process's runtime) starve. A killed
/// node's refused ping is not counted as slow, a frozen one's is (only one
/// node is frozen at a time).
pub(super) async fn watch_nodes(urls: Vec<String>, shared: Arc<Shared>) {
    let mut conns: Vec<Option<redis::aio::MultiplexedConnection>> = vec![None; urls.len()];
    let patience = Duration::from_secs(1);
    while !shared.watching_stop.load(Ordering::Relaxed) {
        let sent = Instant::now();
        let slow =
            futures::future::join_all(conns.iter_mut().zip(&urls).map(|(conn, url)| async move {
                if conn.is_none() {
                    let config = redis::AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(patience))
                        .set_response_timeout(Some(patience));
                    let client = redis::Client::open(url.as_str()).expect("url");
                    *conn = client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await
                        .ok();
                }
                let Some(c) = conn.as_mut() else {
                    return false; // down: an outage, not a slow node
                };
                match redis::cmd("PING").query_async::<()>(c).await {
                    Ok(()) => sent.elapsed() > NODE_TIMEOUT,
                    Err(e) if e.is_timeout() => true,
                    Err(_) => {
                        *conn = None;
                        false
                    }
                }
            }))
            .await;
        if slow.iter().filter(|&&slow| slow).count() > NODES / 2 {
            shared.recorder.starved(sent, Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
