//! Which form a record takes (in its value, in pieces, out of line), what
//! a store notes of the forms it writes, and which script a touch tries
//! first.

use super::{
    CHECK_BYTES, CHECKED_FORMAT, Compact, EXPIRY_BYTES, Form, INTEGER_FORM, MAX_PIECED_RECORD,
    MAX_PIECES, OUT_OF_LINE, PIECED, PIECED_HEAD, SHORT_PIECES_FORMAT, piece_field, piece_size_for,
    pieces_of_len,
};
use crate::session::layout::{Inserted, Written};
use crate::session::record;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Touches in a row handed from the short script to the full one after
/// which the full one goes first ([`Compact::touch_until`]).
pub(super) const TOUCHES_BEFORE_FULL: u32 = 4;

/// Once the full script goes first, one touch in this many still tries
/// the short one, to notice records kept in their buckets again.
pub(super) const TOUCH_PROBE_EVERY: u32 = 32;

/// Which script a touch tries first: a touch does not know the record's
/// form before it reads it. Shared by a layout's clones.
#[derive(Debug, Default)]
pub(super) struct TouchRoute {
    /// Touches in a row the short script handed to the full one (records
    /// out of line), since the last it took itself.
    handed_on: std::sync::atomic::AtomicU32,
    /// Touches begun: each takes a ticket as it decides, so the probes are
    /// one in [`TOUCH_PROBE_EVERY`] however many touches are in flight
    /// (the count of those handed on moves only as their replies come).
    tickets: std::sync::atomic::AtomicU32,
}

impl TouchRoute {
    /// Whether the next touch tries the short script first.
    pub(super) fn short_first(&self) -> bool {
        let ticket = self.tickets.fetch_add(1, Ordering::Relaxed);
        self.handed_on.load(Ordering::Relaxed) < TOUCHES_BEFORE_FULL
            || ticket.is_multiple_of(TOUCH_PROBE_EVERY)
    }

    /// The short script took a touch itself.
    pub(super) fn taken(&self) {
        self.handed_on.store(0, Ordering::Relaxed);
    }

    /// A touch went to the full script.
    pub(super) fn handed_on(&self) {
        self.handed_on.fetch_add(1, Ordering::Relaxed);
    }
}

/// Share of written records that may go out of line before the store warns.
pub(super) const OUT_OF_LINE_WARN_SHARE: f64 = 0.1;

/// Writes seen before the share is judged.
pub(super) const OUT_OF_LINE_WARN_AFTER: u64 = 1000;

/// Counts how many written records go out of line, and warns once when a
/// large share does: each costs a key of its own (~100 B more than inline),
/// which a higher `hash-max-listpack-value` would save.
#[derive(Debug, Default)]
pub(super) struct OutOfLineWatch {
    pub(super) writes: AtomicU64,
    pub(super) out_of_line: AtomicU64,
    pub(super) longest: AtomicU64,
    pub(super) warned: AtomicBool,
}

impl OutOfLineWatch {
    pub(super) fn note(&self, value_len: u64, out_of_line: bool, limit: u64) {
        let writes = self.writes.fetch_add(1, Ordering::Relaxed) + 1;
        if !out_of_line {
            return;
        }
        let out = self.out_of_line.fetch_add(1, Ordering::Relaxed) + 1;
        self.longest.fetch_max(value_len, Ordering::Relaxed);
        if writes >= OUT_OF_LINE_WARN_AFTER
            && out as f64 > OUT_OF_LINE_WARN_SHARE * writes as f64
            && !self.warned.swap(true, Ordering::Relaxed)
        {
            tracing::warn!(
                share = format!("{:.0}%", 100.0 * out as f64 / writes as f64),
                longest_value = self.longest.load(Ordering::Relaxed),
                hash_max_listpack_value = limit,
                "many session records are longer than the server's hash-max-listpack-value \
                 and go out of line, each under a key of its own; `sessionpack advise \
                 --profile` says which limit would keep them in their buckets"
            );
        }
    }
}

impl<C> Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// Notes a record whose write is done, for the metrics and the
    /// out-of-line warning: once per write, never for one refused or
    /// failed, however many attempts it took.
    pub(super) fn wrote(&self, record: &[u8]) {
        self.note(self.form_of(record), record);
    }

    /// [`Compact::wrote`] where `inserted` says the record went in.
    pub(super) fn wrote_if_created(&self, record: &[u8], inserted: Inserted) -> Inserted {
        if matches!(inserted, Inserted::Created { .. }) {
            self.wrote(record);
        }
        inserted
    }

    /// [`Compact::wrote`] where `written` says the record went in.
    pub(super) fn wrote_if_done(&self, record: &[u8], written: Written) -> Written {
        if written == Written::Done {
            self.wrote(record);
        }
        written
    }

    /// Notes a record written in `form`.
    pub(super) fn note(&self, form: Form, record: &[u8]) {
        let len = (record.len() + EXPIRY_BYTES) as u64;
        let out_of_line = form == Form::OutOfLine;
        self.watch.note(len, out_of_line, self.limits.hash_value);
        crate::metrics::record_written(
            "compact",
            match form {
                Form::OutOfLine => crate::metrics::Placement::OutOfLine,
                Form::Pieced { .. } => crate::metrics::Placement::Pieces,
                _ => crate::metrics::Placement::Inline,
            },
        );
    }

    /// How a record of these bytes is stored, unnoted.
    pub(super) fn form_of(&self, record: &[u8]) -> Form {
        // A record that is the out-of-line marker, or begins with the
        // pieced one, would read as that form (packed record data begins
        // with the out-of-line byte and is longer).
        let marked = record == [OUT_OF_LINE] || record.first() == Some(&PIECED);
        if !marked && ((record.len() + EXPIRY_BYTES) as u64) <= self.limits.hash_value {
            return self.form_inline(record);
        }
        match self.largest_piece() {
            Some(largest)
                if record.len() <= MAX_PIECED_RECORD
                    && pieces_of_len(self.payload_len(record.len()), largest) <= MAX_PIECES =>
            {
                Form::Pieced {
                    size: piece_size_for(largest, self.payload_len(record.len())),
                    checked: self.checked(),
                    short: self.short_pieces(),
                }
            }
            _ => Form::OutOfLine,
        }
    }

    /// Whether this store's records in pieces begin with their check: in a
    /// namespace of [`CHECKED_FORMAT`] on, which only versions that strip
    /// it open.
    pub(super) fn checked(&self) -> bool {
        self.format >= CHECKED_FORMAT
    }

    /// Whether this store's records in pieces may take short piece names
    /// ([`super::value::piece_field`]): in a namespace of
    /// [`SHORT_PIECES_FORMAT`] on, which only versions that read them open.
    pub(super) fn short_pieces(&self) -> bool {
        self.format >= SHORT_PIECES_FORMAT
    }

    /// The length of the payload a record of `len` bytes is cut into
    /// pieces as.
    pub(super) fn payload_len(&self, len: usize) -> usize {
        len + if self.checked() { CHECK_BYTES } else { 0 }
    }

    /// The largest a piece may be, where this store keeps records in
    /// pieces: its format allows it, and the listpack value limit leaves
    /// room for a pieced value's head and a piece's field. A record's own
    /// pieces may be cut shorter ([`piece_size_for`]).
    pub(super) fn largest_piece(&self) -> Option<usize> {
        let limit = usize::try_from(self.limits.hash_value).unwrap_or(usize::MAX);
        (self.pieces && limit > PIECED_HEAD && self.buckets().field_len() < limit)
            .then_some(limit.min(MAX_PIECED_RECORD))
    }

    /// Whether a record of `len` bytes stays in its bucket, in one value
    /// or in pieces (without noting it for the out-of-line warning).
    pub fn fits(&self, len: usize) -> bool {
        ((len + EXPIRY_BYTES) as u64) <= self.limits.hash_value
            || (len <= MAX_PIECED_RECORD
                && self
                    .largest_piece()
                    .is_some_and(|size| pieces_of_len(self.payload_len(len), size) <= MAX_PIECES))
    }

    /// The fields a record of `len` bytes stored under `field` takes
    /// besides the session's own, under their long names: its pieces (how
    /// many fields it takes, whatever their names; the names themselves
    /// only in a namespace whose pieces never have short ones).
    pub(super) fn piece_fields(&self, field: &[u8], len: usize) -> Vec<Vec<u8>> {
        (1..=self.pieces_of(len))
            .map(|i| piece_field(field, i, false))
            .collect()
    }

    /// How many pieces a record of `len` bytes is cut into (none for one
    /// kept in its value).
    pub(super) fn pieces_of(&self, len: usize) -> usize {
        match self.largest_piece() {
            Some(largest) if ((len + EXPIRY_BYTES) as u64) > self.limits.hash_value => {
                let payload = self.payload_len(len);
                pieces_of_len(payload, piece_size_for(largest, payload))
            }
            _ => 0,
        }
    }

    /// The form of a record known to fit the listpack.
    pub(super) fn form_inline(&self, record: &[u8]) -> Form {
        match record::int_only(record) {
            Some(identity) if INTEGER_FORM.contains(&identity) => Form::Integer(identity),
            _ => Form::Inline,
        }
    }
}
