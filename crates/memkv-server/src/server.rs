//! Starting, running and stopping a server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{AuthKeySource, ConfigError, ConfigErrorKind, ServerConfig};
use crate::state::Shared;

/// Why a server did not start. Each names the thing that failed.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("auth key: {0}")]
    AuthKey(String),
    #[error("storage: {0}")]
    Store(#[from] memkv_store::StoreError),
    #[error("cannot listen on {address} (network.address): {source}")]
    Bind {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Admin(#[from] crate::admin::AdminError),
    #[error(
        "cannot bind the same-host transport's Unix socket (set network.shared_memory: false to run without it): {0}"
    )]
    LocalSocket(std::io::Error),
    #[error(transparent)]
    Congestion(#[from] crate::congestion::CongestionError),
    #[error("no random source for the server's instance id: {0}")]
    Random(String),
}

/// A running server. Dropping it without [`Server::shutdown`] leaves its tasks running on the
/// runtime until the runtime stops.
pub struct Server {
    shared: Arc<Shared>,
    admin_addr: SocketAddr,
    stop: watch::Sender<bool>,
    /// The admin API stops after the data plane has drained, so `/v1/ready` answers 503
    /// `draining` and `/v1/metrics` is scraped through the drain.
    stop_admin: watch::Sender<bool>,
    data_task: JoinHandle<()>,
    admin_task: JoinHandle<()>,
    reaper_task: JoinHandle<()>,
    /// The same-host transport's socket, when the arena is shared.
    local_task: Option<JoinHandle<()>>,
}

impl Server {
    /// Opens the store, binds the data and admin listeners and starts serving.
    pub async fn start(config: ServerConfig) -> Result<Server, StartError> {
        crate::metrics::install();
        let (key, source) = config
            .resolve_auth_key()
            .map_err(|e| StartError::AuthKey(e.to_string()))?;
        // Drawn afresh each start: signatures made for an earlier run no longer verify.
        let mut random = [0u8; memkv_proto::admin_auth::ADMIN_INSTANCE_LEN];
        getrandom::fill(&mut random).map_err(|e| StartError::Random(e.to_string()))?;
        let instance = memkv_proto::admin_auth::admin_instance_id(random);
        match &source {
            AuthKeySource::Config => tracing::info!("auth key from network.auth_key"),
            AuthKeySource::Env => tracing::info!("auth key from MEMKV_AUTH_KEY"),
            AuthKeySource::KeyFile {
                path,
                created: true,
            } => tracing::info!(
                path = %path.display(),
                "no network.auth_key configured: generated a key and stored it in this file (0600); local clients read it from there"
            ),
            AuthKeySource::KeyFile {
                path,
                created: false,
            } => {
                tracing::info!(path = %path.display(), "auth key from key file")
            }
        }
        let address = config.network.address;
        let bind_error = |source| StartError::Bind { address, source };
        // Listening now, so a port in use fails the start at once (a socket only bound would
        // share the port with another starting server). Until the store is open (a file-mode
        // replay can take minutes), each connection is refused as it arrives, so a client backs
        // off instead of waiting out its deadline on a handshake nobody answers.
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(bind_error)?;
        let data_addr = listener.local_addr().map_err(bind_error)?;
        if let Some(name) = &config.network.tcp_congestion {
            crate::congestion::apply(&listener, name)?;
            tracing::info!(algorithm = %name, "TCP congestion control of data connections (network.tcp_congestion)");
        }
        let (started, starting) = tokio::sync::oneshot::channel();
        let refusing = tokio::spawn(refuse_while_starting(listener, starting));
        let admin_listener = crate::admin::bind_admin(admin_address(&config, data_addr)).await?;
        let admin_addr = admin_listener
            .local_addr()
            .map_err(|source| StartError::Bind { address, source })?;
        let store_config = crate::store_config::store_config(&config);
        let store = tokio::task::spawn_blocking(move || memkv_store::Store::open(store_config))
            .await
            .expect("store open does not panic")?;
        if let Some(arena) = store.arena() {
            tracing::info!(bytes = arena.len, backing = ?arena.backing, "memory arena mapped");
        }
        let rdma_config = config.rdma.clone();
        let staging_chunk = config.memory.block_size.bytes();
        let staging_chunks = config.rdma.staging_size.bytes() / staging_chunk;
        let dc_key = key.dc_access_key();
        let prefault = config.memory.prefault;
        let (store, rdma) = tokio::task::spawn_blocking(move || {
            if prefault {
                prefault_arena(&store);
            }
            let remote = match store.arena_handle() {
                Some(arena) => crate::rdma::RemoteMemory::Arena(arena),
                None => crate::rdma::RemoteMemory::Staging {
                    chunk_size: staging_chunk as usize,
                    chunks: staging_chunks as usize,
                },
            };
            let rdma = crate::rdma::bring_up(&rdma_config, remote, dc_key);
            (store, rdma)
        })
        .await
        .expect("fabric discovery does not panic");
        // rdma.mtu above the port's active MTU: refused at start, on the key's line.
        let rdma = rdma.map_err(|refusal| {
            StartError::Config(config.error_at(ConfigErrorKind::InvalidValue, "rdma.mtu", refusal))
        })?;
        let tls = config.network.tls.clone();
        let local = crate::local::start(store.arena_handle()).map_err(StartError::LocalSocket)?;
        let (local, local_listener) = local.unzip();
        let _ = started.send(());
        let listener = refusing.await.expect("refusing connections does not panic");
        let shared = Shared::new(config, store, key, data_addr, rdma, local.clone(), instance);
        // The data listener serves from now on: health must say so from the admin API's first
        // answer, not once the data task first runs.
        shared
            .listener_up
            .store(true, std::sync::atomic::Ordering::Release);
        shared.sync_store_metrics();
        let (stop, stopped) = watch::channel(false);
        let (stop_admin, mut admin_stop) = watch::channel(false);

        let admin_source: Arc<dyn crate::admin::StatusSource> = shared.clone();
        let admin_task = tokio::spawn(async move {
            let shutdown = async move { self::stopped(&mut admin_stop).await };
            if let Err(e) = crate::admin::serve_admin(
                admin_listener,
                tls,
                crate::admin::AdminLimits::default(),
                admin_source,
                shutdown,
            )
            .await
            {
                tracing::error!(error = %e, "admin API stopped");
            }
        });
        let data_task = tokio::spawn(crate::data::serve(
            Arc::clone(&shared),
            listener,
            stopped.clone(),
        ));
        let local_task = local.zip(local_listener).map(|(local, listener)| {
            tokio::spawn(crate::local::socket::serve(
                local,
                listener,
                stopped.clone(),
            ))
        });
        let reaper_task = tokio::spawn(reap(Arc::clone(&shared), stopped));
        shared.set_ready();
        tracing::info!(data = %data_addr, admin = %admin_addr, mode = shared.config.storage.mode.as_str(), "memkv serving");
        Ok(Server {
            shared,
            admin_addr,
            stop,
            stop_admin,
            data_task,
            admin_task,
            reaper_task,
            local_task,
        })
    }

    /// The data listener's address (the real port when configured with port 0).
    pub fn data_addr(&self) -> SocketAddr {
        self.shared.data_address
    }

    /// The admin API's address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// This run's instance id, as `GET /v1/status` shows it (signed admin requests name it).
    pub fn instance(&self) -> &str {
        &self.shared.instance
    }

    /// Stops at once, as a crash would: every connection and queue pair is dropped mid-request,
    /// nothing is drained or flushed. For tests of what clients see when a server dies.
    pub fn kill(self) {
        self.data_task.abort();
        self.admin_task.abort();
        self.reaper_task.abort();
        if let Some(task) = self.local_task {
            task.abort();
        }
    }

    /// Stops accepting, lets in-flight requests finish, flushes the store and stops.
    pub async fn shutdown(self) -> Result<(), memkv_store::StoreError> {
        self.shared.set_draining();
        let _ = self.stop.send(true);
        let _ = self.data_task.await;
        let _ = self.reaper_task.await;
        let _ = self.stop_admin.send(true);
        let _ = self.admin_task.await;
        if let Some(task) = self.local_task {
            let _ = task.await;
        }
        let shared = Arc::clone(&self.shared);
        tokio::task::spawn_blocking(move || shared.store.close())
            .await
            .expect("store close does not panic")
    }
}

/// Answers each connection with a Busy refusal ("starting") until `started` fires (or the start
/// fails), then hands the listener back.
async fn refuse_while_starting(
    listener: tokio::net::TcpListener,
    mut started: tokio::sync::oneshot::Receiver<()>,
) -> tokio::net::TcpListener {
    loop {
        tokio::select! {
            biased;
            _ = &mut started => return listener,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => crate::data::refuse_busy(
                    stream,
                    "the server is starting (opening its store); try again shortly".into(),
                ),
                // Out of file descriptors and the like: back off instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            },
        }
    }
}

/// The admin address: the data IP at port + 1, or an ephemeral port when the data port was.
fn admin_address(config: &ServerConfig, data: SocketAddr) -> SocketAddr {
    let mut admin = config.network.admin_address();
    if config.network.address.port() == 0 {
        admin.set_ip(data.ip());
    }
    admin
}

async fn reap(shared: Arc<Shared>, mut stopped: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = self::stopped(&mut stopped) => return,
            _ = tick.tick() => {
                let s = Arc::clone(&shared);
                let _ = tokio::task::spawn_blocking(move || {
                    s.store.reap_expired();
                    s.store.discard_freed();
                    if let Some(staging) = s.staging() {
                        staging.reap(std::time::Instant::now());
                    }
                    s.sync_store_metrics();
                })
                .await;
            }
        }
    }
}

/// Runs a server until SIGINT or SIGTERM, then drains and returns.
pub async fn run_until_signal(config: ServerConfig) -> anyhow::Result<()> {
    // Handlers first: a SIGTERM that follows READY at once must start a drain, not kill the
    // process with the default action.
    let signals = Signals::install();
    let server = Server::start(config).await?;
    // A Type=notify unit counts the server as started only now, when both listeners serve.
    notify_systemd(sd_notify::NotifyState::Ready);
    signals.wait().await;
    tracing::info!("signal received: draining in-flight requests");
    notify_systemd(sd_notify::NotifyState::Stopping);
    server.shutdown().await?;
    // The last OTLP export (a no-op without MEMKV_OTEL_ENDPOINT); it blocks on the network.
    tokio::task::spawn_blocking(crate::otel::shutdown)
        .await
        .expect("OTLP shutdown does not panic");
    tracing::info!("stopped cleanly");
    Ok(())
}

/// Tells the service manager about a state change when it asked to be told (NOTIFY_SOCKET);
/// failing to tell it only costs a log line.
fn notify_systemd(state: sd_notify::NotifyState<'_>) {
    if let Err(e) = sd_notify::notify(&[state]) {
        tracing::warn!("cannot notify the service manager (NOTIFY_SOCKET): {e}");
    }
}

/// SIGTERM and SIGINT, caught from the moment they are installed.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Signals {
        use tokio::signal::unix::{SignalKind, signal};
        Signals {
            term: signal(SignalKind::terminate()).expect("SIGTERM handler"),
            int: signal(SignalKind::interrupt()).expect("SIGINT handler"),
        }
    }

    async fn wait(mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// Resolves once the stop flag is set (or its sender is gone).
pub(crate) async fn stopped(flag: &mut watch::Receiver<bool>) {
    let _ = flag.wait_for(|stop| *stop).await;
}

/// Populates the memory arena with one thread per CPU before RDMA registers it (registration
/// would fault every page in on one thread) and before clients write into it.
fn prefault_arena(store: &memkv_store::Store) {
    if store.arena().is_none() {
        return;
    }
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(memkv_store::MAX_PREFAULT_THREADS);
    match store.prefault(threads) {
        Ok(report) => tracing::info!(
            bytes = report.bytes,
            threads = report.threads,
            method = ?report.method,
            elapsed_ms = report.elapsed.as_millis() as u64,
            "memory arena prefaulted"
        ),
        // Not fatal: pages are then populated on first use, as without prefault.
        Err(e) => {
            tracing::warn!(error = %e, "memory arena not prefaulted; pages fill on first use")
        }
    }
}
