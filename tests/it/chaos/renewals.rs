//! The renewer's log of a run: its debug events, kept to explain a holder's
//! loss.

use super::*;

/// The renewer's debug events ([`RENEWER`] only: a few per renewal
/// round), kept with their time so that an unexplained holder loss can be
/// shown with what its renewals saw. The last `RENEW_LOG` events are kept.
#[derive(Clone, Default)]
pub(super) struct RenewLog(Arc<Mutex<std::collections::VecDeque<(Instant, String)>>>);

const RENEW_LOG: usize = 50_000;

/// The renewer's tracing target: its module's path.
pub(super) const RENEWER: &str = "quorumlock::holding::renew";

/// One event being formatted; logged when dropped.
pub(super) struct RenewLine(RenewLog, Vec<u8>);

impl std::io::Write for RenewLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.1.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for RenewLine {
    fn drop(&mut self) {
        let line = String::from_utf8_lossy(&self.1).trim_end().to_owned();
        let mut log = self.0.0.lock().unwrap_or_else(|e| e.into_inner());
        if log.len() == RENEW_LOG {
            log.pop_front();
        }
        log.push_back((Instant::now(), line));
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for RenewLog {
    type Writer = RenewLine;
    fn make_writer(&'a self) -> RenewLine {
        RenewLine(self.clone(), Vec::new())
    }
}

impl RenewLog {
    /// The process's log, installed once.
    pub(super) fn get() -> &'static RenewLog {
        &Self::installed().0
    }

    /// The log, and whether it is the process's subscriber (another one
    /// may have been installed first: then it hears nothing).
    pub(super) fn installed() -> &'static (RenewLog, bool) {
        static LOG: std::sync::OnceLock<(RenewLog, bool)> = std::sync::OnceLock::new();
        LOG.get_or_init(|| {
            use tracing_subscriber::layer::{Layer, SubscriberExt};
            let log = RenewLog::default();
            let layer = tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .without_time()
                .with_writer(log.clone());
            let filter = tracing_subscriber::filter::Targets::new()
                .with_target(RENEWER, tracing::Level::DEBUG);
            let subscriber = tracing_subscriber::registry().with(layer.with_filter(filter));
            let installed = tracing::subscriber::set_global_default(subscriber).is_ok();
            (log, installed)
        })
    }

    /// How many events it kept.
    pub(super) fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The events between `from` and `to`, with their time since `start`.
    pub(super) fn between(&self, start: Instant, from: Instant, to: Instant) -> Vec<String> {
        let log = self.0.lock().unwrap_or_else(|e| e.into_inner());
        log.iter()
            .filter(|(at, _)| *at >= from && *at <= to)
            .map(|(at, line)| {
                let ms = at.saturating_duration_since(start).as_secs_f64() * 1000.0;
                format!("      {ms:.1}ms {line}")
            })
            .collect()
    }
}
