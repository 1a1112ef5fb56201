//! The shared behaviour suite, run against every layout on a real server.

mod common;

use sessionpack::session::buckets::Buckets;
use sessionpack::session::layout::Bucketed;
use sessionpack::session::layout::BucketedConfig;
use sessionpack::session::layout::Layout;
use sessionpack::session::layout::compact::{DEFAULT_GROWING_BITS, GroupedBuckets};
use sessionpack::session::sweep::Sweepable;
use sessionpack::users::UserIndexConfig;
use sessionpack::{Compact, CompactConfig, IdWidth, SessionId};
use sessionpack_cli::baselines::{BookLoginHash, Encoding, KeyPerSession};
use sessionpack_testkit::LocalServer;

async fn bucketed_256(server: &LocalServer) -> impl Layout + Sweepable + 'static {
    common::bucketed(server, 8).await
}

async fn bucketed_2(server: &LocalServer) -> impl Layout + Sweepable + 'static {
    common::bucketed(server, 1).await
}

async fn bucketed_narrow(server: &LocalServer) -> impl Layout + Sweepable + 'static {
    let config = BucketedConfig::new(8).with_id_width(IdWidth::Bits128);
    Bucketed::new(common::manager(server).await, config)
        .await
        .unwrap()
}

fn corrupt_bucketed_narrow(server: &LocalServer, id: &SessionId, garbage: &[u8]) {
    let b = Buckets::new("sp", 8)
        .unwrap()
        .with_id_width(IdWidth::Bits128);
    let hash = b.hash_key(b.bucket_of(id));
    common::raw_command(
        server,
        redis::cmd("HSET").arg(hash).arg(b.field(id)).arg(garbage),
    );
}

async fn compact(server: &LocalServer) -> impl Layout + Sweepable + 'static {
    Compact::new(common::manager(server).await, CompactConfig::new(8))
        .await
        .unwrap()
}

async fn compact_narrow(server: &LocalServer) -> impl Layout + Sweepable + 'static {
    let config = CompactConfig::new(10).with_id_width(IdWidth::Bits128);
    Compact::new(common::manager(server).await, config)
        .await
        .unwrap()
}

/// A compact store that keeps a user index: every case must behave the
/// same with it.
async fn compact_indexed(server: &LocalServer) -> impl Layout + Sweepable + 'static {
    let config = CompactConfig::new(8).with_user_index(UserIndexConfig::new(4));
    Compact::new(common::manager(server).await, config)
        .await
        .unwrap()
}

fn corrupt_compact(bits: u8, width: IdWidth, server: &LocalServer, id: &SessionId, garbage: &[u8]) {
    let scheme = GroupedBuckets::new(Buckets::new("sp", bits).unwrap().with_id_width(width));
    let b = scheme.buckets();
    // A value with a live expiry and a garbage record.
    let mut value = (u32::MAX - 1).to_be_bytes().to_vec();
    value.extend_from_slice(garbage);
    common::raw_command(
        server,
        redis::cmd("HSET")
            .arg(scheme.bucket_key(b.bucket_of(id)))
            .arg(b.field(id))
            .arg(value),
    );
}

fn corrupt_compact_8(server: &LocalServer, id: &SessionId, garbage: &[u8]) {
    corrupt_compact(8, IdWidth::Bits160, server, id, garbage);
}

fn corrupt_compact_narrow(server: &LocalServer, id: &SessionId, garbage: &[u8]) {
    corrupt_compact(10, IdWidth::Bits128, server, id, garbage);
}

/// A growing store on a server whose buckets hold 8 entries: the suite's
/// sessions split its buckets again and again under every case.
async fn compact_growing(server: &LocalServer) -> impl Layout + Sweepable + 'static {
    common::set_hash_entries(server, 8);
    Compact::new(common::manager(server).await, CompactConfig::growing())
        .await
        .unwrap()
}

fn corrupt_growing(server: &LocalServer, id: &SessionId, garbage: &[u8]) {
    use redis::Commands;
    use sessionpack::session::shape::{GroupShape, Shape};
    let shape = Shape::new(Buckets::new("sp", DEFAULT_GROWING_BITS).unwrap());
    let mut conn = server.client().unwrap().get_connection().unwrap();
    let group = shape.group_of(id);
    let (epoch, trie): (Option<u64>, Option<Vec<u8>>) = redis::cmd("HMGET")
        .arg(shape.shape_key(group))
        .arg("epoch")
        .arg("trie")
        .query(&mut conn)
        .unwrap();
    let node = shape.leaf(
        &GroupShape::new(epoch.unwrap_or(0), trie.unwrap_or_default()),
        id,
    );
    let mut value = (u32::MAX - 1).to_be_bytes().to_vec();
    value.extend_from_slice(garbage);
    let _: () = conn
        .hset(shape.bucket_key(node), shape.field(node, id), value)
        .unwrap();
}

fn corrupt_bucketed(bits: u8, server: &LocalServer, id: &SessionId, garbage: &[u8]) {
    let b = Buckets::new("sp", bits).unwrap();
    let hash = b.hash_key(b.bucket_of(id));
    common::raw_command(
        server,
        redis::cmd("HSET").arg(hash).arg(b.field(id)).arg(garbage),
    );
}

fn corrupt_bucketed_256(server: &LocalServer, id: &SessionId, garbage: &[u8]) {
    corrupt_bucketed(8, server, id, garbage);
}

fn corrupt_bucketed_2(server: &LocalServer, id: &SessionId, garbage: &[u8]) {
    corrupt_bucketed(1, server, id, garbage);
}

async fn book(server: &LocalServer) -> impl Layout + Sweepable + 'static {
    BookLoginHash::book(common::manager(server).await, "sp")
}

fn corrupt_book(server: &LocalServer, id: &SessionId, garbage: &[u8]) {
    common::raw_command(
        server,
        redis::cmd("HSET")
            .arg("sp:login:")
            .arg(id.to_hex())
            .arg(garbage),
    );
}

async fn json_setex(server: &LocalServer) -> impl Layout + Sweepable + 'static {
    KeyPerSession::new(common::manager(server).await, Encoding::JsonSetex)
}

fn corrupt_json(server: &LocalServer, id: &SessionId, garbage: &[u8]) {
    let key = format!("session:{}", id.to_hex());
    common::raw_command(
        server,
        redis::cmd("SET").arg(key).arg(garbage).arg("KEEPTTL"),
    );
}

async fn packed_setex(server: &LocalServer) -> impl Layout + Sweepable + 'static {
    KeyPerSession::new(common::manager(server).await, Encoding::PackedSetex)
}

fn corrupt_packed(server: &LocalServer, id: &SessionId, garbage: &[u8]) {
    common::raw_command(
        server,
        redis::cmd("SET")
            .arg(id.as_bytes())
            .arg(garbage)
            .arg("KEEPTTL"),
    );
}

async fn hash_per_session(server: &LocalServer) -> impl Layout + Sweepable + 'static {
    KeyPerSession::new(common::manager(server).await, Encoding::HashPerSession)
}

fn corrupt_hash(server: &LocalServer, id: &SessionId, garbage: &[u8]) {
    common::raw_command(
        server,
        redis::cmd("HSET").arg(id.as_bytes()).arg("i").arg(garbage),
    );
}

layout_suite!(bucketed_8_bits, bucketed_256, corrupt_bucketed_256);
layout_suite!(bucketed_1_bit, bucketed_2, corrupt_bucketed_2);
layout_suite!(
    bucketed_128_bit_ids,
    bucketed_narrow,
    corrupt_bucketed_narrow
);
layout_suite!(book_login_hash, book, corrupt_book);
layout_suite!(json_setex_layout, json_setex, corrupt_json);
layout_suite!(packed_setex_layout, packed_setex, corrupt_packed);
layout_suite!(hash_per_session_layout, hash_per_session, corrupt_hash);
layout_suite!(compact_8_bits, compact, corrupt_compact_8);
layout_suite!(compact_128_bit_ids, compact_narrow, corrupt_compact_narrow);
layout_suite!(
    compact_with_a_user_index,
    compact_indexed,
    corrupt_compact_8
);
layout_suite!(compact_growing_buckets, compact_growing, corrupt_growing);
