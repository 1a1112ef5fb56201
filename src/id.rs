//! Session ids: 160 random bits, 40 lowercase hex characters in a cookie.

use std::fmt;
use std::str::FromStr;

use rand::TryRngCore;
use rand::rngs::OsRng;

use crate::error::{Error, InvalidId, Result};

/// Bytes in a session id.
pub const ID_BYTES: usize = 20;
/// Characters in a session id's text (cookie) form.
pub const ID_HEX_LEN: usize = ID_BYTES * 2;

/// A session id: 160 bits from the operating system's CSPRNG.
///
/// Its `Debug` form shows only the first four hex digits, so ids do not leak
/// into logs; [`SessionId::to_hex`] gives the cookie value.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId([u8; ID_BYTES]);

impl SessionId {
    /// Draws a fresh id from the operating system's random number generator.
    pub fn generate() -> Result<Self> {
        let mut bytes = [0u8; ID_BYTES];
        OsRng
            .try_fill_bytes(&mut bytes)
            .map_err(|e| Error::Rng(e.to_string()))?;
        Ok(Self(bytes))
    }

    /// Wraps raw id bytes.
    pub const fn from_bytes(bytes: [u8; ID_BYTES]) -> Self {
        Self(bytes)
    }

    /// The raw id bytes.
    pub const fn as_bytes(&self) -> &[u8; ID_BYTES] {
        &self.0
    }

    /// Parses the text form strictly: exactly 40 bytes of `0-9a-f`.
    ///
    /// Any other length, any other byte (upper-case hex, non-ASCII, NUL)
    /// is refused. The length is checked first, so a huge input costs
    /// nothing.
    pub fn parse(text: impl AsRef<[u8]>) -> Result<Self, InvalidId> {
        let text = text.as_ref();
        if text.len() != ID_HEX_LEN {
            return Err(InvalidId::Length { found: text.len() });
        }
        let mut bytes = [0u8; ID_BYTES];
        for (i, pair) in text.chunks_exact(2).enumerate() {
            let hi = lower_hex_value(pair[0]).ok_or(InvalidId::NotLowerHex { at: 2 * i })?;
            let lo = lower_hex_value(pair[1]).ok_or(InvalidId::NotLowerHex { at: 2 * i + 1 })?;
            bytes[i] = (hi << 4) | lo;
        }
        Ok(Self(bytes))
    }

    /// The text form, for a cookie: 40 lowercase hex characters.
    ///
    /// This is the whole secret; do not log it.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// A short, log-safe form: the first four hex digits and an ellipsis.
    pub fn redacted(&self) -> String {
        format!("{}…", hex::encode(&self.0[..2]))
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
    fn generated_ids_differ() {
        let a = SessionId::generate().unwrap();
        let b = SessionId::generate().unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn refuses_wrong_lengths() {
        assert_eq!(SessionId::parse(""), Err(InvalidId::Length { found: 0 }));
        assert_eq!(
            SessionId::parse("a".repeat(39)),
            Err(InvalidId::Length { found: 39 })
        );
        assert_eq!(
            SessionId::parse("a".repeat(1 << 20)),
            Err(InvalidId::Length { found: 1 << 20 })
        );
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
