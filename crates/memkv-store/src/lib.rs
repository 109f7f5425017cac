//! memkv-store
