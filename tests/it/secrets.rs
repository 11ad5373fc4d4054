//! No secret in any output: with every log line captured at TRACE level
//! (quorumlock's, and through `tracing-log` any `log` record of a
//! dependency), runs lock,
//! extend, release, auto-extension and the failure paths with a password
//! in every URL, then searches the logs and the `Debug` and `Display`
//! output of every public type and error for the tokens and the passwords.

use crate::support;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use quorumlock::testkit::{RedisNodes, ServerOptions};
use quorumlock::{Error, LossReason, NativeCommands, Redlock, RedlockBuilder, Retry, ScriptMode};
use support::no_hang;
use tracing::subscriber::DefaultGuard;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::util::SubscriberInitExt;

const PASSWORD: &str = "pw-never-shown-4b1f9";
const WRONG_PASSWORD: &str = "pw-wrong-never-shown-77ae";
const TTL: Duration = Duration::from_secs(5);

/// Everything every subscriber writes, in one buffer.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Capture {
    type Writer = Capture;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

impl Capture {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

/// Installs a capturing subscriber on this thread until the guard drops
/// (and, once per process, the `log` bridge). The tests run on a
/// current-thread runtime, so all they start runs on this thread and is
/// captured; the other tests of this binary run on other threads.
/// (See [`support::scoped_subscribers`] for why it is reliable.)
fn capture() -> (Capture, DefaultGuard) {
    support::scoped_subscribers();
    let capture = Capture::default();
    let scope = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(capture.clone())
        .set_default();
    (capture, scope)
}

/// What was shown: every output to search, and every secret not to find.
#[derive(Default)]
struct Shown {
    outputs: Vec<String>,
    tokens: Vec<String>,
}

impl Shown {
    fn debug_display(&mut self, what: &(impl std::fmt::Debug + std::fmt::Display)) {
        self.outputs.push(format!("{what:?}"));
        self.outputs.push(what.to_string());
    }

    fn debug(&mut self, what: &impl std::fmt::Debug) {
        self.outputs.push(format!("{what:?}"));
    }

    fn error(&mut self, err: &Error) {
        self.debug_display(err);
        for failure in err.node_failures() {
            self.debug_display(failure);
            self.debug_display(&failure.error);
        }
        let mut source = std::error::Error::source(err);
        while let Some(inner) = source {
            self.outputs.push(inner.to_string());
            source = inner.source();
        }
    }
}

fn builder(urls: &[String]) -> RedlockBuilder {
    Redlock::builder().nodes(urls).retry(Retry::none())
}

// Current-thread runtime: see `capture`.
#[tokio::test]
async fn tokens_and_passwords_never_appear_in_logs_or_output() {
    let (capture, _scope) = capture();
    let nodes = RedisNodes::start_with(3, ServerOptions::new().arg("--requirepass").arg(PASSWORD))
        .expect("nodes");
    let urls: Vec<String> = nodes
        .urls()
        .iter()
        .map(|url| url.replace("redis://", &format!("redis://:{PASSWORD}@")))
        .collect();
    let mut shown = Shown::default();

    let configured = builder(&urls).key_prefix("app:");
    shown.debug(&configured);
    let locks = configured.build().expect("config");
    shown.debug(&locks);

    // Lock, extend, release; fenced and multi-resource locks.
    let guard = no_hang("lock", locks.lock("orders:1", TTL))
        .await
        .expect("lock");
    shown.tokens.push(guard.token().as_str().to_owned());
    shown.debug(&guard);
    shown.debug(guard.token());
    shown.debug(&guard.lease());
    guard.extend(TTL).await.expect("extend");
    let summary = guard.release().await.expect("release").settled().await;
    shown.debug(&summary);
    for lock in [
        locks.lock_fenced("ledger", TTL).await.expect("fenced"),
        locks.lock_many(&["a", "b"], TTL).await.expect("multi"),
    ] {
        shown.tokens.push(lock.token().as_str().to_owned());
        shown.debug(&lock);
        lock.release().await.expect("release");
    }

    // Auto-extension: wait until a renewal moved the deadline.
    let guard = locks
        .lock("jobs:renewed", Duration::from_millis(600))
        .await
        .expect("lock");
    shown.tokens.push(guard.token().as_str().to_owned());
    let first = guard.deadline();
    guard.auto_extend();
    no_hang("renewal", async {
        while guard.deadline() <= first {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    guard.release().await.expect("release");

    // Contention, and a wait deadline running out on it.
    let holder = locks.lock("busy", TTL).await.expect("lock");
    shown.tokens.push(holder.token().as_str().to_owned());
    let err = locks.try_lock("busy", TTL).await.expect_err("contended");
    assert!(matches!(err, Error::Contended { .. }), "{err}");
    shown.error(&err);
    let waiting = builder(&urls)
        .key_prefix("app:")
        .retry(
            Retry::default()
                .delay(Duration::from_millis(10))
                .jitter(Duration::from_millis(10))
                .wait(Duration::from_millis(100))
                .unlimited_attempts(),
        )
        .build()
        .expect("config");
    let err = waiting.lock("busy", TTL).await.expect_err("wait timeout");
    assert!(matches!(err, Error::WaitTimeout { .. }), "{err}");
    shown.error(&err);
    holder.release().await.expect("release");

    // Lost locks: another owner's value replaces ours while held. (Keys
    // that merely vanish, as after an empty restart, are restored by the
    // next extension instead.)
    let extended = locks.lock("lost:extend", TTL).await.expect("lock");
    let renewed = locks
        .lock("lost:renew", Duration::from_millis(600))
        .await
        .expect("lock");
    shown.tokens.push(extended.token().as_str().to_owned());
    shown.tokens.push(renewed.token().as_str().to_owned());
    for url in &urls {
        for key in ["app:lost:extend", "app:lost:renew"] {
            let () = redis::cmd("SET")
                .arg(key)
                .arg("another-owner")
                .query_async(&mut support::conn(url).await)
                .await
                .expect("SET");
        }
    }
    let err = extended.extend(TTL).await.expect_err("lost");
    assert!(matches!(err, Error::Lost { .. }), "{err}");
    shown.error(&err);
    let err = extended.release().await.expect_err("lost");
    shown.error(&err);
    renewed.auto_extend();
    let reason = no_hang("lost", renewed.lost()).await;
    assert_eq!(reason, LossReason::TokenGone);
    shown.debug_display(&reason);
    drop(renewed);

    // A wrong password, and one in a malformed URL.
    let wrong: Vec<String> = nodes
        .urls()
        .iter()
        .map(|url| url.replace("redis://", &format!("redis://:{WRONG_PASSWORD}@")))
        .collect();
    let refused = builder(&wrong).build().expect("config");
    shown.debug(&refused);
    let err = refused
        .lock("orders:1", TTL)
        .await
        .expect_err("wrong password");
    assert!(matches!(err, Error::Incompatible { .. }), "{err}");
    shown.error(&err);
    let err =
        Redlock::new([format!("redis://:{PASSWORD}@127.0.0.1:notaport")]).expect_err("malformed");
    shown.error(&err);

    // Functions mode without the library.
    let functions = builder(&urls)
        .script_mode(ScriptMode::Functions)
        // Where the server has native commands, extending needs no
        // function at all.
        .native_commands(NativeCommands::Never)
        .build()
        .expect("config");
    let guard = functions.lock("fn:1", TTL).await.expect("SET");
    shown.tokens.push(guard.token().as_str().to_owned());
    let err = guard.extend(TTL).await.expect_err("no library");
    shown.error(&err);
    drop(guard);

    #[cfg(feature = "tls")]
    {
        // A TLS handshake failure, with the password in the URL.
        let tls = Redlock::builder()
            .node(format!(
                "rediss://:{PASSWORD}@127.0.0.1:{}",
                nodes[0].port()
            ))
            .retry(Retry::none())
            .build()
            .expect("config");
        let err = tls.lock("tls:1", TTL).await.expect_err("not a TLS server");
        shown.error(&err);
    }

    locks.settle().await;
    functions.settle().await;
    let logs = capture.text();
    // The capture works: it saw per-node outcomes, naming the nodes, and
    // the failures.
    assert!(logs.contains("op=\"release\""), "{logs}");
    assert!(logs.contains(&nodes[0].port().to_string()), "{logs}");
    assert!(logs.contains("refused the credentials"), "{logs}");

    assert!(shown.tokens.len() >= 8);
    for output in shown.outputs.iter().chain([&logs]) {
        for secret in shown
            .tokens
            .iter()
            .map(String::as_str)
            .chain([PASSWORD, WRONG_PASSWORD])
        {
            assert!(
                !output.contains(secret),
                "secret `{secret}` shown in:\n{output}"
            );
        }
    }
}

/// A password for the ACL users of the NOPERM servers.
const USER_PASSWORD: &str = "user-pw-never-shown-c3d8";

/// How servers are broken so that the library's commands fail with an
/// error: some of these echo the command's arguments, the token among
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Broken {
    /// The script commands (EVALSHA, EVAL, FCALL) are renamed away: an
    /// unknown command, whose error echoes its arguments.
    ScriptsUnknown,
    /// SET is renamed away: an unknown command.
    SetUnknown,
    /// The script commands are renamed away and commands with another
    /// arity renamed onto them: a wrong number of arguments.
    ScriptsArity,
    /// SET is renamed away and STRLEN renamed onto it.
    SetArity,
    /// ACL users without the script commands, or without SET: NOPERM.
    NoPerm,
}

fn broken_servers(broken: Broken) -> RedisNodes {
    let version = quorumlock::testkit::server_version().expect("server version");
    let mut args: Vec<String> = Vec::new();
    let mut rename = |from: &str, to: &str| {
        args.extend(["--rename-command", from, to].map(str::to_owned));
    };
    let scripts_away = |rename: &mut dyn FnMut(&str, &str)| {
        rename("EVALSHA", "ql-evalsha");
        rename("EVAL", "ql-eval");
        // Before 7.0 there is no FCALL: it is unknown anyway.
        if version.has_functions() {
            rename("FCALL", "ql-fcall");
        }
    };
    match broken {
        Broken::ScriptsUnknown => scripts_away(&mut rename),
        Broken::SetUnknown => rename("SET", "ql-set"),
        Broken::ScriptsArity => {
            scripts_away(&mut rename);
            rename("ECHO", "EVALSHA");
            rename("DBSIZE", "FCALL");
        }
        Broken::SetArity => {
            rename("SET", "ql-set");
            rename("STRLEN", "SET");
        }
        Broken::NoPerm => {
            for (user, rules) in [("noscripts", "-@scripting"), ("noset", "-set")] {
                args.extend(
                    [
                        "--user",
                        user,
                        "on",
                        &format!(">{USER_PASSWORD}"),
                        "~*",
                        "+@all",
                        rules,
                    ]
                    .map(str::to_owned),
                );
            }
        }
    }
    let options = args
        .into_iter()
        .fold(ServerOptions::new(), ServerOptions::arg);
    RedisNodes::start_with(3, options).expect("nodes")
}

/// Whether `text` holds a run of hex digits as long as a token or a
/// token's start cut short (8 to 39; a script's SHA1 has 40): for errors
/// of calls whose token the test never learns (a failed acquisition).
fn token_like(text: &str) -> Option<&str> {
    text.split(|c: char| !(c.is_ascii_hexdigit() || c == '.'))
        // A decimal fraction (a duration's `1.401128959s`) is no token.
        .filter(|run| !(run.contains('.') && run.chars().all(|c| c.is_ascii_digit() || c == '.')))
        .flat_map(|run| run.split('.'))
        .find(|run| (8..40).contains(&run.len()))
}

/// Runs every path that sends a token through `urls`' servers in `mode`
/// (acquire plain, fenced and many; extend; release; renewal; `with_lock`),
/// recording every error and summary in `shown`.
async fn exercise(urls: &[String], mode: ScriptMode, shown: &mut Shown) {
    // Scripts on every server: the servers are broken for scripts, and a
    // native release or extension would not meet the breakage.
    let locks = builder(urls)
        .script_mode(mode)
        .native_commands(NativeCommands::Never)
        .build()
        .expect("config");
    let mut held = Vec::new();
    for attempt in [
        locks.lock("plain", TTL).await,
        locks.lock_fenced("fenced", TTL).await,
        locks.lock_many(&["many:a", "many:b"], TTL).await,
    ] {
        match attempt {
            Ok(guard) => held.push(guard),
            Err(err) => shown.error(&err),
        }
    }
    for guard in held {
        shown.tokens.push(guard.token().as_str().to_owned());
        if let Err(err) = no_hang("extend", guard.extend(TTL)).await {
            shown.error(&err);
        }
        match no_hang("release", guard.release()).await {
            Ok(summary) => shown.summary(&summary),
            Err(err) => shown.error(&err),
        }
    }
    // Renewal: it fails where scripts do, until the lock is lost.
    if let Ok(guard) = locks.lock("renewed", Duration::from_millis(600)).await {
        shown.tokens.push(guard.token().as_str().to_owned());
        guard.auto_extend();
        let reason = no_hang("lost", guard.lost()).await;
        shown.debug_display(&reason);
        match no_hang("release", guard.release()).await {
            Ok(summary) => shown.summary(&summary),
            Err(err) => shown.error(&err),
        }
    }
    let token = Arc::new(Mutex::new(None));
    let seen = token.clone();
    let outcome = no_hang(
        "with_lock",
        locks.with_lock("with", TTL, |lease| async move {
            *seen.lock().expect("token") = Some(lease.token().as_str().to_owned());
        }),
    )
    .await;
    if let Err(err) = outcome {
        shown.error(&err);
    }
    shown.tokens.extend(token.lock().expect("token").take());
    locks.settle().await;
}

impl Shown {
    fn summary(&mut self, summary: &quorumlock::ReleaseSummary) {
        self.debug(summary);
        for failure in summary.failures() {
            self.debug_display(failure);
            self.debug_display(&failure.error);
        }
    }
}

// Current-thread runtime: see `capture`.
#[tokio::test]
async fn echoing_server_errors_never_carry_a_token_or_password() {
    let (capture, _scope) = capture();
    let mut shown = Shown::default();
    for broken in [
        Broken::ScriptsUnknown,
        Broken::SetUnknown,
        Broken::ScriptsArity,
        Broken::SetArity,
        Broken::NoPerm,
    ] {
        let nodes = broken_servers(broken);
        let url_sets: Vec<Vec<String>> = if broken == Broken::NoPerm {
            ["noscripts", "noset"]
                .iter()
                .map(|user| {
                    nodes
                        .urls()
                        .iter()
                        .map(|url| {
                            url.replace("redis://", &format!("redis://{user}:{USER_PASSWORD}@"))
                        })
                        .collect()
                })
                .collect()
        } else {
            vec![nodes.urls()]
        };
        let before = shown.outputs.len();
        for urls in &url_sets {
            for mode in [ScriptMode::Eval, ScriptMode::Functions] {
                exercise(urls, mode, &mut shown).await;
            }
        }
        let outputs = shown.outputs[before..].join("\n");
        // The servers were broken as meant, and said so.
        let expected = match broken {
            Broken::ScriptsUnknown | Broken::SetUnknown => "unknown command",
            Broken::ScriptsArity | Broken::SetArity => "wrong number of arguments",
            Broken::NoPerm => "NoPerm",
        };
        assert!(
            outputs.contains(expected),
            "{broken:?}: no `{expected}` in:\n{outputs}"
        );
        if matches!(broken, Broken::ScriptsUnknown | Broken::SetUnknown) {
            // An unknown command echoes its arguments: the token was there,
            // and was scrubbed.
            assert!(
                outputs.contains("***"),
                "{broken:?}: nothing redacted in:\n{outputs}"
            );
        }
        for output in &shown.outputs[before..] {
            assert_eq!(
                token_like(output),
                None,
                "{broken:?}: token-like text in:\n{output}"
            );
        }
    }

    let logs = capture.text();
    assert!(shown.tokens.len() >= 6, "{}", shown.tokens.len());
    for output in shown.outputs.iter().chain([&logs]) {
        for secret in shown
            .tokens
            .iter()
            .map(String::as_str)
            .chain([USER_PASSWORD])
        {
            assert!(
                !output.contains(secret),
                "secret `{secret}` shown in:\n{output}"
            );
        }
    }
}
