//! `memkv start`: load the configuration, set up logging, serve until a signal.

use std::io::IsTerminal;
use std::path::Path;

use memkv_server::config::ServerConfig;
use tracing_subscriber::EnvFilter;

use crate::exit::{self, Exit};

pub fn start(config_path: Option<&Path>) -> Result<(), Exit> {
    let config = ServerConfig::load_for_start(config_path)
        .map_err(|e| Exit::with(exit::FAILURE, e.to_string()))?;
    // RUST_LOG, when set, replaces the configured level.
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.is_empty() => EnvFilter::try_new(&directives)
            .map_err(|e| Exit::with(exit::USAGE, format!("RUST_LOG: {e}")))?,
        _ => EnvFilter::try_new(&config.logging.level).map_err(|e| {
            Exit::with(
                exit::FAILURE,
                format!("{}: logging.level: {e}", config.source_name),
            )
        })?,
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = config.network.threads {
        runtime.worker_threads(threads);
    }
    let runtime = runtime.enable_all().build()?;
    tracing::info!(
        "serving connections on {} runtime threads",
        config
            .network
            .threads
            .map_or_else(|| "one per CPU".to_owned(), |n| n.to_string())
    );
    runtime.block_on(memkv_server::run_until_signal(config))?;
    Ok(())
}

/// Client commands log only errors unless RUST_LOG asks for more.
pub fn init_client_logging() {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|d| EnvFilter::try_new(d).ok())
        .unwrap_or_else(|| EnvFilter::new("error"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
