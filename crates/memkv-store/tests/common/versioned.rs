//! Values that name their key, version and length, so that a read returning any other bytes
//! (another key's, another version's, a torn mix) is caught.

use memkv_store::checksum;

/// Key, version and length in the first 24 bytes, then a pattern of all three.
pub fn make(key: u64, version: u64, len: usize) -> Vec<u8> {
    let len = len.max(24);
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(&key.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    v.extend_from_slice(&(len as u64).to_le_bytes());
    let mix = key.wrapping_mul(0x9e37_79b9) ^ version;
    v.extend((24..len).map(|i| (i as u64 ^ mix).wrapping_mul(31) as u8));
    v
}

/// Panics unless `bytes` is exactly one whole value written for `key`, and `sum` its checksum.
pub fn verify(key: u64, bytes: &[u8], sum: u64) {
    assert!(bytes.len() >= 24, "short value for key {key}");
    let field = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
    assert_eq!(field(0), key, "value of another key");
    assert_eq!(field(2) as usize, bytes.len(), "length header disagrees");
    assert!(
        bytes == make(key, field(1), bytes.len()),
        "torn value for key {key}"
    );
    assert_eq!(
        sum,
        checksum(bytes),
        "checksum does not belong to these bytes"
    );
}
