//! The `memkv` binary's key-value commands against an in-process server on loopback.

mod common;

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_get_exists_delete_with_files_and_pipes() {
    let server = start_server().await;
    let addr = server.data_addr().to_string();
    let dir = scratch("kv");
    let input = dir.join("in.bin");
    let value = pattern(3 << 20);
    std::fs::write(&input, &value).unwrap();

    let mut put = memkv(&addr, KEY_HEX);
    put.args(["put", "from-file"]).arg(&input);
    let o = run(put, None).await;
    assert!(o.status.success(), "{}", stderr(&o));

    let output = dir.join("out.bin");
    let mut get = memkv(&addr, KEY_HEX);
    get.args(["get", "from-file"]).arg(&output);
    let o = run(get, None).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        std::fs::read(&output).unwrap() == value,
        "file round trip differs"
    );

    let piped = pattern(100_000);
    let mut put = memkv(&addr, KEY_HEX);
    put.args(["put", "from-stdin", "-"]);
    let o = run(put, Some(piped.clone())).await;
    assert!(o.status.success(), "{}", stderr(&o));
    let mut get = memkv(&addr, KEY_HEX);
    get.args(["get", "from-stdin"]);
    let o = run(get, None).await;
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(o.stdout == piped, "stdout differs");

    let mut empty = memkv(&addr, KEY_HEX);
    empty.args(["put", "empty"]);
    assert!(run(empty, Some(Vec::new())).await.status.success());
    let mut get = memkv(&addr, KEY_HEX);
    get.args(["get", "empty", "-"]);
    let o = run(get, None).await;
    assert_eq!((o.status.code(), o.stdout.len()), (Some(0), 0));

    for (args, code) in [
        (vec!["exists", "from-file"], 0),
        (vec!["exists", "nope"], 3),
        (vec!["delete", "from-file"], 0),
        (vec!["delete", "from-file"], 3),
        (vec!["exists", "from-file"], 3),
        (vec!["get", "from-file"], 3),
    ] {
        let mut cmd = memkv(&addr, KEY_HEX);
        cmd.args(&args);
        let o = run(cmd, None).await;
        assert_eq!(o.status.code(), Some(code), "{args:?}: {}", stderr(&o));
    }
    server.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_and_reachability_failures_have_their_exit_codes() {
    let server = start_server().await;
    let addr = server.data_addr().to_string();
    let mut cmd = memkv(&addr, WRONG_KEY_HEX);
    cmd.args(["get", "k"]);
    let o = run(cmd, None).await;
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(!stderr(&o).contains(WRONG_KEY_HEX));

    let unused = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let mut cmd = memkv(&unused, KEY_HEX);
    cmd.args(["exists", "k"]);
    let o = run(cmd, None).await;
    assert_eq!(o.status.code(), Some(5), "{}", stderr(&o));
    assert!(stderr(&o).contains("unreachable"), "{}", stderr(&o));

    // A listener that accepts but never answers: the deadline ends the command.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_addr = silent.local_addr().unwrap().to_string();
    let mut cmd = memkv(&silent_addr, KEY_HEX);
    cmd.args(["get", "k", "--timeout-ms", "200"]);
    let o = run(cmd, None).await;
    assert_eq!(o.status.code(), Some(6), "{}", stderr(&o));
    assert!(stderr(&o).contains("timed out"), "{}", stderr(&o));
    drop(silent);

    let mut cmd = memkv(&addr, "not-a-key");
    cmd.args(["get", "k"]);
    let o = run(cmd, None).await;
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("MEMKV_AUTH_KEY"), "{}", stderr(&o));
    server.shutdown().await.unwrap();
}
