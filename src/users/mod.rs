//! The per-user index of a compact store: list a user's sessions ("your
//! devices"), revoke them all ("log out everywhere"), or all but the
//! current one. Opt-in with [`crate::CompactConfig::with_user_index`].
//!
//! # Layout
//!
//! The index is packed like the sessions: `2^bits` listpack HASH buckets,
//! each under a hash tag of its own (`sp:{u03fa}:u`), a user's entries in
//! the bucket its identity hashes to. An entry's field is the session id;
//! its value is a 7-bit check of the identity (one byte in the listpack,
//! so a listing loads only the sessions whose check matches), or the check
//! and a short label the application set ([`MAX_LABEL_BYTES`]). Every
//! session id of an indexed store ends in the second it was issued
//! ([`crate::SessionId::generate_stamped`]; a rotation keeps it), which a
//! listing reports as the sign-in time at no cost in bytes.
//!
//! # Order of writes
//!
//! A user's index bucket and a session's bucket may be in different
//! cluster slots, so no script sees both. The writes are ordered so that
//! every interleaving is safe:
//!
//! - **Create** (and the new id of a rotation): the index entry first,
//!   then the session, with a script that refuses it ([`crate::Inserted::Late`])
//!   when it comes more than the grace ([`UserIndexConfig::grace_secs`])
//!   after the entry was written, or ([`crate::Inserted::IdTaken`]) when a
//!   tombstone stands beside its field. A create refused either way draws
//!   a new id and writes a new entry.
//! - **Rotate** ([`crate::Store::rotate`]): the new id's entry first; then,
//!   in the old session's bucket and only while that session is live, a
//!   *forward* record naming the new id (beside the old field, lasting the
//!   hold; at most three rotations of one session in flight); then the
//!   copy, as a create; then the old id goes.
//! - **Revoke**: read the user's entries; then, for each, one script in
//!   the session's bucket removes the session if the user still owns it,
//!   or, if there is none, leaves a tombstone lasting the hold
//!   ([`UserIndexConfig::hold_secs`], the grace and twice the skew), and
//!   returns the ids its forward record names, which are revoked the same
//!   way in turn; then the entries go. Each step refuses to act more than
//!   the grace after the read (the revocation reads again), so a forward
//!   record written after the read is still there. A create whose entry
//!   the revocation read either had landed (and is removed) or lands
//!   after the tombstone was written, within the grace of its entry and so
//!   within the hold: refused. A create whose entry came after the read is
//!   after the revocation, and listed. A rotation's copy of a session
//!   signed in before the revocation never is: either its entry was read,
//!   or its forward record was written before the revocation reached the
//!   old id (which finds it), or the old session was gone by then and no
//!   forward, and so no copy, was made.
//! - **Sweep**: on its full passes the sweeper ([`crate::sweep`]) looks up
//!   each entry's session; for one gone or expired, the same script in the
//!   sweeper's mode keeps a session that has come meanwhile, or leaves a
//!   tombstone, and the entry goes. Destroy, rotate and expiry leave the
//!   old entry to it; listings skip entries without a live session
//!   meanwhile.
//!
//! The servers of a cluster are assumed to agree on the time within the
//! skew ([`UserIndexConfig::skew_secs`]). Tombstones are separate fields
//! (a session's field and one byte), so no read, touch or save ever sees
//! one; they expire like sessions and the sweeper reclaims them.

use crate::id::SessionId;

mod store;

/// Default of [`UserIndexConfig::grace_secs`].
pub const DEFAULT_GRACE_SECS: u64 = 60;
/// Default of [`UserIndexConfig::skew_secs`].
pub const DEFAULT_SKEW_SECS: u64 = 5;
/// The longest label an entry may carry, in bytes of UTF-8: with a 20-byte
/// id and the check byte it stays within the listpack's 64-byte values.
pub const MAX_LABEL_BYTES: usize = 32;
/// Default `log2` of the index's bucket count.
pub const DEFAULT_USER_BITS: u8 = 13;
/// Most `log2` of index buckets.
pub const MAX_USER_BITS: u8 = 24;

/// How a compact store's user index is laid out. Every process of a
/// store must agree on all of it: the first to open the store records it
/// ([`crate::meta`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct UserIndexConfig {
    /// `log2` of the index's bucket count, 1..=24: about one bucket per
    /// 100 to 400 sessions, as for the sessions' own buckets.
    pub bits: u8,
    /// How long after its id was issued a session's first write may reach
    /// its bucket, by the server's clock; a later one is refused and the
    /// create draws a new id. Default 60 s.
    pub grace_secs: u64,
    /// How far the clocks of the servers holding an index bucket and a
    /// session bucket may disagree. Default 5 s.
    pub skew_secs: u64,
}

impl Default for UserIndexConfig {
    fn default() -> Self {
        Self {
            bits: DEFAULT_USER_BITS,
            grace_secs: DEFAULT_GRACE_SECS,
            skew_secs: DEFAULT_SKEW_SECS,
        }
    }
}

impl UserIndexConfig {
    /// `2^bits` buckets, the default grace and skew.
    pub fn new(bits: u8) -> Self {
        Self {
            bits,
            ..Self::default()
        }
    }

    /// How long after an id's stamp its create may be pending, by any
    /// server's clock: the grace and twice the skew. Tombstones last until
    /// then, and the sweeper keeps an entry without a session until then.
    pub fn hold_secs(&self) -> u64 {
        self.grace_secs
            .saturating_add(self.skew_secs.saturating_mul(2))
    }
}

/// The index's key names and where an identity's entries go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserIndex {
    namespace: String,
    config: UserIndexConfig,
}

impl UserIndex {
    /// The index of the store in `namespace`, laid out by `config`.
    pub fn new(namespace: &str, config: UserIndexConfig) -> crate::Result<Self> {
        if !(1..=MAX_USER_BITS).contains(&config.bits) {
            return Err(crate::Error::Config(format!(
                "user index bits {} outside 1..={MAX_USER_BITS}",
                config.bits
            )));
        }
        if !(1..=3600).contains(&config.grace_secs) || config.skew_secs > 3600 {
            return Err(crate::Error::Config(format!(
                "user index grace {} s must be 1 to 3600, skew {} s at most 3600",
                config.grace_secs, config.skew_secs
            )));
        }
        Ok(Self {
            namespace: namespace.to_owned(),
            config,
        })
    }

    /// How it is laid out.
    pub fn config(&self) -> UserIndexConfig {
        self.config
    }

    /// `log2` of the bucket count.
    pub fn bits(&self) -> u8 {
        self.config.bits
    }

    /// The number of buckets.
    pub fn count(&self) -> u32 {
        1 << self.config.bits
    }

    /// The bucket an identity's entries go in, and the check its entries
    /// carry, from its encoded form (a record's head, [`crate::record`]).
    pub fn place(&self, head: &[u8]) -> (u32, u8) {
        let h = place_hash(head);
        (
            (h >> (64 - u32::from(self.bits()))) as u32,
            (h & 0x7f) as u8,
        )
    }

    /// A bucket's key.
    pub fn key(&self, bucket: u32) -> String {
        let digits = usize::from(self.bits().div_ceil(4));
        format!("{}:{{u{bucket:0digits$x}}}:u", self.namespace)
    }
}

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

/// An entry's value: the check alone in decimal (one listpack integer),
/// or with a label, `0x80 | check` and the label's bytes.
pub(crate) fn entry_value(check: u8, label: Option<&str>) -> Vec<u8> {
    match label {
        None => check.to_string().into_bytes(),
        Some(label) => {
            let mut v = Vec::with_capacity(1 + label.len());
            v.push(0x80 | check);
            v.extend_from_slice(label.as_bytes());
            v
        }
    }
}

/// An entry's check and label; `None` if the value is in neither form.
pub(crate) fn parse_entry(value: &[u8]) -> Option<(u8, Option<String>)> {
    match value.first()? {
        b'0'..=b'9' => {
            let check: u8 = std::str::from_utf8(value).ok()?.parse().ok()?;
            (check < 0x80).then_some((check, None))
        }
        &first if first >= 0x80 => {
            let label = String::from_utf8(value[1..].to_vec()).ok()?;
            Some((first & 0x7f, Some(label)))
        }
        _ => None,
    }
}

/// Checks a label's length.
pub(crate) fn check_label(label: &str) -> crate::Result<()> {
    if label.len() > MAX_LABEL_BYTES {
        return Err(crate::Error::LabelTooLong {
            len: label.len(),
            limit: MAX_LABEL_BYTES,
        });
    }
    Ok(())
}

/// One of a user's live sessions, as a listing shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserSession {
    /// The session's id: compare it with the current one; show only a
    /// redacted form.
    pub id: SessionId,
    /// When its id was issued (sign-in, or the last rotation), unix
    /// seconds by the server's clock.
    pub signed_in_at: u64,
    /// When it was last created, touched or saved, told from the idle
    /// timeout: its expiry less that timeout, never before `signed_in_at`.
    /// `None` where the store has no idle timeout it knows of.
    pub last_seen: Option<u64>,
    /// When it expires, unix seconds.
    pub expires_at: u64,
    /// The label the application set ([`crate::Store::set_label`]).
    pub label: Option<String>,
}

impl UserSession {
    /// A user's live sessions as found in the index, oldest sign-in first;
    /// `last_seen` told from the idle timeout `idle_secs`, when known.
    pub(crate) fn listing(
        found: Vec<(SessionId, crate::layout::Stored, Option<String>)>,
        idle_secs: Option<u64>,
    ) -> Vec<Self> {
        let mut listed: Vec<Self> = found
            .into_iter()
            .map(|(id, stored, label)| {
                let signed_in_at = u64::from(id.stamp());
                Self {
                    id,
                    signed_in_at,
                    last_seen: idle_secs
                        .map(|idle| stored.expires_at.saturating_sub(idle).max(signed_in_at)),
                    expires_at: stored.expires_at,
                    label,
                }
            })
            .collect();
        listed.sort_by_key(|s| (s.signed_in_at, s.id));
        listed
    }
}

/// An identity as a record begins with it: what the index places and
/// revocations compare.
pub(crate) fn head<I: crate::identity::UserId>(identity: &I) -> Vec<u8> {
    let mut out = Vec::with_capacity(9);
    identity.encode(&mut out);
    out
}

/// What a revocation did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Revoked {
    /// Live sessions removed.
    pub removed: u64,
    /// Entries without a live session: expired ones (reclaimed), or none
    /// at all (gone, or a create still in flight: each left a tombstone
    /// that refuses the create for the hold).
    pub absent: u64,
    /// Sessions kept: the one asked to be kept, and other users' sessions
    /// whose identity shares the check.
    pub kept: u64,
}

/// What [`crate::Compact::audit_users`] found: every index entry against
/// every session. A sound index has no `unindexed`, `orphans` or
/// `misplaced`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct UserIndexAudit {
    /// Live sessions with an owner in the buckets.
    pub sessions: u64,
    /// Entries in the index.
    pub entries: u64,
    /// Live sessions with no entry: a revocation would miss them.
    pub unindexed: u64,
    /// Entries without a live session: sessions gone since the last full
    /// sweep (which removes these), or creates in flight.
    pub orphans: u64,
    /// Entries whose session's identity places it elsewhere, or whose
    /// value is in neither form.
    pub misplaced: u64,
    /// Tombstones left by revocations, not yet reclaimed.
    pub tombstones: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_with_and_without_labels() {
        for check in [0u8, 9, 10, 127] {
            assert_eq!(parse_entry(&entry_value(check, None)), Some((check, None)));
            let labelled = entry_value(check, Some("Firefox on Linux"));
            assert_eq!(
                parse_entry(&labelled),
                Some((check, Some("Firefox on Linux".to_owned())))
            );
        }
        for garbage in [&b""[..], b"128", b"x", b"\x80\xff"] {
            assert_eq!(parse_entry(garbage), None, "{garbage:?}");
        }
    }

    #[test]
    fn identities_spread_and_keys_carry_their_own_tag() {
        let index = UserIndex::new("sp", UserIndexConfig::new(10)).unwrap();
        assert_eq!(index.key(0x3fa), "sp:{u3fa}:u");
        // Consecutive integers (each encoding's width), UUIDs and names.
        let firsts = [0u64, 1 << 20, 1 << 40];
        for first in firsts {
            let mut buckets = std::collections::HashSet::new();
            let mut checks = std::collections::HashSet::new();
            for user in first..first + 4096 {
                let mut head = Vec::new();
                rmp::encode::write_uint(&mut head, user).unwrap();
                let (bucket, check) = index.place(&head);
                assert!(bucket < 1024 && check < 128);
                buckets.insert(bucket);
                checks.insert(check);
            }
            // 4096 users over 1024 buckets leave about 1024 / e^4 = 19 empty.
            assert!(
                buckets.len() > 950,
                "{} buckets used from {first}",
                buckets.len()
            );
            assert_eq!(checks.len(), 128);
        }
        let mut buckets = std::collections::HashSet::new();
        for n in 0..4096 {
            let mut head = Vec::new();
            crate::identity::Form::Name(24)
                .identity(n)
                .encode(&mut head);
            buckets.insert(index.place(&head).0);
        }
        assert!(
            buckets.len() > 950,
            "{} buckets used by names",
            buckets.len()
        );
        assert!(UserIndex::new("sp", UserIndexConfig::new(0)).is_err());
        assert!(UserIndex::new("sp", UserIndexConfig::new(25)).is_err());
    }
}
