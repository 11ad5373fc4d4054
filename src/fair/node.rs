//! A fair lock on one node: its scripts (`enter.lua`, `try.lua`,
//! `release.lua`, `leave.lua` beside this file), what a node answers a
//! waiter, and the fair lock's [`Shape`] — a lock key holding the token,
//! extended as a plain lock's, released with the turn handed on.

use std::sync::{Arc, LazyLock};

use redis::{Cmd, Value};

use crate::contract::{Extension, Release, Shape, TokenAt};
use crate::error::NodeError;
use crate::keys::Layout;
use crate::lock::node::{EXTEND, LockShape};
use crate::node::{Deadline, Node, unexpected};
use crate::quorum::{Answer, Vote};
use crate::request::Ttl;
use crate::scripts::{Lua, Replicas};

/// A call's first attempt: the lock if nobody is queued, and a ticket.
pub(crate) static ENTER: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "quorumlock_fair_enter",
        include_str!("enter.lua"),
        Replicas::Wait,
    )
});

/// A queued waiter's attempt: its place in line, and the lock if first.
pub(crate) static TRY: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "quorumlock_fair_try",
        include_str!("try.lua"),
        Replicas::Wait,
    )
});

/// Token-checked release, telling the next waiter its turn came.
pub(crate) static RELEASE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "quorumlock_fair_release",
        include_str!("release.lua"),
        Replicas::DontWait,
    )
});

/// A waiter leaving the line.
pub(crate) static LEAVE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(
        "quorumlock_fair_leave",
        include_str!("leave.lua"),
        Replicas::DontWait,
    )
});

/// A fair lock's keys on a node, beside its lock key: the line, the
/// waiters' leases, the ticket counter, and the turn channel.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Line {
    pub(crate) key: Arc<str>,
    pub(crate) queue: Arc<str>,
    pub(crate) leases: Arc<str>,
    pub(crate) ticket: Arc<str>,
    pub(crate) turn: Arc<str>,
}

impl Line {
    /// The line of the lock whose key is `key`.
    pub(crate) fn of(key: &Arc<str>) -> Self {
        let layout = Layout::new(key.to_string());
        Self {
            key: key.clone(),
            queue: layout.queue().into(),
            leases: layout.queue_leases().into(),
            ticket: layout.queue_ticket().into(),
            turn: layout.turn().into(),
        }
    }

    /// Every key its scripts touch, in their order (`KEYS`).
    pub(crate) fn keys(&self) -> [&str; 4] {
        [&self.key, &self.queue, &self.leases, &self.ticket]
    }
}

/// A node's answer to a call's first attempt (`enter.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entered {
    /// The lock key now holds the attempt's token.
    pub(crate) granted: bool,
    /// The ticket drawn here.
    pub(crate) ticket: u64,
}

impl Answer for Entered {
    fn vote(&self) -> Vote {
        if self.granted { Vote::Yes } else { Vote::No }
    }
}

/// A node's answer to a queued waiter's attempt (`try.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tried {
    /// First in line, and the lock key now holds the attempt's token.
    Granted,
    /// Another waiter is first; its lease ends in this many ms unless it
    /// renews it.
    Behind { first_lease_ms: u64 },
    /// First in line, but the lock is held; it expires in this many ms
    /// (`None`: no expiry known).
    First { held_ms: Option<u64> },
}

impl Answer for Tried {
    fn vote(&self) -> Vote {
        match self {
            Tried::Granted => Vote::Yes,
            Tried::Behind { .. } | Tried::First { .. } => Vote::No,
        }
    }
}

/// The first attempt of a call on `node` (see `enter.lua`).
///
/// `waiter`, the id of a call that waits, places it in line where the node
/// refuses it; a call that does not wait (`try_fair_lock`) gives none.
pub(crate) async fn enter(
    node: &Node,
    line: &Line,
    token: &str,
    (ttl, lease): (Ttl, Ttl),
    waiter: Option<&str>,
    deadline: Deadline,
) -> Result<Entered, NodeError> {
    let (ttl, lease) = (ttl.ms().to_string(), lease.ms().to_string());
    let mut args = vec![token, ttl.as_str(), lease.as_str()];
    args.extend(waiter);
    let reply = node
        .script(&ENTER, &line.keys(), &args, &[token], deadline)
        .await?;
    match ints(&reply)?.as_slice() {
        [granted, ticket] => Ok(Entered {
            granted: *granted == 1,
            ticket: u64::try_from(*ticket).map_err(|_| unexpected(&reply))?,
        }),
        _ => Err(unexpected(&reply)),
    }
}

/// What a waiter asks of a node in one attempt (see `try.lua`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Attempt<'a> {
    pub(crate) id: &'a str,
    pub(crate) ticket: u64,
    pub(crate) token: &'a str,
    pub(crate) ttl: Ttl,
    pub(crate) lease: Ttl,
}

/// A queued waiter's attempt on `node` (see `try.lua`).
pub(crate) async fn try_turn(
    node: &Node,
    line: &Line,
    attempt: Attempt<'_>,
    deadline: Deadline,
) -> Result<Tried, NodeError> {
    let ticket = attempt.ticket.to_string();
    let (ttl, lease) = (attempt.ttl.ms().to_string(), attempt.lease.ms().to_string());
    let args = [attempt.id, &ticket, attempt.token, &ttl, &lease];
    let reply = node
        .script(&TRY, &line.keys(), &args, &[attempt.token], deadline)
        .await?;
    let ms = |n: i64| u64::try_from(n).ok();
    match ints(&reply)?.as_slice() {
        [1] => Ok(Tried::Granted),
        [0, lease] => Ok(Tried::Behind {
            first_lease_ms: ms(*lease).unwrap_or(0),
        }),
        // -2: the key went meanwhile; -1: it has no expiry.
        [2, -2] => Ok(Tried::First { held_ms: Some(0) }),
        [2, held] => Ok(Tried::First { held_ms: ms(*held) }),
        _ => Err(unexpected(&reply)),
    }
}

/// Waiter `id` leaves the line on `node` (see `leave.lua`); with `turn`,
/// the next waiter is told when the leaver was first and the lock is
/// free. True if it was in line there.
pub(crate) async fn leave(
    node: &Node,
    line: &Line,
    id: &str,
    turn: bool,
    deadline: Deadline,
) -> Result<bool, NodeError> {
    let keys = [&*line.key, &*line.queue, &*line.leases];
    let args: &[&str] = if turn { &[id, &line.turn] } else { &[id] };
    let reply = node.script(&LEAVE, &keys, args, &[], deadline).await?;
    match reply {
        Value::Int(n) => Ok(n == 1),
        other => Err(unexpected(&other)),
    }
}

/// A script's reply as integers.
fn ints(reply: &Value) -> Result<Vec<i64>, NodeError> {
    let Value::Array(items) = reply else {
        return Err(unexpected(reply));
    };
    items
        .iter()
        .map(|item| match item {
            Value::Int(n) => Ok(*n),
            other => Err(unexpected(other)),
        })
        .collect()
}

/// A fair lock: its lock key holds the token and extends as a plain
/// lock's (`extend.lua`); its release hands the turn on.
impl Shape for Line {
    /// Its lock key holds the token.
    fn token_at(&self) -> Option<TokenAt> {
        Some(TokenAt::Value)
    }

    /// The lock's `extend.lua`.
    fn extend_script(&self) -> &'static Lua {
        &EXTEND
    }

    /// The lock key.
    fn extend_keys<'a>(&'a self, lock: &Extension<'a>, keys: &mut Vec<&'a str>) {
        keys.extend(lock.keys.iter().map(|k| &**k));
    }

    /// As a plain lock's: token, ttl, one key, no fence.
    fn extend_args(&self, lock: &Extension<'_>, cmd: &mut Cmd) {
        LockShape.extend_args(lock, cmd);
    }

    /// `release.lua` of this folder.
    fn release_script(&self) -> &'static Lua {
        &RELEASE
    }

    /// The lock key, the line and the leases; the token, and with an
    /// announced release the turn channel.
    fn release_call(&self, release: &Release<'_>, cmd: &mut Cmd) {
        cmd.arg(3)
            .arg(&*self.key)
            .arg(&*self.queue)
            .arg(&*self.leases)
            .arg(release.token);
        if release.announce.is_some() {
            cmd.arg(&*self.turn);
        }
    }

    /// 1: released.
    fn released(&self, _release: &Release<'_>, reply: &Value) -> Result<bool, NodeError> {
        match reply {
            Value::Int(n) => Ok(*n == 1),
            other => Err(unexpected(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lines_keys_are_named_beside_its_lock_key() {
        let line = Line::of(&Arc::from("{jobs}:7"));
        assert_eq!(
            line.keys(),
            [
                "{jobs}:7",
                "{jobs}:7:queue",
                "{jobs}:7:queue:leases",
                "{jobs}:7:queue:ticket"
            ]
        );
        assert_eq!(&*line.turn, "{jobs}:7:turn");
    }

    #[test]
    fn only_a_grant_votes_yes() {
        assert_eq!(Tried::Granted.vote(), Vote::Yes);
        assert_eq!(Tried::Behind { first_lease_ms: 3 }.vote(), Vote::No);
        assert_eq!(Tried::First { held_ms: None }.vote(), Vote::No);
        let entered = |granted| Entered { granted, ticket: 1 };
        assert_eq!(entered(true).vote(), Vote::Yes);
        assert_eq!(entered(false).vote(), Vote::No);
    }
}
