//! The `notice` part (issue 53): how soon a held lock hears that another
//! owner took it, with the nodes watching held keys (`CLIENT TRACKING`,
//! the default) and without; and what watching costs the nodes while
//! locks are held and renewed.
//!
//! - **Lost after a take.** One auto-extended lock (ttl 30 s) at a time on
//!   three nodes; its key is taken on two of them (`DEL` and another
//!   token's `SET` in one transaction per node: an operator's delete and
//!   another owner's grant with no gap for the holder's restore). The
//!   sample is the time from the second node's reply to the holder's
//!   `lost()`. Without watching, the loss waits for the next renewal: a
//!   few locks at once, each sampled the same way.
//! - **Renewals' server cost.** The part's held locks, auto-extended, for
//!   a window each with watching off and on, in turns, twice: the nodes'
//!   CPU per held lock and second, and the same over a window with no
//!   locks held (the nodes' own idle work).

use super::{BoxError, CommandStat, Plan, ServerCpu, command_stats, micros, progress};

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use futures::future::join_all;
use quorumlock::{HeldKeyTracking, LossReason, Redlock};
use serde_json::json;

/// The ttl of the locks whose loss is timed: the case.
const NOTICE_TTL: Duration = Duration::from_secs(30);
/// Longer than any renewal of a `NOTICE_TTL` lock is scheduled.
const NOTICE_WAIT: Duration = Duration::from_secs(40);

/// The commands a renewal round sends: its script (or `batch.lua`), or the
/// native extension.
const RENEWALS: &[&str] = &["evalsha", "eval", "fcall", "pexpire", "set"];

/// Lost-after-take samples and renewal windows.
#[derive(Debug)]
pub(super) struct NoticePart {
    /// Milliseconds from the take to `lost()`, watching, sorted.
    watched_ms: Vec<f64>,
    /// The same without watching (full runs only).
    unwatched_ms: Vec<f64>,
    /// Losses whose reason was not the token gone (each is a bug).
    wrong_reason: usize,
    /// Per window: tracking on or off, and what the nodes did.
    windows: Vec<Window>,
    /// The nodes' CPU with no locks held, µs per second.
    idle_us_per_s: f64,
    locks: usize,
    ttl: Duration,
    /// Held locks lost during the windows (each is a bug).
    lost: usize,
}

#[derive(Debug)]
struct Window {
    tracking: bool,
    seconds: f64,
    server: Duration,
    commands: HashMap<String, CommandStat>,
}

impl Window {
    fn server_us_per_s(&self) -> f64 {
        micros(self.server) / self.seconds
    }

    /// Calls per second and the nodes' µs in them per second, of the
    /// commands `names`.
    fn per_s(&self, names: &[&str]) -> (f64, f64) {
        let (calls, usec) = names
            .iter()
            .filter_map(|n| self.commands.get(*n))
            .fold((0, 0), |(c, u), s| (c + s.calls, u + s.usec));
        (calls as f64 / self.seconds, usec as f64 / self.seconds)
    }
}

pub(super) async fn notice_part(urls: &[String], plan: Plan) -> Result<NoticePart, BoxError> {
    let urls = &urls[..3];
    let runs = if plan.quick { 20 } else { 100 };
    progress(&format!(
        "notice: {runs} held locks taken on a majority, one at a time, nodes watching"
    ));
    let (watched_ms, mut wrong_reason) =
        lost_after_take(urls, HeldKeyTracking::WhereAvailable, runs, 1).await?;
    let unwatched_ms = if plan.quick {
        Vec::new()
    } else {
        progress("notice: 10 held locks taken on a majority at once, nodes not watching");
        let (ms, wrong) = lost_after_take(urls, HeldKeyTracking::Off, 10, 10).await?;
        wrong_reason += wrong;
        ms
    };

    let window = if plan.quick {
        Duration::from_secs(2)
    } else {
        Duration::from_secs(10)
    };
    let cpu = ServerCpu::new(urls).await?;
    let before = cpu.used().await;
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let idle_us_per_s =
        micros(cpu.used().await.saturating_sub(before)) / started.elapsed().as_secs_f64();
    let mut windows = Vec::new();
    let mut lost = 0;
    for _round in 0..2 {
        for tracking in [HeldKeyTracking::Off, HeldKeyTracking::WhereAvailable] {
            let (w, l) = renewal_window(urls, plan, tracking, window, &cpu).await?;
            progress(&format!(
                "notice: {} locks held, watching {}: nodes {:.0} µs CPU per s",
                plan.held_locks,
                if w.tracking { "on" } else { "off" },
                w.server_us_per_s()
            ));
            windows.push(w);
            lost += l;
        }
    }
    Ok(NoticePart {
        watched_ms,
        unwatched_ms,
        wrong_reason,
        windows,
        idle_us_per_s,
        locks: plan.held_locks,
        ttl: plan.held_ttl,
        lost,
    })
}

/// `runs` locks, `together` at a time: each taken on nodes 0 and 1, and
/// the time from the take to its holder's `lost()`, in ms, sorted; and how
/// many were lost for another reason than the token gone.
async fn lost_after_take(
    urls: &[String],
    tracking: HeldKeyTracking,
    runs: usize,
    together: usize,
) -> Result<(Vec<f64>, usize), BoxError> {
    let locks = Redlock::builder()
        .nodes(urls)
        .held_key_tracking(tracking)
        .build()?;
    let mut takers = Vec::new();
    for url in &urls[..2] {
        takers.push(
            redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection()
                .await?,
        );
    }
    let (mut samples, mut wrong) = (Vec::with_capacity(runs), 0);
    for first in (0..runs).step_by(together) {
        let names: Vec<String> = (first..(first + together).min(runs))
            .map(|i| format!("bench:notice:{i}"))
            .collect();
        let mut watchers = Vec::new();
        for name in &names {
            let guard = locks.lock(name, NOTICE_TTL).await?;
            guard.auto_extend();
            let lost = guard.lost();
            // The guard stays alive beside its watcher: dropping it would
            // release the lock.
            watchers.push((
                guard,
                tokio::spawn(async move {
                    let reason = tokio::time::timeout(NOTICE_WAIT, lost).await.ok();
                    (reason, Instant::now())
                }),
            ));
        }
        join_all(takers.iter().map(|conn| {
            let mut conn = conn.clone();
            let names = names.clone();
            async move {
                let mut take = redis::pipe();
                take.atomic();
                for name in &names {
                    take.del(name).ignore().set(name, "another-owner").ignore();
                }
                take.query_async::<()>(&mut conn).await
            }
        }))
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
        let at = Instant::now();
        for (guard, watcher) in watchers {
            let (reason, when) = watcher.await?;
            match reason {
                None => {
                    return Err(format!(
                        "a taken lock's lost() did not resolve in {NOTICE_WAIT:?}"
                    )
                    .into());
                }
                Some(LossReason::TokenGone) => {}
                Some(_) => wrong += 1,
            }
            samples.push(when.saturating_duration_since(at).as_secs_f64() * 1e3);
            drop(guard);
        }
        for conn in &takers {
            let mut conn = conn.clone();
            let mut clean = redis::cmd("DEL");
            for name in &names {
                clean.arg(name);
            }
            clean.query_async::<()>(&mut conn).await?;
        }
    }
    locks.settle().await;
    samples.sort_by(f64::total_cmp);
    Ok((samples, wrong))
}

/// `plan.held_locks` auto-extended locks held for `window` after a warm-up
/// of one ttl (their first renewals and reads are in): the nodes' CPU and
/// commands over the window, and how many locks were lost.
async fn renewal_window(
    urls: &[String],
    plan: Plan,
    tracking: HeldKeyTracking,
    window: Duration,
    cpu: &ServerCpu,
) -> Result<(Window, usize), BoxError> {
    let locks = Redlock::builder()
        .nodes(urls)
        .held_key_tracking(tracking)
        .build()?;
    let mut guards = Vec::with_capacity(plan.held_locks);
    for chunk in (0..plan.held_locks).collect::<Vec<_>>().chunks(64) {
        let taken = join_all(chunk.iter().map(|i| {
            let name = format!("bench:notice:held:{i}");
            let locks = &locks;
            async move { locks.lock(&name, plan.held_ttl).await }
        }))
        .await;
        for guard in taken {
            let guard = guard?;
            guard.auto_extend();
            guards.push(guard);
        }
    }
    tokio::time::sleep(plan.held_ttl).await;
    let before = command_stats(urls).await?;
    let server_before = cpu.used().await;
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let server = cpu.used().await.saturating_sub(server_before);
    let seconds = started.elapsed().as_secs_f64();
    let mut commands = command_stats(urls).await?;
    for (name, stat) in &mut commands {
        let was = before.get(name).copied().unwrap_or_default();
        stat.calls = stat.calls.saturating_sub(was.calls);
        stat.usec = stat.usec.saturating_sub(was.usec);
    }
    let lost = guards.iter().filter(|g| g.loss_reason().is_some()).count();
    join_all(guards.into_iter().map(|g| g.release())).await;
    locks.settle().await;
    Ok((
        Window {
            tracking: tracking != HeldKeyTracking::Off,
            seconds,
            server,
            commands,
        },
        lost,
    ))
}

fn percentile_ms(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 * p / 100.0) as usize).min(sorted.len() - 1)]
}

impl NoticePart {
    /// The nodes' CPU per second with watching on or off, summed over the
    /// windows, less the idle nodes' own.
    fn renewals_us_per_s(&self, tracking: bool) -> f64 {
        let (us, s) = self
            .windows
            .iter()
            .filter(|w| w.tracking == tracking)
            .fold((0.0, 0.0), |(us, s), w| {
                (us + micros(w.server), s + w.seconds)
            });
        us / s - self.idle_us_per_s
    }

    /// Calls per second and the nodes' µs in them per second, of the
    /// commands `names`, over the windows watching or not.
    fn per_s(&self, tracking: bool, names: &[&str]) -> (f64, f64) {
        let of: Vec<(f64, f64)> = self
            .windows
            .iter()
            .filter(|w| w.tracking == tracking)
            .map(|w| w.per_s(names))
            .collect();
        let n = of.len().max(1) as f64;
        let (calls, usec) = of
            .iter()
            .fold((0.0, 0.0), |(c, u), (dc, du)| (c + dc, u + du));
        (calls / n, usec / n)
    }

    fn cost_ratio(&self) -> f64 {
        self.renewals_us_per_s(true) / self.renewals_us_per_s(false)
    }

    pub(super) fn targets(&self) -> Vec<(String, bool)> {
        let p99 = percentile_ms(&self.watched_ms, 99.0);
        let ratio = self.cost_ratio();
        vec![
            (
                format!(
                    "a held lock taken on a majority: lost() p99 <= 50 ms after the take, watching ({p99:.1} ms over {} runs)",
                    self.watched_ms.len()
                ),
                p99 <= 50.0 && self.wrong_reason == 0,
            ),
            (
                format!(
                    "held locks' renewals: the nodes' CPU watching <= 1.2x not watching ({ratio:.2}x)"
                ),
                ratio <= 1.2 && self.lost == 0,
            ),
        ]
    }

    pub(super) fn table(&self, out: &mut String) {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "A held lock (ttl {NOTICE_TTL:?}) taken on 2 of 3 nodes: take → lost(), ms:"
        );
        let _ = writeln!(out);
        let _ = writeln!(out, "| watching | runs | p50 | p99 | max | other reasons |");
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
        for (name, ms) in [("on", &self.watched_ms), ("off", &self.unwatched_ms)] {
            if ms.is_empty() {
                continue;
            }
            let _ = writeln!(
                out,
                "| {name} | {} | {:.1} | {:.1} | {:.1} | {} |",
                ms.len(),
                percentile_ms(ms, 50.0),
                percentile_ms(ms, 99.0),
                percentile_ms(ms, 100.0),
                self.wrong_reason
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{} auto-extended locks (ttl {:?}) on 3 nodes, watching off and on in turns: nodes' CPU µs/s less idle ({:.0}), commands/s over 3 nodes; {} lost",
            self.locks, self.ttl, self.idle_us_per_s, self.lost
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "| watching | nodes' CPU µs/s | renewal calls/s | µs/s in them | MGET/s | µs/s in them |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|");
        for tracking in [false, true] {
            let (renewals, renewals_us) = self.per_s(tracking, RENEWALS);
            let (reads, reads_us) = self.per_s(tracking, &["mget"]);
            let _ = writeln!(
                out,
                "| {} | {:.0} | {renewals:.0} | {renewals_us:.0} | {reads:.0} | {reads_us:.0} |",
                if tracking { "on" } else { "off" },
                self.renewals_us_per_s(tracking),
            );
        }
        let _ = writeln!(out, "watching / not watching: {:.2}x", self.cost_ratio());
        let _ = writeln!(out, "Targets (issue 53):");
        for (target, met) in self.targets() {
            let _ = writeln!(out, "- [{}] {target}", if met { "x" } else { " " });
        }
    }

    pub(super) fn json(&self) -> serde_json::Value {
        let lost = |ms: &[f64]| {
            json!({
                "runs": ms.len(),
                "p50": percentile_ms(ms, 50.0),
                "p99": percentile_ms(ms, 99.0),
                "max": percentile_ms(ms, 100.0),
                "samples": ms,
            })
        };
        let renewals = |tracking: bool| {
            let (calls, calls_us) = self.per_s(tracking, RENEWALS);
            let (reads, reads_us) = self.per_s(tracking, &["mget"]);
            json!({
                "server_us_per_s": self.renewals_us_per_s(tracking),
                "renewal_calls_per_s": calls,
                "renewal_calls_us_per_s": calls_us,
                "mget_per_s": reads,
                "mget_us_per_s": reads_us,
            })
        };
        json!({
            "notice_ttl_ms": NOTICE_TTL.as_millis() as u64,
            "lost_after_take_ms": {
                "watching": lost(&self.watched_ms),
                "not_watching": if self.unwatched_ms.is_empty() { serde_json::Value::Null } else { lost(&self.unwatched_ms) },
            },
            "other_reasons": self.wrong_reason,
            "renewals": {
                "locks": self.locks,
                "ttl_ms": self.ttl.as_millis() as u64,
                "idle_server_us_per_s": self.idle_us_per_s,
                "watching": renewals(true),
                "not_watching": renewals(false),
                "ratio": self.cost_ratio(),
                "lost": self.lost,
            },
        })
    }
}
