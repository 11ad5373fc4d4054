//! TLS for testkit servers (features `testkit` and `tls`): a throwaway
//! certificate authority, server certificates it signs for `127.0.0.1` and
//! `localhost`, the files `redis-server` reads them from, and a check that
//! the binary was built with TLS.

use std::ffi::OsString;
use std::fmt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

use super::TestkitError;

/// A certificate authority made up for tests: its certificate (PEM) for
/// clients to trust, and its key to sign server certificates with.
///
/// Servers started with [`ServerOptions::tls`](super::ServerOptions::tls)
/// present certificates signed by the process-wide [`test_ca`]; a CA from
/// [`TestCa::generate`] is another, unrelated authority (for tests that a
/// client trusting the wrong CA is refused).
pub struct TestCa {
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl fmt::Debug for TestCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

impl TestCa {
    /// A new CA with a fresh key (ECDSA P-256).
    ///
    /// # Errors
    ///
    /// [`TestkitError::Tls`] if the key or certificate cannot be made.
    pub fn generate() -> Result<Self, TestkitError> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(tls_error)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "quorumlock testkit CA");
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().map_err(tls_error)?;
        let cert = params.self_signed(&key).map_err(tls_error)?;
        Ok(Self {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The CA's certificate, PEM-encoded: what a client must trust, e.g.
    /// with [`RedlockBuilder::tls_root_certificate`](crate::RedlockBuilder::tls_root_certificate).
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A server certificate for `127.0.0.1` and `localhost` and its key,
    /// both PEM-encoded.
    fn server_cert(&self) -> Result<(String, String), TestkitError> {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .map_err(tls_error)?;
        params
            .distinguished_name
            .push(DnType::CommonName, "quorumlock testkit server");
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate().map_err(tls_error)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(tls_error)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

/// The CA that signs the certificates of every TLS server this process
/// starts; generated on first use.
///
/// # Errors
///
/// [`TestkitError::Tls`] if it could not be generated.
pub fn test_ca() -> Result<&'static TestCa, TestkitError> {
    static CA: OnceLock<Result<TestCa, String>> = OnceLock::new();
    CA.get_or_init(|| TestCa::generate().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| TestkitError::Tls(e.clone()))
}

/// Writes a fresh server certificate signed by [`test_ca`], its key and
/// the CA's certificate into `dir`.
pub(super) fn write_files(dir: &Path) -> Result<(), TestkitError> {
    let ca = test_ca()?;
    let (cert, key) = ca.server_cert()?;
    std::fs::write(dir.join("ca.pem"), ca.cert_pem())?;
    std::fs::write(dir.join("server.pem"), cert)?;
    std::fs::write(dir.join("server.key"), key)?;
    Ok(())
}

/// The `redis-server` arguments that serve TLS only, on `port`, with the
/// files [`write_files`] put in `dir`.
pub(super) fn args(dir: &Path, port: u16) -> Vec<OsString> {
    let file = |name: &str| dir.join(name).into_os_string();
    vec![
        "--port".into(),
        "0".into(),
        "--tls-port".into(),
        port.to_string().into(),
        "--tls-cert-file".into(),
        file("server.pem"),
        "--tls-key-file".into(),
        file("server.key"),
        "--tls-ca-cert-file".into(),
        file("ca.pem"),
        // Clients authenticate with passwords, not certificates.
        "--tls-auth-clients".into(),
        "no".into(),
    ]
}

/// Fails with [`TestkitError::TlsUnsupported`] unless `binary` was built
/// with TLS (Debian's and most distributions' are; `make BUILD_TLS=yes`).
/// The answer is cached per process.
pub(super) fn check_support(binary: &Path) -> Result<(), TestkitError> {
    static SUPPORT: OnceLock<Result<(), String>> = OnceLock::new();
    SUPPORT
        .get_or_init(|| probe(binary))
        .clone()
        .map_err(|detail| TestkitError::TlsUnsupported {
            binary: binary.display().to_string(),
            detail,
        })
}

/// What a server built without TLS prints when asked to serve it: Redis
/// before 7.2 rejects the `tls-*` options ("Bad directive"); Redis 7.2 and
/// Valkey parse them and fail when they set up the TLS listener ("Failed
/// finding TLS support.", after Valkey 8's "Missing implement of
/// connection type tls").
const NO_TLS_MARKERS: [&str; 3] = [
    "Bad directive",
    "Failed finding TLS support",
    "Missing implement of connection type tls",
];

/// How long the probe waits for the binary to exit.
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// Starts the binary with a TLS port and certificate files that do not
/// exist, so that it exits at once either way: a build with TLS fails to
/// load the certificates ("Failed to configure TLS"), one without fails
/// with one of [`NO_TLS_MARKERS`]. A TLS port of 0 would not do: Valkey
/// and Redis 7.2 only look for TLS support when they open a TLS listener.
fn probe(binary: &Path) -> Result<(), String> {
    let port = super::ports::free_port().map_err(|e| format!("no port to probe with: {e}"))?;
    let missing = std::env::temp_dir().join("quorumlock-tls-probe-no-such-file");
    let mut child = Command::new(binary)
        .args(["--port", "0", "--tls-port", &port.to_string()])
        .arg("--tls-cert-file")
        .arg(missing.join("server.pem"))
        .arg("--tls-key-file")
        .arg(missing.join("server.key"))
        .arg("--tls-ca-cert-file")
        .arg(missing.join("ca.pem"))
        .args(["--save", "", "--appendonly", "no"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not run it: {e}"))?;
    let deadline = Instant::now() + PROBE_TIMEOUT;
    while child.try_wait().map_err(|e| e.to_string())?.is_none() {
        if Instant::now() >= deadline {
            // Still running: it loaded files that cannot exist? Not ours to
            // judge; stop it and let the real start report what it finds.
            let _ = child.kill();
            let _ = child.wait();
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child
        .wait_with_output()
        .map_err(|e| format!("could not read its output: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    unsupported(&text).map_or(Ok(()), Err)
}

/// `Some(why)` if `output` (a server's startup output) says it was built
/// without TLS.
fn unsupported(output: &str) -> Option<String> {
    let line = output
        .lines()
        .find(|line| NO_TLS_MARKERS.iter().any(|m| line.contains(m)))?;
    // The log prefix (pid, role, time) says nothing; keep the message.
    let message = line.rsplit_once(" # ").map_or(line, |(_, m)| m);
    Some(format!("built without TLS support ({})", message.trim()))
}

/// A client for `url` that trusts [`test_ca`].
pub(super) fn client(url: &str) -> redis::RedisResult<redis::Client> {
    crate::node::install_crypto_provider();
    let ca = test_ca().map_err(|e| {
        redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "no test CA",
            e.to_string(),
        ))
    })?;
    redis::Client::build_with_tls(
        url,
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(ca.cert_pem().as_bytes().to_vec()),
        },
    )
}

fn tls_error(e: rcgen::Error) -> TestkitError {
    TestkitError::Tls(e.to_string())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_binary_without_tls_is_detected() {
        let dir = tempfile::tempdir().expect("dir");
        let fake = dir.path().join("redis-server");
        // What redis-server built without TLS prints for `--tls-port`.
        std::fs::write(
            &fake,
            "#!/bin/sh\necho \"*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***\" >&2\n\
             echo \">>> 'tls-port \\\"0\\\"'\" >&2\n\
             echo 'Bad directive or wrong number of arguments' >&2\nexit 1\n",
        )
        .expect("write");
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let detail = probe(&fake).expect_err("no TLS");
        assert!(detail.contains("without TLS"), "{detail}");
    }

    #[test]
    fn what_each_server_without_tls_prints_is_recognised() {
        // Valkey 8.0.1 and 8.1.8 without TLS, for a nonzero --tls-port.
        let valkey = "23775:M 25 Nov 2026 17:22:08.525 * Running mode=standalone, port=46399.\n\
                      23775:M 25 Nov 2026 17:22:08.525 # Missing implement of connection type tls\n\
                      23775:M 25 Nov 2026 17:22:08.525 # Failed finding TLS support.\n";
        let detail = unsupported(valkey).expect("no TLS");
        assert_eq!(
            detail,
            "built without TLS support (Missing implement of connection type tls)"
        );
        assert!(unsupported("1:M 01 Jan 00:00:00.000 # Failed finding TLS support.").is_some());
        // A build with TLS fails on the missing certificate files instead.
        assert!(
            unsupported(
                "1:M 25 Nov 2026 17:22:25.647 # Failed to configure TLS. Check logs for more info."
            )
            .is_none()
        );
    }
}
