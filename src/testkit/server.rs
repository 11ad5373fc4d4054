//! One `redis-server` (or `valkey-server`) process: its options, starting
//! it on a free loopback port and waiting until it is ready, stopping,
//! pausing and restarting it; a set of independent ones ([`RedisNodes`]);
//! and which binary and version the testkit runs.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::ports::{free_port, port_below_bus};
#[cfg(feature = "tls")]
use super::tls;
use super::{REDIS_SERVER_ENV, TestkitError};

/// How long a server may take to print that it is ready.
const START_TIMEOUT: Duration = Duration::from_secs(15);
/// How many log lines are kept for error reports.
const LOG_LINES: usize = 40;
/// How many fresh ports to try when one is taken between probe and bind.
const PORT_ATTEMPTS: usize = 8;

/// Options for the servers a [`RedisServer`], [`RedisNodes`] or
/// [`RedisCluster`](super::RedisCluster) starts.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct ServerOptions {
    persistent: bool,
    args: Vec<String>,
    /// Start as a cluster member with this `cluster-node-timeout`.
    cluster_node_timeout: Option<Duration>,
    /// Serve TLS only.
    tls: bool,
    /// The server binary, instead of [`find_redis_server`]'s.
    binary: Option<PathBuf>,
}

impl ServerOptions {
    /// No persistence, no extra arguments.
    pub fn new() -> Self {
        Self::default()
    }

    /// Persist every write (`appendonly yes`, `appendfsync always`), so a
    /// restarted server comes back with its keys.
    pub fn persistent(mut self) -> Self {
        self.persistent = true;
        self
    }

    /// One more command-line argument for `redis-server`, e.g.
    /// `"--requirepass"` followed by `"secret"`. Arguments given here come
    /// after the testkit's own, so they override them.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Starts `binary` (a `redis-server` or `valkey-server`) instead of
    /// the one [`find_redis_server`] finds: for a fleet of mixed servers.
    pub fn binary(mut self, binary: impl Into<PathBuf>) -> Self {
        self.binary = Some(binary.into());
        self
    }

    /// Serves TLS only (`rediss://`; no plain-text port), with a
    /// certificate for `127.0.0.1` and `localhost` signed by [`test_ca`](super::test_ca).
    /// Clients need no certificate of their own. Cluster members also talk
    /// TLS on the cluster bus and for replication.
    ///
    /// [`RedisServer::start_with`] fails with
    /// [`TestkitError::TlsUnsupported`] if `redis-server` was built without
    /// TLS.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls(mut self) -> Self {
        self.tls = true;
        self
    }

    /// Makes the server a cluster member (`cluster-enabled yes`, its own
    /// `nodes.conf` in its directory, the given `cluster-node-timeout`).
    pub(crate) fn cluster_member(mut self, node_timeout: Duration) -> Self {
        self.cluster_node_timeout = Some(node_timeout);
        self
    }

    /// The options for one start attempt: cluster membership turned into
    /// plain arguments with a concrete bus port, so that a restart replays
    /// exactly the same command line.
    ///
    /// Returns the options, the port to listen on, and a cluster member's
    /// bus port. The bus port is explicit (`cluster-port`, 7.0+), because
    /// the default (port + 10000) overflows for ports above 55535, where
    /// the OS hands out most free ports; before 7.0, which has no
    /// `cluster-port`, the port is chosen 10000 below a free bus port.
    fn resolve(&self, version: &ServerVersion) -> Result<(Self, u16, Option<u16>), TestkitError> {
        let Some(node_timeout) = self.cluster_node_timeout else {
            return Ok((self.clone(), free_port()?, None));
        };
        let (port, bus_port, explicit_bus) = if version.at_least(7, 0) {
            (free_port()?, free_port()?, true)
        } else {
            let (port, bus_port) = port_below_bus()?;
            (port, bus_port, false)
        };
        let mut args: Vec<String> = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
        ]
        .map(str::to_owned)
        .into();
        if explicit_bus {
            args.extend(["--cluster-port".to_owned(), bus_port.to_string()]);
        }
        args.extend(
            [
                "--cluster-node-timeout",
                &node_timeout.as_millis().to_string(),
                // A dead master takes down its own slots only, not the whole
                // cluster: the partial failures the tests are about.
                "--cluster-require-full-coverage",
                "no",
            ]
            .map(str::to_owned),
        );
        if self.tls {
            args.extend(["--tls-cluster", "yes", "--tls-replication", "yes"].map(str::to_owned));
        }
        args.extend(self.args.iter().cloned());
        let resolved = Self {
            persistent: self.persistent,
            args,
            cluster_node_timeout: None,
            tls: self.tls,
            binary: self.binary.clone(),
        };
        Ok((resolved, port, Some(bus_port)))
    }
}

/// One `redis-server` process on a loopback port, killed on drop.
///
/// All methods take `&self`, so a server can be shared (e.g. in an `Arc`)
/// between a test and the tasks that kill and restart it.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    /// The cluster bus port, for cluster members.
    bus_port: Option<u16>,
    binary: PathBuf,
    version: ServerVersion,
    options: ServerOptions,
    process: Mutex<Option<Process>>,
    // Declared last: removed after the process is gone.
    dir: tempfile::TempDir,
}

#[derive(Debug)]
struct Process {
    child: Child,
    log: Arc<Mutex<VecDeque<String>>>,
}

impl RedisServer {
    /// Starts a server without persistence on a free port.
    ///
    /// # Errors
    ///
    /// [`TestkitError::NotFound`] when there is no `redis-server`, and
    /// [`TestkitError::StartFailed`] (with its log) when it does not start.
    pub fn start() -> Result<Self, TestkitError> {
        Self::start_with(ServerOptions::new())
    }

    /// Starts a server with `options` on a free port.
    ///
    /// # Errors
    ///
    /// As [`RedisServer::start`].
    pub fn start_with(options: ServerOptions) -> Result<Self, TestkitError> {
        let binary = match &options.binary {
            Some(binary) => binary.clone(),
            None => find_redis_server()?,
        };
        let version = version_of(&binary)?;
        let dir = tempfile::Builder::new()
            .prefix("quorumlock-redis-")
            .tempdir()?;
        #[cfg(feature = "tls")]
        if options.tls {
            tls::check_support(&binary)?;
            tls::write_files(dir.path())?;
        }
        let mut last_error = None;
        for _ in 0..PORT_ATTEMPTS {
            let (options, port, bus_port) = options.resolve(&version)?;
            if bus_port == Some(port) {
                continue;
            }
            match spawn(&binary, &version, port, dir.path(), &options) {
                Ok(process) => {
                    return Ok(Self {
                        port,
                        bus_port,
                        binary,
                        version,
                        options,
                        process: Mutex::new(Some(process)),
                        dir,
                    });
                }
                // Another process took the port between probe and bind.
                Err(e @ TestkitError::StartFailed { .. }) if e.to_string().contains("in use") => {
                    last_error = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_error.unwrap_or(TestkitError::NotRunning(0)))
    }

    /// The port it listens on (the same across restarts).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`, or `rediss://…` for a TLS server.
    pub fn url(&self) -> String {
        let scheme = if self.options.tls { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// A client for [`url`](Self::url), trusting [`test_ca`] if it is a
    /// TLS server.
    pub(crate) fn client(&self) -> redis::RedisResult<redis::Client> {
        #[cfg(feature = "tls")]
        if self.options.tls {
            return tls::client(&self.url());
        }
        redis::Client::open(self.url())
    }

    /// The version of the server binary it runs.
    pub fn version(&self) -> &ServerVersion {
        &self.version
    }

    /// The cluster bus port of a cluster member.
    pub(crate) fn bus_port(&self) -> Option<u16> {
        self.bus_port
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.process().as_ref().map(|p| p.child.id())
    }

    /// The last lines the current process logged, for diagnostics.
    pub fn log_tail(&self) -> String {
        self.process()
            .as_ref()
            .map(|p| join_log(&p.log))
            .unwrap_or_default()
    }

    /// Whether the process is running (paused counts as running).
    pub fn is_running(&self) -> bool {
        self.process().is_some()
    }

    /// Kills the process with SIGKILL and reaps it. Keys not persisted are
    /// lost. Does nothing if it is not running.
    pub fn kill(&self) {
        if let Some(mut process) = self.process().take() {
            // Fails only if it already exited; either way it is gone.
            let _ = process.child.kill();
            let _ = process.child.wait();
        }
    }

    /// Freezes the process with SIGSTOP: connections stay open, nothing is
    /// answered.
    ///
    /// # Errors
    ///
    /// [`TestkitError::NotRunning`] if it was killed.
    pub fn pause(&self) -> Result<(), TestkitError> {
        self.signal(Signal::SIGSTOP)
    }

    /// Thaws a paused process with SIGCONT.
    ///
    /// # Errors
    ///
    /// [`TestkitError::NotRunning`] if it was killed.
    pub fn resume(&self) -> Result<(), TestkitError> {
        self.signal(Signal::SIGCONT)
    }

    /// Kills the process if running, then starts it again on the same port
    /// and directory (so a persistent server gets its data back).
    ///
    /// # Errors
    ///
    /// As [`RedisServer::start`]; also if another process took the port.
    pub fn restart(&self) -> Result<(), TestkitError> {
        self.kill();
        let process = spawn(
            &self.binary,
            &self.version,
            self.port,
            self.dir.path(),
            &self.options,
        )?;
        *self.process() = Some(process);
        Ok(())
    }

    fn signal(&self, signal: Signal) -> Result<(), TestkitError> {
        let guard = self.process();
        let process = guard.as_ref().ok_or(TestkitError::NotRunning(self.port))?;
        let pid =
            i32::try_from(process.child.id()).map_err(|_| TestkitError::NotRunning(self.port))?;
        kill(Pid::from_raw(pid), signal).map_err(|e| TestkitError::Io(e.into()))
    }

    fn process(&self) -> MutexGuard<'_, Option<Process>> {
        // A panic while holding the lock cannot leave the Option torn.
        self.process.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // SIGKILL also ends a paused (SIGSTOPped) process.
        self.kill();
    }
}

/// A set of independent `redis-server` processes, each killed on drop.
///
/// Index it to reach one server: `nodes[2].kill()`.
#[derive(Debug)]
pub struct RedisNodes {
    servers: Vec<RedisServer>,
}

impl RedisNodes {
    /// Starts `n` servers without persistence.
    ///
    /// # Errors
    ///
    /// As [`RedisServer::start`]; servers already started are killed.
    pub fn start(n: usize) -> Result<Self, TestkitError> {
        Self::start_with(n, ServerOptions::new())
    }

    /// Starts `n` servers with `options`.
    ///
    /// # Errors
    ///
    /// As [`RedisServer::start`]; servers already started are killed.
    pub fn start_with(n: usize, options: ServerOptions) -> Result<Self, TestkitError> {
        let servers = (0..n)
            .map(|_| RedisServer::start_with(options.clone()))
            .collect::<Result<_, _>>()?;
        Ok(Self { servers })
    }

    /// Every server's URL, in order.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }
}

server_set!(RedisNodes, "servers");

/// A server binary's product and version, as its `--version` prints them
/// (`Redis server v=7.2.6 …`, `Valkey server v=8.0.1 …`).
///
/// The testkit passes a server only the options its version supports;
/// tests use it to skip what a version lacks (Functions before 7.0).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerVersion {
    /// `redis` or `valkey` (lowercase, as the binary names itself).
    pub product: String,
    /// `[major, minor, patch]`.
    pub version: [u32; 3],
}

impl ServerVersion {
    /// Whether this is version `major.minor` or later.
    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        self.version[..2] >= [major, minor][..]
    }

    /// Whether the server has Redis Functions (`FCALL`, `FUNCTION LOAD`):
    /// 7.0 and later.
    pub fn has_functions(&self) -> bool {
        self.at_least(7, 0)
    }

    /// Parses the output of `redis-server --version`. Valkey 7.2 names no
    /// product (`Server v=7.2.7 …`): it is then told by the binary's name.
    fn parse(output: &str, binary: &Path) -> Option<Self> {
        let mut product = output.split_whitespace().next()?.to_ascii_lowercase();
        if product == "server" {
            let name = binary.file_name().unwrap_or_default().to_string_lossy();
            product = if name.starts_with("valkey") {
                "valkey"
            } else {
                "redis"
            }
            .to_owned();
        }
        let number = output
            .split_whitespace()
            .find_map(|word| word.strip_prefix("v="))?;
        let mut parts = number.split('.').map(|p| p.parse::<u32>().ok());
        let version = [
            parts.next()??,
            parts.next()??,
            parts.next().flatten().unwrap_or(0),
        ];
        Some(Self { product, version })
    }
}

impl std::fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [major, minor, patch] = self.version;
        write!(f, "{} {major}.{minor}.{patch}", self.product)
    }
}

/// The version of the server binary the testkit starts (see
/// [`find_redis_server`]), asked once per binary.
///
/// # Errors
///
/// [`TestkitError::NotFound`] without a binary, [`TestkitError::Io`] if it
/// cannot run, and [`TestkitError::StartFailed`] if its `--version` output
/// names no version.
pub fn server_version() -> Result<ServerVersion, TestkitError> {
    version_of(&find_redis_server()?)
}

fn version_of(binary: &Path) -> Result<ServerVersion, TestkitError> {
    static VERSIONS: Mutex<Vec<(PathBuf, ServerVersion)>> = Mutex::new(Vec::new());
    let mut versions = VERSIONS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, version)) = versions.iter().find(|(path, _)| path == binary) {
        return Ok(version.clone());
    }
    let output = Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .output()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let version = ServerVersion::parse(&text, binary).ok_or_else(|| TestkitError::StartFailed {
        port: 0,
        reason: format!("`{} --version` names no version", binary.display()),
        log: format!("{text}{}", String::from_utf8_lossy(&output.stderr)),
    })?;
    versions.push((binary.to_owned(), version.clone()));
    Ok(version)
}

/// Finds the server binary: the environment variable, then `redis-server`
/// on `PATH`, then `valkey-server` on `PATH`.
pub fn find_redis_server() -> Result<PathBuf, TestkitError> {
    if let Some(path) = std::env::var_os(REDIS_SERVER_ENV) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(TestkitError::NotFound {
                looked: format!("{REDIS_SERVER_ENV}={} is not a file", path.display()),
            })
        };
    }
    let path: Vec<PathBuf> = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .collect();
    ["redis-server", "valkey-server"]
        .iter()
        .find_map(|name| {
            path.iter()
                .map(|dir| dir.join(name))
                .find(|candidate| candidate.is_file())
        })
        .ok_or_else(|| TestkitError::NotFound {
            looked: format!(
                "neither redis-server nor valkey-server is on PATH, and {REDIS_SERVER_ENV} is unset"
            ),
        })
}

/// Starts one process and waits for its "ready" log line.
fn spawn(
    binary: &Path,
    version: &ServerVersion,
    port: u16,
    dir: &Path,
    options: &ServerOptions,
) -> Result<Process, TestkitError> {
    let mut child = command(binary, version, port, dir, options).spawn()?;
    let log = Arc::new(Mutex::new(VecDeque::with_capacity(LOG_LINES)));
    let (said, stderr) = drain_stderr(&mut child, &log);
    let (ready_tx, ready_rx) = mpsc::channel();
    if let Some(stdout) = child.stdout.take() {
        let log = log.clone();
        // Drains the log for the process' whole life (a full pipe would
        // block the server) and signals readiness once.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.contains("Ready to accept connections") {
                    let _ = ready_tx.send(());
                }
                push_line(&log, line);
            }
        });
    }
    let failure = match ready_rx.recv_timeout(START_TIMEOUT) {
        Ok(()) => return Ok(Process { child, log }),
        Err(mpsc::RecvTimeoutError::Timeout) => "not ready in time",
        Err(mpsc::RecvTimeoutError::Disconnected) => "exited",
    };
    let _ = child.kill();
    let _ = child.wait();
    // The process is gone: its stderr is at its end.
    if let Some(reader) = stderr {
        let _ = reader.join();
    }
    let log = join_log(&log);
    let said = said.lock().unwrap_or_else(|e| e.into_inner());
    let reason = start_failure(failure, &said, &log);
    Err(TestkitError::StartFailed { port, reason, log })
}

/// The server's command line: loopback only, no daemon, no RDB snapshots,
/// AOF as `options` say, and `options`' own arguments last.
fn command(
    binary: &Path,
    version: &ServerVersion,
    port: u16,
    dir: &Path,
    options: &ServerOptions,
) -> Command {
    let mut cmd = Command::new(binary);
    #[cfg(feature = "tls")]
    if options.tls {
        cmd.args(tls::args(dir, port));
    }
    if !options.tls {
        cmd.arg("--port").arg(port.to_string());
    }
    cmd.arg("--bind")
        .arg("127.0.0.1")
        .arg("--dir")
        .arg(dir)
        .arg("--daemonize")
        .arg("no")
        .arg("--logfile")
        .arg("")
        .arg("--save")
        .arg("");
    // DEBUG is off by default from 7.0 on, and the option unknown before.
    if version.at_least(7, 0) {
        cmd.args(["--enable-debug-command", "local"]);
    }
    if options.persistent {
        cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
    } else {
        cmd.args(["--appendonly", "no"]);
    }
    cmd.args(&options.args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// What the server says on stderr (a configuration it rejects, before
/// any log line) goes to `log` too, and into the lines returned (for the
/// reason of a failed start), read by the thread returned.
fn drain_stderr(
    child: &mut std::process::Child,
    log: &Arc<Mutex<VecDeque<String>>>,
) -> (Arc<Mutex<Vec<String>>>, Option<std::thread::JoinHandle<()>>) {
    let said = Arc::new(Mutex::new(Vec::new()));
    let reader = child.stderr.take().map(|stderr| {
        let (log, said) = (log.clone(), said.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if !line.trim().is_empty() {
                    said.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(line.clone());
                }
                push_line(&log, line);
            }
        })
    });
    (said, reader)
}

/// Why a server did not start (`failure`: it exited, or was not ready in
/// time), from what it `said` on stderr and its `log`.
fn start_failure(failure: &str, said: &[String], log: &str) -> String {
    // Redis 8 takes an unknown directive for a module's setting, logs it
    // (`# >>> 'no-such-option x'`) and aborts: its reason is in the log.
    let logged: Vec<&str> = log.lines().filter(|line| line.contains(" # ")).collect();
    if log.contains("Address already in use") {
        "port in use".to_owned()
    } else if said.is_empty() && logged.is_empty() {
        failure.to_owned()
    } else if said.is_empty() {
        let tail = logged.len().saturating_sub(2);
        format!("{failure}: {}", logged[tail..].join(" "))
    } else {
        // A rejected configuration: the directive and why, e.g.
        // `>>> 'enable-debug-command "local"'` and `Bad directive or wrong
        // number of arguments`.
        let tail = said.len().saturating_sub(2);
        format!("{failure}: {}", said[tail..].join(" "))
    }
}

fn push_line(log: &Mutex<VecDeque<String>>, line: String) {
    let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
    if log.len() == LOG_LINES {
        log.pop_front();
    }
    log.push_back(line);
}

fn join_log(log: &Mutex<VecDeque<String>>) -> String {
    let log = log.lock().unwrap_or_else(|e| e.into_inner());
    log.iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_what_each_server_prints() {
        let redis_server = Path::new("/usr/bin/redis-server");
        let parse = |text| ServerVersion::parse(text, redis_server).expect("a version");
        let redis = parse("Redis server v=6.2.16 sha=00000000:0 malloc=jemalloc-5.1.0 bits=64");
        assert_eq!(redis.version, [6, 2, 16]);
        assert_eq!(redis.to_string(), "redis 6.2.16");
        assert!(!redis.at_least(7, 0) && redis.at_least(6, 2) && !redis.has_functions());
        let valkey = parse("Valkey server v=8.0.1 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64");
        assert_eq!(valkey.to_string(), "valkey 8.0.1");
        assert!(valkey.at_least(7, 0) && valkey.has_functions());
        assert!(parse("Redis server v=7.0.15").at_least(7, 0));
        let old_valkey = Path::new("/opt/valkey/bin/valkey-server");
        let valkey = ServerVersion::parse("Server v=7.2.7 sha=00000000:0", old_valkey);
        assert_eq!(valkey.expect("a version").to_string(), "valkey 7.2.7");
        assert_eq!(ServerVersion::parse("no version here", redis_server), None);
        assert_eq!(
            ServerVersion::parse("Redis server v=x.y", redis_server),
            None
        );
    }
}
