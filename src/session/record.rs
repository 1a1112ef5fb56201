//! The bytes of one session record.
//!
//! A record is the identity as one MessagePack value (an unsigned integer,
//! a UUID's 16-byte binary or a short string: [`crate::identity`]),
//! followed by the application's attributes in MessagePack. Attributes that
//! encode to `nil` (`()`, `None`) are left out, so an identity-only session
//! costs 1 to 9 bytes with an integer identity, 18 with a UUID. Deadline is not part of the record: each layout keeps it where its
//! own expiry mechanism can see it.
//!
//! Structs are written as maps with their field names, and enum variants by
//! name, so that records survive a rolling deploy in both directions: code
//! with a new field marked `#[serde(default)]` reads old records, old code
//! skips the field it does not know, fields may be reordered, and
//! `skip_serializing_if` is safe. A change that would read back as different
//! data (a field's type changed, a required field added) is a
//! [`crate::Error::CorruptRecord`], never a silent swap. Short names cost
//! fewer bytes: `#[serde(rename = "c")]` keeps the Rust name readable.
//!
//! Byte arrays and byte vectors (`[u8; 32]`, `Vec<u8>`) are written as
//! MessagePack binary, one byte per byte, rather than as arrays of
//! integers (up to two bytes per byte). Records written by version 0.1
//! (structs as arrays) still decode.

use std::io::Cursor;

use rmp_serde::config::BytesMode;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Result;
use crate::identity::{Identity, UserId};

const NIL: u8 = 0xc0;

/// Encodes one record.
pub fn encode<I: UserId, A: Serialize>(identity: &I, attrs: &A) -> Result<Vec<u8>> {
    encode_split(identity, attrs).map(|(record, _)| record)
}

/// Encodes one record, and says where its attributes begin (the length
/// of its identity).
pub fn encode_split<I: UserId, A: Serialize>(identity: &I, attrs: &A) -> Result<(Vec<u8>, usize)> {
    identity.check()?;
    let mut out = Vec::with_capacity(16);
    identity.encode(&mut out);
    let start = out.len();
    let mut ser = rmp_serde::Serializer::new(&mut out)
        .with_struct_map()
        .with_bytes(BytesMode::ForceAll);
    attrs.serialize(&mut ser)?;
    if out[start..] == [NIL] {
        out.truncate(start);
    }
    Ok((out, start))
}

/// Splits a record into its identity and its encoded attributes (empty
/// when the attributes are `nil`), without decoding the attributes.
pub fn split(bytes: &[u8]) -> Result<(Identity, &[u8]), String> {
    let mut rest = bytes;
    let identity = Identity::decode(&mut rest)?;
    Ok((identity, rest))
}

/// The identity of a record that holds an integer identity and nothing
/// else (the compact layout stores those as integers).
pub fn int_only(bytes: &[u8]) -> Option<u64> {
    match split(bytes) {
        Ok((Identity::Int(n), [])) => Some(n),
        _ => None,
    }
}

/// Joins an identity and encoded attributes into a record; the inverse of
/// [`split`].
pub fn join<I: UserId>(identity: &I, attrs: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(18 + attrs.len());
    identity.encode(&mut out);
    out.extend_from_slice(attrs);
    out
}

/// Decodes one record; the error text says what was wrong.
pub fn decode<I: UserId, A: DeserializeOwned>(bytes: &[u8]) -> Result<(I, A), String> {
    let mut rest = bytes;
    let identity = I::decode(&mut rest)?;
    Ok((identity, decode_attrs(rest)?))
}

/// Decodes a record's attributes (what follows its identity).
pub fn decode_attrs<A: DeserializeOwned>(rest: &[u8]) -> Result<A, String> {
    if rest.is_empty() {
        return rmp_serde::from_slice(&[NIL]).map_err(|e| format!("attributes: {e}"));
    }
    let mut de = rmp_serde::Deserializer::new(Cursor::new(rest));
    let attrs = A::deserialize(&mut de).map_err(|e| format!("attributes: {e}"))?;
    let used = de.position() as usize;
    if used != rest.len() {
        return Err(format!("{} trailing bytes", rest.len() - used));
    }
    Ok(attrs)
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
        assert_eq!(encode(&5u64, &()).unwrap(), vec![5]);
        assert_eq!(encode(&1_000_000u64, &()).unwrap().len(), 5);
        assert_eq!(encode(&u64::MAX, &()).unwrap().len(), 9);
        assert_eq!(decode::<u64, ()>(&[5]).unwrap(), (5, ()));
        assert_eq!(decode::<u64, Option<u8>>(&[5]).unwrap(), (5, None));
    }

    #[test]
    fn structs_are_encoded_with_field_names() {
        let cart = Cart {
            items: vec![1, 2],
            note: None,
        };
        let bytes = encode(&7u64, &cart).unwrap();
        // 7, {"items": [1, 2], "note": nil}
        let mut expected = vec![0x07, 0x82, 0xa5];
        expected.extend_from_slice(b"items");
        expected.extend_from_slice(&[0x92, 0x01, 0x02, 0xa4]);
        expected.extend_from_slice(b"note");
        expected.push(0xc0);
        assert_eq!(bytes, expected);
        assert_eq!(decode::<u64, Cart>(&bytes).unwrap(), (7, cart));
    }

    #[test]
    fn records_of_version_0_1_still_decode() {
        // 7, [ [1, 2], nil ]: structs as arrays.
        let old = [0x07, 0x92, 0x92, 0x01, 0x02, 0xc0];
        let cart = Cart {
            items: vec![1, 2],
            note: None,
        };
        assert_eq!(decode::<u64, Cart>(&old).unwrap(), (7, cart));
    }

    /// Version 1 of an application's attributes.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct V1 {
        visits: u32,
    }

    /// Version 2: a field added, an optional one skipped when empty.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct V2 {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nick: Option<u32>,
        visits: u32,
        #[serde(default)]
        theme: String,
    }

    #[test]
    fn old_and_new_code_read_each_others_records() {
        let new = V2 {
            nick: None,
            visits: 5,
            theme: "dark".into(),
        };
        let bytes = encode(&1u64, &new).unwrap();
        assert_eq!(decode::<u64, V1>(&bytes).unwrap(), (1, V1 { visits: 5 }));
        assert_eq!(decode::<u64, V2>(&bytes).unwrap(), (1, new));

        let old = encode(&1u64, &V1 { visits: 9 }).unwrap();
        let read = decode::<u64, V2>(&old).unwrap().1;
        assert_eq!(
            read,
            V2 {
                nick: None,
                visits: 9,
                theme: String::new()
            }
        );
    }

    #[test]
    fn an_incompatible_change_is_an_error_not_different_data() {
        #[derive(Debug, Serialize, Deserialize)]
        struct Retyped {
            visits: String,
        }
        #[derive(Debug, Serialize, Deserialize)]
        struct Required {
            visits: u32,
            owner: u64,
        }
        let bytes = encode(&1u64, &V1 { visits: 5 }).unwrap();
        assert!(decode::<u64, Retyped>(&bytes).is_err());
        assert!(decode::<u64, Required>(&bytes).is_err());
    }

    #[test]
    fn byte_arrays_are_binary() {
        #[derive(Debug, PartialEq, Serialize, Deserialize)]
        struct Login {
            #[serde(rename = "h")]
            hash: [u8; 32],
            salt: Vec<u8>,
        }
        let login = Login {
            hash: [0xab; 32],
            salt: vec![0xff; 16],
        };
        let bytes = encode(&3u64, &login).unwrap();
        // 1 identity + 1 map + 2 "h" + 2+32 + 5 "salt" + 2+16.
        assert_eq!(bytes.len(), 61, "{bytes:x?}");
        assert_eq!(decode::<u64, Login>(&bytes).unwrap(), (3, login));
    }

    #[test]
    fn split_and_join_are_inverse() {
        let bytes = encode(
            &300u64,
            &Cart {
                items: vec![9],
                note: Some("n".into()),
            },
        )
        .unwrap();
        let (identity, attrs) = split(&bytes).unwrap();
        assert_eq!(identity, Identity::Int(300));
        assert_eq!(join(&identity, attrs), bytes);
        assert_eq!(join(&5u64, &[]), vec![5]);
        assert_eq!(int_only(&[5]), Some(5));
        assert_eq!(int_only(&bytes), None);
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
            assert!(decode::<u64, Cart>(bytes).is_err(), "{bytes:?}");
        }
        assert!(
            decode::<u64, u8>(&[0x07, 0x01, 0x02])
                .unwrap_err()
                .contains("trailing")
        );
    }
}
