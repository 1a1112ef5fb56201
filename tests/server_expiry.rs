//! A compact store whose fields the server expires (`Expiry::Server`), on
//! a real server: opened only where the server keeps a hash with field
//! TTLs a listpack (found out, not assumed); every field written carries
//! its value's expiry as its TTL through every kind of write; and sessions,
//! their viewed items and out-of-line records go with no sweeper at all.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use redis::AsyncCommands;
use sessionpack::acl::{Role, Topology, rule};
use sessionpack::limits::{FieldTtls, field_ttls};
use sessionpack::session::layout::Expiry;
use sessionpack::session::layout::compact::DEFAULT_BUCKET_BITS;
use sessionpack::session::sweep::{SweepConfig, Sweeper};
use sessionpack::tower::TowerStore;
use sessionpack::users::UserIndexConfig;
use sessionpack::viewed::ViewedConfig;
use sessionpack::{Compact, CompactConfig, Error, Store};
use sessionpack_testkit::LocalServer;

type Raw = redis::aio::MultiplexedConnection;

/// How this server keeps a hash with a field TTL.
async fn server_field_ttls(server: &LocalServer) -> FieldTtls {
    let mut raw = common::raw(server).await;
    let found = field_ttls(&mut raw, "probe:field-ttl").await.unwrap();
    let left: u64 = redis::cmd("DBSIZE").query_async(&mut raw).await.unwrap();
    assert_eq!(left, 0, "the probe leaves nothing behind");
    found
}

/// The store on this server, or `None` (said, as `skipped:`) where the
/// server cannot expire fields in a listpack.
async fn open(
    server: &LocalServer,
    config: CompactConfig,
) -> Option<Compact<redis::aio::ConnectionManager>> {
    match server_field_ttls(server).await {
        FieldTtls::Listpack => Some(
            Compact::new(common::manager(server).await, config.with_server_expiry())
                .await
                .expect("open with server expiry"),
        ),
        other => {
            println!("skipped: this server cannot expire fields in a listpack ({other:?})");
            None
        }
    }
}

/// The expiry a bucket value holds: the last ten digits of the integer
/// form, or the binary form's first four bytes.
fn value_expiry(value: &[u8]) -> i64 {
    if value[0].is_ascii_digit() {
        let text = std::str::from_utf8(value).unwrap();
        text[text.len().saturating_sub(10)..].parse().unwrap()
    } else {
        i64::from(u32::from_be_bytes(value[..4].try_into().unwrap()))
    }
}

async fn expire_time(raw: &mut Raw, key: &str, field: &[u8]) -> i64 {
    let times: Vec<i64> = redis::cmd("HEXPIRETIME")
        .arg(key)
        .arg("FIELDS")
        .arg(1)
        .arg(field)
        .query_async(raw)
        .await
        .unwrap();
    times[0]
}

/// Every field of every bucket expires at the expiry its value holds (a
/// piece of a record at its session's), and every viewed chunk field at its
/// session's; no group index is kept.
/// Returns the bucket fields and chunk fields checked.
async fn audit(raw: &mut Raw, layout: &Compact<redis::aio::ConnectionManager>) -> (usize, usize) {
    let (mut fields, mut chunks) = (0, 0);
    let scheme = layout.scheme();
    for bucket in 0..layout.buckets().count() {
        let key = scheme.bucket_key(bucket);
        let values: HashMap<Vec<u8>, Vec<u8>> = raw.hgetall(&key).await.unwrap();
        let field_len = layout.buckets().field_len();
        // The sessions whose pieces have short names, by those names'
        // first three bytes: the field's first and the two before its
        // last four.
        let short_owners: HashMap<Vec<u8>, &Vec<u8>> = values
            .iter()
            .filter(|(f, v)| {
                f.len() == field_len && v.len() >= 6 && v[4] == 0xc3 && v[5] & 0x40 != 0
            })
            .map(|(f, v)| (vec![f[0], f[field_len - 6], f[field_len - 5]], v))
            .collect();
        for (field, value) in &values {
            // A piece of a long record expires with its session.
            let numbered = field.last().is_some_and(|&b| b <= 15);
            let owner = if field.len() == field_len + 1 && numbered {
                values
                    .get(&field[..field.len() - 1])
                    .expect("a piece of a session")
            } else if field.len() == 4 && numbered {
                short_owners.get(&field[..3]).expect("a piece of a session")
            } else {
                value
            };
            assert_eq!(
                expire_time(raw, &key, field).await,
                value_expiry(owner),
                "{key} field {}",
                hex::encode(field)
            );
            fields += 1;
        }
        for chunk in layout.viewed_keys(bucket) {
            let items: HashMap<Vec<u8>, Vec<u8>> = raw.hgetall(&chunk).await.unwrap();
            for field in items.keys() {
                let session = values.get(field).expect("a chunk field of a session");
                assert_eq!(
                    expire_time(raw, &chunk, field).await,
                    value_expiry(session),
                    "{chunk}"
                );
                chunks += 1;
            }
        }
    }
    for group in 0..scheme.groups() {
        let index: bool = raw.exists(scheme.index_key(group)).await.unwrap();
        assert!(!index, "no group index is kept");
    }
    (fields, chunks)
}

/// Opening is decided by what the server does with a field TTL: refused
/// where it has none or converts the hash (nothing written), accepted and
/// recorded where it keeps a listpack; a process opening the namespace
/// the other way is refused; a restricted user with the rule for it works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_follows_what_the_server_does_with_field_ttls() {
    let server = common::server();
    let found = server_field_ttls(&server).await;
    let config = || CompactConfig::new(4).with_server_expiry();
    let opened = Compact::new(common::manager(&server).await, config()).await;
    let mut raw = common::raw(&server).await;
    let keys = |raw: &mut Raw| {
        let mut raw = raw.clone();
        async move {
            redis::cmd("DBSIZE")
                .query_async::<u64>(&mut raw)
                .await
                .unwrap()
        }
    };
    match found {
        FieldTtls::Unsupported(_) => {
            let e = opened.unwrap_err();
            assert!(
                matches!(&e, Error::Config(m) if m.contains("no hash-field expiry")),
                "{e}"
            );
            assert_eq!(keys(&mut raw).await, 0, "nothing written");
        }
        FieldTtls::Converted(encoding) => {
            let e = opened.unwrap_err();
            assert!(
                matches!(&e, Error::Config(m) if m.contains(&encoding) && m.contains("Valkey 9.0")),
                "{e}"
            );
            assert_eq!(keys(&mut raw).await, 0, "nothing written");
            // Only for measuring: opened at the converted cost.
            let mut forced = config();
            forced.allow_converted_buckets = true;
            let layout = Compact::new(common::manager(&server).await, forced)
                .await
                .unwrap();
            assert_eq!(layout.expiry(), Expiry::Server);
        }
        FieldTtls::Listpack => {
            let layout = opened.unwrap();
            assert_eq!(layout.expiry(), Expiry::Server);
            // With no bucket count, such a store keeps fixed buckets: a
            // growing one keeps no fields the server expires.
            let uncounted = CompactConfig::default()
                .with_namespace("uncounted")
                .with_server_expiry();
            let uncounted = Compact::new(common::manager(&server).await, uncounted)
                .await
                .unwrap();
            assert!(uncounted.shape().is_none());
            assert_eq!(uncounted.buckets().bits(), DEFAULT_BUCKET_BITS);
            let swept = Compact::new(common::manager(&server).await, CompactConfig::new(4)).await;
            assert!(
                matches!(&swept, Err(Error::Config(m)) if m.contains("fields expired by the server")),
                "{swept:?}"
            );
            // The store's rule and the server-expiry one are enough.
            let text = rule(&[Role::Store, Role::ServerExpiry], "sp", Topology::Server);
            let mut setuser = redis::cmd("ACL");
            setuser.arg("SETUSER").arg("app").arg("on").arg(">pw");
            for word in text.split(' ') {
                setuser.arg(word);
            }
            let _: () = setuser.query_async(&mut raw).await.unwrap();
            let port = server.port();
            let url = format!("redis://app:pw@127.0.0.1:{port}/");
            let conn = sessionpack::connect(&url).await.unwrap();
            let mine = Compact::new(conn, config()).await.unwrap();
            let store: Store<_, String> = Store::new(mine).without_sweeper();
            let s = store.create(7, "as app".into()).await.unwrap();
            assert!(store.touch(&s.id).await.unwrap().is_some());
            assert!(store.load(&s.id).await.unwrap().is_some());
        }
    }
}

/// Through creates (integer, inline, pieced and out-of-line records), viewed
/// items, touches, saves, updates, a rotation's forward, a revocation's
/// tombstone and the tower-sessions store's writes, every field's TTL is
/// its value's expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_gives_each_field_its_expiry_as_ttl() {
    let server = common::server();
    let config = CompactConfig::new(4)
        .with_user_index(UserIndexConfig::new(2))
        .with_viewed(ViewedConfig::default());
    let Some(layout) = open(&server, config).await else {
        return;
    };
    let mut raw = common::raw(&server).await;
    let ids_only: Store<_, ()> = Store::new(layout.clone()).without_sweeper();
    let strings: Store<_, String> = Store::new(layout.clone()).without_sweeper();
    let hourly: Store<_, String> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(3600));

    let a = ids_only.create(100_000, ()).await.unwrap();
    let b = strings.create(7, "short".into()).await.unwrap();
    let c = strings.create(7, "x".repeat(300)).await.unwrap();
    let d = strings.create(8, "to destroy".into()).await.unwrap();
    let e = strings.create(7, "y".repeat(700)).await.unwrap();
    ids_only.view(&a.id, &42u64).await.unwrap().unwrap();
    strings.view(&b.id, &43u64).await.unwrap().unwrap();
    let (fields, chunks) = audit(&mut raw, &layout).await;
    assert!(fields >= 4 && chunks >= 2, "{fields} {chunks}");

    // Touched an hour out: the value's expiry moves back, and the TTLs of
    // the field and its viewed items with it.
    for id in [&a.id, &b.id, &c.id, &e.id] {
        assert!(hourly.touch(id).await.unwrap().is_some());
    }
    strings.view(&b.id, &44u64).await.unwrap().unwrap();
    audit(&mut raw, &layout).await;

    let mut saved = strings.load(&b.id).await.unwrap().unwrap();
    saved.attrs = "x".repeat(200);
    assert!(strings.save(&saved).await.unwrap());
    strings
        .update(&c.id, |attrs| *attrs = "back inline".into())
        .await
        .unwrap()
        .unwrap();
    // Out of line into pieces.
    strings
        .update(&e.id, |attrs| *attrs = "z".repeat(400))
        .await
        .unwrap()
        .unwrap();
    audit(&mut raw, &layout).await;
    let rotated = strings.rotate(&b.id).await.unwrap().unwrap();
    assert!(strings.load(&rotated).await.unwrap().is_some());
    // A revocation that finds no session leaves a tombstone.
    assert!(strings.destroy(&d.id).await.unwrap());
    let revoked = strings.revoke_all(&8).await.unwrap();
    assert_eq!(revoked.removed, 0);
    let (fields, _) = audit(&mut raw, &layout).await;
    let tombstones = {
        let mut n = 0;
        for bucket in 0..layout.buckets().count() {
            let fields: Vec<Vec<u8>> = raw.hkeys(layout.scheme().bucket_key(bucket)).await.unwrap();
            n += fields
                .iter()
                .filter(|f| f.len() == layout.buckets().field_len() + 1)
                .count();
        }
        n
    };
    assert!(
        tombstones >= 2,
        "a forward and a tombstone: {tombstones} of {fields}"
    );
    // A sweeper of such a store sweeps only the user index: the buckets
    // are left to the server, and no index is written.
    let report = Sweeper::new(layout.clone(), SweepConfig::default())
        .pass()
        .await
        .unwrap();
    assert_eq!((report.buckets, report.reclaimed), (0, 0), "{report:?}");
    assert!(report.index_checked > 0, "{report:?}");
    audit(&mut raw, &layout).await;

    // The tower-sessions store's own writes: create, and save moving the
    // expiry.
    let tower = TowerStore::new(
        common::manager(&server).await,
        CompactConfig::new(4)
            .with_namespace("t")
            .with_viewed(ViewedConfig::default())
            .with_server_expiry(),
    )
    .await
    .unwrap();
    let data: HashMap<String, serde_json::Value> = [("locale".to_owned(), "de".into())].into();
    let at = sessionpack::clock::unix_now() as i64 + 7200;
    let id = tower.create_data(1, &data, at, rand::random).await.unwrap();
    tower.view(id, &9u64).await.unwrap();
    assert!(tower.save_data(id, &data, at + 60).await.unwrap());
    let (fields, chunks) = audit(&mut raw, tower.layout()).await;
    assert_eq!((fields, chunks), (1, 1));
}

/// Sessions of every form, with viewed items and pieced and out-of-line
/// records,
/// expire and leave nothing behind but the store's metadata, with no
/// sweeper ever run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_go_with_no_sweeper() {
    let server = common::server();
    let config = CompactConfig::new(4).with_viewed(ViewedConfig::default());
    let Some(layout) = open(&server, config).await else {
        return;
    };
    let mut raw = common::raw(&server).await;
    let ids_only: Store<_, ()> = Store::new(layout.clone()).without_sweeper();
    let strings: Store<_, String> = Store::new(layout.clone()).without_sweeper();
    let short: Store<_, String> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(1));
    // Long-lived first, then touched down to a second: none can expire
    // before all are written.
    let mut ids = Vec::new();
    for i in 0..20u64 {
        ids.push(ids_only.create(100_000 + i, ()).await.unwrap().id);
        ids.push(strings.create(i, "short".into()).await.unwrap().id);
        ids.push(strings.create(i, "x".repeat(300)).await.unwrap().id);
        ids.push(strings.create(i, "y".repeat(700)).await.unwrap().id);
    }
    for id in &ids {
        strings.view(id, &7u64).await.unwrap().unwrap();
    }
    let before: u64 = redis::cmd("DBSIZE").query_async(&mut raw).await.unwrap();
    assert!(
        before > 20,
        "buckets, viewed chunks and out-of-line keys: {before}"
    );
    for id in &ids {
        assert!(short.touch(id).await.unwrap().is_some());
    }
    // Any record decodes as a JSON value.
    let any: Store<_, serde_json::Value> = Store::new(layout.clone()).without_sweeper();
    while common::found(&any, &ids).await > 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Redis removes the expired fields (and each key with its last) by
    // itself; the bound only keeps a broken server from hanging the test.
    let meta = sessionpack::session::meta::StoreMeta::key("sp");
    let mut left = Vec::new();
    for _ in 0..600 {
        left = raw.keys::<_, Vec<String>>("*").await.unwrap();
        left.retain(|k| *k != meta);
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// When the server expires a user's sessions by itself, the user index
/// stays right: the listing shows none, a revocation finds none live, and
/// a sweeper's passes (of the index only) remove the entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_user_index_stays_right_when_the_server_expires_sessions() {
    let server = common::server();
    let mut users = UserIndexConfig::new(2);
    // Entries are judged, and markers last, a second after their write.
    users.grace_secs = 1;
    users.skew_secs = 0;
    let config = CompactConfig::new(4).with_user_index(users);
    let Some(layout) = open(&server, config).await else {
        return;
    };
    let mut raw = common::raw(&server).await;
    let long: Store<_, String> = Store::new(layout.clone()).without_sweeper();
    let short: Store<_, String> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(1));
    let mut ids = Vec::new();
    for device in ["phone", "laptop", "tablet"] {
        let s = long.create(7, device.into()).await.unwrap();
        long.set_label(&s, Some(device)).await.unwrap();
        ids.push(s.id);
    }
    assert_eq!(long.sessions_of(&7).await.unwrap().len(), 3);
    for id in &ids {
        assert!(short.touch(id).await.unwrap().is_some());
    }
    while common::found(&long, &ids).await > 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(long.sessions_of(&7).await.unwrap().is_empty());
    let revoked = long.revoke_others(&7, &ids[0]).await.unwrap();
    assert_eq!(revoked.removed, 0, "{revoked:?}");
    // The index's entries stay until a sweeper's full pass removes them.
    let sweeper = Sweeper::new(layout.clone(), SweepConfig::default());
    let mut dropped = 0;
    for _ in 0..600 {
        dropped += sweeper.pass().await.unwrap().index_dropped;
        let index = layout.user_index().unwrap();
        let mut left = 0u64;
        for bucket in 0..index.count() {
            left += raw.hlen::<_, u64>(index.key(bucket)).await.unwrap();
        }
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(dropped >= 1, "entries removed: {dropped}");
}
