//! Following stragglers — requests still in flight after their fan-out
//! decided — with one task per node (per tokio runtime) that polls all of
//! that node's stragglers under one timer, instead of a task and a timer
//! per call that left some behind.
//!
//! A node's follower is spawned on the runtime of the first call that
//! hands it a straggler, and lives while its manager does. A call on
//! another runtime gets a follower of its own there: a request is only
//! ever polled on the runtime that sent it, so a runtime that shuts down
//! takes only its own stragglers with it (their keys expire by ttl, as
//! any background work lost with its runtime). Every straggler is counted
//! by the manager's [`Background`] until it is done, so
//! [`Redlock::settle`](crate::Redlock::settle) waits for it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::runtime::{Handle, Id};
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};

use crate::round::calls::Due;
use crate::round::tasks::{Background, Counted};

/// A request still in flight, and what its answer is for.
pub(crate) trait Straggle: Send {
    /// Polls the request; once it has answered, hands the answer on and is
    /// ready.
    fn poll_answer(&mut self, cx: &mut Context<'_>) -> Poll<()>;

    /// The request ran out of time (`given` in all): hands on a timeout,
    /// as its fan-out's timer would have.
    fn time_out(&mut self, given: Duration);
}

/// Each node's follower, spawned when first needed.
pub(crate) struct Followers {
    links: Box<[Mutex<Option<Link>>]>,
    background: Arc<Background>,
}

/// A running follower: its runtime, and the way to hand it stragglers.
struct Link {
    runtime: Id,
    stragglers: mpsc::UnboundedSender<Entry>,
}

impl fmt::Debug for Followers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Followers")
            .field("nodes", &self.links.len())
            .finish_non_exhaustive()
    }
}

impl Followers {
    /// Followers for `nodes` nodes, none running yet; their stragglers are
    /// counted by `background`.
    pub(crate) fn new(nodes: usize, background: Arc<Background>) -> Self {
        Self {
            links: (0..nodes).map(|_| Mutex::new(None)).collect(),
            background,
        }
    }

    /// Hands `work`, a request to node `node`, to that node's follower on
    /// the current runtime, to time out at `due` (`None`: it ends on its
    /// own). Without a runtime (or with no such node), nothing can follow
    /// it: it is dropped, and returns `false`.
    pub(crate) fn follow(&self, node: usize, work: Box<dyn Straggle>, due: Option<Due>) -> bool {
        let (Ok(runtime), Some(link)) = (Handle::try_current(), self.links.get(node)) else {
            return false;
        };
        let entry = Entry {
            work,
            due,
            expired: false,
            waker: None,
            _counted: self.background.count(),
        };
        let mut link = link.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = match link.as_ref().filter(|l| l.runtime == runtime.id()) {
            Some(running) => match running.stragglers.send(entry) {
                Ok(()) => return true,
                // Its runtime shut down, and the follower with it.
                Err(mpsc::error::SendError(entry)) => entry,
            },
            None => entry,
        };
        let (stragglers, received) = mpsc::unbounded_channel();
        if stragglers.send(entry).is_err() {
            return false;
        }
        runtime.spawn(run(received));
        // A follower on another runtime ends once it has followed what it
        // has: its sender is dropped here.
        *link = Some(Link {
            runtime: runtime.id(),
            stragglers,
        });
        true
    }
}

/// One straggler in its follower.
struct Entry {
    work: Box<dyn Straggle>,
    due: Option<Due>,
    /// Its time is up: the next poll times it out.
    expired: bool,
    /// The follower's waker for it, to poll it once it expires.
    waker: Option<Waker>,
    _counted: Counted,
}

impl Future for Entry {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.expired {
            if let Some(due) = this.due {
                this.work.time_out(due.given);
            }
            return Poll::Ready(());
        }
        if !this.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            this.waker = Some(cx.waker().clone());
        }
        this.work.poll_answer(cx)
    }
}

impl Entry {
    /// Marks it expired if its time is up at `now`, and has it polled;
    /// otherwise returns when it is due.
    fn expire_by(&mut self, now: Instant) -> Option<Instant> {
        let at = self.due?.at;
        if at > now {
            return Some(at);
        }
        if !self.expired {
            self.expired = true;
            if let Some(waker) = &self.waker {
                waker.wake_by_ref();
            }
        }
        None
    }
}

/// A node's follower: polls every straggler it is handed until each has
/// answered or timed out, with one timer at the earliest deadline; ends
/// once its sender is gone (the manager dropped, or a follower on the
/// current runtime replaced it) and it has followed everything.
///
/// It runs outside tokio's cooperative budget (`unconstrained`): it stands
/// for many tasks at once, and under load more stragglers can arrive
/// between two of its polls than one task's budget (128 operations) lets
/// it take. Within the budget, each poll spent it taking new stragglers and
/// never got to its timer: nothing timed out, a frozen node's requests
/// never counted against it (so it was never left unasked), and they piled
/// up. The work of a poll is bounded all the same: what arrived, the
/// stragglers woken (`FuturesUnordered` yields after one pass), and what
/// is due.
async fn run(received: mpsc::UnboundedReceiver<Entry>) {
    tokio::task::unconstrained(follow_all(received)).await;
}

async fn follow_all(mut received: mpsc::UnboundedReceiver<Entry>) {
    let mut entries: FuturesUnordered<Entry> = FuturesUnordered::new();
    let mut timer: Pin<Box<Sleep>> = Box::pin(tokio::time::sleep(Duration::ZERO));
    let mut next: Option<Instant> = None;
    let mut open = true;
    std::future::poll_fn(|cx| {
        while open {
            match received.poll_recv(cx) {
                Poll::Ready(Some(entry)) => {
                    if let Some(due) = entry.due
                        && next.is_none_or(|next| due.at < next)
                    {
                        next = Some(due.at);
                        timer.as_mut().reset(due.at);
                    }
                    entries.push(entry);
                }
                Poll::Ready(None) => open = false,
                Poll::Pending => break,
            }
        }
        // Past the earliest deadline: time out what is due, and set the
        // timer for the next. Expired entries are woken: they end below.
        while next.is_some() && timer.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            next = entries.iter_mut().filter_map(|e| e.expire_by(now)).min();
            if let Some(at) = next {
                timer.as_mut().reset(at);
            }
        }
        while let Poll::Ready(Some(())) = entries.poll_next_unpin(cx) {}
        if !open && entries.is_empty() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    /// A straggler answering when `answer` fires, noting what it heard.
    struct Fake {
        answer: oneshot::Receiver<()>,
        heard: Arc<Mutex<Vec<&'static str>>>,
    }

    impl Straggle for Fake {
        fn poll_answer(&mut self, cx: &mut Context<'_>) -> Poll<()> {
            let answer = Pin::new(&mut self.answer).poll(cx);
            answer.map(|_| self.heard.lock().expect("lock").push("answered"))
        }

        fn time_out(&mut self, _given: Duration) {
            self.heard.lock().expect("lock").push("timed out");
        }
    }

    fn fake(heard: &Arc<Mutex<Vec<&'static str>>>) -> (oneshot::Sender<()>, Box<dyn Straggle>) {
        let (tx, answer) = oneshot::channel();
        let heard = heard.clone();
        (tx, Box::new(Fake { answer, heard }))
    }

    fn due_in(ms: u64) -> Option<Due> {
        Some(Due {
            at: Instant::now() + Duration::from_millis(ms),
            given: Duration::from_millis(ms),
        })
    }

    /// Due before the runtime started: its timer fires as soon as it is
    /// set (never a wait on the clock), so only the follower's own polling
    /// decides when it times out.
    fn overdue() -> Option<Due> {
        let at = Instant::now().checked_sub(Duration::from_secs(1))?;
        Some(Due {
            at,
            given: Duration::ZERO,
        })
    }

    fn alive_tasks() -> usize {
        Handle::current().metrics().num_alive_tasks()
    }

    #[tokio::test(start_paused = true)]
    async fn one_task_follows_a_nodes_stragglers_each_to_its_answer_or_its_deadline() {
        let background = Arc::new(Background::default());
        let followers = Followers::new(2, background.clone());
        let heard = Arc::new(Mutex::new(Vec::new()));
        let before = alive_tasks();
        let mut answers = Vec::new();
        for i in 0..100u64 {
            let (tx, work) = fake(&heard);
            assert!(followers.follow(0, work, due_in(100 + i)));
            answers.push(tx);
        }
        assert_eq!(alive_tasks(), before + 1, "one follower, not a task each");
        // The later half answer; the rest time out, each at its own
        // deadline (100 ms to 149 ms).
        for tx in answers.drain(50..) {
            tx.send(()).expect("follower alive");
        }
        tokio::time::sleep(Duration::from_micros(124_500)).await;
        let counts = |heard: &[&str]| {
            let answered = heard.iter().filter(|h| **h == "answered").count();
            (answered, heard.len() - answered)
        };
        assert_eq!(counts(&heard.lock().expect("lock")), (50, 25));
        tokio::time::timeout(Duration::from_secs(1), background.idle())
            .await
            .expect("every straggler ended by its deadline");
        assert_eq!(counts(&heard.lock().expect("lock")), (50, 50));
        drop(answers);
    }

    #[tokio::test(start_paused = true)]
    async fn a_straggler_is_counted_until_it_ends_and_the_follower_ends_with_its_manager() {
        let background = Arc::new(Background::default());
        let followers = Followers::new(1, background.clone());
        let heard = Arc::new(Mutex::new(Vec::new()));
        let (tx, work) = fake(&heard);
        let before = alive_tasks();
        assert!(followers.follow(0, work, None));
        let idle = tokio::spawn({
            let background = background.clone();
            async move { background.idle().await }
        });
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert!(!idle.is_finished(), "no deadline: it waits for the answer");
        drop(followers);
        tx.send(())
            .expect("still followed after the manager is gone");
        idle.await.expect("idle");
        assert_eq!(*heard.lock().expect("lock"), ["answered"]);
        tokio::task::yield_now().await;
        assert_eq!(alive_tasks(), before, "the follower ended");
    }

    #[test]
    fn a_follower_lost_with_its_runtime_is_replaced_on_the_next() {
        let background = Arc::new(Background::default());
        let followers = Followers::new(1, background.clone());
        let heard = Arc::new(Mutex::new(Vec::new()));
        let runtime = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .expect("runtime")
        };
        let (_tx, work) = fake(&heard);
        assert!(!followers.follow(0, work, None), "no runtime: not followed");
        let first = runtime();
        let (lost, work) = fake(&heard);
        first.block_on(async { assert!(followers.follow(0, work, None)) });
        drop(first);
        assert!(lost.is_closed(), "dropped with its runtime");
        let second = runtime();
        second.block_on(async {
            let (tx, work) = fake(&heard);
            assert!(followers.follow(0, work, None));
            tx.send(()).expect("followed on this runtime");
            background.idle().await;
        });
        assert_eq!(*heard.lock().expect("lock"), ["answered"]);
    }

    /// Wakes itself each poll and returns `Pending`, `polls` times: a busy
    /// task, queued behind the others each time (as a coop-budget wake
    /// queues the follower).
    async fn busy<F: FnMut(usize)>(polls: usize, mut each: F) {
        let mut n = 0;
        std::future::poll_fn(|cx| {
            if n == polls {
                return Poll::Ready(());
            }
            each(n);
            n += 1;
            cx.waker().wake_by_ref();
            Poll::Pending
        })
        .await;
    }

    #[tokio::test]
    async fn deadlines_are_kept_while_stragglers_keep_coming() {
        // A busy follower: between two of its polls, 100 tasks hand it 2
        // stragglers each, more than tokio's per-poll budget (128) lets a
        // task take. Its timer must still time out what is due (here, all
        // already), or a frozen node's requests never count against it and
        // pile up in its follower.
        const TASKS: usize = 100;
        const ROUNDS: usize = 50;
        let followers = Arc::new(Followers::new(1, Arc::new(Background::default())));
        let heard = Arc::new(Mutex::new(Vec::new()));
        let answers = Arc::new(Mutex::new(Vec::new()));
        let timed_out_meanwhile = Arc::new(Mutex::new(None));
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let (followers, heard, answers) =
                    (followers.clone(), heard.clone(), answers.clone());
                let timed_out_meanwhile = timed_out_meanwhile.clone();
                tokio::spawn(busy(ROUNDS, move |round| {
                    for _ in 0..2 {
                        let (tx, work) = fake(&heard);
                        assert!(followers.follow(0, work, overdue()));
                        answers.lock().expect("lock").push(tx);
                    }
                    if t == 0 && round == ROUNDS - 1 {
                        let heard = heard.lock().expect("lock").len();
                        *timed_out_meanwhile.lock().expect("lock") = Some(heard);
                    }
                }))
            })
            .collect();
        for task in tasks {
            task.await.expect("task");
        }
        // Within the budget, none did; outside it, all but those handed
        // over since the follower's last poll (a round's, or two).
        let meanwhile = timed_out_meanwhile.lock().expect("lock").unwrap_or(0);
        assert!(
            meanwhile >= TASKS * ROUNDS,
            "{meanwhile} of {} timed out while they kept coming",
            TASKS * 2 * ROUNDS
        );
    }
}
