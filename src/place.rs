//! Placing keys by a stable hash, so that every process puts an entry in
//! the same bucket: the user index's buckets and the rate limiter's.

/// FNV-1a, 64 bits, then MurmurHash3's 64-bit finaliser: stable across
/// builds and platforms, which placing entries needs (every process must
/// agree). The finaliser matters: FNV-1a alone leaves its top bits, which
/// choose the bucket, almost unchanged by the last byte of a key, so
/// consecutive integer ids would share a bucket.
pub(crate) fn place_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}
