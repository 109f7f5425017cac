//! `memkv net show` (from memkv-fabric), `memkv net verify` and `memkv net doctor` ([`doctor`]).

pub mod doctor;
mod settings;
mod verify;

pub use verify::{VerifyArgs, verify};

use memkv_fabric::{ShowFilter, net_show_system};
use std::path::Path;

use crate::exit::Exit;

/// Ports as planned with the server's settings on a server node (`config`, else the default
/// config file when it exists), else the client's. Which file and variables were read comes
/// after the ports, so the output starts as the InfiniBand runbook's does (`device`, then
/// `link layer`); with `--json` it goes to stderr, so the JSON stays one document.
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
            if json {
                eprintln!("{}", settings.describe().trim_end());
                out!("{}", show.json());
            } else {
                let text = show.text();
                out!("{}\n\n{}", text.trim_end(), settings.describe());
            }
            match show.exit_code() {
                0 => Ok(()),
                code => Err(Exit::silent(code)),
            }
        }
        Err(e) => Err(Exit::with(e.exit_code(), e.to_string())),
    }
}
