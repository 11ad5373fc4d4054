//! What a holder owns: the guards handed to callers (`guard`: extend,
//! release, drop), the [`Lease`](lease::Lease) that says until when and
//! where the token is confirmed (`lease`), auto-extension (`renew`), and
//! what a release reports (`summary`).

pub(crate) mod guard;
pub(crate) mod lease;
pub(crate) mod renew;
pub(crate) mod summary;
