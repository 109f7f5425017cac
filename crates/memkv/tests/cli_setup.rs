//! `memkv setup` on drive files: formats blank drives and writes a config the server starts
//! from; refuses a drive holding a filesystem (a test double: ext4's magic number at its
//! offset) until `--force`; `--idempotent` changes nothing the second time.

mod common;

use std::os::unix::fs::FileExt;

use common::drive_files::{drive, scratch, setup, text};
use memkv_server::Server;
use memkv_server::config::ServerConfig;

#[tokio::test]
async fn formats_refuses_forces_and_is_idempotent() {
    let dir = scratch("cycle");
    let (d0, d1) = (drive(&dir, "d0"), drive(&dir, "d1"));
    // ext4's superblock magic, where blkid looks for it.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&d1)
        .unwrap()
        .write_all_at(&[0x53, 0xef], 1080)
        .unwrap();
    let config = dir.join("etc/config.yaml");
    let drives = format!("{},{}", d0.display(), d1.display());
    let base = [
        "--drives",
        drives.as_str(),
        "--shard-size",
        "1MiB",
        "--config",
        config.to_str().unwrap(),
    ];

    let refused = setup(&base);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    let message = text(&refused);
    assert!(
        message.contains("d1")
            && message.contains("ext2/3/4 filesystem")
            && message.contains("--force"),
        "{message}"
    );
    assert!(!config.exists(), "nothing written after a refusal");

    let forced = setup(&[&base[..], &["--force"]].concat());
    assert!(forced.status.success(), "{}", text(&forced));
    assert!(text(&forced).contains("overwrote an ext2/3/4 filesystem"));
    let written = std::fs::read_to_string(&config).unwrap();
    assert!(
        written.contains("mode: direct") && written.contains("block_size: 1 MiB"),
        "{written}"
    );

    // A second plain run refuses: the drives now hold a store.
    let again = setup(&base);
    assert_eq!(again.status.code(), Some(1));
    assert!(text(&again).contains("of memkv store"), "{}", text(&again));

    let before = std::fs::read(&d0).unwrap()[..4096].to_vec();
    let idempotent = setup(&[&base[..], &["--idempotent"]].concat());
    assert!(idempotent.status.success(), "{}", text(&idempotent));
    assert!(
        text(&idempotent).contains("nothing changed"),
        "{}",
        text(&idempotent)
    );
    assert_eq!(
        std::fs::read(&d0).unwrap()[..4096],
        before[..],
        "superblock rewritten"
    );

    // The server starts from what setup wrote and serves from the drives.
    let mut server_config = ServerConfig::load(&config).unwrap();
    server_config.network.address = "127.0.0.1:0".parse().unwrap();
    server_config.network.auth_key = Some(memkv_server::config::AuthKey::from_bytes([9; 32]));
    let server = Server::start(server_config).await.unwrap();
    let client = memkv_client::Client::connect(memkv_client::ClientConfig::new(
        [server.data_addr().to_string()],
        memkv_client::AuthKey::from_bytes([9; 32]),
    ))
    .await
    .unwrap();
    let value = vec![7u8; 3 << 20];
    client.put(b"on-the-drives", &value).await.unwrap();
    assert!(client.get(b"on-the-drives").await.unwrap().unwrap() == value);
    drop(client);
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_arguments_are_named() {
    let o = setup(&[
        "--drives",
        "/nonexistent/memkv-drive",
        "--config",
        "/tmp/x.yaml",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("/nonexistent/memkv-drive"),
        "{}",
        text(&o)
    );
    let o = setup(&["--drives", "/dev/null", "--shard-size", "12 parsecs"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("12 parsecs"), "{}", text(&o));
}

/// As MemKV's setup is used in runbooks: `--shard-size` in KiB, the config on standard output,
/// redirected into the config file (which the shell has created, empty, before setup runs).
#[test]
fn a_memkv_runbook_invocation_works() {
    let dir = scratch("runbook");
    let d0 = drive(&dir, "d0");
    let config = dir.join("config.yaml");
    std::fs::write(&config, b"").unwrap();
    let o = setup(&[
        "--drives",
        d0.to_str().unwrap(),
        "--shard-size",
        "4096",
        "--config",
        config.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let printed = String::from_utf8(o.stdout.clone()).unwrap();
    assert!(printed.contains("block_size: 4 MiB"), "{printed}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), printed);
    ServerConfig::from_yaml_str(&printed, "stdout").expect("the printed config loads");
}
