//! memkv-proto
