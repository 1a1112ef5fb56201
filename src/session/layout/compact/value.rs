//! A bucket's values: the integer form, the binary form with the record
//! inline, in pieces or out of line, and how they are read back.

use super::{CHECK_BYTES, CHECKED, EXPIRY_BYTES, OUT_OF_LINE, PIECED, PIECED_HEAD, SCALE, SHORT};
use crate::session::record;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Form {
    /// `identity * 10^10 + expiry`, one listpack integer.
    Integer(u64),
    /// Deadline, then the record, in the bucket.
    Inline,
    /// Deadline, the marker, the count and the payload's first bytes in
    /// the value; the rest in pieces of `size` bytes in the bucket. A
    /// `checked` payload is the record's check, then the record. `short`:
    /// the pieces take short names where the bucket has them free (the
    /// writing script decides, [`piece_field`]).
    Pieced {
        size: usize,
        checked: bool,
        short: bool,
    },
    /// Deadline, then the marker; the record under its own key.
    OutOfLine,
}

impl Form {
    /// The form's name in the scripts' arguments (`make_value` in
    /// `compact_common.lua`).
    pub(super) fn code(self) -> std::borrow::Cow<'static, str> {
        match self {
            Self::Integer(_) => "i".into(),
            Self::Inline => "b".into(),
            Self::Pieced {
                size,
                checked: false,
                ..
            } => format!("p{size}").into(),
            Self::Pieced {
                size,
                checked: true,
                short: false,
            } => format!("c{size}").into(),
            Self::Pieced {
                size,
                checked: true,
                short: true,
            } => format!("s{size}").into(),
            Self::OutOfLine => "o".into(),
        }
    }

    /// The stored value for this form, as `make_value` in
    /// `compact_common.lua` writes it, of the payload [`Form::payload`]
    /// gives.
    pub(super) fn value(self, payload: &[u8], expiry: u64) -> Vec<u8> {
        match self {
            Self::Integer(identity) => (identity * SCALE + expiry).to_string().into_bytes(),
            Self::Inline | Self::OutOfLine | Self::Pieced { .. } => {
                let mut v = Vec::with_capacity(PIECED_HEAD + payload.len().min(64));
                // Expiries are checked to fit 32 bits before any write.
                v.extend_from_slice(&(expiry as u32).to_be_bytes());
                match self {
                    Self::OutOfLine => v.push(OUT_OF_LINE),
                    Self::Pieced {
                        size,
                        checked,
                        short,
                    } => {
                        let (head, rest) = split(payload, size);
                        // At most MAX_PIECES, checked where the form is
                        // chosen. SHORT only where there are pieces, as
                        // `split_record` in `compact_pieces.lua` sets it:
                        // the script clears it where the names are taken.
                        let count = rest.len() as u8
                            | if checked { CHECKED } else { 0 }
                            | if short && !rest.is_empty() { SHORT } else { 0 };
                        v.extend_from_slice(&[PIECED, count]);
                        v.extend_from_slice(head);
                    }
                    _ => v.extend_from_slice(payload),
                }
                v
            }
        }
    }

    /// What a script given this form is given beside it (`make_value`),
    /// and what [`Form::value`] and [`Form::pieces`] cut: the identity in
    /// decimal for the integer form, a checked record's check followed by
    /// the record, else the record.
    pub(super) fn payload(self, record: &[u8]) -> std::borrow::Cow<'_, [u8]> {
        match self {
            Self::Integer(identity) => identity.to_string().into_bytes().into(),
            Self::Pieced { checked: true, .. } => {
                let mut payload = Vec::with_capacity(CHECK_BYTES + record.len());
                payload.extend_from_slice(&check_of(record).to_be_bytes());
                payload.extend_from_slice(record);
                payload.into()
            }
            Self::Inline | Self::OutOfLine | Self::Pieced { .. } => record.into(),
        }
    }

    /// The pieces a payload of this form continues in (none but for
    /// [`Form::Pieced`]).
    pub(super) fn pieces(self, payload: &[u8]) -> Vec<&[u8]> {
        match self {
            Self::Pieced { size, .. } => split(payload, size).1,
            _ => Vec::new(),
        }
    }
}

/// The check a pieced payload begins with: the low half of the record's
/// XXH3-64 (what the server never computes: scripts only move payloads).
pub(super) fn check_of(record: &[u8]) -> u32 {
    xxhash_rust::xxh3::xxh3_64(record) as u32
}

/// A payload cut for the pieced form with pieces of `size` bytes: the
/// part its value holds, and the pieces, as `split_record` in
/// `compact_pieces.lua` cuts it.
pub(super) fn split(payload: &[u8], size: usize) -> (&[u8], Vec<&[u8]>) {
    let first = (size - PIECED_HEAD).min(payload.len());
    let (head, rest) = payload.split_at(first);
    (head, rest.chunks(size).collect())
}

/// The pieces of `size` bytes [`split`] cuts a payload of `len` bytes into.
pub(super) fn pieces_of_len(len: usize, size: usize) -> usize {
    len.saturating_sub(size - PIECED_HEAD).div_ceil(size)
}

/// The longest string a listpack entry holds behind a one-byte header
/// (its 6-bit length); one byte longer takes two.
const SHORT_STRING: usize = 63;

/// The size of the pieces a payload of `len` bytes is cut into where the
/// largest a value may be is `largest` (more than a pieced value's 6
/// bytes of head): that, or 63 where that cuts it into no more pieces. A
/// 64-byte value's listpack entry takes a byte more of header than a
/// 63-byte one, so at the default `hash-max-listpack-value` (64) a full
/// piece costs one byte less cut shorter. Readers join whatever sizes a
/// record's pieces have; the scripts cut by the size the form names.
pub fn piece_size_for(largest: usize, len: usize) -> usize {
    if largest > SHORT_STRING && pieces_of_len(len, SHORT_STRING) == pieces_of_len(len, largest) {
        SHORT_STRING
    } else {
        largest
    }
}

/// The field of piece `i` (from 1) of the session stored under `field`,
/// as `piece_fields` in `compact_pieces.lua` names it: long, the field and
/// the byte `i`; or `short`, the field's first byte (the one a split or
/// merge below a byte's last bit rewrites, so the piece moves with its
/// session), the two bytes before its last four (random in every id, a
/// stamp being an id's last four) and `i`. A short name may be another
/// session's: a writer takes short names only where no other session's
/// first piece holds the first, and the count byte says which it took.
pub(super) fn piece_field(field: &[u8], i: usize, short: bool) -> Vec<u8> {
    // At most MAX_PIECES.
    let i = i as u8;
    match field.len().checked_sub(6) {
        Some(at) if short => vec![field[0], field[at], field[at + 1], i],
        _ => {
            let mut name = Vec::with_capacity(field.len() + 1);
            name.extend_from_slice(field);
            name.push(i);
            name
        }
    }
}

/// A value read back: its expiry and where its record is.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Value {
    Here {
        expires_at: u64,
        record: Vec<u8>,
    },
    Pieced {
        expires_at: u64,
        pieces: usize,
        /// Whether the pieces have short names ([`piece_field`]).
        short: bool,
        /// The record's first bytes.
        head: Vec<u8>,
        /// The record's check, where its payload begins with one.
        check: Option<u32>,
    },
    OutOfLine {
        expires_at: u64,
    },
}

impl Value {
    pub(super) fn expires_at(&self) -> u64 {
        match self {
            Self::Here { expires_at, .. }
            | Self::Pieced { expires_at, .. }
            | Self::OutOfLine { expires_at } => *expires_at,
        }
    }
}

/// The expiry a stored value holds; `None` if it is in neither form.
pub(crate) fn value_expiry(bytes: &[u8]) -> Option<u64> {
    parse_value(bytes).map(|v| v.expires_at())
}

/// Where a stored value's record is, and its size: what a reader of the
/// keyspace (the tool's `advise --sample-namespace`) needs to size the
/// records a store holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoredRecord {
    /// In the bucket: the record's length in bytes (an integer-form
    /// value's record is its identity alone).
    Inline(usize),
    /// In the bucket in pieces: the bytes the value holds and the number
    /// of pieces, each a field of its own (see the module's docs).
    Pieced {
        /// The record's bytes in the value.
        head: usize,
        /// The pieces holding the rest.
        pieces: usize,
    },
    /// Under a key of its own ([`GroupedBuckets::out_of_line_key`](super::GroupedBuckets::out_of_line_key)),
    /// whose length is the record's.
    OutOfLine,
}

impl StoredRecord {
    /// The fields of the pieces the bucket value `bytes`, stored under
    /// `field`, names, in order, under the names its count byte says (see
    /// the module's docs); none for a value of another form.
    pub fn piece_fields(field: &[u8], bytes: &[u8]) -> Vec<Vec<u8>> {
        match parse_value(bytes) {
            Some(Value::Pieced { pieces, short, .. }) => {
                (1..=pieces).map(|i| piece_field(field, i, short)).collect()
            }
            _ => Vec::new(),
        }
    }

    /// What the bucket value `bytes` holds; `None` if it is in neither of
    /// the compact layout's forms.
    pub fn of_value(bytes: &[u8]) -> Option<Self> {
        Some(match parse_value(bytes)? {
            Value::Here { record, .. } => Self::Inline(record.len()),
            Value::Pieced { pieces, head, .. } => Self::Pieced {
                head: head.len(),
                pieces,
            },
            Value::OutOfLine { .. } => Self::OutOfLine,
        })
    }
}

/// Reads a stored value; `None` if it is in neither form.
pub(super) fn parse_value(bytes: &[u8]) -> Option<Value> {
    match bytes.first()? {
        b'0'..=b'9' => {
            let n: u64 = std::str::from_utf8(bytes).ok()?.parse().ok()?;
            Some(Value::Here {
                expires_at: n % SCALE,
                record: record::join(&(n / SCALE), &[]),
            })
        }
        _ if bytes.len() > EXPIRY_BYTES => {
            let (head, rest) = bytes.split_at(EXPIRY_BYTES);
            let expires_at = u64::from(u32::from_be_bytes(head.try_into().ok()?));
            Some(if rest == [OUT_OF_LINE] {
                Value::OutOfLine { expires_at }
            } else if rest.len() >= 2 && rest[0] == PIECED {
                let pieces = usize::from(rest[1] & !(CHECKED | SHORT));
                let short = rest[1] & SHORT != 0;
                let (check, head) = if rest[1] & CHECKED == 0 {
                    (None, &rest[2..])
                } else {
                    let (check, head) = rest[2..].split_at_checked(CHECK_BYTES)?;
                    (Some(u32::from_be_bytes(check.try_into().ok()?)), head)
                };
                Value::Pieced {
                    expires_at,
                    pieces,
                    short,
                    head: head.to_vec(),
                    check,
                }
            } else {
                Value::Here {
                    expires_at,
                    record: rest.to_vec(),
                }
            })
        }
        _ => None,
    }
}
