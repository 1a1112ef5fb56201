//! What this process remembers of recent sessions, for the write
//! threshold and deletes.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Mutex, PoisonError};

use crate::clock::unix_now;
use crate::session::layout::Seen;
use crate::session::layout::compact::{Kept, Read};

/// What this process last loaded or wrote for recent sessions: a keyed
/// digest of the record, its length and its expiry. Two generations: when
/// the newer fills half the capacity it becomes the older and the old one
/// is dropped, so the most recent sessions are always remembered.
#[derive(Debug)]
pub(super) struct Memo {
    generations: Mutex<[HashMap<i128, Memory>; 2]>,
    capacity: usize,
    hasher: std::collections::hash_map::RandomState,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Memory {
    pub(super) digest: u64,
    /// A digest of the record's owner head (see [`MapStore`]).
    pub(super) head: u64,
    pub(super) seen: Seen,
    /// How the record was kept, where this process knows: what a plain
    /// write of the session names.
    pub(super) kept: Option<Kept>,
}

impl Memory {
    /// What a plain write of the session needs of this memory, if it
    /// knows how the record is kept.
    pub(super) fn read(&self) -> Option<Read> {
        Some(Read {
            expires_at: self.seen.expires_at,
            kept: self.kept?,
        })
    }
}

impl Memo {
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            generations: Mutex::default(),
            capacity,
            hasher: Default::default(),
        }
    }

    pub(super) fn digest(&self, bytes: &[u8]) -> u64 {
        self.hasher.hash_one(bytes)
    }

    pub(super) fn put(
        &self,
        id: i128,
        bytes: &[u8],
        head: usize,
        expires_at: u64,
        kept: Option<Kept>,
    ) {
        if self.capacity == 0 {
            return;
        }
        let memory = Memory {
            digest: self.hasher.hash_one(bytes),
            head: self.digest(&bytes[..head.min(bytes.len())]),
            seen: Seen {
                expires_at,
                record_len: bytes.len(),
            },
            kept,
        };
        let mut g = self
            .generations
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if g[0].len() >= self.capacity.div_ceil(2) {
            g[1] = std::mem::take(&mut g[0]);
        }
        g[1].remove(&id);
        g[0].insert(id, memory);
    }

    pub(super) fn get(&self, id: i128) -> Option<Memory> {
        let g = self
            .generations
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        g[0].get(&id).or_else(|| g[1].get(&id)).copied()
    }

    /// Forgets `id`, returning what was remembered of it.
    pub(super) fn take(&self, id: i128) -> Option<Memory> {
        let mut g = self
            .generations
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let newer = g[0].remove(&id);
        let older = g[1].remove(&id);
        newer.or(older)
    }

    /// Whether writing `bytes` with expiry `at` over `memory` would change
    /// nothing but move the expiry forward by less than `fraction` of the
    /// lifetime left.
    pub(super) fn unchanged(&self, memory: &Memory, bytes: &[u8], at: u64, fraction: f64) -> bool {
        memory.digest == self.hasher.hash_one(bytes) && self.moves_little(memory, at, fraction)
    }

    /// Whether expiry `at` moves the one `memory` saw forward by less than
    /// `fraction` of the lifetime left.
    pub(super) fn moves_little(&self, memory: &Memory, at: u64, fraction: f64) -> bool {
        let stored = memory.seen.expires_at;
        let now = unix_now();
        at >= stored
            && stored > now
            && ((at - stored) as f64) < fraction * at.saturating_sub(now) as f64
    }

    /// Records that session `id`'s expiry is now `expires_at`.
    pub(super) fn moved(&self, id: i128, expires_at: u64) {
        let mut g = self
            .generations
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for generation in g.iter_mut() {
            if let Some(memory) = generation.get_mut(&id) {
                memory.seen.expires_at = expires_at;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::map_store::DEFAULT_MEMO_CAPACITY;

    fn unchanged(memo: &Memo, id: i128, bytes: &[u8], at: u64, fraction: f64) -> bool {
        memo.get(id)
            .is_some_and(|m| memo.unchanged(&m, bytes, at, fraction))
    }

    #[test]
    fn the_memo_skips_only_unchanged_data_and_short_moves() {
        let memo = Memo::new(DEFAULT_MEMO_CAPACITY);
        let now = unix_now();
        memo.put(1, b"abc", 0, now + 1000, None);
        assert!(unchanged(&memo, 1, b"abc", now + 1050, 0.1));
        assert!(
            !unchanged(&memo, 1, b"abc", now + 1200, 0.1),
            "moves too far"
        );
        assert!(
            !unchanged(&memo, 1, b"abd", now + 1010, 0.1),
            "data changed"
        );
        assert!(!unchanged(&memo, 1, b"abc", now + 900, 0.1), "moves back");
        assert!(!unchanged(&memo, 2, b"abc", now + 1010, 0.1), "never seen");
        memo.take(1);
        assert!(!unchanged(&memo, 1, b"abc", now + 1010, 0.1));
        memo.put(3, b"abc", 0, now - 1, None);
        assert!(
            !unchanged(&memo, 3, b"abc", now + 10, 1.0),
            "stored one expired"
        );
    }

    #[test]
    fn the_memo_keeps_the_most_recent_sessions() {
        let memo = Memo::new(4);
        for id in 1..=5 {
            memo.put(id, b"x", 0, 100 + id as u64, None);
        }
        // Generations of two: {1, 2} were dropped when 5 came.
        assert!(memo.get(1).is_none() && memo.get(2).is_none());
        for id in 3..=5 {
            assert_eq!(memo.get(id).unwrap().seen.expires_at, 100 + id as u64);
        }
        // A session put again lives in the newer generation only.
        memo.put(3, b"xy", 0, 200, None);
        assert_eq!(memo.get(3).unwrap().seen.record_len, 2);
        assert_eq!(memo.take(3).unwrap().seen.record_len, 2);
        assert!(memo.get(3).is_none());

        let none = Memo::new(0);
        none.put(1, b"x", 0, 100, None);
        assert!(none.get(1).is_none(), "capacity 0 remembers nothing");
    }
}
