//! One Redis node: its shared multiplexed connection (lazy, reconnecting),
//! the per-call deadline, and the lock commands and scripts.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, PubSub};
use redis::{Cmd, ScriptInvocation, Value};
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::error::{ConfigError, NodeError};
use crate::scripts;

/// How long one connection attempt may take before it is abandoned (and
/// retried on the next request).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// One Redis deployment that votes as one member of the quorum.
pub(crate) struct Node {
    /// `host:port[/db]`: safe to log, never holds credentials.
    label: Arc<str>,
    client: redis::Client,
    /// Created on first use, inside the caller's runtime, so that building
    /// a manager needs neither I/O nor a runtime.
    conn: OnceCell<ConnectionManager>,
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label)
    }
}

impl Node {
    /// Parses a node URL (`redis://[user:password@]host:port[/db]`). No I/O.
    pub(crate) fn parse(url: &str) -> Result<Self, ConfigError> {
        let client = redis::Client::open(url).map_err(|e| ConfigError::MalformedUrl {
            url: redact_url(url),
            // The parser's message names what is wrong, not the URL itself.
            reason: e.to_string(),
        })?;
        let info = client.get_connection_info();
        let db = info.redis_settings().db();
        let label = if db == 0 {
            info.addr().to_string()
        } else {
            format!("{}/{db}", info.addr())
        };
        Ok(Self {
            label: label.into(),
            client,
            conn: OnceCell::new(),
        })
    }

    pub(crate) fn label(&self) -> &Arc<str> {
        &self.label
    }

    /// The shared connection. Reconnection is the connection manager's job:
    /// a dropped connection is re-established on the next request, so a
    /// node that comes back (or comes up late) is used again.
    async fn connection(&self) -> Result<ConnectionManager, NodeError> {
        let conn = self
            .conn
            .get_or_try_init(|| async {
                let config = ConnectionManagerConfig::new()
                    // Fail a dead node fast and try again on the next
                    // request instead of parking requests behind a long
                    // backoff: the per-call deadline bounds waiting anyway.
                    .set_number_of_retries(0)
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(None);
                ConnectionManager::new_lazy_with_config(self.client.clone(), config)
            })
            .await?;
        Ok(conn.clone())
    }

    /// `SET key token NX PX ttl`: true if granted, false if the key exists
    /// (whatever its type: NX never touches an existing key).
    pub(crate) async fn acquire(
        &self,
        key: &str,
        token: &str,
        ttl_ms: u64,
        deadline: Instant,
    ) -> Result<bool, NodeError> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(key).arg(token).arg("NX").arg("PX").arg(ttl_ms);
        match self.command(&cmd, deadline).await? {
            Value::Okay => Ok(true),
            Value::SimpleString(s) if s == "OK" => Ok(true),
            Value::Nil => Ok(false),
            other => Err(unexpected(&other)),
        }
    }

    /// Fenced acquire, phase 1: the node's new fence counter value if it
    /// granted the lock, `None` if the key exists.
    pub(crate) async fn acquire_fenced(
        &self,
        key: &str,
        fence_key: &str,
        token: &str,
        ttl_ms: u64,
        deadline: Instant,
    ) -> Result<Option<u64>, NodeError> {
        let mut invocation = scripts::ACQUIRE_FENCED.key(key);
        invocation.key(fence_key).arg(token).arg(ttl_ms);
        match self.script(&invocation, deadline).await? {
            Value::Int(0) => Ok(None),
            Value::Int(fence) => u64::try_from(fence)
                .map(Some)
                .map_err(|_| unexpected(&Value::Int(fence))),
            other => Err(unexpected(&other)),
        }
    }

    /// Fenced acquire, phase 2: `counter = max(counter, fence)`.
    pub(crate) async fn fence_writeback(
        &self,
        fence_key: &str,
        fence: u64,
        deadline: Instant,
    ) -> Result<bool, NodeError> {
        let mut invocation = scripts::FENCE_WRITEBACK.key(fence_key);
        invocation.arg(fence);
        self.flag_script(&invocation, deadline).await
    }

    /// All of `keys` or none, atomically: true if every key was set.
    pub(crate) async fn acquire_many(
        &self,
        keys: &[Arc<str>],
        token: &str,
        ttl_ms: u64,
        deadline: Instant,
    ) -> Result<bool, NodeError> {
        let mut invocation = scripts::ACQUIRE_MANY.prepare_invoke();
        for key in keys {
            invocation.key(&**key);
        }
        invocation.arg(token).arg(ttl_ms);
        self.flag_script(&invocation, deadline).await
    }

    /// Token-checked delete of a lock's keys: true if this node held the
    /// token on every key and deleted them. With `announce = (suffix,
    /// message)`, each deleted key is announced on the channel
    /// `<key><suffix>`.
    pub(crate) async fn release(
        &self,
        keys: &[Arc<str>],
        token: &str,
        announce: Option<(&str, &str)>,
        deadline: Instant,
    ) -> Result<bool, NodeError> {
        let mut invocation = scripts::RELEASE.prepare_invoke();
        for key in keys {
            invocation.key(&**key);
        }
        invocation.arg(token);
        if let Some((suffix, message)) = announce {
            invocation.arg(suffix).arg(message);
        }
        match self.script(&invocation, deadline).await? {
            Value::Int(n) => Ok(usize::try_from(n).is_ok_and(|n| n == keys.len())),
            other => Err(unexpected(&other)),
        }
    }

    /// Token-checked PEXPIRE of a lock's keys: true if this node held the
    /// token on every key and reset their time-to-live.
    pub(crate) async fn extend(
        &self,
        keys: &[Arc<str>],
        token: &str,
        ttl_ms: u64,
        deadline: Instant,
    ) -> Result<bool, NodeError> {
        let locks = keys.iter().map(|key| (&**key, token, ttl_ms));
        let flags = self.extend_many(locks, deadline).await?;
        Ok(flags.iter().all(|&flag| flag))
    }

    /// Token-checked PEXPIRE of many locks in one script call: one flag per
    /// `(key, token, ttl_ms)`, in order.
    pub(crate) async fn extend_many<'k>(
        &self,
        locks: impl IntoIterator<Item = (&'k str, &'k str, u64)>,
        deadline: Instant,
    ) -> Result<Vec<bool>, NodeError> {
        let mut invocation = scripts::EXTEND.prepare_invoke();
        let mut count = 0;
        for (key, token, ttl_ms) in locks {
            invocation.key(key).arg(token).arg(ttl_ms);
            count += 1;
        }
        let flags = match self.script(&invocation, deadline).await? {
            Value::Array(items) if items.len() == count => items
                .iter()
                .map(|item| match item {
                    Value::Int(1) => Ok(true),
                    Value::Int(0) => Ok(false),
                    other => Err(unexpected(other)),
                })
                .collect::<Result<Vec<_>, _>>()?,
            other => return Err(unexpected(&other)),
        };
        Ok(flags)
    }

    /// A pub/sub connection of its own (not the shared one), made within
    /// `timeout`.
    pub(crate) async fn pubsub(&self, timeout: Duration) -> Result<PubSub, NodeError> {
        match tokio::time::timeout(timeout, self.client.get_async_pubsub()).await {
            Ok(connection) => Ok(connection?),
            Err(_) => Err(NodeError::Timeout(timeout)),
        }
    }

    async fn command(&self, cmd: &Cmd, deadline: Instant) -> Result<Value, NodeError> {
        within(deadline, async {
            let mut conn = self.connection().await?;
            Ok(cmd.query_async::<Value>(&mut conn).await?)
        })
        .await
    }

    /// Runs a script (EVALSHA, loading it on NOSCRIPT) within `deadline`.
    async fn script(
        &self,
        invocation: &ScriptInvocation<'_>,
        deadline: Instant,
    ) -> Result<Value, NodeError> {
        within(deadline, async {
            let mut conn = self.connection().await?;
            Ok(invocation.invoke_async::<Value>(&mut conn).await?)
        })
        .await
    }

    /// Runs a script that answers 1 (done) or 0 (not ours).
    async fn flag_script(
        &self,
        invocation: &ScriptInvocation<'_>,
        deadline: Instant,
    ) -> Result<bool, NodeError> {
        match self.script(invocation, deadline).await? {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            other => Err(unexpected(&other)),
        }
    }
}

/// Bounds a node call by `deadline`, reporting how long it was given.
async fn within<T>(
    deadline: Instant,
    call: impl Future<Output = Result<T, NodeError>>,
) -> Result<T, NodeError> {
    let given = deadline.saturating_duration_since(Instant::now());
    tokio::time::timeout_at(deadline, call)
        .await
        .unwrap_or(Err(NodeError::Timeout(given)))
}

fn unexpected(value: &Value) -> NodeError {
    let mut text = format!("{value:?}");
    if text.len() > 80 {
        let cut = (0..=80)
            .rev()
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(0);
        text.truncate(cut);
        text.push('…');
    }
    NodeError::UnexpectedReply(text)
}

/// Masks the user information of a URL so that errors can show the rest.
pub(crate) fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}***{}", &url[..scheme_end + 3], &rest[at..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_user_information() {
        assert_eq!(
            redact_url("redis://alice:s3cret@10.0.0.1:6379/2"),
            "redis://***@10.0.0.1:6379/2"
        );
        assert_eq!(redact_url("redis://:pw@h:1"), "redis://***@h:1");
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
        assert_eq!(redact_url("not a url"), "not a url");
        // An '@' after the authority is not user information.
        assert_eq!(redact_url("redis://h:1/0?x=a@b"), "redis://h:1/0?x=a@b");
    }

    #[test]
    fn labels_never_include_credentials() {
        let node = Node::parse("redis://alice:s3cret@127.0.0.1:6379/3").expect("valid url");
        assert_eq!(&**node.label(), "127.0.0.1:6379/3");
        assert_eq!(format!("{node:?}"), "127.0.0.1:6379/3");
    }

    #[test]
    fn malformed_urls_are_config_errors_without_the_password() {
        for url in ["", "http://a:b@h:1", "redis://user:hunter2@:notaport"] {
            match Node::parse(url) {
                Err(ConfigError::MalformedUrl { url: shown, .. }) => {
                    assert!(!shown.contains("hunter2"), "{shown}");
                }
                other => panic!("{url:?}: expected MalformedUrl, got {other:?}"),
            }
        }
    }

    #[test]
    fn long_unexpected_replies_are_truncated_on_a_char_boundary() {
        let value = Value::BulkString("é".repeat(100).into_bytes());
        let NodeError::UnexpectedReply(text) = unexpected(&value) else {
            panic!("wrong variant");
        };
        assert!(text.chars().count() <= 82, "{text}");
    }
}
