//! Records too long for one listpack value, kept in their bucket in pieces
//! at the server's default limits (`hash-max-listpack-value` 64): every
//! size round-trips through every write, a load is one `HMGET`, no write
//! leaves a piece behind or a bucket converted, and what races a write
//! sees either the old record or the new one, whole.

#[path = "../common/mod.rs"]
mod common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use sessionpack::session::layout::Layout;
use sessionpack::session::layout::compact::{
    CHECKED_FORMAT, GroupedBuckets, MAX_PIECED_RECORD, SHORT_PIECES_FORMAT,
};
use sessionpack::session::meta::StoreMeta;
use sessionpack::session::sweep::{SweepConfig, Sweeper};
use sessionpack::{Compact, CompactConfig, Store};
use sessionpack_testkit::LocalServer;

type Conn = redis::aio::ConnectionManager;

async fn compact(server: &LocalServer, bits: u8) -> Compact<Conn> {
    Compact::new(common::manager(server).await, CompactConfig::new(bits))
        .await
        .expect("compact layout")
}

/// What every bucket holds: sessions (fields of a session's length), the
/// pieces their values name, pieces no value names, pieces a value names
/// that are missing, and buckets no longer listpacks.
#[derive(Debug, Default, PartialEq)]
struct Census {
    sessions: u64,
    pieces: u64,
    orphans: u64,
    missing: u64,
    converted: u64,
    /// First short pieces no value names holding the byte 0xc0: what a
    /// session that gave up its short names leaves (record format 10),
    /// kept while a session of its prefix lives and then left to the
    /// sweeper.
    holds: u64,
}

async fn census(raw: &mut redis::aio::MultiplexedConnection, layout: &Compact<Conn>) -> Census {
    let longest = layout.buckets().field_len();
    let mut census = Census::default();
    // Every hash of the namespace, so a growing store's buckets are counted wherever its
    // shape has put them; only fields of a session's length (and one
    // more, or four ending in a byte up to 15, for pieces) count, which no
    // other hash of a namespace has. A growing store's buckets below a
    // byte's last bit hold fields a byte shorter.
    let keys: Vec<String> = raw
        .keys(format!("{}:*", layout.buckets().namespace()))
        .await
        .unwrap();
    for key in keys {
        if key.ends_with(":meta") {
            continue;
        }
        let Ok(pairs) = raw.hgetall::<_, HashMap<Vec<u8>, Vec<u8>>>(&key).await else {
            continue;
        };
        // A session's field is the shortest of its fields past a short
        // piece name's four.
        let Some(field_len) = pairs
            .keys()
            .map(Vec::len)
            .filter(|&len| len > 4)
            .min()
            .filter(|len| (longest - 3..=longest).contains(len))
            .or((!pairs.is_empty()).then_some(longest))
        else {
            continue;
        };
        let holds_sessions = pairs.keys().any(|f| {
            f.len() == field_len
                || ((f.len() == field_len + 1 || f.len() == 4)
                    && f.last().is_some_and(|&b| b <= 15))
        });
        if !holds_sessions {
            continue;
        }
        if common::encoding(raw, &key).await != "listpack" {
            census.converted += 1;
        }
        let mut named = HashSet::new();
        for (field, value) in &pairs {
            if field.len() != field_len {
                continue;
            }
            census.sessions += 1;
            if value.len() >= 6 && value[4] == 0xc3 && !value[0].is_ascii_digit() {
                // The count's high bit says a check begins the payload,
                // the next one that the pieces have short names.
                for i in 1..=value[5] & 0x3f {
                    let piece = piece_name(field, i, value[5] & 0x40 != 0);
                    if pairs.contains_key(&piece) {
                        census.pieces += 1;
                    } else {
                        census.missing += 1;
                    }
                    named.insert(piece);
                }
            }
        }
        for (field, value) in &pairs {
            let is_piece = (field.len() == field_len + 1 || field.len() == 4)
                && field.last().is_some_and(|&b| b <= 15);
            if is_piece && !named.contains(field) {
                if field.len() == 4 && field[3] == 1 && value[..] == [0xc0] {
                    census.holds += 1;
                } else {
                    census.orphans += 1;
                }
            }
        }
    }
    census
}

impl Census {
    /// What is left once every session has ended but the holds, which the
    /// sweeper removes at its next pass over their buckets.
    fn but_holds(self) -> Self {
        Self { holds: 0, ..self }
    }
}

/// The field of piece `i` of the session under `field`: long, the field
/// and `i`; short, the field's first byte, the two before its last four,
/// and `i` (record format 7 on).
fn piece_name(field: &[u8], i: u8, short: bool) -> Vec<u8> {
    if short {
        let at = field.len() - 6;
        vec![field[0], field[at], field[at + 1], i]
    } else {
        [field, &[i][..]].concat()
    }
}

/// Deletes `id` (a fixed store's session, whose record has `pieces`
/// short-named pieces now) as a process that saw it `seen_len` bytes long
/// does, and leaves its pieces as a delete by script on a server without
/// `HGETDEL` does there (`compact_unset.lua` removes only what the length
/// it was told names): on a server with it, the delete takes the value and
/// then every piece it names, so the pieces are written back here.
async fn delete_leaving_pieces(
    raw: &mut redis::aio::MultiplexedConnection,
    layout: &Compact<Conn>,
    id: &sessionpack::SessionId,
    seen_len: usize,
    pieces: u8,
) {
    let bucket = layout.scheme().bucket_key(layout.buckets().bucket_of(id));
    let field = layout.buckets().field(id);
    let names: Vec<Vec<u8>> = (1..=pieces).map(|i| piece_name(&field, i, true)).collect();
    let values: Vec<Option<Vec<u8>>> = redis::cmd("HMGET")
        .arg(&bucket)
        .arg(&names)
        .query_async(raw)
        .await
        .unwrap();
    assert!(layout.delete(id, Some(seen_len)).await.unwrap());
    if layout.plain_deletes().is_some() {
        for (name, value) in names.iter().zip(values) {
            let _: () = raw.hset(&bucket, name, value.unwrap()).await.unwrap();
        }
    }
}

/// A record of `len` bytes whose bytes say which write made it.
fn record_of(len: usize, seed: u8) -> Vec<u8> {
    // An integer identity (one byte), then MessagePack-like bytes.
    let mut record = vec![0x05];
    record.extend((0..len.saturating_sub(1)).map(|i| seed.wrapping_add(i as u8)));
    record.truncate(len);
    record
}

/// Sessions `0..count` with records of `len` bytes (`record_of(len, n)`),
/// live ten minutes: their ids, in order.
async fn insert_each(layout: &Compact<Conn>, len: usize, count: u8) -> Vec<sessionpack::SessionId> {
    let mut ids = Vec::new();
    for n in 0..count {
        let id = layout.new_id().await.unwrap();
        layout
            .insert(&id, &record_of(len, n), sessionpack::ttl::Deadline::In(600))
            .await
            .unwrap();
        ids.push(id);
    }
    ids
}

/// A store of fixed buckets and a growing one, in namespaces of their own.
fn fixed_and_growing() -> [CompactConfig; 2] {
    [
        CompactConfig::new(4),
        CompactConfig::growing().with_namespace("grown"),
    ]
}

mod calls;
mod damage;
mod names;
mod plain;
mod plain_creates;
mod sizes;
