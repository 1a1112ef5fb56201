//! Who a session belongs to: an integer, a UUID or a short name.
//!
//! A record begins with its identity as one MessagePack value: an unsigned
//! integer (1 to 9 bytes, as records have always been written), a 16-byte
//! binary for a UUID (18 bytes) or a string of at most
//! [`MAX_NAME_BYTES`] bytes (1 or 2 bytes more than its length). The first
//! byte says which, so records written before names and UUIDs existed read
//! back as integers, unchanged.
//!
//! A [`crate::Store`] is typed by its identities ([`UserId`]): `u64` (the
//! default), [`Uuid`], [`Name`], or [`Identity`] for a store that holds
//! more than one form. A record whose identity is of another form reads as
//! [`crate::Error::CorruptRecord`].
//!
//! ```no_run
//! # async fn run() -> sessionpack::Result<()> {
//! use sessionpack::identity::{Name, Uuid};
//! use sessionpack::{Compact, CompactConfig, Store};
//!
//! let conn = sessionpack::connect("redis://127.0.0.1/").await?;
//! let layout = Compact::new(conn, CompactConfig::new(16)).await?;
//! let by_email: Store<_, (), Name> = Store::for_identities(layout.clone());
//! let owner = Name::new("ada@example.com").expect("at most 64 bytes");
//! let session = by_email.create(owner.clone(), ()).await?;
//! assert_eq!(by_email.load(&session.id).await?.map(|s| s.identity), Some(owner));
//!
//! let by_uuid: Store<_, (), Uuid> = Store::for_identities(layout);
//! by_uuid.create(Uuid([0x5a; 16]), ()).await?;
//! # Ok(()) }
//! ```

use std::fmt;

use serde::{Deserialize, Serialize};

/// The longest name an identity may have, in bytes of UTF-8.
pub const MAX_NAME_BYTES: usize = 64;

/// A session's owner.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Identity {
    /// An integer user id.
    Int(u64),
    /// A UUID's 16 bytes.
    Uuid([u8; 16]),
    /// A short name (an email address, an external id): at most
    /// [`MAX_NAME_BYTES`] bytes.
    Name(String),
}

/// A name that is empty or longer than [`MAX_NAME_BYTES`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidName {
    /// Its length in bytes.
    pub len: usize,
}

impl fmt::Display for InvalidName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "an identity name has 1 to {MAX_NAME_BYTES} bytes, not {}",
            self.len
        )
    }
}

impl std::error::Error for InvalidName {}

/// Checks a name's length: 1 to [`MAX_NAME_BYTES`] bytes.
fn check_name(name: &str) -> Result<(), InvalidName> {
    if (1..=MAX_NAME_BYTES).contains(&name.len()) {
        Ok(())
    } else {
        Err(InvalidName { len: name.len() })
    }
}

impl Identity {
    /// A name identity, refused when empty or beyond [`MAX_NAME_BYTES`].
    pub fn name(name: impl Into<String>) -> Result<Self, InvalidName> {
        Name::new(name).map(Into::into)
    }

    /// Checks an identity made directly: a name of 1 to [`MAX_NAME_BYTES`]
    /// bytes. (Integers and UUIDs are always good.)
    pub fn check(&self) -> Result<(), InvalidName> {
        match self {
            Self::Name(name) => check_name(name),
            Self::Int(_) | Self::Uuid(_) => Ok(()),
        }
    }

    /// Which form it is, for error messages.
    pub fn form(&self) -> &'static str {
        match self {
            Self::Int(_) => "an integer",
            Self::Uuid(_) => "a UUID",
            Self::Name(_) => "a name",
        }
    }

    /// The integer, for an integer identity.
    pub fn as_int(&self) -> Option<u64> {
        match self {
            Self::Int(n) => Some(*n),
            _ => None,
        }
    }

    /// Bytes it takes at the head of a record.
    pub fn encoded_len(&self) -> usize {
        match self {
            Self::Int(n) => match *n {
                0..=0x7f => 1,
                0x80..=0xff => 2,
                0x100..=0xffff => 3,
                0x1_0000..=0xffff_ffff => 5,
                _ => 9,
            },
            Self::Uuid(_) => 18,
            Self::Name(s) => name_len(s.len()),
        }
    }

    /// Appends its MessagePack form to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        // Writing to a Vec cannot fail.
        match self {
            Self::Int(n) => {
                let _ = rmp::encode::write_uint(out, *n);
            }
            Self::Uuid(bytes) => {
                let _ = rmp::encode::write_bin(out, bytes);
            }
            Self::Name(s) => {
                let _ = rmp::encode::write_str(out, s);
            }
        }
    }

    /// Reads an identity from the head of `bytes`, leaving the rest; the
    /// error says what was there instead.
    pub fn decode(bytes: &mut &[u8]) -> Result<Self, String> {
        use rmp::Marker;
        let marker = bytes
            .first()
            .map(|&b| Marker::from_u8(b))
            .ok_or("identity: empty record")?;
        match marker {
            Marker::Bin8 => {
                let len = usize::from(*bytes.get(1).ok_or("identity: truncated binary")?);
                if len != 16 {
                    return Err(format!("identity: a {len}-byte binary is not a UUID"));
                }
                let uuid: [u8; 16] = bytes
                    .get(2..18)
                    .ok_or("identity: truncated UUID")?
                    .try_into()
                    .map_err(|_| "identity: truncated UUID")?;
                *bytes = &bytes[18..];
                Ok(Self::Uuid(uuid))
            }
            Marker::FixStr(_) | Marker::Str8 => {
                let (head, len) = match marker {
                    Marker::FixStr(n) => (1, usize::from(n)),
                    _ => (
                        2,
                        usize::from(*bytes.get(1).ok_or("identity: truncated name")?),
                    ),
                };
                if len > MAX_NAME_BYTES {
                    return Err(format!("identity: a {len}-byte name is too long"));
                }
                let text = bytes
                    .get(head..head + len)
                    .ok_or("identity: truncated name")?;
                let name = std::str::from_utf8(text)
                    .map_err(|e| format!("identity: name is not UTF-8: {e}"))?
                    .to_owned();
                *bytes = &bytes[head + len..];
                Ok(Self::Name(name))
            }
            _ => rmp::decode::read_int(bytes)
                .map(Self::Int)
                .map_err(|e| format!("identity: {e}")),
        }
    }
}

/// Bytes of a MessagePack string of `len` bytes: a fixstr up to 31, else
/// a str8 (names are at most [`MAX_NAME_BYTES`]).
fn name_len(len: usize) -> usize {
    if len < 32 { 1 + len } else { 2 + len }
}

/// A type of session owner a [`crate::Store`] holds: how it is written
/// at the head of a record and read back.
pub trait UserId: Clone + fmt::Debug + PartialEq + Send + Sync + 'static {
    /// Appends its MessagePack form to `out`.
    fn encode(&self, out: &mut Vec<u8>);

    /// Reads one from the head of `bytes`, leaving the rest; the error
    /// says what was there instead.
    fn decode(bytes: &mut &[u8]) -> Result<Self, String>;

    /// Checks it may be written (before every write of a record that
    /// begins with it); by default every value may.
    fn check(&self) -> Result<(), InvalidName> {
        Ok(())
    }
}

impl UserId for Identity {
    fn encode(&self, out: &mut Vec<u8>) {
        Identity::encode(self, out);
    }

    fn decode(bytes: &mut &[u8]) -> Result<Self, String> {
        Identity::decode(bytes)
    }

    fn check(&self) -> Result<(), InvalidName> {
        Identity::check(self)
    }
}

impl UserId for u64 {
    fn encode(&self, out: &mut Vec<u8>) {
        let _ = rmp::encode::write_uint(out, *self);
    }

    fn decode(bytes: &mut &[u8]) -> Result<Self, String> {
        match Identity::decode(bytes)? {
            Identity::Int(n) => Ok(n),
            other => Err(format!(
                "identity: {} where an integer was expected",
                other.form()
            )),
        }
    }
}

/// A UUID identity: its 16 bytes, written as an 18-byte MessagePack binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Uuid(pub [u8; 16]);

impl std::str::FromStr for Uuid {
    type Err = String;

    /// The usual form: 32 hex digits in groups of 8-4-4-4-12.
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || format!("{text:?} is not a UUID (8-4-4-4-12 hex digits)");
        let groups: Vec<&str> = text.split('-').collect();
        if groups.iter().map(|g| g.len()).ne([8, 4, 4, 4, 12]) {
            return Err(bad());
        }
        let bytes = hex::decode(groups.concat()).map_err(|_| bad())?;
        bytes.try_into().map(Self).map_err(|_| bad())
    }
}

impl UserId for Uuid {
    fn encode(&self, out: &mut Vec<u8>) {
        let _ = rmp::encode::write_bin(out, &self.0);
    }

    fn decode(bytes: &mut &[u8]) -> Result<Self, String> {
        match Identity::decode(bytes)? {
            Identity::Uuid(b) => Ok(Self(b)),
            other => Err(format!(
                "identity: {} where a UUID was expected",
                other.form()
            )),
        }
    }
}

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Identity::Uuid(self.0).fmt(f)
    }
}

/// A name identity (an email address, an external id) of 1 to
/// [`MAX_NAME_BYTES`] bytes, checked when it is made.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(String);

impl Name {
    /// `name`, refused when empty (no one's name: every session given it
    /// would be indexed under one user) or beyond [`MAX_NAME_BYTES`].
    pub fn new(name: impl Into<String>) -> Result<Self, InvalidName> {
        let name = name.into();
        check_name(&name)?;
        Ok(Self(name))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for Name {
    type Error = InvalidName;

    fn try_from(name: &str) -> Result<Self, InvalidName> {
        Self::new(name)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl UserId for Name {
    fn encode(&self, out: &mut Vec<u8>) {
        let _ = rmp::encode::write_str(out, &self.0);
    }

    fn decode(bytes: &mut &[u8]) -> Result<Self, String> {
        match Identity::decode(bytes)? {
            Identity::Name(s) => Ok(Self(s)),
            other => Err(format!(
                "identity: {} where a name was expected",
                other.form()
            )),
        }
    }
}

impl From<Uuid> for Identity {
    fn from(u: Uuid) -> Self {
        Self::Uuid(u.0)
    }
}

impl From<Name> for Identity {
    fn from(n: Name) -> Self {
        Self::Name(n.0)
    }
}

impl From<u64> for Identity {
    fn from(n: u64) -> Self {
        Self::Int(n)
    }
}

impl From<[u8; 16]> for Identity {
    fn from(uuid: [u8; 16]) -> Self {
        Self::Uuid(uuid)
    }
}

impl TryFrom<&str> for Identity {
    type Error = InvalidName;

    fn try_from(name: &str) -> Result<Self, InvalidName> {
        Self::name(name)
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Int(n) => write!(f, "{n}"),
            Self::Uuid(b) => {
                for (i, byte) in b.iter().enumerate() {
                    if matches!(i, 4 | 6 | 8 | 10) {
                        f.write_str("-")?;
                    }
                    write!(f, "{byte:02x}")?;
                }
                Ok(())
            }
            Self::Name(s) => f.write_str(s),
        }
    }
}

/// The first integer identity [`Form::identity`] hands out: 2^20, a
/// 7-digit user id as real ones often are (5 bytes of MessagePack).
pub const FIRST_INT: u64 = 1 << 20;

/// A form of identity, for planning and benchmarks: what each costs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Form {
    /// Integers (the benchmarks' from [`FIRST_INT`] up: 5 bytes of
    /// MessagePack).
    #[default]
    Int,
    /// Random UUIDs (18 bytes).
    Uuid,
    /// Names of this many bytes (`user-000…0042@example.com`, cut or
    /// padded; 1-2 bytes more in MessagePack).
    Name(u8),
}

impl std::str::FromStr for Form {
    type Err = String;

    /// `int`, `uuid` or `name-N` (N bytes, at most 64).
    fn from_str(text: &str) -> std::result::Result<Self, String> {
        match text {
            "int" => Ok(Self::Int),
            "uuid" => Ok(Self::Uuid),
            _ => text
                .strip_prefix("name-")
                .and_then(|n| n.parse::<u8>().ok())
                .filter(|&n| (1..=MAX_NAME_BYTES as u8).contains(&n))
                .map(Self::Name)
                .ok_or_else(|| format!("{text:?}: int, uuid or name-N (N from 1 to 64)")),
        }
    }
}

impl Form {
    /// Bytes of MessagePack one identity of this form takes in a record,
    /// for an integer form `int`.
    pub fn record_bytes(self, int: u64) -> usize {
        match self {
            Self::Int => Identity::Int(int).encoded_len(),
            Self::Uuid => 18,
            Self::Name(n) => name_len(usize::from(n)),
        }
    }

    /// The `n`th session's identity (integers from [`FIRST_INT`]).
    pub fn identity(self, n: u64) -> Identity {
        match self {
            Self::Int => Identity::Int(FIRST_INT + n),
            Self::Uuid => {
                let mut bytes: [u8; 16] = rand::random();
                // Version 4, variant 1, as random UUIDs are.
                bytes[6] = (bytes[6] & 0x0f) | 0x40;
                bytes[8] = (bytes[8] & 0x3f) | 0x80;
                Identity::Uuid(bytes)
            }
            Self::Name(len) => {
                // `len` bytes, ending in the number so names differ.
                let len = usize::from(len);
                let number = n.to_string();
                let name = match len.checked_sub(number.len() + 1) {
                    Some(room) => {
                        let mut head = "user@example.com".repeat(room / 16 + 1);
                        head.truncate(room);
                        format!("{head}-{number}")
                    }
                    None => number[number.len().saturating_sub(len)..].to_owned(),
                };
                Identity::Name(name)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn round_trip(identity: &Identity) -> Identity {
        let mut out = Vec::new();
        identity.encode(&mut out);
        assert_eq!(out.len(), identity.encoded_len(), "{identity:?}");
        out.extend_from_slice(b"\x81\xa1a\x01");
        let mut rest = out.as_slice();
        let back = Identity::decode(&mut rest).unwrap();
        assert_eq!(rest, b"\x81\xa1a\x01", "the attributes are left");
        back
    }

    #[test]
    fn integers_are_written_as_before() {
        for n in [
            0,
            7,
            127,
            128,
            255,
            65_535,
            65_536,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut out = Vec::new();
            Identity::Int(n).encode(&mut out);
            let mut before = Vec::new();
            rmp::encode::write_uint(&mut before, n).unwrap();
            assert_eq!(out, before);
            assert_eq!(round_trip(&Identity::Int(n)), Identity::Int(n));
        }
    }

    #[test]
    fn each_form_states_its_size() {
        assert_eq!(Identity::Int(42).encoded_len(), 1);
        assert_eq!(Identity::Uuid([7; 16]).encoded_len(), 18);
        assert_eq!(Identity::name("ada@example.com").unwrap().encoded_len(), 16);
        assert_eq!(Identity::name("x".repeat(64)).unwrap().encoded_len(), 66);
        assert_eq!(Identity::name("x".repeat(65)), Err(InvalidName { len: 65 }));
        assert_eq!(Identity::name(""), Err(InvalidName { len: 0 }));
        assert_eq!(Name::new(""), Err(InvalidName { len: 0 }));
        assert!(Identity::Name(String::new()).check().is_err());
        assert!(Identity::Name("x".repeat(65)).check().is_err());
        assert!(Identity::Name("x".repeat(64)).check().is_ok());
    }

    #[test]
    fn hostile_heads_are_errors_not_panics() {
        for bad in [
            &b""[..],
            b"\xc4",
            b"\xc4\x10\x01",
            b"\xc4\x03abc",
            b"\xa5ab",
            b"\xd9\x41",
            b"\xa2\xff\xfe",
            b"\xc0",
            b"\xd3\xff\xff\xff\xff\xff\xff\xff\xff",
        ] {
            let mut rest = bad;
            assert!(Identity::decode(&mut rest).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn typed_identities_refuse_other_forms() {
        let mut out = Vec::new();
        Name::new("ada").unwrap().encode(&mut out);
        assert!(<u64 as UserId>::decode(&mut out.as_slice()).is_err());
        assert!(<Uuid as UserId>::decode(&mut out.as_slice()).is_err());
        assert_eq!(
            <Name as UserId>::decode(&mut out.as_slice())
                .unwrap()
                .as_str(),
            "ada"
        );
        assert_eq!(
            <Identity as UserId>::decode(&mut out.as_slice()).unwrap(),
            Identity::Name("ada".into())
        );
        let mut out = Vec::new();
        Uuid([9; 16]).encode(&mut out);
        assert_eq!(
            <Uuid as UserId>::decode(&mut out.as_slice()).unwrap(),
            Uuid([9; 16])
        );
        let mut out = Vec::new();
        UserId::encode(&42u64, &mut out);
        assert_eq!(out, [42]);
    }

    #[test]
    fn uuids_display_and_parse_in_the_usual_form() {
        let bytes = [
            0x67, 0xe5, 0x50, 0x44, 0x10, 0xb1, 0x42, 0x6f, 0x92, 0x47, 0xbb, 0x68, 0x0e, 0x5f,
            0xe0, 0xc8,
        ];
        let text = "67e55044-10b1-426f-9247-bb680e5fe0c8";
        assert_eq!(Identity::Uuid(bytes).to_string(), text);
        assert_eq!(text.parse::<Uuid>(), Ok(Uuid(bytes)));
        for bad in [
            "",
            "67e55044-10b1-426f-9247-bb680e5fe0c",
            "67e55044x10b1-426f-9247-bb680e5fe0c8",
            "g7e55044-10b1-426f-9247-bb680e5fe0c8",
            "67e5504410b1426f9247bb680e5fe0c8",
        ] {
            assert!(bad.parse::<Uuid>().is_err(), "{bad}");
        }
    }

    #[test]
    fn benchmark_names_have_their_length_and_differ() {
        for len in [1u8, 3, 8, 24, 64] {
            let names: std::collections::HashSet<_> = (990..1010)
                .map(|n| match Form::Name(len).identity(n) {
                    Identity::Name(name) => {
                        assert_eq!(name.len(), usize::from(len), "{name:?}");
                        name
                    }
                    other => panic!("{other:?}"),
                })
                .collect();
            let expected = if len == 1 { 10 } else { 20 };
            assert_eq!(names.len(), expected, "names of {len} bytes");
        }
    }

    proptest! {
        #[test]
        fn every_identity_round_trips(n in any::<u64>(), uuid in any::<[u8; 16]>(), name in "\\PC{0,16}") {
            prop_assert_eq!(round_trip(&Identity::Int(n)), Identity::Int(n));
            prop_assert_eq!(round_trip(&Identity::Uuid(uuid)), Identity::Uuid(uuid));
            if let Ok(name) = Identity::name(name) {
                prop_assert_eq!(round_trip(&name), name);
            }
        }

        #[test]
        fn any_bytes_decode_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let mut rest = bytes.as_slice();
            let _ = Identity::decode(&mut rest);
        }
    }
}
