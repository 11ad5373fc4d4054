//! Getting a hold: what an acquiring call does around its attempts — the
//! retry loop's delays ([`Retry`](retry::Retry)), waiting for a release by
//! pub/sub instead of polling (`wakeup`), the node check a manager runs on
//! its first use ([`FirstUse`]), and what a primitive keeps per manager
//! ([`Singletons`]).

pub(crate) mod call;
pub(crate) mod retry;
pub(crate) mod wakeup;

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::check::StartupCheck;

/// What primitives keep per manager, one value of each type, made on
/// first use: a fair lock's waiters told their turn (`fair::turns`). The
/// manager holds it without knowing the types, so that a primitive's
/// state is its own folder's, not a field of the manager.
#[derive(Debug, Default)]
pub(crate) struct Singletons {
    values: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl Singletons {
    /// The manager's one `T`, made with `make` on first use. (`None`
    /// cannot happen: what is kept under `T`'s id is a `T`.)
    pub(crate) fn get_or<T: Any + Send + Sync>(&self, make: impl FnOnce() -> T) -> Option<Arc<T>> {
        // The map stays consistent even if a holder of the lock panicked.
        let mut values = self.values.lock().unwrap_or_else(|e| e.into_inner());
        let value: Arc<dyn Any + Send + Sync> = values
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(make()))
            .clone();
        value.downcast::<T>().ok()
    }
}

/// A manager's startup check, and whether it has started.
#[derive(Debug, Default)]
pub(crate) struct FirstUse {
    pub(crate) check: StartupCheck,
    pub(crate) started: std::sync::atomic::AtomicBool,
}

impl FirstUse {
    /// Whether the startup check is to start now: true once, on the first
    /// call, unless the check is skipped.
    pub(crate) fn begin(&self) -> bool {
        self.check != StartupCheck::Skip
            && !self
                .started
                .swap(true, std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_value_is_made_once_per_type() {
        let kept = Singletons::default();
        let first = kept.get_or(|| 1u32).expect("a u32");
        let again = kept.get_or(|| 2u32).expect("a u32");
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(*again, 1);
        assert_eq!(*kept.get_or(|| "other").expect("a &str"), "other");
    }
}
