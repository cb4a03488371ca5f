//! TLS for `wss://` targets: the webpki roots, plus a CA file, or no verification at all.

use super::error::SetupError;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::sync::Arc;
use wsload_spec::Tls;

pub fn client_config(tls: Option<&Tls>) -> Result<ClientConfig, SetupError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| SetupError::field("spec.tls", e))?;
    if tls.is_some_and(|t| t.insecure_skip_verify) {
        return Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
            .with_no_client_auth());
    }
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = tls.and_then(|t| t.ca_file.as_deref()) {
        let pem = wsload_spec::file::read_bounded(path, MAX_CA_FILE_BYTES, "a CA file")
            .map_err(|e| SetupError::field("spec.tls.caFile", e))?;
        let certs = CertificateDer::pem_slice_iter(&pem)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| SetupError::field(format!("spec.tls.caFile {path:?}"), e))?;
        if certs.is_empty() {
            return Err(SetupError::NoCertificate {
                path: path.to_string(),
            });
        }
        for c in certs {
            roots
                .add(c)
                .map_err(|e| SetupError::field(format!("spec.tls.caFile {path:?}"), e))?;
        }
    }
    Ok(builder.with_root_certificates(roots).with_no_client_auth())
}

/// The most `spec.tls.caFile` may hold: a whole system bundle is ~200 KiB.
const MAX_CA_FILE_BYTES: u64 = 4 << 20;

/// `insecureSkipVerify`: accepts any certificate, still checks handshake signatures.
#[derive(Debug)]
struct NoVerification(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use crate::connect::Dialer;
    use futures_util::StreamExt;
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::PrivateKeyDer;
    use rustls::pki_types::pem::PemObject;
    use std::net::ToSocketAddrs;
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::sync::Arc;
    use tokio::net::TcpListener;
    use tokio_rustls::TlsAcceptor;
    use wsload_report::measure::ConnectError;

    /// A CA and a `localhost` certificate it signed, made by the openssl command line (a real
    /// chain, not one the code under test could have agreed with itself on).
    fn certificates(dir: &Path) {
        let run = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(dir)
                .output()
                .expect("run openssl");
            assert!(out.status.success(), "openssl {args:?}: {out:?}");
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        run(&[
            &["req", "-x509"][..],
            &ec,
            &["-days", "1", "-subj", "/CN=wsload test CA"],
            &["-keyout", "ca.key", "-out", "ca.pem"],
        ]
        .concat());
        run(&[
            &["req"][..],
            &ec,
            &[
                "-subj",
                "/CN=localhost",
                "-keyout",
                "leaf.key",
                "-out",
                "leaf.csr",
            ],
        ]
        .concat());
        std::fs::write(
            dir.join("leaf.ext"),
            "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n",
        )
        .expect("write leaf.ext");
        run(&[
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "leaf.ext",
            "-out",
            "leaf.pem",
        ]);
    }

    /// A `wss://` server on `localhost`: TLS with the leaf certificate, then a WebSocket
    /// handshake, held open until the client goes.
    async fn server(dir: &Path) -> u16 {
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(dir.join("leaf.pem"))
                .expect("leaf.pem")
                .collect::<Result<_, _>>()
                .expect("leaf cert");
        let key = PrivateKeyDer::from_pem_file(dir.join("leaf.key")).expect("leaf.key");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
        let acceptor = TlsAcceptor::from(Arc::new(config));
        // Where the dialer will connect: localhost's first address.
        let addr = ("localhost", 0)
            .to_socket_addrs()
            .expect("resolve localhost")
            .next()
            .expect("an address");
        let listener = TcpListener::bind(addr).await.expect("bind");
        let port = listener.local_addr().expect("local addr").port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    if let Ok(mut ws) = tokio_tungstenite::accept_async(tls).await {
                        while ws.next().await.is_some() {}
                    }
                });
            }
        });
        port
    }

    fn dialer(port: u16, tls: &str) -> Dialer {
        let url = format!("wss://localhost:{port}/");
        let spec = format!("  target: {{url: '{url}'}}\n  scenario: throughput\n{tls}");
        Dialer::new(&wsload_spec::fixtures::spec(&spec), &url).expect("dialer")
    }

    #[tokio::test]
    async fn wss_trusts_the_ca_file_and_only_it() {
        let dir: PathBuf = std::env::temp_dir().join(format!("wsload-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        certificates(&dir);
        let port = server(&dir).await;
        let ca = dir.join("ca.pem");

        let trusted = dialer(port, &format!("  tls: {{caFile: '{}'}}\n", ca.display()));
        assert!(trusted.dial(0).await.is_ok(), "TLS and upgrade with caFile");
        // The webpki roots alone do not know the test CA.
        let untrusted = dialer(port, "");
        assert_eq!(
            untrusted.dial(1).await.err().map(|e| e.why),
            Some(ConnectError::Tls)
        );
        let skip = dialer(port, "  tls: {insecureSkipVerify: true}\n");
        assert!(skip.dial(2).await.is_ok(), "insecureSkipVerify accepts it");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
