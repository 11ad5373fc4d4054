//! Public types are `Send + Sync` and returned futures are `Send` (and
//! `'static` where documented), so they work with `tokio::spawn`.

use std::time::Duration;

use quorumlock::{Error, LockGuard, Redlock, RedlockBuilder, ReleaseSummary, Retry, Token};

fn send_sync<T: Send + Sync>() {}
fn send_static<T: Send + 'static>(_: &T) {}
fn send<T: Send>(_: &T) {}

#[test]
fn types_are_send_and_sync() {
    send_sync::<Redlock>();
    send_sync::<RedlockBuilder>();
    send_sync::<LockGuard>();
    send_sync::<ReleaseSummary>();
    send_sync::<Retry>();
    send_sync::<Token>();
    send_sync::<Error>();
    send_sync::<quorumlock::testkit::RedisCluster>();
    send_sync::<quorumlock::ScriptMode>();
    send_sync::<quorumlock::check::Report>();
    send_sync::<quorumlock::check::CheckOptions>();
    #[cfg(feature = "tls")]
    send_sync::<quorumlock::testkit::TestCa>();
}

#[tokio::test]
async fn futures_can_be_spawned() {
    let locks = Redlock::new(["redis://127.0.0.1:1"]).expect("valid");
    let resource = String::from("r");
    // The futures do not borrow the manager or the resource name.
    let lock = locks.lock(&resource, Duration::from_secs(1));
    let try_lock = locks.try_lock(&resource, Duration::from_secs(1));
    drop(resource);
    send_static(&lock);
    send_static(&try_lock);
    drop((lock, try_lock));
    // tokio::spawn compiles with them directly.
    let _ = tokio::spawn(locks.try_lock("r", Duration::ZERO)).await;
    // The node check runs in the background too.
    let checker = locks.clone();
    let report = tokio::spawn(async move { checker.check().await })
        .await
        .expect("check");
    assert_eq!(report.nodes.len(), 1);

    fn guard_futures(guard: &LockGuard) {
        send(&guard.extend(Duration::from_secs(1)));
        send_static(&guard.lost());
    }
    fn release_future(guard: LockGuard) {
        send_static(&guard.release());
    }
    let _ = (guard_futures, release_future);
}
