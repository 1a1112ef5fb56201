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
//! On a cluster a user's index bucket and a session's bucket may be in
//! different slots, so no script sees both. The writes are ordered so
//! that every interleaving is safe:
//!
//! - **Create** (and the new id of a rotation): the index entry first,
//!   then the session, with a script that refuses it ([`crate::session::layout::Inserted::Late`])
//!   when it comes more than the grace ([`UserIndexConfig::grace_secs`])
//!   after the entry was written, or ([`crate::session::layout::Inserted::IdTaken`]) when a
//!   tombstone stands beside its field. A create refused either way draws
//!   a new id and writes a new entry. On a server that holds both keys (one
//!   node, with or without replicas), a create writes the entry in its
//!   session's own script instead, just before the session: no revocation
//!   or sweep can read the entry before the session is there, so none
//!   leaves a tombstone for it, and there is no grace to check. A cluster
//!   refuses that script (`CROSSSLOT`, before it runs); the store
//!   remembers the refusal and writes entries first from then on, as it
//!   does for a rotation's copy, a record kept out of line, an expiry
//!   too close to call by its clock estimate and a batch of creates.
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
//! - **Sweep**: on its full passes the sweeper ([`crate::session::sweep`]) looks up
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

mod store;

pub use crate::session::layout::compact::user_index::{
    DEFAULT_GRACE_SECS, DEFAULT_SKEW_SECS, DEFAULT_USER_BITS, MAX_LABEL_BYTES, MAX_USER_BITS,
    Revoked, UserIndex, UserIndexAudit, UserIndexConfig, UserSession,
};
