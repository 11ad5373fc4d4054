//! The depth of quorumlock's futures, checked by the compiler: a caller's
//! future holds ours, and the compiler works out its layout and its auto
//! traits through every level of both. Each level of ours is one less for
//! the caller before the compiler's query depth (128 by default)
//! overflows (`queries overflow the depth limit!`): a change this round
//! made `examples/bench.rs` fail to compile that way on a fresh build.
//! The fan-out boxes each node's request, and `acquire`, `extend`,
//! `release`, `Election::leader`, `Redlock::inspect` and `Redlock::check`
//! box their inner call, so a caller awaiting every call in one future
//! needs 39 levels (113 before the last five were boxed): that is the
//! figure this crate keeps from growing, with the limit a few levels above
//! it. Nothing runs against a server: making the future and asking its
//! size is the check.
#![recursion_limit = "44"]

use std::time::Duration;

use quorumlock::{Error, Redlock};

/// Every kind of call, awaited in one future, as a caller would.
async fn every_call(locks: Redlock) -> Result<(), Error> {
    let ttl = Duration::from_secs(1);
    let guard = locks.lock("r", ttl).await?;
    guard.extend(ttl).await?;
    guard.release().await?.settled().await;
    let fenced = locks.lock_fenced("f", ttl).await?;
    fenced.release().await?;
    let many = locks.lock_many(&["{m}a", "{m}b"], ttl).await?;
    many.release().await?;
    locks.with_lock("w", ttl, async |_lease| ()).await?;
    let permit = locks.semaphore("s", 2).acquire(ttl).await?;
    permit.release().await?;
    let read = locks.rwlock("rw").read(ttl).await?;
    read.release().await?;
    let write = locks.rwlock("rw").write(ttl).await?;
    write.release().await?;
    let leadership = locks.election("e").campaign("v", ttl).await?;
    let _ = locks.election("e").leader().await?;
    leadership.resign().await?;
    let _ = locks.inspect("r").await?.settled().await;
    let _ = locks.check().await;
    locks.settle().await;
    Ok(())
}

fn sent<T: Send>(future: T) -> T {
    future
}

#[test]
fn a_callers_future_over_every_call_needs_no_more_depth_than_today() {
    let locks = Redlock::new(["redis://127.0.0.1:1"]).expect("config");
    let future = sent(every_call(locks));
    assert!(std::mem::size_of_val(&future) > 0);
}
