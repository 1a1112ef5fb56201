//! The tower-sessions store against a real redis-server, through the
//! traits of tower-sessions-core 0.15 (and 0.14, which axum-login uses).

mod common;

use std::collections::HashMap;
use std::time::Duration;

use redis::AsyncCommands;
use serde_json::{Value, json};
use sessionpack::CompactConfig;
use sessionpack::tower::{TowerStore, session_id};
use sessionpack_testkit::LocalServer;
use time::OffsetDateTime;
use tower_sessions_core::session::{Id, Record};
use tower_sessions_core::session_store::Error as StoreError;
use tower_sessions_core::{ExpiredDeletion, SessionStore};

type Store = TowerStore<redis::aio::ConnectionManager>;

/// A store with no sweeper in the background: some tests count the
/// commands the server ran.
async fn store(server: &LocalServer) -> Store {
    TowerStore::new(common::manager(server).await, CompactConfig::new(4))
        .await
        .unwrap()
        .without_sweeper()
}

fn data(v: Value) -> HashMap<String, Value> {
    serde_json::from_value(v).unwrap()
}

fn axum_login(user_id: u64, hash: &[u8]) -> HashMap<String, Value> {
    data(json!({"axum-login.data": {"user_id": user_id, "auth_hash": hash}}))
}

fn record(data: HashMap<String, Value>, secs: i64) -> Record {
    Record {
        id: Id::default(),
        data,
        expiry_date: OffsetDateTime::now_utc() + time::Duration::seconds(secs),
    }
}

/// The raw value of a session's field in its bucket.
async fn raw_value(server: &LocalServer, store: &Store, id: Id) -> Option<Vec<u8>> {
    let sid = session_id(id.0);
    let scheme = store.layout().scheme();
    let bucket = store.layout().buckets().bucket_of(&sid);
    let mut raw = common::raw(server).await;
    raw.hget(
        scheme.bucket_key(bucket),
        store.layout().buckets().field(&sid),
    )
    .await
    .unwrap()
}

/// A PHC password-hash string as axum-login's examples keep it (97 bytes).
fn password_hash() -> Vec<u8> {
    let s = "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$\
             l0a8xV8u5xUGpa+6XWw9QJ9pNUVxJc0Wd2Pm3kn1TdU";
    assert_eq!(s.len(), 97);
    s.as_bytes().to_vec()
}

#[tokio::test]
async fn records_round_trip_exactly_inline_and_out_of_line() {
    let server = common::server();
    let store = store(&server).await;
    let shapes = [
        axum_login(42, &[7u8; 32]),
        axum_login(u64::MAX, &password_hash()),
        data(
            json!({"cart": [{"sku": "a-1", "qty": 2}, {"sku": "b", "qty": 1.5}], "n": -3, "x": null}),
        ),
        data(json!({"big": "x".repeat(5000)})),
        HashMap::new(),
    ];
    for shape in shapes {
        let mut r = record(shape.clone(), 600);
        store.create(&mut r).await.unwrap();
        let back = store.load(&r.id).await.unwrap().unwrap();
        assert_eq!(back.data, shape);
        assert_eq!(back.id, r.id);
        // Kept to the second, as an EXAT key is.
        assert_eq!(
            back.expiry_date.unix_timestamp(),
            r.expiry_date.unix_timestamp()
        );
    }
}

#[tokio::test]
async fn the_axum_login_shape_with_a_digest_stays_in_its_bucket() {
    let server = common::server();
    let store = store(&server).await;
    let mut r = record(axum_login(1_000_042, &[200u8; 32]), 600);
    store.create(&mut r).await.unwrap();
    let value = raw_value(&server, &store, r.id).await.unwrap();
    // 4-byte expiry, then the record: 40 bytes with a one-byte user id,
    // four more for this one (a MessagePack uint32).
    assert_eq!(value.len(), 4 + 44);
    let mut raw = common::raw(&server).await;
    let keys: Vec<String> = raw.keys("sp:*:o:*").await.unwrap();
    assert!(keys.is_empty());
}

#[tokio::test]
async fn create_gives_a_taken_id_a_new_one_and_keeps_the_first() {
    let server = common::server();
    let store = store(&server).await;
    let mut first = record(axum_login(1, &[1; 32]), 600);
    store.create(&mut first).await.unwrap();
    let mut second = record(axum_login(2, &[2; 32]), 600);
    second.id = first.id;
    store.create(&mut second).await.unwrap();
    assert_ne!(second.id, first.id);
    assert_eq!(
        store.load(&first.id).await.unwrap().unwrap().data,
        first.data
    );
    assert_eq!(
        store.load(&second.id).await.unwrap().unwrap().data,
        second.data
    );
}

#[tokio::test]
async fn save_never_revives_a_deleted_or_expired_session() {
    let server = common::server();
    let store = store(&server).await;
    let mut deleted = record(axum_login(1, &[1; 32]), 600);
    store.create(&mut deleted).await.unwrap();
    store.delete(&deleted.id).await.unwrap();
    store.save(&deleted).await.unwrap();
    assert!(store.load(&deleted.id).await.unwrap().is_none());
    assert_eq!(raw_value(&server, &store, deleted.id).await, None);

    let mut expiring = record(axum_login(2, &[2; 32]), 2);
    store.create(&mut expiring).await.unwrap();
    tokio::time::sleep(Duration::from_millis(3100)).await;
    let mut later = expiring.clone();
    later.expiry_date = OffsetDateTime::now_utc() + time::Duration::hours(1);
    store.save(&later).await.unwrap();
    assert!(store.load(&expiring.id).await.unwrap().is_none());
    // Still the old expiry: the sweeper will remove it.
    let value = raw_value(&server, &store, expiring.id).await.unwrap();
    let at = u32::from_be_bytes(value[..4].try_into().unwrap());
    assert_eq!(i64::from(at), expiring.expiry_date.unix_timestamp());
    store.delete_expired().await.unwrap();
    assert_eq!(raw_value(&server, &store, expiring.id).await, None);
}

/// The fields every bucket of the default namespace holds, together.
async fn bucket_fields(raw: &mut redis::aio::MultiplexedConnection) -> usize {
    let keys: Vec<String> = raw.keys("sp:{*}:*").await.unwrap();
    let mut fields = 0;
    for key in keys {
        let kind: String = redis::cmd("TYPE").arg(&key).query_async(raw).await.unwrap();
        if kind == "hash" {
            fields += raw.hlen::<_, usize>(&key).await.unwrap();
        }
    }
    fields
}

#[tokio::test]
async fn save_moves_records_in_and_out_of_line_and_a_past_expiry_removes() {
    let server = common::server();
    let store = store(&server).await;
    let mut r = record(axum_login(1, &[1; 32]), 600);
    store.create(&mut r).await.unwrap();
    let mut raw = common::raw(&server).await;
    // Each shape: the bucket fields the session then takes (its own and
    // its record's pieces: 58 bytes in its value, 64 in each piece, at
    // the server's default limit; once its short piece names are given
    // up, the first stays as a hold while it lives, and its pieces take
    // long names), and whether its record has a key of its own.
    for (shape, fields, side_key) in [
        (data(json!({"big": "y".repeat(300)})), 1 + 4, false),
        (axum_login(9, &[9; 32]), 1 + 1, false),
        (data(json!({"big": "z".repeat(700)})), 1 + 1, true),
        (data(json!({"big": "w".repeat(100)})), 1 + 1 + 1, false),
        (data(json!({"big": "v".repeat(450)})), 1 + 7 + 1, false),
        (axum_login(8, &[8; 32]), 1 + 1, false),
    ] {
        r.data = shape.clone();
        r.expiry_date += time::Duration::seconds(10);
        store.save(&r).await.unwrap();
        let back = store.load(&r.id).await.unwrap().unwrap();
        assert_eq!(back.data, shape);
        assert_eq!(
            back.expiry_date.unix_timestamp(),
            r.expiry_date.unix_timestamp()
        );
        let side: Vec<String> = raw.keys("sp:*:o:*").await.unwrap();
        assert_eq!(side.len(), usize::from(side_key));
        assert_eq!(bucket_fields(&mut raw).await, fields);
    }
    r.expiry_date = OffsetDateTime::now_utc() - time::Duration::seconds(5);
    store.save(&r).await.unwrap();
    assert!(store.load(&r.id).await.unwrap().is_none());
    assert_eq!(raw_value(&server, &store, r.id).await, None);
    let side: Vec<String> = raw.keys("sp:*:o:*").await.unwrap();
    assert!(side.is_empty(), "{side:?}");
    // The hold, left to the sweeper's next pass over the bucket.
    assert_eq!(bucket_fields(&mut raw).await, 1);
}

#[tokio::test]
async fn an_unchanged_save_within_the_threshold_sends_nothing() {
    let server = common::server();
    let store = store(&server).await.with_write_threshold(0.1);
    let mut r = record(axum_login(1, &[1; 32]), 3600);
    store.create(&mut r).await.unwrap();
    let mut raw = common::raw(&server).await;
    let loaded = store.load(&r.id).await.unwrap().unwrap();
    let before = common::commands_processed(&mut raw).await;
    // Same data, 60 s later of an hour: under a tenth.
    let mut rolled = loaded.clone();
    rolled.expiry_date += time::Duration::seconds(60);
    store.save(&rolled).await.unwrap();
    let after = common::commands_processed(&mut raw).await;
    // Only the INFO call itself was counted.
    assert_eq!(after - before, 1);
    // Moving by more than the threshold writes.
    rolled.expiry_date += time::Duration::seconds(600);
    store.save(&rolled).await.unwrap();
    let back = store.load(&r.id).await.unwrap().unwrap();
    assert_eq!(
        back.expiry_date.unix_timestamp(),
        rolled.expiry_date.unix_timestamp()
    );
    // Changed data writes however small the move.
    let mut changed = back.clone();
    changed.data.insert("visits".into(), json!(1));
    store.save(&changed).await.unwrap();
    assert_eq!(store.load(&r.id).await.unwrap().unwrap().data, changed.data);
    // A session deleted elsewhere is not revived by a skipped or sent save.
    let other = store.clone();
    other.delete(&r.id).await.unwrap();
    store.save(&changed).await.unwrap();
    assert!(store.load(&r.id).await.unwrap().is_none());
}

#[tokio::test]
async fn a_corrupt_record_is_a_decode_error_and_redis_down_a_backend_error() {
    let server = common::server();
    let store = store(&server).await;
    let mut r = record(axum_login(1, &[1; 32]), 600);
    store.create(&mut r).await.unwrap();
    let sid = session_id(r.id.0);
    let bucket = store.layout().buckets().bucket_of(&sid);
    let mut raw = common::raw(&server).await;
    let mut value = raw_value(&server, &store, r.id).await.unwrap();
    value.truncate(4);
    value.extend_from_slice(b"\x81\xa1");
    let _: () = raw
        .hset(
            store.layout().scheme().bucket_key(bucket),
            store.layout().buckets().field(&sid),
            value,
        )
        .await
        .unwrap();
    assert!(matches!(
        store.load(&r.id).await,
        Err(StoreError::Decode(_))
    ));

    server.stop();
    let mut other = record(axum_login(2, &[2; 32]), 600);
    assert!(matches!(
        store.create(&mut other).await,
        Err(StoreError::Backend(_))
    ));
    assert!(matches!(
        store.load(&r.id).await,
        Err(StoreError::Backend(_))
    ));
}

#[tokio::test]
async fn the_014_traits_see_the_same_store() {
    use tower_sessions_core_014::SessionStore as Store014;
    use tower_sessions_core_014::session::{Id as Id014, Record as Record014};
    let server = common::server();
    let store = store(&server).await;
    let mut r = Record014 {
        id: Id014::default(),
        data: axum_login(5, &[5; 32]),
        expiry_date: OffsetDateTime::now_utc() + time::Duration::minutes(5),
    };
    Store014::create(&store, &mut r).await.unwrap();
    let back = SessionStore::load(&store, &Id(r.id.0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back.data, r.data);
    Store014::delete(&store, &r.id).await.unwrap();
    assert!(Store014::load(&store, &r.id).await.unwrap().is_none());
}

#[tokio::test]
async fn a_save_is_one_read_and_one_write_and_never_revives() {
    let server = common::server();
    // Two processes: each store has its own memory of what it loaded.
    let this = store(&server).await;
    let other = store(&server).await;
    let mut raw = common::raw(&server).await;
    let mut r = record(axum_login(1, &[1; 32]), 3600);
    other.create(&mut r).await.unwrap();
    let mut loaded = this.load(&r.id).await.unwrap().unwrap();

    // A save of what this process read: one HSETEX where the server has
    // it, else a script of HEXISTS and HSET; no read of the stored value.
    let calls = async |raw: &mut redis::aio::MultiplexedConnection| {
        let mut counts = Vec::new();
        for command in ["hget", "hset", "hexists", "hsetex", "time"] {
            counts.push(common::calls(raw, command).await);
        }
        counts
    };
    let hsetex = this.layout().plain_saves() == Some("HSETEX FXX");
    let before = calls(&mut raw).await;
    loaded.data = axum_login(2, &[2; 32]);
    this.save(&loaded).await.unwrap();
    let after = calls(&mut raw).await;
    let sent: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let plain = if hsetex {
        [0, 0, 0, 1, 0]
    } else {
        [0, 1, 1, 0, 0]
    };
    assert_eq!(sent, plain, "hget hset hexists hsetex time");
    assert_eq!(other.load(&r.id).await.unwrap().unwrap().data, loaded.data);

    // A save that moves the expiry earlier moves the bucket's index entry.
    let sid = session_id(r.id.0);
    let scheme = this.layout().scheme();
    let bucket = this.layout().buckets().bucket_of(&sid);
    let index = scheme.index_key(scheme.group_of(bucket));
    let mut earlier = this.load(&r.id).await.unwrap().unwrap();
    earlier.expiry_date -= time::Duration::seconds(1800);
    this.save(&earlier).await.unwrap();
    let score: f64 = raw.zscore(&index, scheme.member(bucket)).await.unwrap();
    assert!(
        score <= earlier.expiry_date.unix_timestamp() as f64,
        "{score}"
    );

    // Deleted by the other process after this one loaded it: nothing is
    // written, and nothing is left.
    this.load(&r.id).await.unwrap().unwrap();
    other.delete(&r.id).await.unwrap();
    let hset = common::calls(&mut raw, "hset").await;
    this.save(&loaded).await.unwrap();
    assert_eq!(
        common::calls(&mut raw, "hset").await,
        hset,
        "nothing written"
    );
    assert!(other.load(&r.id).await.unwrap().is_none());
    assert_eq!(raw_value(&server, &this, r.id).await, None);
    let keys: Vec<String> = raw.keys("sp:*").await.unwrap();
    assert!(
        keys.iter().all(|k| !k.contains(":o:")),
        "no out-of-line record: {keys:?}"
    );

    // Seen inline, now out of line: the script reads what is stored.
    let mut big = record(axum_login(3, &[3; 32]), 3600);
    this.create(&mut big).await.unwrap();
    let mut fat = other.load(&big.id).await.unwrap().unwrap();
    fat.data = data(json!({"big": "q".repeat(300)}));
    other.save(&fat).await.unwrap();
    let mut slim = this.load(&big.id).await.unwrap().unwrap();
    slim.data = axum_login(4, &[4; 32]);
    this.save(&slim).await.unwrap();
    assert_eq!(other.load(&big.id).await.unwrap().unwrap().data, slim.data);
    let side: Vec<String> = raw.keys("sp:*:o:*").await.unwrap();
    assert!(side.is_empty(), "{side:?}");
}

#[tokio::test]
async fn delete_removes_the_field_and_any_out_of_line_record() {
    let server = common::server();
    let this = store(&server).await;
    let other = store(&server).await;
    let mut raw = common::raw(&server).await;
    let big = || data(json!({"big": "b".repeat(300)}));

    // Out of line, and this process never saw it: field and record go
    // together.
    let mut r = record(big(), 600);
    other.create(&mut r).await.unwrap();
    this.delete(&r.id).await.unwrap();
    assert_eq!(raw_value(&server, &this, r.id).await, None);
    let side: Vec<String> = raw.keys("sp:*:o:*").await.unwrap();
    assert!(side.is_empty(), "{side:?}");

    // Out of line, seen by this process: the same.
    let mut r = record(big(), 600);
    this.create(&mut r).await.unwrap();
    this.delete(&r.id).await.unwrap();
    assert_eq!(raw_value(&server, &this, r.id).await, None);
    let side: Vec<String> = raw.keys("sp:*:o:*").await.unwrap();
    assert!(side.is_empty(), "{side:?}");

    // Seen inline: one HDEL (one HGETDEL where the server has it), no
    // transaction, no script.
    let mut r = record(axum_login(1, &[1; 32]), 600);
    other.create(&mut r).await.unwrap();
    this.load(&r.id).await.unwrap().unwrap();
    let removes = if this.layout().plain_deletes().is_some() {
        "hgetdel"
    } else {
        "hdel"
    };
    let (removed, multi, scripts) = (
        common::calls(&mut raw, removes).await,
        common::calls(&mut raw, "multi").await,
        common::calls(&mut raw, "evalsha").await,
    );
    this.delete(&r.id).await.unwrap();
    assert_eq!(common::calls(&mut raw, removes).await, removed + 1);
    assert_eq!(common::calls(&mut raw, "multi").await, multi);
    assert_eq!(common::calls(&mut raw, "evalsha").await, scripts);
    assert!(other.load(&r.id).await.unwrap().is_none());
    // Deleting what is gone is not an error.
    this.delete(&r.id).await.unwrap();
}

/// With an absolute lifetime, a session dies that long after it was
/// created, whatever expiry tower-sessions asks for in a create or in
/// later saves (rolling expiry asks for more on every request).
#[tokio::test]
async fn an_absolute_lifetime_caps_what_tower_sessions_asks() {
    let server = common::server();
    let s = store(&server)
        .await
        .with_absolute_lifetime(Duration::from_secs(2));
    let mut r = record(axum_login(7, &[1; 32]), 3600);
    s.create(&mut r).await.unwrap();
    let deadline = i64::from(session_id(r.id.0).stamp()) + 2;
    let loaded = s.load(&r.id).await.unwrap().expect("live");
    assert!(loaded.expiry_date.unix_timestamp() <= deadline);
    let mut later = loaded.clone();
    later.expiry_date = OffsetDateTime::now_utc() + time::Duration::hours(2);
    s.save(&later).await.unwrap();
    let saved = s.load(&r.id).await.unwrap().expect("live");
    assert!(
        saved.expiry_date.unix_timestamp() <= deadline,
        "a save went past the deadline"
    );
    while OffsetDateTime::now_utc().unix_timestamp() <= deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(s.load(&r.id).await.unwrap().is_none());
}

/// The server's time, in seconds with a fraction.
async fn server_time(server: &LocalServer) -> f64 {
    let (s, us): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut common::raw(server).await)
        .await
        .unwrap();
    s as f64 + us as f64 / 1e6
}

/// Process A loads a session; process B moves its expiry earlier; once
/// that has passed (not yet swept), a save from a process that did not
/// read it live does not bring it back (the full script reads the stored
/// expiry), and A's save, sent as a plain write of what it read live, is
/// the later write and wins, as the guide's plain writes say.
#[tokio::test]
async fn a_save_after_another_process_shortened_a_session_is_the_later_write() {
    let server = common::server();
    let a = store(&server).await;
    let b = store(&server).await;
    let mut r = record(axum_login(7, &[7; 32]), 3600);
    a.create(&mut r).await.unwrap();
    let loaded = a.load(&r.id).await.unwrap().unwrap();
    let mut short = b.load(&r.id).await.unwrap().unwrap();
    short.expiry_date = OffsetDateTime::now_utc() + time::Duration::seconds(4);
    b.save(&short).await.unwrap();
    let shortened = b.load(&r.id).await.unwrap().expect("still live");
    assert_eq!(
        shortened.expiry_date,
        short.expiry_date.replace_nanosecond(0).unwrap()
    );
    let until = short.expiry_date.unix_timestamp() as f64;
    while server_time(&server).await < until {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let c = store(&server).await;
    c.save(&loaded).await.unwrap();
    assert!(c.load(&r.id).await.unwrap().is_none(), "revived");
    a.save(&loaded).await.unwrap();
    let back = b.load(&r.id).await.unwrap().expect("the later write");
    assert_eq!(back.data, loaded.data);
}

/// What a load returns as live, a save can extend, up to its last second:
/// a session loaded in its last ~1.5 s and saved with an hour more lives
/// the hour. A trial in which the session expired before the save was
/// answered (the server's clock says so) proves nothing and is run again.
#[tokio::test]
async fn a_session_loaded_as_live_in_its_last_seconds_can_be_extended() {
    let server = common::server();
    let store = store(&server).await;
    let mut proven = 0;
    for _ in 0..40 {
        if proven == 3 {
            break;
        }
        let mut r = record(axum_login(8, &[8; 32]), 3);
        store.create(&mut r).await.unwrap();
        let expiry = r.expiry_date.unix_timestamp() as f64;
        while server_time(&server).await < expiry - 1.5 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let Some(mut loaded) = store.load(&r.id).await.unwrap() else {
            continue;
        };
        loaded.expiry_date = OffsetDateTime::now_utc() + time::Duration::hours(1);
        store.save(&loaded).await.unwrap();
        if server_time(&server).await >= expiry {
            continue;
        }
        proven += 1;
        let back = store.load(&r.id).await.unwrap().expect("extended");
        assert_eq!(
            back.expiry_date.unix_timestamp(),
            loaded.expiry_date.unix_timestamp()
        );
    }
    assert_eq!(proven, 3, "three trials saved before the old expiry");
}

/// An expiry past what a layout's 32-bit expiry holds (February 2106)
/// ends then: the create and save succeed (no error for the app to turn
/// into a 500), and the load shows the last second the store keeps.
#[tokio::test]
async fn an_expiry_after_2106_is_kept_as_the_last_second_the_store_holds() {
    let server = common::server();
    let store = store(&server).await;
    let last = sessionpack::ttl::MAX_EXPIRES_AT as i64;
    let far = OffsetDateTime::from_unix_timestamp(last + 86_400 * 365 * 100).unwrap();
    let mut r = record(data(json!({"k": 1})), 600);
    r.expiry_date = far;
    store.create(&mut r).await.unwrap();
    let back = store.load(&r.id).await.unwrap().unwrap();
    assert_eq!(back.expiry_date.unix_timestamp(), last);
    r.data = data(json!({"k": 2}));
    store.save(&r).await.unwrap();
    let back = store.load(&r.id).await.unwrap().unwrap();
    assert_eq!(
        (back.data, back.expiry_date.unix_timestamp()),
        (r.data, last)
    );
}

#[tokio::test]
async fn a_growing_store_serves_tower_sessions_through_its_splits() {
    let server = common::server();
    common::set_hash_entries(&server, 32);
    let open = || async {
        TowerStore::new(common::manager(&server).await, CompactConfig::growing())
            .await
            .unwrap()
    };
    let app = open().await;
    // Another instance of the app, opened before the store grew.
    let other = open().await;
    let mut records = Vec::new();
    for n in 0..1500u64 {
        let data = if n % 2 == 0 {
            axum_login(n, &[7u8; 32])
        } else {
            data(json!({"csrf": "x".repeat(43), "locale": "en-GB", "flash": format!("saved {n}")}))
        };
        let mut r = record(data, 600);
        app.create(&mut r).await.unwrap();
        records.push(r);
    }
    let shape = app.layout().shape().unwrap();
    let mut buckets = 0;
    for group in 0..shape.group_count() {
        buckets += app.layout().group_buckets(group).await.unwrap().len();
    }
    assert!(buckets > 64, "{buckets} buckets for 1500 sessions");
    // The store keeps whole seconds of expiry.
    let same = |loaded: Option<Record>, r: &Record| {
        loaded.is_some_and(|l| {
            l.id == r.id
                && l.data == r.data
                && l.expiry_date.unix_timestamp() == r.expiry_date.unix_timestamp()
        })
    };
    for r in &records {
        assert!(same(other.load(&r.id).await.unwrap(), r));
    }
    // The other instance saves half and logs the rest out, by a shape it
    // learned one redirect at a time.
    for (n, r) in records.iter_mut().enumerate() {
        if n % 2 == 0 {
            r.data.insert("seen".into(), json!(n));
            other.save(r).await.unwrap();
        } else {
            other.delete(&r.id).await.unwrap();
        }
    }
    let fresh = open().await;
    for (n, r) in records.iter().enumerate() {
        let loaded = fresh.load(&r.id).await.unwrap();
        if n % 2 == 0 {
            assert!(same(loaded, r), "session {n}");
        } else {
            assert_eq!(loaded, None, "a logged-out session came back");
        }
    }
}

/// The quickstart's store: `connect` opens buckets that grow, a sweeper of
/// its own, and a write threshold, so a save of unchanged data that moves
/// the expiry by a second sends nothing.
#[tokio::test]
async fn connect_opens_the_recommended_store() {
    let server = common::server();
    let store = TowerStore::connect(&server.url()).await.unwrap();
    assert!(store.layout().shape().is_some(), "buckets that grow");
    assert!(store.sweep_stats().is_some(), "a sweeper of its own");
    // The commands are counted below: no sweeps meanwhile.
    let store = store.without_sweeper();
    assert!(store.sweep_stats().is_none());
    let data = data(json!({"n": 1}));
    let at = OffsetDateTime::now_utc().unix_timestamp() + 3600;
    let id = store.create_data(1, &data, at, || 2).await.unwrap();
    assert_eq!(store.load_data(id).await.unwrap().unwrap().0, data);
    let mut raw = common::raw(&server).await;
    let before = common::calls(&mut raw, "evalsha").await;
    assert!(
        !store.save_data(id, &data, at + 1).await.unwrap(),
        "skipped"
    );
    assert_eq!(common::calls(&mut raw, "evalsha").await, before);
    // A change of the data is written.
    let changed = self::data(json!({"n": 2}));
    assert!(store.save_data(id, &changed, at + 1).await.unwrap());
    assert_eq!(store.load_data(id).await.unwrap().unwrap().0, changed);
}

#[tokio::test]
async fn connect_packs_where_the_policy_keeps_the_dictionary_and_not_elsewhere() {
    let data = |n: u64| {
        let locale = ["de-DE", "en-GB", "fr-FR"][n as usize % 3];
        self::data(json!({
            "csrf_token": format!("{:016x}{:016x}", n.wrapping_mul(0x9e37_79b9_7f4a_7c15), n),
            "locale": locale,
        }))
    };
    let at = OffsetDateTime::now_utc().unix_timestamp() + 3600;
    for (policy, packs) in [("noeviction", true), ("allkeys-lru", false)] {
        let server = LocalServer::start_with(&["--maxmemory-policy", policy]).unwrap();
        let store = TowerStore::connect(&server.url())
            .await
            .unwrap_or_else(|e| panic!("{policy}: {e}"))
            .without_sweeper();
        // Under allkeys-* the buckets stay fixed too: their shape's keys
        // could be evicted.
        assert_eq!(store.layout().shape().is_some(), packs, "{policy}");
        let mut ids = Vec::new();
        for n in 0..1001u64 {
            let id = (i128::from(n.wrapping_mul(0x9e37_79b9_7f4a_7c15)) << 64) | i128::from(n);
            ids.push(
                store
                    .create_data(id, &data(n), at, || id + 1)
                    .await
                    .unwrap(),
            );
        }
        let expected = packs.then_some(255);
        assert_eq!(store.layout().dictionary_id(), expected, "{policy}");
        for (n, id) in ids.into_iter().enumerate().step_by(97) {
            let loaded = store.load_data(id).await.unwrap().unwrap().0;
            assert_eq!(loaded, data(n as u64), "{policy}");
        }
    }
}

/// Calls on sessions that are not there write nothing on a fresh growing
/// store (the quickstart's): a save, a load, a delete, an expiry check of
/// ids never created leave no key behind, not even a bucket holding only
/// its marker (which no sweep would remove).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_on_absent_sessions_leave_nothing_behind() {
    let server = common::server();
    let conn = common::manager(&server).await;
    let store = TowerStore::new(conn, sessionpack::tower::recommended_config())
        .await
        .unwrap()
        .without_sweeper();
    let mut raw = common::raw(&server).await;
    let keys = |raw: &mut redis::aio::MultiplexedConnection| {
        let mut raw = raw.clone();
        async move {
            let mut keys: Vec<String> = raw.keys("*").await.unwrap();
            keys.sort();
            keys
        }
    };
    let before = keys(&mut raw).await;
    for _ in 0..64 {
        let absent = record(axum_login(1, b"h"), 600);
        assert!(store.load(&absent.id).await.unwrap().is_none());
        store.delete(&absent.id).await.unwrap();
        // A save of a session gone (deleted, expired) under its id: the
        // store creates it anew only through `create`; nothing here is a
        // marker-only bucket afterwards.
        let saved = absent.clone();
        store.save(&saved).await.unwrap();
        store.delete(&saved.id).await.unwrap();
    }
    let after = keys(&mut raw).await;
    assert_eq!(after, before, "keys left by calls on absent sessions");
}
