//! The admin HTTP(S) API on the data listener's IP at port + 1:
//! `GET /v1/health`, `/v1/ready`, `/v1/status`, `/v1/metrics`, and the drive changes
//! `POST /v1/drives/remove` and `/v1/drives/add`, which must be signed with the auth key
//! (`drives.rs`).
//!
//! The server provides its state through [`StatusSource`]; this module only serves it.
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use memkv_server::admin::{AdminError, AdminLimits, StatusSource, bind_admin, serve_admin};
//! # use memkv_server::config::ServerConfig;
//! # async fn start(config: ServerConfig, source: Arc<dyn StatusSource>) -> Result<(), AdminError> {
//! let listener = bind_admin(config.network.admin_address()).await?;
//! let shutdown = async {
//!     let _ = tokio::signal::ctrl_c().await;
//! };
//! let tls = config.network.tls.clone();
//! tokio::spawn(serve_admin(listener, tls, AdminLimits::default(), source, shutdown));
//! # Ok(())
//! # }
//! ```

mod connections;
mod drives;
pub mod model;
mod routes;
mod tls;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

pub use crate::config::TlsFiles;
pub use connections::AdminLimits;
pub use model::*;
pub use routes::router;
pub use tls::load_tls;

/// How long in-flight admin requests get to finish after shutdown is signalled.
const GRACEFUL_SHUTDOWN: Duration = Duration::from_secs(5);

/// What the admin API reports. Implemented by the server; methods must be cheap and must not
/// block (they run on the async runtime for every request).
pub trait StatusSource: Send + Sync + 'static {
    fn status(&self) -> StatusReport;
    fn health(&self) -> HealthReport;
    fn readiness(&self) -> Readiness;
    /// Brings gauges up to date just before `/v1/metrics` renders (capacity and the like).
    fn sync_metrics(&self) {}
    /// The key state-changing requests must be signed with; `None` refuses them all.
    fn admin_key(&self) -> Option<memkv_proto::AuthKey> {
        None
    }
    /// The instance id signed requests must name (`StatusReport::instance`); refused all
    /// without one, as without a key.
    fn instance(&self) -> Option<String> {
        None
    }
    /// Removes or adds the drive `media`. May block (it reads the drive): the API calls it on
    /// a blocking thread.
    fn change_drive(
        &self,
        action: DriveAction,
        media: &str,
    ) -> Result<DriveChangeReport, DriveChangeError> {
        let _ = media;
        Err(DriveChangeError::Refused(format!(
            "this server cannot {} drives",
            action.as_str()
        )))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("admin API: cannot listen on {address}: {source}")]
    Bind {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("admin API TLS file {}: {message}", path.display())]
    TlsFile { path: PathBuf, message: String },
    #[error("admin API TLS files {} and {}: {message}", cert.display(), key.display())]
    TlsPair {
        cert: PathBuf,
        key: PathBuf,
        message: String,
    },
    #[error("admin API: {0}")]
    Serve(std::io::Error),
}

/// Binds the admin listener; the error names the address.
pub async fn bind_admin(address: SocketAddr) -> Result<TcpListener, AdminError> {
    TcpListener::bind(address)
        .await
        .map_err(|source| AdminError::Bind { address, source })
}

/// Serves the admin API on `listener` until `shutdown` completes, over HTTPS when `tls` is
/// given (the files are read before anything is served, so bad files fail here at once),
/// within `limits` (`connections.rs`).
pub async fn serve_admin(
    listener: TcpListener,
    tls: Option<TlsFiles>,
    limits: AdminLimits,
    source: Arc<dyn StatusSource>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AdminError> {
    crate::metrics::install();
    let app = router(source).into_make_service();
    let local = listener.local_addr().ok();
    let rustls_config = tls.as_ref().map(load_tls).transpose()?;
    let std_listener = listener.into_std().map_err(AdminError::Serve)?;
    let handle = axum_server::Handle::new();
    let stopper = handle.clone();
    let stop_task = tokio::spawn(async move {
        shutdown.await;
        stopper.graceful_shutdown(Some(GRACEFUL_SHUTDOWN));
    });
    let admit = connections::LimitAcceptor::new(&limits);
    let server = axum_server::from_tcp(std_listener).handle(handle);
    let served = match rustls_config {
        None => {
            tracing::info!(address = ?local, "admin API listening (HTTP)");
            with_header_timeout(server.acceptor(admit), &limits)
                .serve(app)
                .await
        }
        Some(config) => {
            tracing::info!(address = ?local, "admin API listening (HTTPS)");
            let tls = axum_server::tls_rustls::RustlsAcceptor::new(
                axum_server::tls_rustls::RustlsConfig::from_config(config),
            )
            .acceptor(admit);
            with_header_timeout(server.acceptor(tls), &limits)
                .serve(app)
                .await
        }
    };
    stop_task.abort();
    served.map_err(AdminError::Serve)
}

fn with_header_timeout<A>(
    mut server: axum_server::Server<A>,
    limits: &AdminLimits,
) -> axum_server::Server<A> {
    server
        .http_builder()
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    server
}
