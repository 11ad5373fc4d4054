//! Loopback ports for servers and proxies: free ones from the OS, never
//! one this process handed out before.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::TcpListener;
use std::sync::Mutex;

use nix::fcntl::{Flock, FlockArg};

use super::TestkitError;

/// Every loopback port this process has handed to a server or a proxy,
/// each with its lock file held (see [`claim_across_processes`]).
///
/// A killed server's port is free for anyone until it restarts, and a
/// SIGKILLed redis-server with a request unread on every connection (a
/// busy node under load) leaves no `TIME_WAIT` behind to keep the OS from
/// handing the port to the next `bind(0)`. Another test's server or proxy
/// could then start there, and this test's clients, reconnecting to their
/// "dead" node, would be answered by a stranger: a grant with a majority
/// down. No port is handed out twice in one process, which rules that out
/// for the tests of one binary (they share a process), and the lock files
/// rule it out between processes that use the test kit at once (cargo
/// runs doctests side by side, and CI runs examples beside tests).
static CLAIMED: Mutex<BTreeMap<u16, Option<Flock<File>>>> = Mutex::new(BTreeMap::new());

/// Claims `port` for this process; false if it was claimed before, by this
/// process or by another that is still running.
pub(super) fn claim(port: u16) -> bool {
    let mut claimed = CLAIMED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if claimed.contains_key(&port) {
        return false;
    }
    match claim_across_processes(port) {
        Some(lock) => {
            claimed.insert(port, lock);
            true
        }
        None => false,
    }
}

/// Takes `port`'s lock file (`quorumlock-ports/<port>.lock` in the
/// temporary directory), held until this process exits, when the OS
/// drops it, however the process ends: `Some(None)` where the file cannot
/// be made (the claim in this process still holds), `None` when another
/// running process holds it.
fn claim_across_processes(port: u16) -> Option<Option<Flock<File>>> {
    let dir = std::env::temp_dir().join("quorumlock-ports");
    let file = std::fs::create_dir_all(&dir).and_then(|()| {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(format!("{port}.lock")))
    });
    let Ok(file) = file else {
        return Some(None);
    };
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Some(Some(lock)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => None,
        Err(_) => Some(None),
    }
}

/// Whether `port` was claimed before by this process.
fn claimed(port: u16) -> bool {
    CLAIMED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .contains_key(&port)
}

/// The first socket `bind` gives whose port this process never handed out,
/// claimed. Sockets with a claimed port are held until the end, so that
/// the OS offers another.
pub(super) fn unclaimed<S>(
    mut bind: impl FnMut() -> std::io::Result<S>,
    port_of: impl Fn(&S) -> std::io::Result<u16>,
) -> Result<(S, u16), TestkitError> {
    let mut held = Vec::new();
    for _ in 0..64 {
        let socket = bind()?;
        let port = port_of(&socket)?;
        if claim(port) {
            return Ok((socket, port));
        }
        held.push(socket);
    }
    Err(TestkitError::Io(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        "64 ports in a row were ones this process handed out before",
    )))
}

/// Asks the OS for a free loopback port this process never handed out,
/// and claims it.
pub(super) fn free_port() -> Result<u16, TestkitError> {
    let (_, port) = unclaimed(
        || TcpListener::bind("127.0.0.1:0"),
        |l| Ok(l.local_addr()?.port()),
    )?;
    Ok(port)
}

/// A free port `p` with `p + 10000` free too (a cluster member's default
/// bus port, before `cluster-port` existed): the bus port is asked of the
/// OS, the port taken 10000 below it.
pub(super) fn port_below_bus() -> Result<(u16, u16), TestkitError> {
    for _ in 0..64 {
        let bus_port = free_port()?;
        let Some(port) = bus_port.checked_sub(10_000).filter(|&p| p >= 1024) else {
            continue;
        };
        // An explicit bind succeeds on a killed server's port (the listener
        // sets SO_REUSEADDR, so not even TIME_WAIT keeps it off): only the
        // claim tells it is another server's.
        if !claimed(port) && TcpListener::bind(("127.0.0.1", port)).is_ok() && claim(port) {
            return Ok((port, bus_port));
        }
    }
    Err(TestkitError::Cluster(
        "no free port with a free bus port 10000 above it".to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_port_is_handed_out_twice_in_one_process() {
        let ports: Vec<u16> = (0..50).map(|_| free_port().expect("a port")).collect();
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len());
        // The OS offering a port handed out before (a killed server's) is
        // refused until it offers a fresh one.
        let old = ports[0];
        let fresh = (1024..u16::MAX)
            .find(|&p| !claimed(p))
            .expect("an unclaimed port number");
        let mut offers = [old, old, fresh].into_iter();
        let pick = unclaimed(|| Ok(offers.next().unwrap_or(old)), |&p| Ok(p));
        assert_eq!(pick.expect("a fresh port").1, fresh);
        assert!(claimed(fresh));
        // And only so many times.
        let refused = unclaimed(|| Ok(old), |&p| Ok(p));
        assert!(
            matches!(refused, Err(TestkitError::Io(e)) if e.kind() == std::io::ErrorKind::AddrInUse)
        );
    }

    /// A port another running process claimed (its lock file held: here a
    /// second open file of this process, which `flock` treats alike) is
    /// refused, and free again once that process lets go.
    #[test]
    fn a_port_another_process_claimed_is_refused() {
        let port = (20_000..u16::MAX)
            .find(|&p| !claimed(p))
            .expect("an unclaimed port number");
        let held = claim_across_processes(port)
            .expect("nobody holds it")
            .expect("a lock file");
        assert!(!claim(port), "claimed while another holds it");
        assert!(!claimed(port));
        drop(held);
        assert!(claim(port), "free once let go");
        assert!(!claim(port), "and claimed once");
    }
}
