//! `--local`: an in-process server on an ephemeral loopback port with a fresh auth key, for a
//! quick look without setting anything up. It shares the bench's runtime (and cores), so its
//! figures are below what a separate server process reaches.

use memkv_client::AuthKey;
use memkv_server::Server;
use memkv_server::config::ServerConfig;

/// Room kept beside the key space: replaced values live until their last reader lets go.
const HEADROOM: u64 = 64 << 20;
/// Arena granularity (the default memory.block_size).
const ARENA_STEP: u64 = 2 << 20;

pub struct Local {
    pub server: Server,
    pub address: String,
    pub key: AuthKey,
}

/// The arena for a run whose largest key space holds `bytes`: half as much again for values
/// being replaced, plus headroom, in whole arena blocks.
pub fn arena_for(bytes: u64) -> u64 {
    let wanted = bytes.saturating_add(bytes / 2).saturating_add(HEADROOM);
    wanted.div_ceil(ARENA_STEP).saturating_mul(ARENA_STEP)
}

/// Starts the server; `rdma` is `None` for TCP only, else `Some(device)` (`None` inside: the
/// server's default device).
pub async fn start(arena_bytes: u64, rdma: Option<Option<&str>>) -> anyhow::Result<Local> {
    let mut raw = [0u8; memkv_proto::AUTH_KEY_LEN];
    getrandom::fill(&mut raw)
        .map_err(|e| anyhow::anyhow!("no random source for the auth key: {e}"))?;
    let key = AuthKey::from_bytes(raw);
    if let Some(Some(device)) = rdma
        && (device.is_empty()
            || !device
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b)))
    {
        anyhow::bail!(
            "--local-rdma-device {device:?}: not an RDMA device name such as rxe0 or mlx5_0"
        );
    }
    let rdma = match rdma {
        None => "  enabled: false\n".to_owned(),
        Some(None) => "  enabled: true\n".to_owned(),
        Some(Some(device)) => format!("  enabled: true\n  device: {device}\n"),
    };
    let yaml = format!(
        "network:\n  address: 127.0.0.1:0\n  auth_key: {hex}\n\
         memory:\n  max_size: {mib} MiB\n\
         rdma:\n{rdma}",
        hex = key.to_hex(),
        mib = arena_bytes >> 20,
    );
    let config = ServerConfig::from_yaml_str(&yaml, "memkv bench --local")?;
    let server = Server::start(config).await.map_err(|e| {
        anyhow::anyhow!("memkv bench --local: the in-process server did not start: {e}")
    })?;
    let address = server.data_addr().to_string();
    Ok(Local {
        server,
        address,
        key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arena_fits_the_key_space_with_room_to_replace() {
        assert_eq!(arena_for(0), 64 << 20);
        assert_eq!(arena_for(256 << 20), (384 + 64) << 20);
        assert_eq!(arena_for(1) % ARENA_STEP, 0);
        assert!(arena_for(1) > HEADROOM);
    }
}
