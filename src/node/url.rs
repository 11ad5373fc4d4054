//! Node URLs: parsing with errors that name the cause (and never the
//! password), TLS roots, and the labels nodes go by in errors and metrics.

use redis::{ConnectionAddr, ConnectionInfo};

use crate::error::ConfigError;
use crate::node::options::NodeOptions;

/// Parses one URL into a client, without connecting. A `rediss://` URL
/// trusts the configured CA if there is one, else Mozilla's root CAs;
/// turning verification off (`#insecure`) is refused.
pub(super) fn open(url: &str, options: &NodeOptions) -> Result<redis::Client, ConfigError> {
    let client = redis::Client::open(url).map_err(|e| ConfigError::MalformedUrl {
        url: redact_url(url),
        reason: url_problem(url, &e),
    })?;
    let info = client.get_connection_info();
    if let ConnectionAddr::TcpTls { insecure: true, .. } = info.addr() {
        return Err(ConfigError::InsecureTls {
            url: redact_url(url),
        });
    }
    #[cfg(feature = "tls")]
    if let (Some(roots), true) = (&options.tls_roots, is_tls(info)) {
        return redis::Client::build_with_tls(info.clone(), tls_certificates(roots)).map_err(|e| {
            ConfigError::TlsRootCertificate {
                reason: e.to_string(),
            }
        });
    }
    #[cfg(not(feature = "tls"))]
    let _ = options;
    Ok(client)
}

pub(super) fn is_tls(info: &ConnectionInfo) -> bool {
    matches!(info.addr(), ConnectionAddr::TcpTls { .. })
}

#[cfg(feature = "tls")]
pub(super) fn tls_certificates(roots: &[u8]) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(roots.to_vec()),
    }
}

/// Makes sure rustls has a process-wide crypto provider before the first
/// TLS connection: the redis crate asks rustls for the default one, and
/// rustls cannot pick one by itself (it panics) when the dependency graph
/// enables several, e.g. ring through quorumlock and aws-lc-rs through
/// another crate. A provider the application installed first is kept.
#[cfg(feature = "tls")]
pub(crate) fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Fails only when another thread installed one meanwhile: fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Without TLS there is no provider to install.
#[cfg(not(feature = "tls"))]
pub(crate) fn install_crypto_provider() {}

/// `host:port`, with `/db` when not 0: never credentials.
pub(super) fn label(info: &ConnectionInfo) -> String {
    let db = info.redis_settings().db();
    if db == 0 {
        info.addr().to_string()
    } else {
        format!("{}/{db}", info.addr())
    }
}

/// The schemes the redis crate takes for a node URL.
const SCHEMES: [&str; 7] = [
    "redis",
    "rediss",
    "valkey",
    "valkeys",
    "redis+unix",
    "valkey+unix",
    "unix",
];

/// Names what is wrong with a node URL the redis crate refused, whose own
/// message ("Redis URL did not parse") names no cause. Never echoes user
/// information: at most the scheme and the port are quoted, and the port
/// only when the URL's user information is where [`redact_url`] masks it.
fn url_problem(url: &str, parser: &redis::RedisError) -> String {
    const SHAPE: &str = "write redis://[user:password@]host:port[/db], or rediss:// for TLS";
    let trimmed = url.trim();
    if trimmed.is_empty() {
        return format!("the url is empty; {SHAPE}");
    }
    // The parser ignores spaces around the URL.
    let url = trimmed;
    let scheme_ok = |scheme: &str| {
        scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    };
    let Some((scheme, rest)) = url.split_once("://").filter(|(s, _)| scheme_ok(s)) else {
        return format!("no scheme; {SHAPE}");
    };
    let lower = scheme.to_ascii_lowercase();
    if !SCHEMES.contains(&lower.as_str()) {
        return format!("unsupported scheme `{scheme}://`; {SHAPE}");
    }
    if lower.ends_with("unix") {
        return parser_says(parser);
    }
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    // An '@' past the authority means a password with a '/' in it: quote nothing.
    let may_quote = !rest[authority_end..].contains('@');
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let (host, port) = match host_port.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, after)) => (host, after.strip_prefix(':')),
            None => return format!("an IPv6 host is missing its closing `]`; {SHAPE}"),
        },
        None => match host_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        },
    };
    if host.is_empty() {
        return format!("no host; {SHAPE}");
    }
    if let Some(port) = port.filter(|p| !p.is_empty()) {
        if !port.chars().all(|c| c.is_ascii_digit()) {
            return "the port is not a number (1-65535)".to_owned();
        }
        if port.parse::<u16>().is_err() {
            return if may_quote && port.len() <= 12 {
                format!("port {port} is out of range (1-65535)")
            } else {
                "the port is out of range (1-65535)".to_owned()
            };
        }
    }
    parser_says(parser)
}

/// The redis crate's own reason, without its error kind's name.
fn parser_says(parser: &redis::RedisError) -> String {
    let text = parser.to_string();
    // "DESCRIPTION - KIND[: DETAIL]"
    let description = text.split_once(" - ").map_or(text.as_str(), |(d, _)| d);
    let reason = match parser.detail() {
        Some(detail) => format!("{description}: {detail}"),
        None => description.to_owned(),
    };
    if reason == "Redis URL did not parse" {
        "not a valid url; write redis://[user:password@]host:port[/db], or rediss:// for TLS"
            .to_owned()
    } else {
        // The parser's message names what is wrong, not the URL itself.
        reason
    }
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
    use std::time::Duration;

    use super::*;
    use crate::node::Node;

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
        let node = Node::parse(
            "redis://alice:s3cret@127.0.0.1:6379/3",
            &NodeOptions::default(),
        )
        .expect("valid url");
        assert_eq!(&**node.label(), "127.0.0.1:6379/3");
        assert_eq!(format!("{node:?}"), "127.0.0.1:6379/3");
    }

    #[test]
    fn cluster_labels_list_the_seeds_without_credentials() {
        let node = Node::cluster(
            &[
                "redis://:s3cret@127.0.0.1:7000",
                "redis://:s3cret@127.0.0.1:7001",
                "redis://:s3cret@127.0.0.1:7000",
            ],
            Duration::from_millis(250),
            &NodeOptions::default(),
        )
        .expect("valid seeds");
        assert!(node.is_cluster());
        assert_eq!(&**node.label(), "cluster(127.0.0.1:7000,127.0.0.1:7001)");
        assert_eq!(node.addresses(), ["127.0.0.1:7000", "127.0.0.1:7001"]);
        assert!(!format!("{node:?}").contains("s3cret"));
        assert!(
            !Node::parse("redis://h:1", &NodeOptions::default())
                .expect("valid")
                .is_cluster()
        );
    }

    #[test]
    fn cluster_seeds_are_validated_without_leaking_credentials() {
        let timeout = Duration::from_millis(250);
        let no_seeds: [&str; 0] = [];
        assert_eq!(
            Node::cluster(&no_seeds, timeout, &NodeOptions::default()).err(),
            Some(ConfigError::EmptyCluster)
        );
        match Node::cluster(
            &["redis://h:1", "redis://u:hunter2@h:x"],
            timeout,
            &NodeOptions::default(),
        ) {
            Err(ConfigError::MalformedUrl { url, .. }) => assert!(!url.contains("hunter2")),
            other => panic!("expected MalformedUrl, got {other:?}"),
        }
        match Node::cluster(
            &["redis://:hunter2@h:1", "redis://:other@h:2"],
            timeout,
            &NodeOptions::default(),
        ) {
            Err(e @ ConfigError::InvalidCluster { .. }) => {
                let text = e.to_string();
                assert!(
                    !text.contains("hunter2") && !text.contains("other"),
                    "{text}"
                );
            }
            other => panic!("expected InvalidCluster, got {other:?}"),
        }
    }

    #[test]
    fn malformed_urls_are_config_errors_without_the_password() {
        for url in ["", "http://a:b@h:1", "redis://user:hunter2@:notaport"] {
            match Node::parse(url, &NodeOptions::default()) {
                Err(ConfigError::MalformedUrl { url: shown, .. }) => {
                    assert!(!shown.contains("hunter2"), "{shown}");
                }
                other => panic!("{url:?}: expected MalformedUrl, got {other:?}"),
            }
        }
    }

    fn url_reason(url: &str) -> String {
        match Node::parse(url, &NodeOptions::default()) {
            Err(ConfigError::MalformedUrl { reason, .. }) => reason,
            other => panic!("{url:?}: expected MalformedUrl, got {other:?}"),
        }
    }

    #[test]
    fn malformed_urls_name_the_cause() {
        for (url, cause) in [
            ("", "the url is empty"),
            (" redis://h:99999 ", "port 99999 is out of range"),
            ("127.0.0.1:6379", "no scheme"),
            ("localhost:6379", "no scheme"),
            ("alice:hunter2@h:6379", "no scheme"),
            ("http://h:6379", "unsupported scheme `http://`"),
            (
                "https://alice:hunter2@h:6379",
                "unsupported scheme `https://`",
            ),
            ("redis://h:99999", "port 99999 is out of range (1-65535)"),
            (
                "redis://alice:hunter2@h:70000/0",
                "port 70000 is out of range",
            ),
            ("redis://[::1]:65536", "port 65536 is out of range"),
            ("redis://user:hunter2@:notaport", "no host"),
            ("redis://h:port", "the port is not a number"),
            ("redis://:6379", "no host"),
            ("redis://[::1:6379", "closing `]`"),
        ] {
            let reason = url_reason(url);
            assert!(reason.contains(cause), "{url:?}: {reason}");
            assert!(!reason.contains("hunter2"), "{url:?}: {reason}");
            assert!(!reason.contains("InvalidClientConfig"), "{url:?}: {reason}");
        }
        // Every hint names the scheme to use.
        assert!(url_reason("127.0.0.1:6379").contains("redis://"));
        // A password with a '/' in it hides the user information from the
        // masking: then the port is not quoted either.
        let reason = url_reason("redis://u:99999/x@h:1");
        assert!(!reason.contains("99999"), "{reason}");
    }
}
