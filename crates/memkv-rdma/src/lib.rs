//! memkv-rdma
