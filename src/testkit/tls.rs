//! TLS for testkit servers (features `testkit` and `tls`): a throwaway
//! certificate authority, server certificates it signs for `127.0.0.1` and
//! `localhost`, the files `redis-server` reads them from, and a check that
//! the binary was built with TLS.

use std::ffi::OsString;
use std::fmt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

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

/// Starts the binary with a TLS option and nothing to listen on: a build
/// with TLS exits at once ("not listen anywhere"), one without rejects the
/// option as a bad directive.
fn probe(binary: &Path) -> Result<(), String> {
    let output = Command::new(binary)
        .args([
            "--port",
            "0",
            "--tls-port",
            "0",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("could not run it: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if text.contains("Bad directive") || text.contains("TLS") && text.contains("not supported") {
        let line = text
            .lines()
            .find(|line| line.contains("tls") || line.contains("TLS") || line.contains("Bad"))
            .unwrap_or_default();
        return Err(format!("built without TLS support ({})", line.trim()));
    }
    Ok(())
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
}
