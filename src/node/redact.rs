//! Keeping secrets out of errors: passwords and tokens are scrubbed from
//! server replies and the redis crate's messages, whole or echoed cut short.

use redis::{ConnectionInfo, ErrorKind};

use crate::error::NodeError;

/// The passwords of a node's URLs, to scrub from its errors.
pub(super) fn passwords<'a>(infos: impl IntoIterator<Item = &'a ConnectionInfo>) -> Vec<String> {
    let mut passwords: Vec<String> = Vec::new();
    for info in infos {
        if let Some(password) = info.redis_settings().password()
            && !password.is_empty()
            && !passwords.iter().any(|p| p == password)
        {
            passwords.push(password.to_owned());
        }
    }
    passwords
}

/// What a secret is replaced with.
const REDACTED: &str = "***";

/// How many leading characters of a secret, cut off at the end of a text,
/// count as the secret: a server truncates the arguments it echoes
/// ("with args beginning with: …"), which can cut a token short. Fewer
/// (or a whole secret shorter than this) is not scrubbed as a prefix.
const SECRET_PREFIX: usize = 8;

/// `error` with every secret scrubbed out of the text it carries: no
/// server error text carries a token or password out of the library,
/// whatever the server echoes (an unknown or renamed command echoes its
/// arguments). A server error keeps its code and kind; any other error with
/// a secret in its text becomes one of the same kind with the scrubbed text.
pub(crate) fn redact(error: NodeError, secrets: &[&str]) -> NodeError {
    match error {
        NodeError::Redis(e) => NodeError::Redis(redact_redis(e, secrets)),
        NodeError::UnexpectedReply(text) => NodeError::UnexpectedReply(scrub(&text, secrets)),
        other => other,
    }
}

pub(super) fn redact_redis(error: redis::RedisError, secrets: &[&str]) -> redis::RedisError {
    let text = error.to_string();
    if scrub(&text, secrets) == text {
        return error;
    }
    let from_server = matches!(error.kind(), ErrorKind::Server(_) | ErrorKind::Extension);
    if let Some(code) = error.code().filter(|_| from_server) {
        let detail = scrub(error.detail().unwrap_or_default(), secrets).replace(['\r', '\n'], " ");
        let line = format!("-{code} {detail}\r\n");
        if let Ok(value) = redis::parse_redis_value(line.as_bytes())
            && let Err(rebuilt) = value.extract_error()
        {
            return rebuilt;
        }
    }
    redis::RedisError::from((
        error.kind(),
        "error (secrets redacted)",
        scrub(&text, secrets),
    ))
}

/// `text` with each secret replaced by [`REDACTED`], and each run of a
/// secret's first [`SECRET_PREFIX`] or more characters too (an echo cut
/// short).
pub(super) fn scrub(text: &str, secrets: &[&str]) -> String {
    let mut out = text.to_owned();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        out = out.replace(secret, REDACTED);
        if secret.len() <= SECRET_PREFIX {
            continue;
        }
        let mut scrubbed = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(at) = find_prefix(rest, secret) {
            scrubbed.push_str(&rest[..at]);
            scrubbed.push_str(REDACTED);
            let len = common_prefix(&rest[at..], secret);
            rest = &rest[at + len..];
        }
        scrubbed.push_str(rest);
        out = scrubbed;
    }
    out
}

/// Where in `text` at least [`SECRET_PREFIX`] leading bytes of `secret`
/// start.
fn find_prefix(text: &str, secret: &str) -> Option<usize> {
    let head = secret.get(..SECRET_PREFIX)?;
    let mut from = 0;
    while let Some(found) = text[from..].find(head) {
        let at = from + found;
        if common_prefix(&text[at..], secret) >= SECRET_PREFIX {
            return Some(at);
        }
        from = at + head.len().max(1);
    }
    None
}

/// How many leading bytes `a` and `b` share, on a char boundary.
fn common_prefix(a: &str, b: &str) -> usize {
    a.char_indices()
        .zip(b.chars())
        .take_while(|((_, x), y)| x == y)
        .map(|((i, x), _)| i + x.len_utf8())
        .last()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::{ServerErrorKind, Value};

    use crate::node::{server_error, unexpected};

    #[test]
    fn long_unexpected_replies_are_truncated_on_a_char_boundary() {
        let value = Value::BulkString("é".repeat(100).into_bytes());
        let NodeError::UnexpectedReply(text) = unexpected(&value) else {
            panic!("wrong variant");
        };
        assert!(text.chars().count() <= 82, "{text}");
    }

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn scrubs_whole_secrets_and_echoes_cut_short() {
        let echo = format!(
            "unknown command `FCALL`, with args beginning with: `quorumlock_release`, `1`, `k`, `{TOKEN}`, "
        );
        assert_eq!(
            scrub(&echo, &[TOKEN]),
            "unknown command `FCALL`, with args beginning with: `quorumlock_release`, `1`, `k`, `***`, "
        );
        // The server cut the token off after 10 characters.
        let cut = format!("with args beginning with: `{}`", &TOKEN[..10]);
        assert_eq!(scrub(&cut, &[TOKEN]), "with args beginning with: `***`");
        // What `Token`'s Debug shows (4 characters) is not a secret.
        assert_eq!(scrub("`0123`", &[TOKEN]), "`0123`");
        // Several secrets, one of them short.
        assert_eq!(scrub("a pw b 0123456789ab", &["pw", TOKEN]), "a *** b ***");
        assert_eq!(scrub("nothing here", &[TOKEN, ""]), "nothing here");
    }

    #[test]
    fn redacted_server_errors_keep_their_code_and_kind() {
        for (line, kind) in [
            (
                format!(
                    "-ERR unknown command `SET`, with args beginning with: `k`, `{TOKEN}`, \r\n"
                ),
                ErrorKind::Server(ServerErrorKind::ResponseError),
            ),
            (
                format!("-NOPERM no permissions for {TOKEN}\r\n"),
                ErrorKind::Server(ServerErrorKind::NoPerm),
            ),
            (format!("-WEIRDCODE says {TOKEN}\r\n"), ErrorKind::Extension),
        ] {
            let original = server_error(&line);
            assert_eq!(original.kind(), kind);
            let NodeError::Redis(redacted) = redact(NodeError::Redis(original.clone()), &[TOKEN])
            else {
                panic!("wrong variant");
            };
            assert_eq!(redacted.kind(), kind, "{redacted}");
            assert_eq!(redacted.code(), original.code());
            for shown in [redacted.to_string(), format!("{redacted:?}")] {
                assert!(!shown.contains(&TOKEN[..SECRET_PREFIX]), "{shown}");
                assert!(shown.contains("***"), "{shown}");
            }
        }
    }

    #[test]
    fn other_errors_are_redacted_too_and_clean_ones_kept() {
        let io = redis::RedisError::from(std::io::Error::other(format!("peer said {TOKEN}")));
        let NodeError::Redis(redacted) = redact(NodeError::Redis(io), &[TOKEN]) else {
            panic!("wrong variant");
        };
        assert_eq!(redacted.kind(), ErrorKind::Io);
        assert!(!redacted.to_string().contains(TOKEN), "{redacted}");
        let clean = server_error("-ERR wrong number of arguments for 'set' command\r\n");
        let NodeError::Redis(kept) = redact(NodeError::Redis(clean.clone()), &[TOKEN]) else {
            panic!("wrong variant");
        };
        assert_eq!(kept.to_string(), clean.to_string());
        let NodeError::UnexpectedReply(text) =
            redact(NodeError::UnexpectedReply(format!("\"{TOKEN}\"")), &[TOKEN])
        else {
            panic!("wrong variant");
        };
        assert_eq!(text, "\"***\"");
    }
}
