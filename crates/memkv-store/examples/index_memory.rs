//! Memory the store keeps per value beyond the value bytes and the key bytes: stores N small
//! values (keys like `bench/64/N`, as `memkv bench` writes them) and prints the growth of the
//! process's resident memory, less the key bytes and, in memory mode, the arena bytes the values
//! occupy, per value. In file mode the values go to a sparse drive file in the temporary
//! directory (through the page cache, which is not resident memory of the process), so what
//! grows is the index and each block's extent list.
//!
//!     cargo run --release -p memkv-store --example index_memory -- [N] [VALUE_BYTES] [memory|file]

use std::sync::Arc;

use memkv_store::{DriveConfig, Store, StoreConfig, StoreMode, checksum};

/// Writers in file mode: each commit waits for a journal sync, so many at once share them.
const FILE_WRITERS: u64 = 64;
/// The smallest file-mode extent (storage.block_size): one per small value. The drive file is
/// sparse; only the pages written take disk space.
const FILE_EXTENT: u64 = 64 << 10;

/// Resident memory after handing freed heap pages back (glibc keeps the pages of freed
/// temporaries, such as a put's journal buffers, otherwise; they would count as the index's).
fn resident_bytes() -> u64 {
    // SAFETY: malloc_trim only releases free heap memory; it takes no pointers.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::malloc_trim(0);
    }
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn key(value_len: usize, i: u64) -> String {
    format!("bench/{value_len}/{i}")
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().map_or(1_000_000, |a| a.parse().expect("N"));
    let value_len: usize = args.next().map_or(64, |a| a.parse().expect("VALUE_BYTES"));
    let file_mode = match args.next().as_deref() {
        None | Some("memory") => false,
        Some("file") => true,
        Some(other) => panic!("mode {other:?}: memory or file"),
    };
    let value = vec![0x5au8; value_len];
    let dir = std::env::temp_dir().join(format!("memkv-index-memory-{}", std::process::id()));
    let store = if file_mode {
        assert!(
            value_len as u64 <= FILE_EXTENT,
            "file mode here takes values up to {FILE_EXTENT} bytes"
        );
        std::fs::create_dir_all(&dir).expect("temporary directory");
        let mut cfg = StoreConfig::file(vec![DriveConfig {
            path: dir.join("drive0"),
            size: Some((n + n / 8 + 1024) * FILE_EXTENT),
        }]);
        if let StoreMode::File { block_size, .. } = &mut cfg.mode {
            *block_size = FILE_EXTENT;
        }
        Store::open(cfg).expect("open")
    } else {
        let arena = (n * (value_len as u64).next_power_of_two().max(64) * 2).max(64 << 20);
        Store::open(StoreConfig::memory(arena)).expect("open")
    };
    let store = Arc::new(store);
    let before = resident_bytes();
    let key_bytes: u64 = (0..n).map(|i| key(value_len, i).len() as u64).sum();
    if file_mode {
        std::thread::scope(|s| {
            for w in 0..FILE_WRITERS {
                let (store, value) = (&store, &value);
                s.spawn(move || {
                    for i in (w..n).step_by(FILE_WRITERS as usize) {
                        store.put(key(value_len, i).as_bytes(), value).expect("put");
                    }
                });
            }
        });
    } else {
        let sum = checksum(&value);
        for i in 0..n {
            let key = key(value_len, i);
            let mut r = store
                .allocate(key.as_bytes(), value_len as u64)
                .expect("allocate");
            r.as_mut_slice()
                .expect("memory mode")
                .copy_from_slice(&value);
            store.commit(r, sum).expect("commit");
        }
    }
    let grown = resident_bytes().saturating_sub(before);
    let in_memory = if file_mode {
        0
    } else {
        store.stats().used_bytes
    };
    let per_value = grown.saturating_sub(in_memory + key_bytes) as f64 / n as f64;
    // What the store counts itself (`memkv_index_bytes`), on the same terms.
    let counted = store.stats().index_bytes.saturating_sub(key_bytes) as f64 / n as f64;
    println!(
        "{} mode, {n} values of {value_len} B: resident +{:.1} MiB, values in memory {:.1} MiB, \
         keys {:.1} MiB; {per_value:.1} bytes per value beyond value and key bytes \
         (the index counts {counted:.1})",
        if file_mode { "file" } else { "memory" },
        grown as f64 / 1048576.0,
        in_memory as f64 / 1048576.0,
        key_bytes as f64 / 1048576.0
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
