//! Memory-mode puts hashed as their bytes arrive (`Reservation::hash_filled`): the commit
//! checks the same checksum as a commit that hashes everything at once.

use memkv_store::{Store, StoreConfig, StoreError};
use proptest::prelude::*;

fn store() -> Store {
    Store::open(StoreConfig::memory(64 << 20)).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any chunking (including repeated and shrinking `filled` reports) commits exactly when
    /// the checksum is the value's.
    #[test]
    fn chunked_hashing_commits_like_a_whole_hash(
        data in proptest::collection::vec(any::<u8>(), 0..300_000),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
        corrupt in any::<bool>(),
    ) {
        let store = store();
        let empty = store.stats().used_bytes;
        let mut r = store.allocate(b"k", data.len() as u64).unwrap();
        let mut reports: Vec<usize> = cuts.iter().map(|c| c.index(data.len() + 1)).collect();
        reports.sort_unstable();
        let mut filled = 0;
        for &upto in &reports {
            r.as_mut_slice().unwrap()[filled..upto].copy_from_slice(&data[filled..upto]);
            filled = filled.max(upto);
            r.hash_filled(upto);
            r.hash_filled(upto / 2); // a smaller report changes nothing
        }
        r.as_mut_slice().unwrap()[filled..].copy_from_slice(&data[filled..]);
        let sum = memkv_store::checksum(&data) ^ u64::from(corrupt);
        match store.commit(r, sum) {
            Ok(()) => {
                prop_assert!(!corrupt);
                let got = store.get(b"k").unwrap().unwrap();
                prop_assert_eq!(&got[..], &data[..]);
            }
            Err(StoreError::ChecksumMismatch { expected, .. }) => {
                prop_assert!(corrupt);
                prop_assert_eq!(expected, sum);
                prop_assert!(store.get(b"k").unwrap().is_none());
                // Freed at once, not parked until its lease runs out.
                prop_assert_eq!(store.stats().used_bytes, empty, "the space is freed");
            }
            Err(e) => prop_assert!(false, "unexpected {e}"),
        }
    }
}
