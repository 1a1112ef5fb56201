//! The compact layout's side of the user index: its configuration, where
//! a user's entries go, and how an entry is written. [`crate::users`]
//! describes the index, its order of writes and what it promises.

use crate::session::id::SessionId;
use crate::session::meta::StoreMeta;

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
/// ([`crate::session::meta`]).
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
    /// The user index a namespace's metadata records, if any.
    pub fn from_meta(meta: &StoreMeta) -> Option<Self> {
        (meta.user_bits > 0).then_some(Self {
            bits: meta.user_bits,
            grace_secs: meta.user_grace_secs,
            skew_secs: meta.user_skew_secs,
        })
    }

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
    /// carry, from its encoded form (a record's head, [`crate::session::record`]).
    pub fn place(&self, head: &[u8]) -> (u32, u8) {
        let h = crate::place::place_hash(head);
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
        found: Vec<(SessionId, crate::session::layout::Stored, Option<String>)>,
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
