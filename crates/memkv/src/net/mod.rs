//! `memkv net show` (from memkv-fabric), `memkv net verify` and `memkv net doctor` ([`doctor`]).

pub mod doctor;
mod settings;

use memkv_fabric::{ShowFilter, net_show_system};
use std::path::Path;

use std::time::Instant;

use memkv_client::{Client, ConfigSources, Setting, Transport};

use crate::exit::{self, Exit};

/// Ports as planned with the server's settings on a server node (`config`, else the default
/// config file when it exists), else the client's; which file and variables were read comes
/// first (on stderr with `--json`, so the JSON stays one document).
pub fn show(
    device: Option<String>,
    port: Option<u8>,
    json: bool,
    config: Option<&Path>,
) -> Result<(), Exit> {
    let settings = settings::FabricSettings::load(config, None)?;
    let filter = ShowFilter { device, port };
    match net_show_system(&settings.primary(), &filter) {
        Ok(show) => {
            let text = if json { show.json() } else { show.text() };
            if json {
                eprintln!("{}", settings.describe().trim_end());
            } else {
                out!("{}", settings.describe());
            }
            out!("{text}");
            if !text.ends_with('\n') {
                outln!();
            }
            match show.exit_code() {
                0 => Ok(()),
                code => Err(Exit::silent(code)),
            }
        }
        Err(e) => Err(Exit::with(e.exit_code(), e.to_string())),
    }
}

/// The class a rail's queue pairs send in: what decides whether its transfers are lossless.
fn rail_class(rail: &memkv_client::RailStats) -> String {
    match rail.traffic_class {
        Some(tc) => format!(
            "traffic class {tc} (DSCP {}), service level {}",
            tc >> 2,
            rail.service_level
        ),
        None => format!("service level {}", rail.service_level),
    }
}

/// What `memkv net verify` was asked to check.
pub struct VerifyArgs {
    pub server: String,
    pub device: Option<String>,
    pub auth_key: Option<String>,
    pub size: usize,
    pub require_rdma: bool,
}

fn failed(code: i32, reason: impl std::fmt::Display) -> Exit {
    Exit::with(code, format!("net verify FAILED: {reason}"))
}

/// Connects, authenticates, writes a random block, reads it back and compares.
pub async fn verify(args: VerifyArgs) -> Result<(), Exit> {
    let overrides = |name: &str| match name {
        "MEMKV_SERVERS" => Some(Setting::new(args.server.clone(), "--server")),
        "MEMKV_AUTH_KEY" => args.auth_key.clone().map(|k| Setting::new(k, "--auth-key")),
        "MEMKV_RDMA_DEVICES" => args.device.clone().map(|d| Setting::new(d, "--device")),
        _ => None,
    };
    let mut config = ConfigSources::load(&overrides)
        .and_then(|sources| sources.config())
        .map_err(|e| failed(exit::FAILURE, e))?;
    if args.require_rdma {
        config.transport = Transport::Rdma;
    }
    let client = Client::connect(config)
        .await
        .map_err(|e| failed(exit::for_error(&e), e))?;
    // An authenticated round trip before any data: a wrong key fails here, by name.
    let rtt = client
        .ping(&args.server)
        .await
        .map_err(|e| failed(exit::for_error(&e), e))?;
    outln!("server            : {}", args.server);
    outln!(
        "authenticated     : yes (round trip {:.2} ms)",
        rtt.as_secs_f64() * 1e3
    );
    let mut block = vec![0u8; args.size];
    getrandom::fill(&mut block)
        .map_err(|e| failed(exit::FAILURE, format!("no random source: {e}")))?;
    let mut name = [0u8; 8];
    getrandom::fill(&mut name)
        .map_err(|e| failed(exit::FAILURE, format!("no random source: {e}")))?;
    let key = format!(
        "memkv-net-verify/{}",
        name.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    let started = Instant::now();
    client
        .put(key.as_bytes(), &block)
        .await
        .map_err(|e| failed(exit::for_error(&e), e))?;
    let wrote = started.elapsed();
    let started = Instant::now();
    let back = client
        .get(key.as_bytes())
        .await
        .map_err(|e| failed(exit::for_error(&e), e))?;
    let read = started.elapsed();
    let _ = client.delete(key.as_bytes()).await;
    let rails = client.rdma_rail_stats();
    let qp_transport = match client.transport() {
        "rdma" if rails.iter().any(|r| r.transport == "DC") => "DC",
        "rdma" => "RC",
        _ => "TCP",
    };
    let transport = match client.transport() {
        "rdma" => rails
            .iter()
            .map(|r| {
                format!(
                    "{} over {} ({}; {})",
                    r.transport,
                    r.device,
                    r.transport_reason,
                    rail_class(r)
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
        _ => format!(
            "TCP (RDMA not used: {})",
            client
                .rdma_fallback_reason()
                .unwrap_or_else(|| "unknown".into())
        ),
    };
    outln!("transport         : {transport}");
    match back {
        Some(bytes) if bytes == block => {}
        Some(_) => {
            return Err(failed(
                exit::FAILURE,
                "the block read back differs from the block written",
            ));
        }
        None => {
            return Err(failed(
                exit::FAILURE,
                "the block written is missing when read back",
            ));
        }
    }
    if args.require_rdma && client.transport() != "rdma" {
        return Err(failed(
            exit::RDMA_UNAVAILABLE,
            format!("RDMA required but not used: {transport}"),
        ));
    }
    // Naming a device asks for RDMA: VERIFIED means the addressing, partition and MTU agree
    // end to end, which a TCP fall-back proves nothing about.
    if let Some(device) = &args.device
        && client.transport() != "rdma"
    {
        return Err(failed(
            exit::RDMA_UNAVAILABLE,
            format!("--device {device} asks for RDMA, but the block moved over {transport}"),
        ));
    }
    outln!(
        "VERIFIED {} bytes over {}: write {:.2} ms, read {:.2} ms",
        args.size,
        qp_transport,
        wrote.as_secs_f64() * 1e3,
        read.as_secs_f64() * 1e3
    );
    Ok(())
}
