//! Maps the server's configuration onto the storage engine's.

use memkv_store::{
    DriveConfig, EvictionPolicy as StoreEviction, FileReads as StoreFileReads, StoreConfig,
    StoreMode,
};

use crate::config::{EvictionPolicy, FileReads, ServerConfig, StorageMode};

/// The storage-engine configuration for `config`.
pub fn store_config(config: &ServerConfig) -> StoreConfig {
    let drives = || {
        config
            .storage
            .drives
            .iter()
            .map(|d| DriveConfig {
                path: d.media.clone(),
                size: d.size.map(|s| s.0),
            })
            .collect()
    };
    let block_size = config.storage.block_size.0;
    let mode = match config.storage.mode {
        StorageMode::Memory => StoreMode::Memory {
            max_size: config.memory.max_size.0,
            block_size: config.memory.block_size.0,
        },
        StorageMode::File => StoreMode::File {
            drives: drives(),
            block_size,
        },
        StorageMode::Direct => StoreMode::Direct {
            drives: drives(),
            block_size,
        },
    };
    StoreConfig {
        mode,
        eviction: match config.storage.eviction {
            EvictionPolicy::Lru => StoreEviction::Lru,
            EvictionPolicy::None => StoreEviction::None,
        },
        reservation_lease: config.storage.reservation_lease,
        pin_lease: config.storage.pin_lease,
        max_value_size: config.limits.max_value_size.0,
        file_reads: match config.storage.file_reads {
            FileReads::Mapped => StoreFileReads::Mapped,
            FileReads::Pread => StoreFileReads::Pread,
        },
        share_memory: config.network.shared_memory && config.storage.mode == StorageMode::Memory,
        discard: config.storage.discard,
    }
}

/// The wire limits a server enforces for `config`.
pub fn wire_limits(config: &ServerConfig) -> memkv_proto::Limits {
    let max_value = config.limits.max_value_size.0;
    let defaults = memkv_proto::Limits::DEFAULT;
    memkv_proto::Limits {
        max_value_len: max_value,
        // A frame must hold at least one maximal value plus its batch item header.
        max_frame_payload: defaults
            .max_frame_payload
            .max(max_value + crate::config::FRAME_SLACK_BYTES),
        ..defaults
    }
}
