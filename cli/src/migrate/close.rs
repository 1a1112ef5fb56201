//! The close's deletes: each old key deleted only while it holds what was
//! copied, its session marked moved first, and counted as it goes.
//!
//! On one server a script does all three in one step
//! ([`map_store::CLOSE_SCRIPT`]). On a cluster the old key, the marks and
//! one counter lie in different slots, so each batch takes three
//! pipelines: the marks (moved, each mark before returned), the keys
//! (deleted while unchanged, with a counter in the key's own slot raised
//! in the same step), then the marks of the keys kept given back. A load
//! between the steps finds the old key, or the session marked moved: never
//! the key gone and the session still marked as having one, which it takes
//! for a log-out.

use std::sync::OnceLock;

use sessionpack::Compact;
use sessionpack::error::Result;
use sessionpack::map_store;
use sessionpack::takeover;

use super::keyspace::Keyspace;
use super::{Read, scripted};

/// The counters of the keys a pass closed: one on a server; on a cluster
/// one per slot, named with a hash tag of the slot's, so that a close
/// raises it in the step that deletes the key (a close killed part way
/// has counted every key it deleted).
pub(super) struct Counters {
    base: String,
    cluster: bool,
}

impl Counters {
    pub(super) fn new(state: &str, cluster: bool) -> Self {
        Self {
            base: format!("{state}:deleted"),
            cluster,
        }
    }

    /// The counter a close of `old_key` raises.
    fn key_for(&self, old_key: &[u8]) -> String {
        if self.cluster {
            let slot = sessionpack::conn::cluster::slots::key_slot(old_key);
            format!("{{{}}}{}", tag_of(slot), self.base)
        } else {
            self.base.clone()
        }
    }

    fn pattern(&self) -> String {
        let base = sessionpack::acl::escape_glob(&self.base);
        if self.cluster {
            format!("{{*}}{base}")
        } else {
            base
        }
    }

    /// The keys counted so far this pass.
    pub(super) async fn sum(&self, keyspace: &mut Keyspace) -> Result<u64> {
        keyspace.sum_matching(&self.pattern()).await
    }

    /// Deletes the counters (a new pass, or one whose report holds them).
    pub(super) async fn clear(&self, keyspace: &mut Keyspace) -> Result<()> {
        keyspace.unlink_matching(&self.pattern(), "string").await
    }
}

/// A short hash tag of `slot`'s: the first hex number that hashes to it.
fn tag_of(slot: u16) -> &'static str {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        let slots = usize::from(sessionpack::conn::cluster::slots::SLOTS);
        let mut tags = vec![String::new(); slots];
        let (mut left, mut n) = (slots, 0u32);
        while left > 0 {
            let tag = format!("{n:x}");
            let s = usize::from(sessionpack::conn::cluster::slots::key_slot(tag.as_bytes()));
            if tags[s].is_empty() {
                tags[s] = tag;
                left -= 1;
            }
            n += 1;
        }
        tags
    });
    &tags[usize::from(slot)]
}

/// The close's scripts, for a server or a cluster.
pub(super) enum Closer {
    Server(redis::Script),
    Cluster {
        mark: redis::Script,
        key: redis::Script,
        unmark: redis::Script,
    },
}

impl Closer {
    pub(super) fn new(keyspace: &Keyspace) -> Self {
        match keyspace {
            Keyspace::Server(_) => Self::Server(redis::Script::new(map_store::CLOSE_SCRIPT)),
            Keyspace::Cluster(_) => Self::Cluster {
                mark: redis::Script::new(takeover::CLOSE_MARK_SCRIPT),
                key: redis::Script::new(takeover::CLOSE_KEY_SCRIPT),
                unmark: redis::Script::new(takeover::CLOSE_UNMARK_SCRIPT),
            },
        }
    }

    /// Closes `reads`' old keys; returns how many were deleted and how
    /// many kept (changed since their read; the next run closes them).
    pub(super) async fn close<C>(
        &self,
        redis: &mut C,
        layout: &Compact<C>,
        counters: &Counters,
        reads: &[Read],
    ) -> Result<(u64, u64)>
    where
        C: redis::aio::ConnectionLike + Clone + Send + Sync,
    {
        let closed: Vec<i64> = match self {
            Self::Server(close) => {
                let mut pipe = redis::pipe();
                for read in reads {
                    pipe.cmd("EVALSHA")
                        .arg(close.get_hash())
                        .arg(3)
                        .arg(&read.key)
                        .arg(map_store::marks_key(layout, &read.taken.id))
                        .arg(counters.key_for(&read.key))
                        .arg(&read.value)
                        .arg(read.expire_ms)
                        .arg(read.taken.id.as_bytes())
                        .arg(read.taken.expires_at);
                }
                // Pipelined: one round trip for the batch. A key changed
                // since its read is kept and counted; the next run closes
                // it.
                scripted(redis, close, &pipe).await?
            }
            Self::Cluster { mark, key, unmark } => {
                let marks: Vec<String> = reads
                    .iter()
                    .map(|r| map_store::marks_key(layout, &r.taken.id))
                    .collect();
                let mut pipe = redis::pipe();
                for (read, marks) in reads.iter().zip(&marks) {
                    pipe.cmd("EVALSHA")
                        .arg(mark.get_hash())
                        .arg(1)
                        .arg(marks)
                        .arg(read.taken.id.as_bytes())
                        .arg(read.taken.expires_at);
                }
                let before: Vec<Option<Vec<u8>>> = scripted(redis, mark, &pipe).await?;
                let mut pipe = redis::pipe();
                for read in reads {
                    pipe.cmd("EVALSHA")
                        .arg(key.get_hash())
                        .arg(2)
                        .arg(&read.key)
                        .arg(counters.key_for(&read.key))
                        .arg(&read.value)
                        .arg(read.expire_ms);
                }
                let closed: Vec<i64> = scripted(redis, key, &pipe).await?;
                let mut pipe = redis::pipe();
                let mut kept = 0;
                for ((read, marks), (closed, before)) in
                    reads.iter().zip(&marks).zip(closed.iter().zip(&before))
                {
                    if *closed != 1 {
                        pipe.cmd("EVALSHA")
                            .arg(unmark.get_hash())
                            .arg(1)
                            .arg(marks)
                            .arg(read.taken.id.as_bytes())
                            .arg(before.as_deref().unwrap_or_default());
                        kept += 1;
                    }
                }
                if kept > 0 {
                    let _: Vec<i64> = scripted(redis, unmark, &pipe).await?;
                }
                closed
            }
        };
        let deleted = closed.iter().filter(|&&c| c == 1).count() as u64;
        Ok((deleted, closed.len() as u64 - deleted))
    }
}

/// Records the takeover of `namespace` closed (stores with
/// [`map_store::TowerStore::with_takeover`] then read only their
/// buckets), and drops the sessions' marks and the owners revoked during
/// it, which nothing reads any more.
pub(super) async fn close_takeover<C>(
    redis: &mut C,
    keyspace: &mut Keyspace,
    namespace: &str,
) -> Result<()>
where
    C: redis::aio::ConnectionLike + Send,
{
    let _: () = redis::pipe()
        .cmd("SET")
        .arg(map_store::state_key(namespace))
        .arg(map_store::CLOSED)
        .ignore()
        .cmd("DEL")
        .arg(map_store::revoked_key(namespace))
        .ignore()
        .query_async(redis)
        .await?;
    let pattern = format!("{}:*:m", sessionpack::acl::escape_glob(namespace));
    keyspace.unlink_matching(&pattern, "hash").await
}

#[cfg(test)]
mod tests {
    use super::*;
    use sessionpack::conn::cluster::slots::{SLOTS, key_slot};

    #[test]
    fn every_slot_has_a_tag_and_counters_share_their_keys_slots() {
        for slot in 0..SLOTS {
            assert_eq!(key_slot(tag_of(slot).as_bytes()), slot);
        }
        let counters = Counters::new("{ns}:migrate:tower:b64:", true);
        for key in ["AAAAAAAAAAAAAAAAAAAAAA", "zz", "0123456789"] {
            let counter = counters.key_for(key.as_bytes());
            assert_eq!(key_slot(counter.as_bytes()), key_slot(key.as_bytes()));
        }
    }
}
