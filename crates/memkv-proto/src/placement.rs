//! Key placement: rendezvous (highest-random-weight) hashing.
//!
//! The weight of server `s` for key `k` is `xxh3_64_with_seed(k, xxh3_64(s))`, where `s` is the
//! server's address exactly as written in the client's server list (for example
//! `"10.0.0.7:9900"`). The key goes to the server with the highest weight; ties go to the
//! server whose address sorts first bytewise. Every client, in any language, that uses the
//! same server strings places every key on the same server, and removing a server moves only
//! the keys it held.

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// A server's precomputed seed.
pub fn server_seed(address: &str) -> u64 {
    xxh3_64(address.as_bytes())
}

/// The weight of `key` on the server with `seed`.
pub fn weight(key: &[u8], seed: u64) -> u64 {
    xxh3_64_with_seed(key, seed)
}

/// The index in `servers` that owns `key`; `None` when the list is empty.
pub fn owner<S: AsRef<str>>(key: &[u8], servers: &[S]) -> Option<usize> {
    Placement::new(servers).owner(key)
}

/// Placement over a fixed server list with seeds computed once.
#[derive(Debug, Clone)]
pub struct Placement {
    servers: Vec<(String, u64)>,
}

impl Placement {
    /// Placement over `servers` (addresses as the client lists them).
    pub fn new<S: AsRef<str>>(servers: &[S]) -> Placement {
        Placement {
            servers: servers
                .iter()
                .map(|s| (s.as_ref().to_owned(), server_seed(s.as_ref())))
                .collect(),
        }
    }

    /// The index of the server that owns `key`; `None` when there are no servers.
    pub fn owner(&self, key: &[u8]) -> Option<usize> {
        // One server owns everything: no key needs hashing (a batch of 1,000 keys saves 1,000).
        if self.servers.len() == 1 {
            return Some(0);
        }
        let mut best: Option<(u64, &str, usize)> = None;
        for (i, (s, seed)) in self.servers.iter().enumerate() {
            let w = weight(key, *seed);
            let better = match best {
                None => true,
                Some((bw, bs, _)) => w > bw || (w == bw && s.as_str() < bs),
            };
            if better {
                best = Some((w, s, i));
            }
        }
        best.map(|(_, _, i)| i)
    }

    /// Number of servers.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Whether there are no servers.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn spreads_keys_roughly_evenly() {
        let servers = ["a:1", "b:1", "c:1"];
        let p = Placement::new(&servers);
        let mut counts = [0usize; 3];
        for i in 0..30_000u32 {
            counts[p.owner(&i.to_le_bytes()).unwrap()] += 1;
        }
        for c in counts {
            assert!((8_000..12_000).contains(&c), "{counts:?}");
        }
        assert_eq!(owner(b"k", &[] as &[&str]), None);
    }

    proptest! {
        #[test]
        fn removing_a_server_moves_only_its_keys(key in proptest::collection::vec(any::<u8>(), 0..64)) {
            let all = ["10.0.0.1:9900", "10.0.0.2:9900", "10.0.0.3:9900", "10.0.0.4:9900"];
            let before = owner(&key, &all).unwrap();
            let removed = 2;
            let rest: Vec<&str> = all.iter().enumerate().filter(|(i, _)| *i != removed).map(|(_, s)| *s).collect();
            let after = rest[owner(&key, &rest).unwrap()];
            if before != removed {
                prop_assert_eq!(after, all[before]);
            }
            prop_assert_eq!(Placement::new(&all).owner(&key), Some(before));
        }
    }
}
