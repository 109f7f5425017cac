//! GETs a JSON document from a server's admin API, or POSTs a signed request to it, over HTTP
//! or HTTPS (hyper's client with rustls and ring), the response body bounded in size.
//!
//! HTTPS trusts, in this order: the CA certificates of `--tls-ca PATH` (a PEM file: the
//! server's self-signed certificate or the CA that issued it); otherwise the system's trust
//! store. `--insecure` skips verifying the server's certificate (the connection is still
//! encrypted, but anyone in the path can impersonate the server).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};

/// Largest response accepted (a status document is a few KiB).
const MAX_RESPONSE: usize = 4 << 20;

/// How to reach admin APIs: plain HTTP, or HTTPS and what to trust.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// Speak HTTPS (implied by `ca` and `insecure`).
    pub https: bool,
    /// PEM file of the certificates to trust instead of the system's.
    pub ca: Option<PathBuf>,
    /// Accept any server certificate.
    pub insecure: bool,
}

impl TlsOptions {
    pub fn uses_https(&self) -> bool {
        self.https || self.ca.is_some() || self.insecure
    }
}

/// A response: status code and body.
#[derive(Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// An HTTP(S) client for admin APIs; one serves every server of a command.
pub struct AdminClient {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    scheme: &'static str,
}

impl AdminClient {
    pub fn new(options: &TlsOptions) -> Result<AdminClient, String> {
        let tls = tls_config(options)?;
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        Ok(AdminClient {
            client: Client::builder(TokioExecutor::new()).build(connector),
            scheme: if options.uses_https() {
                "https"
            } else {
                "http"
            },
        })
    }

    /// `GET path` from `address` (host:port) within `deadline`.
    pub async fn get(
        &self,
        address: &str,
        path: &str,
        deadline: Duration,
    ) -> Result<Response, String> {
        self.send(address, "GET", path, &[], Vec::new(), deadline)
            .await
    }

    /// `POST path` with `body` and the extra `headers` to `address` within `deadline`.
    pub async fn post(
        &self,
        address: &str,
        path: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
        deadline: Duration,
    ) -> Result<Response, String> {
        self.send(address, "POST", path, headers, body, deadline)
            .await
    }

    async fn send(
        &self,
        address: &str,
        method: &str,
        path: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
        deadline: Duration,
    ) -> Result<Response, String> {
        let url = format!("{}://{address}{path}", self.scheme);
        let uri: hyper::Uri = url.parse().map_err(|e| format!("bad URL {url:?}: {e}"))?;
        let mut request = hyper::Request::builder().method(method).uri(uri);
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        if !body.is_empty() {
            request = request.header("content-type", "application/json");
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("{url}: {e}"))?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| format!("{url}: {}", error_chain(&e)))?;
            let status = response.status().as_u16();
            let body = Limited::new(response.into_body(), MAX_RESPONSE)
                .collect()
                .await
                .map_err(|e| format!("{url}: reading the response: {e}"))?
                .to_bytes()
                .to_vec();
            Ok(Response { status, body })
        };
        tokio::time::timeout(deadline, exchange)
            .await
            .map_err(|_| format!("{url}: no answer within {deadline:?}"))?
    }
}

/// The error and its causes, `: `-separated ("client error (Connect): tcp connect error:
/// Connection refused"), so TLS and connection failures say what went wrong.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The rustls client configuration `options` ask for.
pub fn tls_config(options: &TlsOptions) -> Result<rustls::ClientConfig, String> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let config = if options.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider())))
            .with_no_client_auth()
    } else {
        let roots = match &options.ca {
            Some(path) => roots_from_file(path)?,
            None => system_roots(),
        };
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    Ok(config)
}

fn roots_from_file(path: &Path) -> Result<rustls::RootCertStore, String> {
    let named = |e: &dyn std::fmt::Display| format!("--tls-ca {}: {e}", path.display());
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| named(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| named(&e))?;
    if certs.is_empty() {
        return Err(named(&"no CERTIFICATE block found"));
    }
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs {
        roots.add(cert).map_err(|e| named(&e))?;
    }
    Ok(roots)
}

/// The system's trust store; certificates it cannot parse are skipped.
fn system_roots() -> rustls::RootCertStore {
    let found = rustls_native_certs::load_native_certs();
    for e in &found.errors {
        tracing::debug!(error = %e, "system trust store");
    }
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    roots
}

/// `--insecure`: every certificate is accepted; handshake signatures are still checked, so
/// the session is encrypted to whoever holds the presented certificate's key.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
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
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_is_implied_by_its_options() {
        assert!(!TlsOptions::default().uses_https());
        let ca = TlsOptions {
            ca: Some("/x".into()),
            ..TlsOptions::default()
        };
        assert!(ca.uses_https());
        let insecure = TlsOptions {
            insecure: true,
            ..TlsOptions::default()
        };
        assert!(insecure.uses_https());
    }

    #[test]
    fn a_missing_or_empty_ca_file_is_named() {
        let missing = TlsOptions {
            ca: Some("/nonexistent/ca.pem".into()),
            ..TlsOptions::default()
        };
        let e = tls_config(&missing).unwrap_err();
        assert!(e.contains("--tls-ca /nonexistent/ca.pem"), "{e}");
        let empty = std::env::temp_dir().join(format!("memkv-empty-ca-{}.pem", std::process::id()));
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = tls_config(&TlsOptions {
            ca: Some(empty.clone()),
            ..TlsOptions::default()
        })
        .unwrap_err();
        assert!(e.contains("no CERTIFICATE"), "{e}");
        std::fs::remove_file(empty).unwrap();
    }

    #[tokio::test]
    async fn a_refused_connection_says_so() {
        let unused = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = unused.local_addr().unwrap().to_string();
        drop(unused);
        let client = AdminClient::new(&TlsOptions::default()).unwrap();
        let e = client
            .get(&address, "/v1/status", Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(e.contains(&format!("http://{address}/v1/status")), "{e}");
        assert!(e.to_lowercase().contains("refused"), "{e}");
    }
}
