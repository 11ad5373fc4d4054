//! The clients of a run: single-attempt and fair lockers, and the holders
//! of auto-extended locks.

use super::*;

pub(super) struct Shared {
    pub(super) recorder: Recorder,
    pub(super) counters: Vec<AtomicU64>,
    pub(super) stop: AtomicBool,
    /// Stops the watchers (stalls, starved nodes): only once every client
    /// and holder has ended, since a holder keeps its lock up to `HOLD`
    /// after `stop` and a stall then may cost it its lock.
    pub(super) watching_stop: AtomicBool,
}

/// A client making single attempts on its resource (`try_lock`, or
/// `try_lock_fenced` on a fenced one), each recorded as its own call.
pub(super) async fn client(id: usize, resource: usize, locks: Redlock, shared: Arc<Shared>) {
    let name = RESOURCES[resource];
    let fenced = name.contains("fenced");
    while !shared.stop.load(Ordering::Relaxed) {
        // One attempt per recorded operation, so that its invocation time
        // is the start the library measures the deadline from.
        let attempt = shared.recorder.try_lock(id, name);
        let result = if fenced {
            locks.try_lock_fenced(name, TTL).await
        } else {
            locks.try_lock(name, TTL).await
        };
        let guard = match result {
            Ok(guard) => guard,
            Err(error) => {
                attempt.failed(&error);
                // Randomized backoff, as lock() would do.
                tokio::time::sleep(backoff()).await;
                continue;
            }
        };
        let section = attempt.granted(&guard.lease(), TTL);
        update(&shared, resource, guard, section).await;
    }
}

/// A fair client: each `fair_lock` call on its resource is one recorded
/// call, from when it began to wait until it was granted (or gave up) —
/// what the starvation check reads. Between calls it pauses a few ms at
/// random, so that it sometimes finds the line empty (and takes the lock
/// in its first round) and sometimes arrives while others draw tickets.
pub(super) async fn fair_client(id: usize, resource: usize, locks: Redlock, shared: Arc<Shared>) {
    let name = RESOURCES[resource];
    while !shared.stop.load(Ordering::Relaxed) {
        let attempt = shared.recorder.lock(id, name);
        let guard = match locks.fair_lock(name, TTL).await {
            Ok(guard) => guard,
            Err(error) => {
                attempt.failed(&error);
                tokio::time::sleep(backoff()).await;
                continue;
            }
        };
        let section = attempt.granted(&guard.lease(), TTL);
        update(&shared, resource, guard, section).await;
        let think = Duration::from_micros(rand::random::<u64>() % 4000);
        tokio::time::sleep(think).await;
    }
}

/// 2 to 10 ms at random: a client's pause after a failed call.
pub(super) fn backoff() -> Duration {
    Duration::from_micros(2000 + rand::random::<u64>() % 8000)
}

/// The protected update of `resource`'s counter under `guard` (read,
/// pause, write — lost if two sections overlap), then the release, with
/// the window closed first and how the release went recorded.
pub(super) async fn update(
    shared: &Shared,
    resource: usize,
    guard: LockGuard,
    mut section: Section,
) {
    let counter = &shared.counters[resource];
    let value = counter.load(Ordering::SeqCst);
    tokio::time::sleep(SECTION).await;
    if !guard.validity().is_zero() {
        counter.store(value + 1, Ordering::SeqCst);
        section.wrote();
    }
    let _ = section.release(guard).await;
}

/// Holds the shared resource for `HOLD` at a time with auto-extension,
/// through whatever faults come, and records the window it trusted it for
/// and any loss.
pub(super) async fn holder(id: usize, locks: Redlock, shared: Arc<Shared>) {
    let name = RESOURCES[HELD];
    while !shared.stop.load(Ordering::Relaxed) {
        // Not a single attempt: `lock` retries up to HOLD, unlike the
        // single attempts whose failures must come quickly.
        let attempt = shared.recorder.lock(id, name);
        // Contending as users do, with `lock`'s randomized retry delays (a
        // contender that tries again every few ms keeps the nodes the
        // holder lost a key on occupied, so that no extension can put it
        // back there). Its deadline is measured from the attempt that
        // succeeded, within this call.
        let guard = match locks.lock(name, HOLD_TTL).await {
            Ok(guard) => guard,
            Err(error) => {
                attempt.failed(&error);
                continue;
            }
        };
        // The grant's start and deadline, before any extension.
        let mut section = attempt.granted(&guard.lease(), HOLD_TTL);
        section.auto_extended();
        guard.auto_extend();
        tokio::select! {
            reason = guard.lost() => section.lost(reason),
            () = tokio::time::sleep(HOLD) => {}
        }
        // The protected update, at the end of the hold.
        update(&shared, HELD, guard, section).await;
    }
}
