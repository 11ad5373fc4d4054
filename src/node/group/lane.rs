//! One node's lane: its queue of requests waiting for the call in flight,
//! and when it batches ([`Pacing`]).

use std::sync::Arc;

use tokio::time::Instant;

use super::request::{Item, Op, Prepared, Single, Step};
use crate::contract::ShapeRef;
use crate::node::replies::{Answer, Reply, Slots};
use crate::node::{Deadline, Node};
use crate::token::Token;

/// When a node's lane batches (see [`Lane`]): how many lone requests it
/// may have in flight while its load is light, before requests start to
/// queue and batch; and the batch size below which the load is light
/// again, and lone requests may go out side by side once more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Pacing {
    pub(super) pipelined: usize,
    pub(super) small_batch: usize,
    /// How many batches may be in flight at once.
    pub(super) batches: usize,
}

impl Pacing {
    /// A node whose batches are `batch.lua` calls: a script of a few
    /// entries costs the node and the client more than the same requests
    /// sent alone, so lone requests go side by side until many are in
    /// flight, and a batch must be large to be worth its call.
    const SCRIPTED: Self = Self {
        pipelined: 24,
        small_batch: 8,
        batches: 1,
    };

    /// A node whose batches are pipelines of native commands: a pipeline
    /// costs the node less per command at every depth (on Valkey 9.1, 1.3
    /// µs per `SET NX PX` and 0.8 µs per `DELIFEQ` pipelined 16 deep
    /// against about 7 µs each sent one per round trip, `redis-benchmark`,
    /// 16 to 64 clients), so the lane batches from a lower load and keeps
    /// batching down to batches of two. Measured (five Valkey 9.1.2 nodes,
    /// interleaved rounds, the medians against rslock's in the same
    /// rounds): 16 tasks 1.20x rslock's cycles/s with the scripted pacing,
    /// 1.40x with this one, at 0.78x the nodes' CPU per cycle; 4 and 8
    /// tasks alike within the machine's noise; batching from the first
    /// request in flight instead lost 7-16 % at 2 and 4 tasks.
    const NATIVE: Self = Self {
        pipelined: 8,
        small_batch: 2,
        batches: 1,
    };

    /// A node without native commands whose batches are pipelines of the
    /// holdings' own commands and scripts (see `scripted.rs`): as cheap
    /// per command at every depth as a native pipeline, so paced as one.
    /// Measured (Redis 7.0, five nodes, against rslock in the same run,
    /// on a loaded 2-core machine): 16 tasks 1.03x rslock's cycles/s with
    /// `batch.lua` and the scripted pacing, 1.38x with this one; 64 tasks
    /// 1.61x, 1.71x.
    const PIPELINED: Self = Self::NATIVE;

    /// A manager of one node whose batches are pipelines (native or not):
    /// lone requests side by side up to 32 in flight, then two batches in
    /// flight. With one node the client and the node take turns, each
    /// idle while the other works, once its requests batch one call at a
    /// time (with several nodes, the client works on the other nodes'
    /// replies meanwhile); requests sent side by side keep both busy,
    /// pipelined on the connection as they come. Measured against rslock
    /// in the same runs (one node, 2-core machine, two runs each):
    ///
    /// | server | pacing | 16 tasks | 64 tasks | 256 tasks |
    /// | --- | --- | ---: | ---: | ---: |
    /// | Redis 7.0 | batching from 8 in flight, two batches | 0.69x, 0.71x | 0.97x, 0.96x | 1.17x, 1.16x |
    /// | Redis 7.0 | this | 1.02x, 1.02x | 1.02x, 1.02x | 1.17x, 1.18x |
    /// | Redis 8.0 | batching from 8 in flight, two batches | 0.75x | 0.96x | 1.17x |
    /// | Redis 8.0 | this | 0.96x | 1.02x | 1.67x |
    /// | Valkey 9.1 | native pacing (from 8, one batch) | 0.84x, 0.85x | 1.23x, 1.28x | 1.71x, 1.73x |
    /// | Valkey 9.1 | this | 1.36x, 1.34x | 1.43x, 1.44x | 1.79x, 1.90x |
    ///
    /// 1, 2, 4 and 8 tasks were alike within the noise. Never batching lost
    /// at 256 tasks (1.05x on Redis 7.0); four batches in flight instead of
    /// two gained nothing measurable; and on five nodes, batching from 32
    /// in flight lost at 16 tasks (1.10x against 1.20x), so only a manager
    /// of one node paces this way.
    const ALONE: Self = Self {
        pipelined: 32,
        batches: 2,
        ..Self::NATIVE
    };

    /// The pacing for `target`, one of `nodes`, as its commands are known
    /// now.
    pub(super) fn of(target: &Node, nodes: usize) -> Self {
        match target.capabilities() {
            Some(caps) if caps.extend() && caps.delete().is_some() && nodes == 1 => Self::ALONE,
            Some(caps) if caps.extend() && caps.delete().is_some() => Self::NATIVE,
            caps if target.pipelines_scripts(caps).is_some() && nodes == 1 => Self::ALONE,
            caps if target.pipelines_scripts(caps).is_some() => Self::PIPELINED,
            _ => Self::SCRIPTED,
        }
    }
}

/// The most requests one call carries; the rest wait for the next one.
/// (A script blocks its node while it runs: about a microsecond an entry.)
pub(super) const MOST: usize = 1024;

/// What a queued request asks: a lock's request, or a primitive's own
/// script call.
pub(super) enum Queued {
    Single {
        op: Op,
        key: Arc<str>,
        token: Token,
        shape: ShapeRef,
    },
    Script(Prepared),
}

/// A request waiting for its node's call in flight to answer.
pub(super) struct Waiting {
    pub(super) queued: Queued,
    /// When it must have answered, and how long its caller gave it (for
    /// its timeout error).
    pub(super) deadline: Deadline,
    pub(super) reply: Answer,
}

impl Waiting {
    pub(super) fn item(&self) -> Item<'_> {
        match &self.queued {
            Queued::Single {
                op,
                key,
                token,
                shape,
            } => Item::Single(Single {
                op: op.borrow(),
                key,
                token: token.as_str(),
                shape,
            }),
            Queued::Script(call) => Item::Script(call),
        }
    }

    /// Whether it is a release (of a lock, or a primitive's own).
    pub(super) fn is_release(&self) -> bool {
        match &self.queued {
            Queued::Single { op, .. } => matches!(op, Op::Release { .. }),
            Queued::Script(call) => call.step == Step::Release,
        }
    }

    /// Whether it still goes out: within its deadline, a release always
    /// (whoever gave up on it still wants the key gone), an acquire or an
    /// extension only while its caller waits. Past its deadline nothing
    /// goes: the node is far behind (a release is shed, and owed to the
    /// node), and its caller has stopped waiting for the answer.
    pub(super) fn wanted(&self, now: Instant) -> bool {
        self.deadline.at() > now && (self.is_release() || !self.reply.is_abandoned())
    }
}

/// One node's queue.
///
/// Under light load, lone requests go out side by side, pipelined on the
/// node's connection, as many as its [`Pacing`] allows: while one call is
/// in flight the client and the node would take turns, each idle while
/// the other works. Once that many are in flight the node is `batching`:
/// a lone request goes out only when nothing else is in flight, and
/// everything else queues and goes out one batch at a time — fewer,
/// larger calls, which is what saves CPU on both sides under heavy load.
/// A small batch ends it.
pub(super) struct Lane {
    /// Calls of this node in flight: lone requests, and the batch.
    pub(super) in_flight: usize,
    /// Heavy load: one call in flight at a time.
    pub(super) batching: bool,
    /// When it batches, as last found from its node's commands.
    pub(super) pacing: Pacing,
    /// Tasks sending what queues, each one batch at a time: at most
    /// [`Pacing::batches`].
    pub(super) flushers: usize,
    /// That task took a batch it has not yet handed to the connection:
    /// until it has, a lone request must queue behind it.
    pub(super) dispatching: bool,
    pub(super) waiting: Vec<Waiting>,
    /// The last batch's emptied vector, for the queue after the next
    /// batch: a queue that starts from nothing grows by reallocation, and
    /// under heavy load every batch would pay that again.
    pub(super) spare: Vec<Waiting>,
    /// Where the requests queued since the last batch was taken get their
    /// answers (the last of their blocks).
    pub(super) slots: Arc<Slots>,
    /// How many requests queued since the last batch was taken.
    pub(super) queued: usize,
}

impl Default for Lane {
    fn default() -> Self {
        Self {
            in_flight: 0,
            batching: false,
            pacing: Pacing::SCRIPTED,
            flushers: 0,
            dispatching: false,
            waiting: Vec::new(),
            spare: Vec::new(),
            slots: Slots::with_capacity(0),
            queued: 0,
        }
    }
}

/// The fewest slots a lane's block of answer slots has.
const FIRST_SLOTS: usize = 8;

impl Lane {
    /// A queued request's two ends, in the lane's block of slots, or in a
    /// new one twice its size when it is full.
    pub(super) fn open(&mut self) -> (Answer, Reply) {
        self.queued += 1;
        loop {
            if let Some(ends) = self.slots.open() {
                return ends;
            }
            self.slots = Slots::with_capacity((2 * self.slots.capacity()).max(FIRST_SLOTS));
        }
    }

    /// The next batch (at most [`MOST`] requests, oldest first), marked
    /// as being dispatched; a small one ends the heavy load if `ends`.
    pub(super) fn take(&mut self, ends: bool) -> Vec<Waiting> {
        self.dispatching = true;
        // The next requests' answers go to slots of their own, sized for
        // as many as queued this time.
        self.slots = Slots::with_capacity(self.queued.max(FIRST_SLOTS));
        self.queued = 0;
        if ends && self.waiting.len() < self.pacing.small_batch {
            self.batching = false;
        }
        let rest = if self.waiting.len() > MOST {
            self.waiting.split_off(MOST)
        } else {
            std::mem::take(&mut self.spare)
        };
        std::mem::replace(&mut self.waiting, rest)
    }
}
