//! memkv-fabric
