//! What a compact store would otherwise only log through `tracing`, as a
//! value an app can check or export: the server's limits and eviction
//! policy, and how many records went out of line.

use std::sync::atomic::Ordering;

use serde::Serialize;

use super::Compact;
use crate::limits::{self, LimitsSource, ListpackLimits};

/// A compact store's standing: what it found when it opened, and what its
/// writes have met since ([`Compact::health`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Health {
    /// The listpack limits the store works to, and where they came from
    /// ([`LimitsSource::Defaults`] when the server would not say).
    pub limits: ListpackLimits,
    /// The server's `maxmemory-policy` when the store opened (`None` when
    /// `CONFIG GET` was refused, or for a layout made with
    /// [`Compact::with_limits`], which reads nothing).
    pub eviction_policy: Option<String>,
    /// Records written by this process (creates, saves, updates).
    pub writes: u64,
    /// Of those, records longer than the limit, each stored under a key of
    /// its own (~100 B more than inline).
    pub out_of_line: u64,
    /// The longest value written, in bytes.
    pub longest_value: u64,
}

impl Health {
    /// What is worth a look, in words; empty when nothing is. The same
    /// conditions the store logs as warnings.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.limits.source == LimitsSource::Defaults {
            out.push(
                "the server did not report its listpack limits: the store assumes Redis 7's \
                 defaults"
                    .to_owned(),
            );
        }
        match self.eviction_policy.as_deref() {
            Some(policy) if limits::evicts_persistent_keys(policy) => out.push(format!(
                "maxmemory-policy {policy} may evict bucket keys, which have no expiry: an \
                 evicted key takes its sessions with it; use noeviction or a volatile-* policy"
            )),
            Some(_) => {}
            None => out.push(
                "the eviction policy was not read (CONFIG GET refused, or a layout made with \
                 known limits): it should be noeviction or volatile-*"
                    .to_owned(),
            ),
        }
        // The share the store warns at; judged at once here, as the app
        // asks (the log waits for enough writes to warn only once).
        if self.out_of_line as f64 > super::forms::OUT_OF_LINE_WARN_SHARE * self.writes as f64 {
            out.push(format!(
                "{} of {} records written went out of line (longest value {} bytes, \
                 hash-max-listpack-value {}): `sessionpack advise --profile` says which limit \
                 would keep them in their buckets",
                self.out_of_line, self.writes, self.longest_value, self.limits.hash_value
            ));
        }
        out
    }
}

impl<C> Compact<C> {
    /// The store's [`Health`]: no round trip, figures this process holds.
    pub fn health(&self) -> Health {
        Health {
            limits: self.limits,
            eviction_policy: self.eviction_policy.clone(),
            writes: self.watch.writes.load(Ordering::Relaxed),
            out_of_line: self.watch.out_of_line.load(Ordering::Relaxed),
            longest_value: self.watch.longest.load(Ordering::Relaxed),
        }
    }
}
