//! memkv-server
