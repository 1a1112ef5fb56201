//! The bytes of one session record.
//!
//! A record is the identity as a MessagePack unsigned integer, followed by
//! the application's attributes in MessagePack's compact form (structs as
//! arrays, no field names). Attributes that encode to `nil` (`()`, `None`)
//! are left out, so an identity-only session costs 1 to 9 bytes. Expiry is not
//! part of the record: each layout keeps it where its own expiry mechanism
//! can see it.
//!
//! Attributes are encoded without field names, so add new fields at the end
//! of a struct and mark them `#[serde(default)]` to read older records.

use std::io::Cursor;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Result;

const NIL: u8 = 0xc0;

/// Encodes one record.
pub fn encode<A: Serialize>(identity: u64, attrs: &A) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(16);
    rmp_serde::encode::write(&mut out, &identity)?;
    let start = out.len();
    rmp_serde::encode::write(&mut out, attrs)?;
    if out[start..] == [NIL] {
        out.truncate(start);
    }
    Ok(out)
}

/// Splits a record into its identity and its encoded attributes (empty
/// when the attributes are `nil`), without decoding the attributes.
pub fn split(bytes: &[u8]) -> Result<(u64, &[u8]), String> {
    let mut rest = bytes;
    let identity: u64 = rmp::decode::read_int(&mut rest).map_err(|e| format!("identity: {e}"))?;
    Ok((identity, rest))
}

/// Joins an identity and encoded attributes into a record; the inverse of
/// [`split`].
pub fn join(identity: u64, attrs: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + attrs.len());
    // Writing to a Vec cannot fail.
    let _ = rmp::encode::write_uint(&mut out, identity);
    out.extend_from_slice(attrs);
    out
}

/// Decodes one record; the error text says what was wrong.
pub fn decode<A: DeserializeOwned>(bytes: &[u8]) -> Result<(u64, A), String> {
    let mut rest = bytes;
    let identity: u64 = rmp::decode::read_int(&mut rest).map_err(|e| format!("identity: {e}"))?;
    if rest.is_empty() {
        let attrs = rmp_serde::from_slice(&[NIL]).map_err(|e| format!("attributes: {e}"))?;
        return Ok((identity, attrs));
    }
    let mut de = rmp_serde::Deserializer::new(Cursor::new(rest));
    let attrs = A::deserialize(&mut de).map_err(|e| format!("attributes: {e}"))?;
    let used = de.position() as usize;
    if used != rest.len() {
        return Err(format!("{} trailing bytes", rest.len() - used));
    }
    Ok((identity, attrs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Cart {
        items: Vec<u32>,
        note: Option<String>,
    }

    #[test]
    fn identity_only_record_is_just_the_integer() {
        assert_eq!(encode(5, &()).unwrap(), vec![5]);
        assert_eq!(encode(1_000_000, &()).unwrap().len(), 5);
        assert_eq!(encode(u64::MAX, &()).unwrap().len(), 9);
        assert_eq!(decode::<()>(&[5]).unwrap(), (5, ()));
        assert_eq!(decode::<Option<u8>>(&[5]).unwrap(), (5, None));
    }

    #[test]
    fn structs_are_encoded_without_field_names() {
        let cart = Cart {
            items: vec![1, 2],
            note: None,
        };
        let bytes = encode(7, &cart).unwrap();
        // 7, [ [1, 2], nil ]
        assert_eq!(bytes, vec![0x07, 0x92, 0x92, 0x01, 0x02, 0xc0]);
        assert_eq!(decode::<Cart>(&bytes).unwrap(), (7, cart));
    }

    #[test]
    fn split_and_join_are_inverse() {
        let bytes = encode(
            300,
            &Cart {
                items: vec![9],
                note: Some("n".into()),
            },
        )
        .unwrap();
        let (identity, attrs) = split(&bytes).unwrap();
        assert_eq!(identity, 300);
        assert_eq!(join(identity, attrs), bytes);
        assert_eq!(join(5, &[]), vec![5]);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bytes in [
            &[][..],
            &[0xc1],
            &[0xa3, b'a', b'b', b'c'],
            &[0x07, 0x92, 0x92],
            &[0x07, 0xdd, 0xff, 0xff, 0xff, 0xff],
            &[0x07, 0x01, 0x02],
        ] {
            assert!(decode::<Cart>(bytes).is_err(), "{bytes:?}");
        }
        assert!(
            decode::<u8>(&[0x07, 0x01, 0x02])
                .unwrap_err()
                .contains("trailing")
        );
    }
}
