//! Session ids: 160 random bits (40 lowercase hex characters in a cookie)
//! by default, or 128 (32 characters) for a store that chooses them.
//!
//! 160 bits is the default: a guess at one live id among 10^8 sessions
//! still needs ~2^133 tries. 128 bits (tower-sessions' width) leaves ~2^101,
//! far beyond any online attack, and saves 4 bytes a session in a bucket;
//! a store records its width (see [`crate::session::meta`]) so processes with
//! different widths cannot share a namespace.

use std::fmt;
use std::str::FromStr;

use rand::TryRngCore;
use rand::rngs::OsRng;
use serde::{Deserialize, Serialize};

use crate::error::{Error, InvalidId, Result};

/// Bytes in a 160-bit session id, the default width.
pub const ID_BYTES: usize = 20;
/// Characters in a 160-bit session id's text (cookie) form.
pub const ID_HEX_LEN: usize = ID_BYTES * 2;
/// Bytes of the issue time at the end of a stamped id.
pub const STAMP_BYTES: usize = 4;

/// How many random bits a store's session ids have.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub enum IdWidth {
    /// 128 bits, 32 hex characters: tower-sessions' width.
    #[serde(rename = "128")]
    Bits128,
    /// 160 bits, 40 hex characters: the default.
    #[default]
    #[serde(rename = "160")]
    Bits160,
}

impl IdWidth {
    /// Bytes in an id of this width.
    pub const fn bytes(self) -> usize {
        match self {
            Self::Bits128 => 16,
            Self::Bits160 => 20,
        }
    }

    /// Bits in an id of this width.
    pub const fn bits(self) -> u16 {
        self.bytes() as u16 * 8
    }

    /// Characters in the text form.
    pub const fn hex_len(self) -> usize {
        self.bytes() * 2
    }

    /// The width with this many bits, if there is one.
    pub const fn from_bits(bits: u16) -> Option<Self> {
        match bits {
            128 => Some(Self::Bits128),
            160 => Some(Self::Bits160),
            _ => None,
        }
    }
}

/// A session id: 128 or 160 bits from the operating system's CSPRNG.
///
/// Its `Debug` form shows only the first four hex digits, so ids do not leak
/// into logs; [`SessionId::to_hex`] gives the cookie value.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId {
    bytes: [u8; ID_BYTES],
    width: IdWidth,
}

impl SessionId {
    /// Draws a fresh 160-bit id from the operating system's random number
    /// generator.
    pub fn generate() -> Result<Self> {
        Self::generate_with(IdWidth::Bits160)
    }

    /// Draws a fresh id of `width`.
    pub fn generate_with(width: IdWidth) -> Result<Self> {
        let mut bytes = [0u8; ID_BYTES];
        OsRng
            .try_fill_bytes(&mut bytes[..width.bytes()])
            .map_err(|e| Error::Rng(e.to_string()))?;
        Ok(Self { bytes, width })
    }

    /// Draws a fresh id of `width` whose last four bytes are `issued_at`
    /// (unix seconds, big-endian) and the rest random: 128 random bits at
    /// width 160, 96 at width 128. A store with a per-user index issues
    /// these (see [`crate::users`]): the stamp says when the session was
    /// signed in, and bounds how late its first write may reach Redis.
    pub fn generate_stamped(width: IdWidth, issued_at: u32) -> Result<Self> {
        Ok(Self::generate_with(width)?.with_stamp(issued_at))
    }

    /// The same id with its last four bytes set to `issued_at`: a rotated
    /// session's new id keeps its sign-in time.
    pub fn with_stamp(mut self, issued_at: u32) -> Self {
        let end = self.width.bytes();
        self.bytes[end - STAMP_BYTES..end].copy_from_slice(&issued_at.to_be_bytes());
        self
    }

    /// The stamp an id from [`SessionId::generate_stamped`] carries: its
    /// last four bytes as unix seconds. Meaningless for a random id.
    pub fn stamp(&self) -> u32 {
        let end = self.width.bytes();
        let mut last = [0u8; STAMP_BYTES];
        last.copy_from_slice(&self.bytes[end - STAMP_BYTES..end]);
        u32::from_be_bytes(last)
    }

    /// Wraps raw 160-bit id bytes.
    pub const fn from_bytes(bytes: [u8; ID_BYTES]) -> Self {
        Self {
            bytes,
            width: IdWidth::Bits160,
        }
    }

    /// Wraps raw id bytes of either width (16 or 20 bytes).
    pub fn from_slice(raw: &[u8]) -> Option<Self> {
        let width = IdWidth::from_bits(u16::try_from(raw.len() * 8).ok()?)?;
        let mut bytes = [0u8; ID_BYTES];
        bytes[..raw.len()].copy_from_slice(raw);
        Some(Self { bytes, width })
    }

    /// The raw id bytes (16 or 20).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.width.bytes()]
    }

    /// The id's width.
    pub const fn width(&self) -> IdWidth {
        self.width
    }

    /// Parses a 160-bit id's text form strictly: exactly 40 bytes of
    /// `0-9a-f`.
    ///
    /// Any other length, any other byte (upper-case hex, non-ASCII, NUL)
    /// is refused. The length is checked first, so a huge input costs
    /// nothing.
    pub fn parse(text: impl AsRef<[u8]>) -> Result<Self, InvalidId> {
        Self::parse_with(text, IdWidth::Bits160)
    }

    /// Parses the text form of an id of `width` as strictly as
    /// [`SessionId::parse`].
    pub fn parse_with(text: impl AsRef<[u8]>, width: IdWidth) -> Result<Self, InvalidId> {
        let text = text.as_ref();
        if text.len() != width.hex_len() {
            return Err(InvalidId::Length {
                expected: width.hex_len(),
                found: text.len(),
            });
        }
        let mut bytes = [0u8; ID_BYTES];
        for (i, pair) in text.chunks_exact(2).enumerate() {
            let hi = lower_hex_value(pair[0]).ok_or(InvalidId::NotLowerHex { at: 2 * i })?;
            let lo = lower_hex_value(pair[1]).ok_or(InvalidId::NotLowerHex { at: 2 * i + 1 })?;
            bytes[i] = (hi << 4) | lo;
        }
        Ok(Self { bytes, width })
    }

    /// The text form, for a cookie: 40 (or 32) lowercase hex characters.
    ///
    /// This is the whole secret; do not log it.
    pub fn to_hex(&self) -> String {
        hex::encode(self.as_bytes())
    }

    /// A short, log-safe form: the first four hex digits and an ellipsis.
    pub fn redacted(&self) -> String {
        format!("{}…", hex::encode(&self.bytes[..2]))
    }
}

/// Refusing an id of another width than a store's.
pub(crate) trait InvalidIdExt {
    /// `Ok` if the id has `width`, else [`InvalidId::Length`].
    fn check_width(&self, width: IdWidth) -> Result<(), InvalidId>;
}

impl InvalidIdExt for SessionId {
    fn check_width(&self, width: IdWidth) -> Result<(), InvalidId> {
        if self.width == width {
            Ok(())
        } else {
            Err(InvalidId::Length {
                expected: width.hex_len(),
                found: self.width.hex_len(),
            })
        }
    }
}

const fn lower_hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({})", self.redacted())
    }
}

impl FromStr for SessionId {
    type Err = InvalidId;

    fn from_str(s: &str) -> Result<Self, InvalidId> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_form_round_trips() {
        let id = SessionId::generate().unwrap();
        let text = id.to_hex();
        assert_eq!(text.len(), ID_HEX_LEN);
        assert!(text.bytes().all(|b| lower_hex_value(b).is_some()));
        assert_eq!(SessionId::parse(&text).unwrap(), id);
    }

    #[test]
    fn stamped_ids_end_in_their_issue_time() {
        for width in [IdWidth::Bits128, IdWidth::Bits160] {
            let a = SessionId::generate_stamped(width, 1_800_000_123).unwrap();
            let b = SessionId::generate_stamped(width, 1_800_000_123).unwrap();
            assert_eq!(a.stamp(), 1_800_000_123);
            assert_eq!(a.as_bytes().len(), width.bytes());
            assert_eq!(&a.to_hex()[width.hex_len() - 8..], "6b49d27b");
            assert_ne!(a, b, "the rest is random");
            let parsed = SessionId::parse_with(a.to_hex(), width).unwrap();
            assert_eq!(parsed.stamp(), 1_800_000_123);
        }
    }

    #[test]
    fn generated_ids_differ() {
        let a = SessionId::generate().unwrap();
        let b = SessionId::generate().unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn refuses_wrong_lengths() {
        let length = |found| InvalidId::Length {
            expected: 40,
            found,
        };
        assert_eq!(SessionId::parse(""), Err(length(0)));
        assert_eq!(SessionId::parse("a".repeat(39)), Err(length(39)));
        assert_eq!(SessionId::parse("a".repeat(32)), Err(length(32)));
        assert_eq!(SessionId::parse("a".repeat(1 << 20)), Err(length(1 << 20)));
    }

    #[test]
    fn narrow_ids_round_trip_and_keep_their_width() {
        let id = SessionId::generate_with(IdWidth::Bits128).unwrap();
        assert_eq!(id.as_bytes().len(), 16);
        let text = id.to_hex();
        assert_eq!(text.len(), 32);
        assert_eq!(SessionId::parse_with(&text, IdWidth::Bits128).unwrap(), id);
        assert!(
            SessionId::parse(&text).is_err(),
            "a 160-bit parse refuses it"
        );
        assert_eq!(SessionId::from_slice(id.as_bytes()), Some(id));
        assert_eq!(SessionId::from_slice(&[0; 17]), None);
    }

    #[test]
    fn refuses_non_lower_hex() {
        let mut text = "0".repeat(40);
        text.replace_range(7..8, "A");
        assert_eq!(
            SessionId::parse(&text),
            Err(InvalidId::NotLowerHex { at: 7 })
        );
        // 40 bytes, but a multi-byte character in the middle.
        let text = format!("{}é{}", "0".repeat(19), "0".repeat(19));
        assert_eq!(text.len(), 40);
        assert_eq!(
            SessionId::parse(&text),
            Err(InvalidId::NotLowerHex { at: 19 })
        );
    }

    proptest::proptest! {
        #[test]
        fn parse_accepts_exactly_the_canonical_form(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..100)) {
            let canonical = bytes.len() == ID_HEX_LEN && bytes.iter().all(|&b| lower_hex_value(b).is_some());
            match SessionId::parse(&bytes) {
                Ok(id) => {
                    proptest::prop_assert!(canonical);
                    proptest::prop_assert_eq!(id.to_hex().into_bytes(), bytes);
                }
                Err(_) => proptest::prop_assert!(!canonical),
            }
        }

        #[test]
        fn parse_never_panics_on_text(text in "\\PC*") {
            let _ = SessionId::parse(&text);
        }
    }

    #[test]
    fn debug_does_not_show_the_whole_id() {
        let id = SessionId::parse("0123456789abcdef0123456789abcdef01234567").unwrap();
        let shown = format!("{id:?}");
        assert_eq!(shown, "SessionId(0123…)");
        assert!(!shown.contains("456789"));
    }
}
