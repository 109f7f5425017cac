//! `memkv net show` (from memkv-fabric) and `memkv net verify`.

use memkv_fabric::{FabricConfig, ShowFilter, client_pkey_index_from_env, net_show_system};

use crate::exit::{self, Exit};

pub fn show(device: Option<String>, port: Option<u8>, json: bool) -> Result<(), Exit> {
    let pkey_index =
        client_pkey_index_from_env(None).map_err(|e| Exit::with(exit::FAILURE, e.to_string()))?;
    let config = FabricConfig {
        pkey_index,
        ..FabricConfig::default()
    };
    let filter = ShowFilter { device, port };
    match net_show_system(&config, &filter) {
        Ok(show) => {
            let text = if json { show.json() } else { show.text() };
            print!("{text}");
            if !text.ends_with('\n') {
                println!();
            }
            match show.exit_code() {
                0 => Ok(()),
                code => Err(Exit::silent(code)),
            }
        }
        Err(e) => Err(Exit::with(e.exit_code(), e.to_string())),
    }
}

pub fn verify() -> Result<(), Exit> {
    Err(Exit::with(
        exit::NOT_IN_BUILD,
        "net verify is not available in this build: it needs the RDMA data plane",
    ))
}
