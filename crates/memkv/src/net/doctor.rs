//! `memkv net doctor`: runs memkv-fabric's runbook checks on this host (read-only), fetching
//! a server's rails from its `/v1/status` for the ARP comparison when `--server` is given.

use std::path::PathBuf;
use std::time::Duration;

use memkv_fabric::doctor::doubles::FixtureProbe;
use memkv_fabric::doctor::{
    DoctorOptions, DoctorSources, HostRoot, Rail, ServerRails, SystemProbe, doctor,
};
use memkv_fabric::doubles::FixtureVerbs;
use memkv_fabric::verbs::VerbsReader;
use memkv_server::admin::StatusReport;

use crate::admin::admin_address;
use crate::exit::Exit;
use crate::http;

/// What `memkv net doctor` was asked to do.
pub struct DoctorArgs {
    pub device: Option<String>,
    pub watch: Option<u64>,
    pub server: Option<String>,
    pub json: bool,
    /// The server's configuration (default: /etc/memkv/config.yaml, under the fixture root
    /// with `fixture_root`, when it exists).
    pub config: Option<PathBuf>,
    /// TEST DOUBLE: read this fixture tree instead of the host.
    pub fixture_root: Option<PathBuf>,
}

pub fn run(args: DoctorArgs, deadline: Duration) -> Result<(), Exit> {
    let settings = super::settings::FabricSettings::load(
        args.config.as_deref(),
        args.fixture_root.as_deref(),
    )?;
    let server = args.server.as_ref().map(|s| ServerRails {
        server: s.clone(),
        rails: server_rails(s, deadline),
    });
    let options = DoctorOptions {
        device: args.device,
        watch: args.watch.map(Duration::from_secs),
        server,
        config: settings.primary(),
        client_config: settings.secondary_client(),
    };
    let report = match &args.fixture_root {
        Some(root) => {
            let verbs = FixtureVerbs::new(root.join("sys/class/infiniband"));
            let probe = FixtureProbe::new(root);
            let src = DoctorSources {
                root: HostRoot::new(root),
                verbs: &verbs,
                probe: &probe,
            };
            doctor(&src, &options)
        }
        None => {
            let verbs = VerbsReader::new();
            let src = DoctorSources {
                root: HostRoot::default(),
                verbs: &verbs,
                probe: &SystemProbe,
            };
            doctor(&src, &options)
        }
    }
    .map_err(|e| Exit::with(e.exit_code(), e.to_string()))?;
    if args.json {
        eprintln!("{}", settings.describe().trim_end());
        out!("{}", report.json());
    } else {
        out!("{}{}", settings.describe(), report.text());
    }
    match report.exit_code() {
        0 => Ok(()),
        code => Err(Exit::silent(code)),
    }
}

/// The server's rails from its `/v1/status` (admin port = data port + 1).
fn server_rails(server: &str, deadline: Duration) -> Result<Vec<Rail>, String> {
    let admin = admin_address(server)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the HTTP client: {e}"))?;
    // Plain HTTP, as doctor's --server takes no TLS options.
    let client = http::AdminClient::new(&http::TlsOptions::default())?;
    let response = runtime.block_on(client.get(&admin, "/v1/status", deadline))?;
    if response.status != 200 {
        return Err(format!(
            "{admin}/v1/status answered HTTP {}",
            response.status
        ));
    }
    let status: StatusReport = serde_json::from_slice(&response.body)
        .map_err(|e| format!("{admin}/v1/status is not a status document: {e}"))?;
    rails_of_status(&status)
}

/// RoCE rails of a status document; a malformed address is an error naming it.
pub fn rails_of_status(status: &StatusReport) -> Result<Vec<Rail>, String> {
    status
        .rdma
        .devices
        .iter()
        .filter_map(|d| Some((d, d.netdev.clone()?)))
        .map(|(d, netdev)| {
            let ipv4 = d
                .ipv4
                .iter()
                .map(|a| {
                    a.parse()
                        .map_err(|_| format!("{} reports IPv4 address {a:?}", d.name))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Rail {
                device: d.name.clone(),
                port: d.port,
                netdev,
                mac: d.mac.as_ref().map(|m| m.to_ascii_lowercase()),
                ipv4,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rails_come_from_roce_devices_of_the_status() {
        let status: StatusReport = serde_json::from_str(
            r#"{"rdma": {"devices": [
                {"name": "rxe0", "port": 1, "netdev": "vethA", "mac": "02:AA:00:00:00:01", "ipv4": ["192.0.2.1"]},
                {"name": "mlx5_0", "port": 1, "link_layer": "InfiniBand"}
            ]}}"#,
        )
        .unwrap();
        let rails = rails_of_status(&status).unwrap();
        assert_eq!(rails.len(), 1);
        assert_eq!(rails[0].mac.as_deref(), Some("02:aa:00:00:00:01"));
        assert_eq!(rails[0].ipv4_text(), "192.0.2.1");
        let bad: StatusReport = serde_json::from_str(
            r#"{"rdma": {"devices": [{"name": "rxe0", "netdev": "vethA", "ipv4": ["nope"]}]}}"#,
        )
        .unwrap();
        assert_eq!(
            rails_of_status(&bad).unwrap_err(),
            "rxe0 reports IPv4 address \"nope\""
        );
    }
}
