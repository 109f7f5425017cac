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
    // Named as the flag it came from: MEMKV_AUTH_KEY is not set.
    assert!(stderr(&o).contains("--auth-key"), "{}", stderr(&o));
    server.shutdown().await.unwrap();
}

/// `get KEY FILE` replaces FILE only with a complete value: when the write fails part way (here
/// RLIMIT_FSIZE of 1 MiB makes it fail with EFBIG, as a full disk would) FILE keeps its old
/// contents and no temporary file is left beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_into_an_existing_file_leaves_it_intact_when_the_write_fails() {
    let server = start_server().await;
    let addr = server.data_addr().to_string();
    let dir = scratch("get-partial");
    let input = dir.join("value.bin");
    std::fs::write(&input, pattern(3 << 20)).unwrap();
    let mut put = memkv(&addr, KEY_HEX);
    put.args(["put", "big"]).arg(&input);
    let o = run(put, None).await;
    assert!(o.status.success(), "{}", stderr(&o));

    let out = dir.join("out.bin");
    std::fs::write(&out, b"OLD CONTENTS\n").unwrap();
    let mut get = std::process::Command::new("sh");
    get.arg("-c")
        .arg(r#"trap '' XFSZ; ulimit -f 1024; exec "$0" "$@""#)
        .arg(env!("CARGO_BIN_EXE_memkv"))
        .args(["--servers", &addr, "--auth-key", KEY_HEX, "get", "big"])
        .arg(&out)
        .env("XDG_STATE_HOME", scratch("get-partial-state"));
    let o = run(get, None).await;
    server.shutdown().await.unwrap();
    assert_eq!(o.status.code(), Some(1), "the write was meant to fail");
    assert_eq!(
        std::fs::read(&out).unwrap(),
        b"OLD CONTENTS\n",
        "{}",
        stderr(&o)
    );
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 2, "a temporary file was left behind: {left:?}");
}
