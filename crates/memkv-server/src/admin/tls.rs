//! Loads the admin API's PEM certificate chain and key into a rustls server config (ring).

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::AdminError;
use crate::config::TlsFiles;

/// A PEM file larger than this is not a certificate chain or key.
const MAX_PEM_BYTES: u64 = 1 << 20;

/// Reads and checks both files; every error names the file at fault.
pub fn load_tls(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, AdminError> {
    let cert_pem = read_pem(&files.cert)?;
    let certs = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_file_error(&files.cert, format!("bad PEM certificate: {e}")))?;
    if certs.is_empty() {
        return Err(tls_file_error(&files.cert, "no CERTIFICATE block found"));
    }
    let key_pem = read_pem(&files.key)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| tls_file_error(&files.key, format!("no usable PEM private key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_file_error(&files.cert, e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| AdminError::TlsPair {
            cert: files.cert.clone(),
            key: files.key.clone(),
            message: e.to_string(),
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

fn read_pem(path: &Path) -> Result<Vec<u8>, AdminError> {
    let metadata = std::fs::metadata(path).map_err(|e| tls_file_error(path, e.to_string()))?;
    if metadata.len() > MAX_PEM_BYTES {
        return Err(tls_file_error(
            path,
            format!(
                "file is {} bytes; expected a PEM file under {MAX_PEM_BYTES}",
                metadata.len()
            ),
        ));
    }
    std::fs::read(path).map_err(|e| tls_file_error(path, e.to_string()))
}

fn tls_file_error(path: &Path, message: impl Into<String>) -> AdminError {
    AdminError::TlsFile {
        path: path.to_owned(),
        message: message.into(),
    }
}
