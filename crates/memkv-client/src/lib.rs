//! memkv-client
