//! Background work a manager owes its nodes (cleanup of cancelled
//! attempts, releases of dropped guards, late acquire answers), counted so
//! that `Redlock::settle` can wait for it.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::Instrument;

#[derive(Debug, Default)]
pub(crate) struct Background {
    running: AtomicUsize,
    idle: Notify,
}

/// One unit of counted work (a task, or a straggler in its node's
/// follower): decrements the count when it ends, however it ends.
pub(crate) struct Counted(Arc<Background>);

impl Drop for Counted {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Background {
    /// Spawns `work` on the current tokio runtime, counted until it ends.
    /// Returns `None` when there is no runtime (e.g. in a `Drop` outside
    /// one); the caller then relies on key expiry.
    pub(crate) fn spawn<F>(self: &Arc<Self>, work: F) -> Option<JoinHandle<()>>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let running = self.count();
        Some(
            runtime.spawn(
                async move {
                    let _running = running;
                    work.await;
                }
                .in_current_span(),
            ),
        )
    }

    /// Counts one unit of work until the returned guard is dropped.
    pub(crate) fn count(self: &Arc<Self>) -> Counted {
        self.running.fetch_add(1, Ordering::AcqRel);
        Counted(self.clone())
    }

    /// Resolves once no counted task is running.
    pub(crate) async fn idle(&self) {
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            // Register before checking, so a wake-up in between is not lost.
            idle.as_mut().enable();
            if self.running.load(Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    }
}

/// The group-commit lanes' flushers are counted like any other task.
impl crate::node::Spawn for Arc<Background> {
    fn spawn_boxed(&self, work: std::pin::Pin<Box<dyn Future<Output = ()> + Send>>) -> bool {
        self.spawn(work).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn idle_waits_for_every_task() {
        let background = Arc::new(Background::default());
        background.idle().await; // nothing running: at once
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        background.spawn(async move {
            let _ = rx.await;
        });
        background.spawn(tokio::time::sleep(Duration::from_secs(5)));
        let waiter = tokio::spawn({
            let background = background.clone();
            async move { background.idle().await }
        });
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(!waiter.is_finished(), "one task still waits on rx");
        drop(tx);
        waiter.await.expect("idle");
    }

    #[test]
    fn no_runtime_means_no_spawn() {
        let background = Arc::new(Background::default());
        assert!(background.spawn(async {}).is_none());
        assert_eq!(background.running.load(Ordering::Acquire), 0);
    }
}
