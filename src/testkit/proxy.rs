//! A fault-injecting TCP proxy in front of a server: latency with jitter
//! (each direction on its own, so replies can be held back past a lock's
//! ttl while requests still land), dropped connections, a blackhole, a
//! partition that delivers what it held when it heals, replies lost after
//! their commands ran, and a node clock that runs fast
//! ([`FaultProxy::set_clock_rate`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

use super::TestkitError;
use super::clock::{Anchor, Framer, Pending};

/// The faults a [`FaultProxy`] applies to the traffic passing through it.
/// The default is none: a transparent proxy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Faults {
    /// Added to every chunk from client to server.
    pub request_delay: Duration,
    /// Added to every chunk from server to client: long enough, it holds
    /// replies back past a lock's ttl while the requests already landed.
    pub reply_delay: Duration,
    /// Up to this much more, uniformly at random, on each chunk.
    pub jitter: Duration,
    /// Nothing flows either way until lifted; connections stay open and
    /// bytes wait in the kernel's buffers, as in a network partition.
    /// What a connection closed meanwhile had sent is delivered (when
    /// lifted) as far as the proxy had read it; [`partition`](Self::partition)
    /// delivers all of it.
    pub blackhole: bool,
    /// Nothing is delivered either way until lifted, but the proxy keeps
    /// reading: every byte sent meanwhile is held, and delivered in order
    /// when the fault is lifted — also on connections the client closed
    /// meanwhile (their close follows their bytes), as TCP retransmits
    /// once a partition heals. Requests sent during the partition run
    /// late, after the lock may have moved on.
    pub hold: bool,
    /// Requests reach the server and run, but each reply the server sends
    /// back is dropped and the client's connection reset (RST): the
    /// command ran, its answer was lost. New connections are accepted and
    /// meet the same fault.
    pub lose_replies: bool,
}

impl Faults {
    /// Delays each chunk: `request` on the way in, `reply` on the way out,
    /// plus up to `jitter` more on each.
    pub fn latency(request: Duration, reply: Duration, jitter: Duration) -> Self {
        Self {
            request_delay: request,
            reply_delay: reply,
            jitter,
            ..Self::default()
        }
    }

    /// Replies wait `delay` while requests pass at once: long enough, and a
    /// SET lands but its answer comes back after the lock's ttl.
    pub fn hold_replies(delay: Duration) -> Self {
        Self::latency(Duration::ZERO, delay, Duration::ZERO)
    }

    /// Nothing flows either way until the faults change.
    pub fn blackhole() -> Self {
        Self {
            blackhole: true,
            ..Self::default()
        }
    }

    /// A partition with delayed delivery: every byte sent either way is
    /// held by the proxy and delivered, in order, when the faults change
    /// (see [`hold`](Self::hold)).
    pub fn partition() -> Self {
        Self {
            hold: true,
            ..Self::default()
        }
    }

    /// The command runs, its reply is lost: requests pass, each reply is
    /// dropped and the client's connection reset (see
    /// [`lose_replies`](Self::lose_replies)).
    pub fn lose_replies() -> Self {
        Self {
            lose_replies: true,
            ..Self::default()
        }
    }
}

/// A TCP proxy on a free loopback port in front of `target`, with faults
/// that can be changed at any time. Spawned on the current tokio runtime;
/// everything stops when the proxy is dropped.
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
/// use quorumlock::testkit::{FaultProxy, Faults, RedisServer};
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let server = RedisServer::start()?;
/// let proxy = FaultProxy::start(server.port()).await?;
/// // Clients connect to proxy.url() instead of server.url().
/// proxy.set(Faults::hold_replies(Duration::from_secs(2)));
/// proxy.drop_connections();
/// proxy.heal();
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct FaultProxy {
    port: u16,
    state: Arc<watch::Sender<State>>,
}

#[derive(Debug, Clone, Default)]
struct State {
    faults: Faults,
    /// The clock fault for connections opened from now on; `None`: off.
    clock: Option<(f64, Arc<Anchor>)>,
    /// Bumped to close every open connection.
    epoch: u64,
    shutdown: bool,
}

impl FaultProxy {
    /// Starts a transparent proxy to `127.0.0.1:<target_port>`.
    ///
    /// # Errors
    ///
    /// [`TestkitError::Io`] if no loopback port can be bound.
    pub async fn start(target_port: u16) -> Result<Self, TestkitError> {
        // Never a port a server of this process had: its clients may be
        // reconnecting to it while it is down (see `super::ports::claim`).
        let (listener, port) = super::ports::unclaimed(
            || std::net::TcpListener::bind("127.0.0.1:0"),
            |l| Ok(l.local_addr()?.port()),
        )?;
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let target = SocketAddr::from(([127, 0, 0, 1], target_port));
        let (state, _) = watch::channel(State::default());
        let state = Arc::new(state);
        tokio::spawn(accept(listener, target, state.subscribe()));
        Ok(Self { port, state })
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Applies `faults` from now on (to open connections too).
    pub fn set(&self, faults: Faults) {
        self.state.send_modify(|s| s.faults = faults);
    }

    /// The faults currently applied.
    pub fn faults(&self) -> Faults {
        self.state.borrow().faults
    }

    /// Closes every open connection at once, as a network failure would;
    /// new connections are accepted as before.
    pub fn drop_connections(&self) {
        self.state.send_modify(|s| s.epoch += 1);
    }

    /// Removes every fault: a transparent proxy again (the clock fault
    /// stays with the connections opened under it; see
    /// [`set_clock_rate`](Self::set_clock_rate)).
    pub fn heal(&self) {
        self.set(Faults::default());
        self.state.send_modify(|s| s.clock = None);
    }

    /// Makes the node look as if its clock ran `rate` times as fast as the
    /// client's (`1.5`: 50 % fast), for connections opened from now on
    /// (call [`drop_connections`](Self::drop_connections) to make clients
    /// reconnect): the expiry a `SET … PX ms` (or a plain acquire batched
    /// with others into one script call) asks for becomes `ms / rate`, and the time `TIME` reports runs `rate` times as fast
    /// from its first reading. `1.0` turns it off.
    ///
    /// What it models: a node that expires plain locks early and whose
    /// clock a client can measure running fast, which is what Redlock's
    /// drift allowance is about. What it does not: expiries set inside
    /// scripts (extend, fenced and multi-resource locks), `EX`, `PXAT` and
    /// `PEXPIRE`, the node's other timers, and a clock that *steps*.
    /// (libfaketime would model more, but fails under Debian's
    /// redis-server at start-up.)
    pub fn set_clock_rate(&self, rate: f64) {
        let clock = (rate.is_finite() && rate > 0.0 && rate != 1.0)
            .then(|| (rate, Arc::new(Anchor::default())));
        self.state.send_modify(|s| s.clock = clock);
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.state.send_modify(|s| s.shutdown = true);
    }
}

async fn accept(listener: TcpListener, target: SocketAddr, mut state: watch::Receiver<State>) {
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                tokio::spawn(serve(client, target, state.clone()));
            }
            changed = state.changed() => {
                if changed.is_err() || state.borrow().shutdown {
                    return;
                }
            }
        }
    }
}

/// Pumps one connection both ways until either side closes, the epoch
/// changes (dropped connections) or the proxy shuts down.
async fn serve(client: TcpStream, target: SocketAddr, state: watch::Receiver<State>) {
    let Ok(server) = TcpStream::connect(target).await else {
        return; // the server is down: the client sees the connection close
    };
    let (epoch, clock) = {
        let s = state.borrow();
        (s.epoch, s.clock.clone())
    };
    let framers = clock.map(|(rate, anchor)| {
        let pending = Arc::new(Pending::default());
        (
            Framer::new(true, rate, pending.clone(), anchor.clone()),
            Framer::new(false, rate, pending, anchor),
        )
    });
    let (request_framer, reply_framer) = match framers {
        Some((request, reply)) => (Some(request), Some(reply)),
        None => (None, None),
    };
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let upstream = pump(
        client_read,
        server_write,
        state.clone(),
        epoch,
        Direction::Request,
        request_framer,
    );
    let downstream = pump(
        server_read,
        client_write,
        state,
        epoch,
        Direction::Reply,
        reply_framer,
    );
    // Either direction ending ends the connection: dropping both halves
    // closes both sockets.
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
    }
}

/// The most chunks (of up to 16 KiB) one direction of a connection holds
/// on their way: enough for any delay at any rate these tests reach.
const BACKLOG: usize = 256;

#[derive(Clone, Copy)]
enum Direction {
    Request,
    Reply,
}

/// What one direction of a connection carries to its writer.
enum Chunk {
    /// Bytes to write once their time to leave has come.
    Bytes(Vec<u8>),
    /// A reply was lost ([`Faults::lose_replies`]): reset the connection.
    Reset,
}

/// Forwards one direction. A reader stamps each chunk with the time it may
/// leave (arrival + delay + jitter) and a writer releases it then, so that
/// delays do not pile up behind one another and a healed proxy catches up.
/// When the sender closes, what was read before is still delivered (after
/// any delay or partition) before the direction ends.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    to: tokio::net::tcp::OwnedWriteHalf,
    state: watch::Receiver<State>,
    epoch: u64,
    direction: Direction,
    mut framer: Option<Framer>,
) {
    // Bounded: a target that stops reading (a paused node) must push back
    // on the sender through TCP, as it would without the proxy, instead of
    // piling what the sender writes up in this process's memory.
    let (chunks, ready) = tokio::sync::mpsc::channel::<(Instant, Chunk)>(BACKLOG);
    let reader = {
        let mut state = state.clone();
        async move {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                // Wait out a blackhole before reading: bytes queue in the kernel.
                if !flowing(&mut state, epoch).await {
                    return;
                }
                let n = tokio::select! {
                    read = from.read(&mut buf) => match read {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    },
                    changed = state.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        continue;
                    }
                };
                let (leave, lost) = {
                    let s = state.borrow();
                    let lost = matches!(direction, Direction::Reply) && s.faults.lose_replies;
                    (leave_at(&s.faults, direction), lost)
                };
                if lost {
                    // The command ran; its answer goes nowhere, and the
                    // client's connection is reset.
                    let _ = chunks.send((leave, Chunk::Reset)).await;
                    return;
                }
                let chunk = match &mut framer {
                    Some(framer) => framer.feed(&buf[..n]),
                    None => buf[..n].to_vec(),
                };
                if !chunk.is_empty() && chunks.send((leave, Chunk::Bytes(chunk))).await.is_err() {
                    return;
                }
            }
        }
    };
    let writer = release(ready, to, state.clone(), epoch);
    let pumping = async {
        tokio::pin!(writer);
        tokio::select! {
            _ = &mut writer => {}
            // The sender closed: what was read goes on before the end.
            _ = reader => (&mut writer).await,
        }
    };
    // Closing: the epoch changes or the proxy shuts down; or the direction
    // ended (its sender closed and all was delivered, or its target did).
    tokio::select! {
        _ = pumping => {}
        _ = wait_for_close(state, epoch) => {}
    }
}

/// Writes each chunk to `to` once its time to leave has come and no
/// partition holds it ([`Faults::hold`]); resets the connection on a lost
/// reply.
async fn release(
    mut ready: tokio::sync::mpsc::Receiver<(Instant, Chunk)>,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut state: watch::Receiver<State>,
    epoch: u64,
) {
    while let Some((leave, chunk)) = ready.recv().await {
        let bytes = match chunk {
            Chunk::Bytes(bytes) => bytes,
            Chunk::Reset => {
                // RST rather than FIN when the socket closes: the client
                // sees its connection reset, as when a middlebox drops it.
                // Not shut down on drop (a FIN would go first): the socket
                // closes, reset, with the read half.
                let _ = to.as_ref().set_zero_linger();
                to.forget();
                return;
            }
        };
        // Without a delay, straight on: a timer would hold every chunk
        // until the next tick (about a millisecond each way).
        if leave > Instant::now() {
            tokio::time::sleep_until(leave).await;
        }
        if !delivering(&mut state, epoch).await {
            return;
        }
        if to.write_all(&bytes).await.is_err() {
            return;
        }
    }
}

/// Waits while a partition holds what was read ([`Faults::hold`]); false
/// once the connection must close instead (epoch bumped, or shutdown).
async fn delivering(state: &mut watch::Receiver<State>, epoch: u64) -> bool {
    loop {
        let (closing, held) = {
            let s = state.borrow_and_update();
            (s.shutdown || s.epoch != epoch, s.faults.hold)
        };
        if closing {
            return false;
        }
        if !held {
            return true;
        }
        if state.changed().await.is_err() {
            return false;
        }
    }
}

/// Waits while a blackhole stops the traffic; false once the connection
/// must close instead (epoch bumped, or shutdown).
async fn flowing(state: &mut watch::Receiver<State>, epoch: u64) -> bool {
    loop {
        let (closing, blackhole) = {
            let s = state.borrow_and_update();
            (s.shutdown || s.epoch != epoch, s.faults.blackhole)
        };
        if closing {
            return false;
        }
        if !blackhole {
            return true;
        }
        if state.changed().await.is_err() {
            return false;
        }
    }
}

/// When a chunk read now may leave, going `direction`: after its delay and
/// a random part of the jitter.
fn leave_at(faults: &Faults, direction: Direction) -> Instant {
    let base = match direction {
        Direction::Request => faults.request_delay,
        Direction::Reply => faults.reply_delay,
    };
    Instant::now() + base + faults.jitter.mul_f64(rand::random::<f64>())
}

/// Resolves once the connection must close (epoch bumped, or shutdown).
async fn wait_for_close(mut state: watch::Receiver<State>, epoch: u64) {
    loop {
        {
            let s = state.borrow_and_update();
            if s.shutdown || s.epoch != epoch {
                return;
            }
        }
        if state.changed().await.is_err() {
            return;
        }
    }
}
