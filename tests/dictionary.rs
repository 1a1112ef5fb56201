//! Session data packed with a dictionary trained on the app's sessions: it
//! round-trips, stays in one value where it would have taken pieces, is
//! read by processes that never held the dictionary, and damaged packed
//! data, a lost dictionary or a reused id is a typed error, never a
//! panic or a wrong session.

mod common;

use std::collections::HashMap;

use redis::AsyncCommands;
use serde_json::{Value, json};
use sessionpack::identity::Identity;
use sessionpack::session::dictionary::{self, Dictionary, PACKED};
use sessionpack::session::layout::Layout;
use sessionpack::session::layout::StoredRecord;
use sessionpack::session::meta::StoreMeta;
use sessionpack::tower::{TowerStore, session_id};
use sessionpack::ttl::Deadline;
use sessionpack::{CompactConfig, Error};
use sessionpack_testkit::LocalServer;
use sha2::Digest;

type Store = TowerStore<redis::aio::ConnectionManager>;

/// An app's session: the login, a csrf token, a locale, a flash message.
fn app_session(n: u64) -> HashMap<String, Value> {
    let token: String = (0..64)
        .map(|i| {
            let x = n.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(i) ^ (u64::from(i) * 7919);
            char::from_digit((x % 16) as u32, 16).unwrap()
        })
        .collect();
    let locales = ["en-US", "de-DE", "fr-FR"];
    let flashes = ["Welcome back", "Item removed", "Order placed"];
    serde_json::from_value(json!({
        "axum-login.data": {"user_id": 1_000_000 + n, "auth_hash": digest(n)},
        "csrf_token": token,
        "locale": locales[(n % 3) as usize],
        "flash": flashes[(n / 3 % 3) as usize],
    }))
    .unwrap()
}

/// 32 bytes that vary with `n` and repeat nothing.
fn digest(n: u64) -> Vec<u8> {
    (0..32u32)
        .map(|i| {
            (n.wrapping_add(1)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .rotate_left(i * 2)
                >> 11) as u8
        })
        .collect()
}

/// The pieces a stored value names.
fn pieces(value: &[u8]) -> usize {
    match StoredRecord::of_value(value) {
        Some(StoredRecord::Pieced { pieces, .. }) => pieces,
        _ => 0,
    }
}

/// Where the record begins in a stored binary value: after the expiry,
/// and for a record in pieces after the marker and the count (and the
/// record's check, where the count's high bit is set).
fn record_at(value: &[u8]) -> usize {
    match StoredRecord::of_value(value) {
        Some(StoredRecord::Pieced { .. }) if value[5] & 0x80 != 0 => 10,
        Some(StoredRecord::Pieced { .. }) => 6,
        _ => 4,
    }
}

fn trained(id: u8) -> Dictionary {
    let samples: Vec<Vec<u8>> = (10_000..11_000)
        .map(|n| sessionpack::json_map::encode(&app_session(n)).unwrap())
        .collect();
    Dictionary::train(id, &samples, 4096).expect("a dictionary trains on 1,000 sessions")
}

/// A store on the default namespace packing with dictionary `id`.
async fn packing(server: &LocalServer, config: CompactConfig, id: u8) -> (Store, Dictionary) {
    let dictionary = trained(id);
    let store = store(server, config)
        .await
        .with_dictionary(&dictionary)
        .await
        .unwrap();
    (store, dictionary)
}

/// A store with no sweeper in the background: a test counts the
/// commands the server ran.
async fn store(server: &LocalServer, config: CompactConfig) -> Store {
    TowerStore::new(common::manager(server).await, config)
        .await
        .unwrap()
        .without_sweeper()
}

fn in_an_hour() -> i64 {
    sessionpack::clock::unix_now() as i64 + 3600
}

/// The raw value of a session's field in its bucket.
async fn raw_value(server: &LocalServer, store: &Store, id: i128) -> Vec<u8> {
    let sid = session_id(id);
    let bucket = store.layout().buckets().bucket_of(&sid);
    let mut raw = common::raw(server).await;
    raw.hget(
        store.layout().scheme().bucket_key(bucket),
        store.layout().buckets().field(&sid),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn packed_sessions_round_trip_and_take_fewer_pieces() {
    let server = common::server();
    let (packing, _) = packing(&server, CompactConfig::new(4), 1).await;
    assert_eq!(packing.dictionary_id(), Some(1));
    let plain_len = sessionpack::json_map::encode(&app_session(1))
        .unwrap()
        .len();
    assert!(plain_len > 120, "the app session is {plain_len} bytes");
    for n in 0..50u64 {
        let id = 1000 + i128::from(n);
        let data = app_session(n);
        packing
            .create_data(id, &data, in_an_hour(), || 0)
            .await
            .unwrap();
        let value = raw_value(&server, &packing, id).await;
        // Expiry, the pieced marker and count, then the packed data.
        let data_at = record_at(&value);
        assert_eq!(value[data_at], PACKED, "packed: {value:?}");
        assert_eq!(value[data_at + 1], 1, "the dictionary's id");
        let (loaded, _) = packing.load_data(id).await.unwrap().unwrap();
        assert_eq!(loaded, data);
        // A change is packed again and read back.
        let mut changed = data.clone();
        changed.insert("flash".into(), json!("Saved"));
        assert!(packing.save_data(id, &changed, in_an_hour()).await.unwrap());
        assert_eq!(packing.load_data(id).await.unwrap().unwrap().0, changed);
    }
    // Unpacked, the same sessions take two pieces each; packed, one.
    let unpacked = store(&server, CompactConfig::new(4).with_namespace("unpacked")).await;
    unpacked
        .create_data(7, &app_session(3), in_an_hour(), || 0)
        .await
        .unwrap();
    let (before, after) = (
        pieces(&raw_value(&server, &unpacked, 7).await),
        pieces(&raw_value(&server, &packing, 1003).await),
    );
    assert!(after < before, "{after} pieces packed, {before} unpacked");
}

#[tokio::test]
async fn processes_without_the_dictionary_read_and_write_packed_namespaces() {
    let server = common::server();
    let (packing, _) = packing(&server, CompactConfig::new(4), 3).await;
    let other = store(&server, CompactConfig::new(4)).await;
    assert_eq!(other.dictionary_id(), None);
    packing
        .create_data(1, &app_session(1), in_an_hour(), || 0)
        .await
        .unwrap();
    // The other process reads the dictionary from the namespace.
    assert_eq!(other.load_data(1).await.unwrap().unwrap().0, app_session(1));
    // What it writes, unpacked, the packing process reads.
    other
        .save_data(1, &app_session(2), in_an_hour())
        .await
        .unwrap();
    let value = raw_value(&server, &other, 1).await;
    let data_at = record_at(&value);
    assert_ne!(value[data_at], PACKED);
    assert_eq!(
        packing.load_data(1).await.unwrap().unwrap().0,
        app_session(2)
    );
    // Short data is never packed: the framing would cost more.
    let short: HashMap<String, Value> = serde_json::from_value(json!({"u": 1})).unwrap();
    packing
        .create_data(2, &short, in_an_hour(), || 0)
        .await
        .unwrap();
    assert_ne!(raw_value(&server, &packing, 2).await[4], PACKED);
    assert_eq!(other.load_data(2).await.unwrap().unwrap().0, short);
}

#[tokio::test]
async fn a_lost_dictionary_or_damaged_packed_data_is_a_corrupt_record() {
    let server = common::server();
    let (packing, dict) = packing(&server, CompactConfig::new(4), 1).await;
    packing
        .create_data(1, &app_session(1), in_an_hour(), || 0)
        .await
        .unwrap();
    let mut raw = common::raw(&server).await;
    let _: () = raw.del(dictionary::key("sp", 1)).await.unwrap();
    // The process holding it still reads; one that never held it cannot,
    // and says which key is missing.
    assert!(packing.load_data(1).await.unwrap().is_some());
    let other = store(&server, CompactConfig::new(4)).await;
    match other.load_data(1).await {
        Err(Error::CorruptRecord { reason, .. }) => {
            assert!(reason.contains("sp:dict:1"), "{reason}")
        }
        other => panic!("expected a corrupt record, got {other:?}"),
    }
    // Publishing it again (as `sessionpack dictionary publish` does)
    // restores the other process's reads.
    dict.publish(&raw, "sp").await.unwrap();
    assert_eq!(other.load_data(1).await.unwrap().unwrap().0, app_session(1));

    // Damaged packed data, written as a raw record: each is refused.
    let layout = packing.layout();
    let frame_of = |claimed: u8| vec![PACKED, 1, 0x20, claimed, 0xde, 0xad, 0xbe, 0xef];
    let damaged: Vec<Vec<u8>> = vec![
        vec![PACKED],
        vec![PACKED, 1],
        frame_of(40),
        // A frame header claiming 2^32 - 1 bytes.
        vec![PACKED, 1, 0xa0, 0xff, 0xff, 0xff, 0xff, 0x00],
        // A dictionary no one stored.
        vec![PACKED, 9, 0x20, 4, 1, 2, 3, 4],
        vec![PACKED, 1, 0x00],
    ];
    for (i, record) in damaged.iter().enumerate() {
        let id = 100 + i as i128;
        let inserted = layout
            .insert(&session_id(id), record, Deadline::In(600))
            .await
            .unwrap();
        assert!(matches!(
            inserted,
            sessionpack::session::layout::Inserted::Created { .. }
        ));
        for reader in [&packing, &other] {
            match reader.load_data(id).await {
                Err(Error::CorruptRecord { .. }) => {}
                other => panic!("{record:?}: expected a corrupt record, got {other:?}"),
            }
        }
        // It is still removable.
        packing.delete_data(id).await.unwrap();
        assert_eq!(layout.load(&session_id(id)).await.unwrap(), None);
    }
}

#[tokio::test]
async fn dictionary_ids_are_never_reused_and_old_namespaces_are_not_packed() {
    let server = common::server();
    let raw = common::raw(&server).await;
    trained(1).publish(&raw, "sp").await.unwrap();
    // The same dictionary again is fine; another under its id is not.
    trained(1).publish(&raw, "sp").await.unwrap();
    let other = Dictionary::new(1, vec![1u8; 300]).unwrap();
    assert!(matches!(
        other.publish(&raw, "sp").await,
        Err(Error::Config(_))
    ));
    let packing = store(&server, CompactConfig::new(4)).await;
    assert!(matches!(
        packing.with_dictionary(&other).await,
        Err(Error::Config(_))
    ));
    assert!(matches!(
        Dictionary::new(0, vec![1u8; 300]),
        Err(Error::Config(_))
    ));
    assert!(matches!(
        Dictionary::new(2, vec![1u8; dictionary::MAX_DICTIONARY_BYTES + 1]),
        Err(Error::Config(_))
    ));
    assert!(matches!(
        Dictionary::new(2, Vec::new()),
        Err(Error::Config(_))
    ));

    // A namespace recorded before record format 3: its other processes
    // would not unpack, so nothing is packed there.
    let mut meta = sessionpack::Compact::<redis::aio::ConnectionManager>::meta(
        &sessionpack::session::buckets::Buckets::new("old", 4)
            .unwrap()
            .with_id_width(sessionpack::IdWidth::Bits128),
    );
    meta.format = 2;
    meta.claim(&raw, "old").await.unwrap();
    let old = store(&server, CompactConfig::new(4).with_namespace("old")).await;
    assert_eq!(old.layout().format(), 2);
    match old.with_dictionary(&trained(1)).await {
        Err(Error::Config(message)) => assert!(message.contains("format 2"), "{message}"),
        other => panic!(
            "expected a refusal, got {:?}",
            other.map(|s| s.dictionary_id())
        ),
    }
    assert_eq!(
        StoreMeta::read(&raw, "old").await.unwrap().unwrap().format,
        2
    );
}

/// A store on namespace `namespace`, recorded first with record `format`,
/// packing with dictionary 1.
async fn recorded_with(server: &LocalServer, namespace: &str, format: u32) -> Store {
    let raw = common::raw(server).await;
    let mut meta = sessionpack::Compact::<redis::aio::ConnectionManager>::meta(
        &sessionpack::session::buckets::Buckets::new(namespace, 4)
            .unwrap()
            .with_id_width(sessionpack::IdWidth::Bits128),
    );
    meta.format = format;
    meta.claim(&raw, namespace).await.unwrap();
    let store = store(server, CompactConfig::new(4).with_namespace(namespace)).await;
    assert_eq!(store.layout().format(), format);
    store.with_dictionary(&trained(1)).await.unwrap()
}

#[tokio::test]
async fn tokens_are_lifted_out_in_new_namespaces_and_older_ones_keep_their_form() {
    let server = common::server();
    let lifting = recorded_with(&server, "new", dictionary::LIFTED_FORMAT).await;
    let older = recorded_with(&server, "older", dictionary::LIFTED_FORMAT - 1).await;
    for (store, lifted) in [(&lifting, true), (&older, false)] {
        store
            .create_data(1, &app_session(1), in_an_hour(), || 0)
            .await
            .unwrap();
        let value = raw_value(&server, store, 1).await;
        let data_at = record_at(&value);
        assert_eq!(&value[data_at..data_at + 2], &[PACKED, 1]);
        // After the id: the count of lifted bytes (the digest's 32 and
        // the csrf token's 64 hex digits as 32), or, in the older form,
        // the frame's descriptor (single segment, a one-byte size).
        assert_eq!(value[data_at + 2], if lifted { 64 } else { 0x20 });
        if lifted {
            // The digest's bytes come first among the lifted ones.
            assert_eq!(&value[data_at + 3..data_at + 35], &digest(1)[..]);
        }
        assert_eq!(store.load_data(1).await.unwrap().unwrap().0, app_session(1));
    }
    // A process of this version that never held the dictionary reads both.
    for namespace in ["new", "older"] {
        let reader = store(&server, CompactConfig::new(4).with_namespace(namespace)).await;
        assert_eq!(
            reader.load_data(1).await.unwrap().unwrap().0,
            app_session(1)
        );
    }
    // Lifting takes the random bytes out of zstd's way: the same session
    // packs shorter (the bucket holds it alone: its value and pieces).
    let mut sizes = Vec::new();
    for store in [&lifting, &older] {
        let bucket = store.layout().buckets().bucket_of(&session_id(1));
        let all: HashMap<Vec<u8>, Vec<u8>> = common::raw(&server)
            .await
            .hgetall(store.layout().scheme().bucket_key(bucket))
            .await
            .unwrap();
        sizes.push(all.values().map(Vec::len).sum::<usize>());
    }
    assert!(sizes[0] < sizes[1], "{sizes:?} bytes, lifted and not");
}

/// An app session that names its tenant by a UUID, as many apps do.
fn with_tenant(n: u64) -> HashMap<String, Value> {
    let hex: String = digest(n + 7)[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let uuid = format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    );
    let mut data = app_session(n);
    data.insert("tenant".into(), Value::String(uuid));
    data
}

#[tokio::test]
async fn uuids_are_lifted_in_new_namespaces_and_older_ones_keep_their_text() {
    let server = common::server();
    let new = recorded_with(&server, "new", dictionary::UUID_FORMAT).await;
    let older = recorded_with(&server, "older", dictionary::UUID_FORMAT - 1).await;
    // The digest's 32 bytes and the csrf token's 64 hex digits as 32 in
    // both; the tenant's 36 characters as 16 bytes only in the new one,
    // which the older version's processes would not unpack.
    for (store, lifted) in [(&new, 80), (&older, 64)] {
        store
            .create_data(1, &with_tenant(1), in_an_hour(), || 0)
            .await
            .unwrap();
        let value = raw_value(&server, store, 1).await;
        let data_at = record_at(&value);
        assert_eq!(&value[data_at..data_at + 2], &[PACKED, 1]);
        assert_eq!(value[data_at + 2], lifted);
        assert_eq!(store.load_data(1).await.unwrap().unwrap().0, with_tenant(1));
    }
    // A process of this version that never held the dictionary reads both.
    for namespace in ["new", "older"] {
        let reader = store(&server, CompactConfig::new(4).with_namespace(namespace)).await;
        assert_eq!(
            reader.load_data(1).await.unwrap().unwrap().0,
            with_tenant(1)
        );
    }
}

/// `bytes` in base64url, unpadded.
fn base64url(bytes: &[u8]) -> String {
    const URL: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bits: Vec<u8> = bytes
        .iter()
        .flat_map(|b| (0..8).rev().map(move |i| b >> i & 1))
        .collect();
    bits.chunks(6)
        .map(|c| {
            let place = c
                .iter()
                .enumerate()
                .fold(0, |v, (i, b)| v | usize::from(*b) << (5 - i));
            URL[place] as char
        })
        .collect()
}

/// The app session with an OpenID Connect id token: a JSON Web Token
/// whose header and claims are JSON, and whose signature is 32 bytes of
/// a hash (43 base64url characters, 33 bytes lifted).
fn with_id_token(n: u64) -> HashMap<String, Value> {
    let header = r#"{"alg":"ES256","kid":"2026-11","typ":"JWT"}"#;
    let claims = format!(
        r#"{{"iss":"https://id.example.com","sub":"{}","aud":"shop","iat":{}}}"#,
        1_000_000 + n,
        1_795_000_000 + n
    );
    let jwt = format!(
        "{}.{}.{}",
        base64url(header.as_bytes()),
        base64url(claims.as_bytes()),
        base64url(&sha2::Sha256::digest(n.to_be_bytes()))
    );
    let mut data = app_session(n);
    data.insert("id_token".into(), Value::String(jwt));
    data
}

#[tokio::test]
async fn base64_of_text_stays_decoded_in_new_namespaces_and_older_ones_lift_it() {
    let server = common::server();
    let new = recorded_with(&server, "new", dictionary::ENCODED_TEXT_FORMAT).await;
    let older = recorded_with(&server, "older", dictionary::ENCODED_TEXT_FORMAT - 1).await;
    for (store, decoded) in [(&new, true), (&older, false)] {
        store
            .create_data(1, &with_id_token(1), in_an_hour(), || 0)
            .await
            .unwrap();
        let value = raw_value(&server, store, 1).await;
        let data_at = record_at(&value);
        assert_eq!(&value[data_at..data_at + 2], &[PACKED, 1]);
        // Lifted in both: the digest's 32 bytes, the csrf token's 64 hex
        // digits as 32 and the signature's 33. The older namespace lifts
        // the header and the claims too, as random base64url (the count
        // is then over 127, a varint of two bytes); the new one keeps
        // them decoded, which the older version's processes would not
        // read.
        let count = value[data_at + 2];
        if decoded {
            assert_eq!(count, 32 + 32 + 33);
        } else {
            assert!(count & 0x80 != 0, "{count}");
        }
        assert_eq!(
            store.load_data(1).await.unwrap().unwrap().0,
            with_id_token(1)
        );
    }
    // A process of this version that never held the dictionary reads both.
    for namespace in ["new", "older"] {
        let reader = store(&server, CompactConfig::new(4).with_namespace(namespace)).await;
        assert_eq!(
            reader.load_data(1).await.unwrap().unwrap().0,
            with_id_token(1)
        );
    }
}

#[tokio::test]
async fn owners_stay_readable_to_the_user_index_when_data_is_packed() {
    let server = common::server();
    let config = CompactConfig::new(4).with_user_index(common::users::config());
    let packing = store(&server, config)
        .await
        .with_dictionary(&trained(1))
        .await
        .unwrap();
    let mut ids = Vec::new();
    for n in 0..6u64 {
        // Three sessions of user 1,000,001, three of others.
        let user = if n % 2 == 0 { 1 } else { 10 + n };
        let id = packing
            .create_data(0, &app_session(user), in_an_hour(), || 0)
            .await
            .unwrap();
        ids.push((id, user));
    }
    let owner = Identity::from(1_000_001u64);
    assert_eq!(packing.sessions_of(&owner).await.unwrap().len(), 3);
    let revoked = packing.revoke_all(&owner).await.unwrap();
    assert_eq!(revoked.removed, 3);
    for (id, user) in ids {
        let live = packing.load_data(id).await.unwrap();
        assert_eq!(live.is_some(), user != 1, "session of user {user}");
    }
}

/// A typed session as an app's `Store` keeps it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct AppAttrs {
    csrf: String,
    locale: String,
    flash: Option<String>,
}

fn app_attrs(n: u64) -> AppAttrs {
    let data = app_session(n);
    AppAttrs {
        csrf: data["csrf_token"].as_str().unwrap().to_owned(),
        locale: data["locale"].as_str().unwrap().to_owned(),
        flash: Some(data["flash"].as_str().unwrap().to_owned()),
    }
}

#[tokio::test]
async fn typed_stores_pack_their_attributes_too() {
    let server = common::server();
    let samples: Vec<Vec<u8>> = (10_000..11_000)
        .map(|n| {
            let record = sessionpack::session::record::encode(&n, &app_attrs(n)).unwrap();
            let (_, attrs) = sessionpack::session::record::split(&record).unwrap();
            attrs.to_vec()
        })
        .collect();
    let dict = Dictionary::train(2, &samples, 4096).unwrap();
    let layout = sessionpack::Compact::new(common::manager(&server).await, CompactConfig::new(4))
        .await
        .unwrap();
    let plain: sessionpack::Store<_, AppAttrs> = sessionpack::Store::new(layout.clone());
    let packing: sessionpack::Store<_, AppAttrs> =
        sessionpack::Store::new(layout.with_dictionary(&dict).await.unwrap());
    let mut raw = common::raw(&server).await;
    for n in 0..20u64 {
        let session = packing.create(1_000_000 + n, app_attrs(n)).await.unwrap();
        let scheme = packing.layout().scheme();
        let bucket = packing.layout().buckets().bucket_of(&session.id);
        let value: Vec<u8> = raw
            .hget(
                scheme.bucket_key(bucket),
                packing.layout().buckets().field(&session.id),
            )
            .await
            .unwrap();
        // Expiry, then the identity (a uint32: 5 bytes), then packed data.
        let data_at = record_at(&value) + 5;
        assert_eq!(value[data_at], PACKED, "{value:?}");
        for reader in [&packing, &plain] {
            let loaded = reader.load(&session.id).await.unwrap().unwrap();
            assert_eq!(
                (loaded.identity, loaded.attrs),
                (1_000_000 + n, app_attrs(n))
            );
        }
        // An update reads packed data and writes it packed again.
        let updated = packing
            .update(&session.id, |a| a.flash = None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(updated.attrs.flash, None);
        let loaded = plain.load(&session.id).await.unwrap().unwrap();
        assert_eq!(
            loaded.attrs,
            AppAttrs {
                flash: None,
                ..app_attrs(n)
            }
        );
    }
}

/// A store on the default namespace learning from its first `samples`
/// writes.
async fn learning(server: &LocalServer, samples: usize) -> Store {
    let learning = dictionary::Learning {
        samples,
        ..dictionary::Learning::default()
    };
    store(
        server,
        CompactConfig::new(4).with_learned_dictionary(learning),
    )
    .await
}

/// Whether the session's stored data is packed, and with which id.
async fn packed_with(server: &LocalServer, store: &Store, id: i128) -> Option<u8> {
    let value = raw_value(server, store, id).await;
    let data_at = record_at(&value);
    (value[data_at] == PACKED).then(|| value[data_at + 1])
}

#[tokio::test]
async fn a_store_learns_its_dictionary_from_its_first_writes_and_shares_it() {
    let server = common::server();
    let learned = dictionary::Learning::default().id;
    let first = learning(&server, 200).await;
    let second = learning(&server, 200).await;
    // Short data is no sample: it would never be packed.
    let short: HashMap<String, Value> = serde_json::from_value(json!({"u": 1})).unwrap();
    for id in 0..300 {
        first
            .create_data(id, &short, in_an_hour(), || 0)
            .await
            .unwrap();
    }
    for n in 0..199u64 {
        first
            .create_data(1000 + i128::from(n), &app_session(n), in_an_hour(), || 0)
            .await
            .unwrap();
    }
    assert_eq!(first.dictionary_id(), None);
    let mut raw = common::raw(&server).await;
    let key = dictionary::key("sp", learned);
    assert!(!raw.exists::<_, bool>(&key).await.unwrap());
    assert_eq!(packed_with(&server, &first, 1198).await, None);
    // The 200th sample completes the training; its own write is packed.
    first
        .create_data(1199, &app_session(199), in_an_hour(), || 0)
        .await
        .unwrap();
    assert_eq!(first.dictionary_id(), Some(learned));
    assert!(raw.exists::<_, bool>(&key).await.unwrap());
    assert_eq!(packed_with(&server, &first, 1199).await, Some(learned));
    // A process still collecting adopts it when it reads a record packed
    // with it; one opened now packs with it from the start.
    assert_eq!(second.dictionary_id(), None);
    assert_eq!(
        second.load_data(1199).await.unwrap().unwrap().0,
        app_session(199)
    );
    assert_eq!(second.dictionary_id(), Some(learned));
    let third = learning(&server, 200).await;
    assert_eq!(third.dictionary_id(), Some(learned));
    third
        .create_data(5000, &app_session(5000), in_an_hour(), || 0)
        .await
        .unwrap();
    assert_eq!(packed_with(&server, &third, 5000).await, Some(learned));
    // Records written before it and after it read back in every process.
    for store in [&first, &second, &third] {
        for n in [0u64, 198, 199] {
            let id = 1000 + i128::from(n);
            assert_eq!(
                store.load_data(id).await.unwrap().unwrap().0,
                app_session(n)
            );
        }
        assert_eq!(store.load_data(7).await.unwrap().unwrap().0, short);
        assert_eq!(
            store.load_data(5000).await.unwrap().unwrap().0,
            app_session(5000)
        );
    }
    // A session written before is packed when next saved.
    assert!(
        first
            .save_data(1000, &app_session(0), in_an_hour())
            .await
            .unwrap()
    );
    assert_eq!(packed_with(&server, &first, 1000).await, Some(learned));
}

#[tokio::test]
async fn processes_learning_at_once_settle_on_one_dictionary() {
    let server = common::server();
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(learning(&server, 100).await);
    }
    // Each process trains its own, and offers it; the first stored wins.
    let mut writers = tokio::task::JoinSet::new();
    for (p, store) in stores.iter().enumerate() {
        let store = store.clone();
        writers.spawn(async move {
            for n in 0..100u64 {
                let id = i128::from(p as u64 * 1000 + n);
                store
                    .create_data(id, &app_session(id as u64), in_an_hour(), || 0)
                    .await
                    .unwrap();
            }
        });
    }
    writers.join_all().await;
    for (p, writer) in stores.iter().enumerate() {
        assert_eq!(writer.dictionary_id(), Some(255), "process {p}");
        let id = 9000 + p as i128;
        writer
            .create_data(id, &app_session(id as u64), in_an_hour(), || 0)
            .await
            .unwrap();
        assert_eq!(packed_with(&server, writer, id).await, Some(255));
        // What one packs, every other reads: they pack with one dictionary.
        for reader in &stores {
            assert_eq!(
                reader.load_data(id).await.unwrap().unwrap().0,
                app_session(id as u64)
            );
        }
    }
}

#[tokio::test]
async fn learning_is_refused_where_its_dictionary_could_be_evicted() {
    let server = common::server();
    common::set_eviction_policy(&server, "allkeys-lru");
    let learning = CompactConfig::new(4).with_learned_dictionary(Default::default());
    let refused = TowerStore::new(common::manager(&server).await, learning).await;
    assert!(
        matches!(&refused, Err(Error::Config(m)) if m.contains("allkeys-lru")),
        "{refused:?}"
    );
    // Policies that evict only keys with an expiry never take it.
    common::set_eviction_policy(&server, "volatile-lru");
    let learning = CompactConfig::new(4).with_learned_dictionary(Default::default());
    assert!(
        TowerStore::new(common::manager(&server).await, learning)
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn absurd_learning_settings_are_refused_before_anything_is_written() {
    let server = common::server();
    let base = dictionary::Learning::default();
    for learning in [
        dictionary::Learning {
            id: 0,
            ..base.clone()
        },
        dictionary::Learning {
            samples: 0,
            ..base.clone()
        },
        dictionary::Learning {
            samples: usize::MAX,
            ..base.clone()
        },
        dictionary::Learning {
            max_bytes: 0,
            ..base.clone()
        },
        dictionary::Learning {
            max_bytes: usize::MAX,
            ..base.clone()
        },
    ] {
        let config = CompactConfig::new(4)
            .with_namespace("absurd")
            .with_learned_dictionary(learning.clone());
        let refused = TowerStore::new(common::manager(&server).await, config).await;
        assert!(
            matches!(refused, Err(Error::Config(_))),
            "{learning:?}: {refused:?}"
        );
    }
    let mut raw = common::raw(&server).await;
    let dictionaries: Vec<String> = raw.keys("absurd:dict:*").await.unwrap();
    assert!(dictionaries.is_empty(), "{dictionaries:?}");
}

#[tokio::test]
async fn a_process_whose_samples_are_done_adopts_a_stored_dictionary_before_training() {
    let server = common::server();
    let first = learning(&server, 200).await;
    // Too few samples to train on (zstd refuses three): this process
    // packs only with what it finds stored.
    let late = learning(&server, 3).await;
    for n in 0..200u64 {
        first
            .create_data(i128::from(n), &app_session(n), in_an_hour(), || 0)
            .await
            .unwrap();
    }
    assert_eq!(first.dictionary_id(), Some(255));
    assert_eq!(late.dictionary_id(), None);
    for n in 1000..1003u64 {
        late.create_data(i128::from(n), &app_session(n), in_an_hour(), || 0)
            .await
            .unwrap();
    }
    assert_eq!(late.dictionary_id(), Some(255));
    assert_eq!(packed_with(&server, &late, 1002).await, Some(255));
    assert_eq!(
        first.load_data(1002).await.unwrap().unwrap().0,
        app_session(1002)
    );
}

#[tokio::test]
async fn a_refused_dictionary_is_not_offered_again_on_every_write() {
    let server = common::server();
    let store = learning(&server, 50).await;
    // Something else takes the key after the store opened.
    let mut raw = common::raw(&server).await;
    let _: () = raw
        .hset("sp:dict:255", "not", "a dictionary")
        .await
        .unwrap();
    for n in 0..50u64 {
        store
            .create_data(i128::from(n), &app_session(n), in_an_hour(), || 0)
            .await
            .unwrap();
    }
    assert_eq!(store.dictionary_id(), None);
    let sets = common::calls(&mut raw, "set").await;
    for n in 50..80u64 {
        store
            .create_data(i128::from(n), &app_session(n), in_an_hour(), || 0)
            .await
            .unwrap();
        assert_eq!(
            store.load_data(i128::from(n)).await.unwrap().unwrap().0,
            app_session(n)
        );
    }
    assert_eq!(
        common::calls(&mut raw, "set").await,
        sets,
        "no offer after the refusal"
    );
}

/// A server flushed (or restarted empty) under a running app: the store's
/// next sweep records the namespace's metadata and its dictionary again,
/// so the command-line tools find the namespace and a process starting
/// next packs with the same dictionary, not one learned anew under its id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushed_namespace_is_recorded_again_by_the_next_sweep() {
    let server = common::server();
    let (store, dictionary) = packing(&server, CompactConfig::default(), 9).await;
    let recorded = StoreMeta::read(store.layout().connection(), "sp")
        .await
        .unwrap()
        .expect("recorded at open");
    let mut raw = common::raw(&server).await;
    let () = redis::cmd("FLUSHALL")
        .arg("SYNC")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(
        StoreMeta::read(&raw, "sp").await.unwrap().is_none(),
        "flushed"
    );
    store.sweep().await.unwrap();
    assert_eq!(StoreMeta::read(&raw, "sp").await.unwrap(), Some(recorded));
    let stored = Dictionary::fetch(&raw, "sp", 9).await.unwrap();
    assert_eq!(
        stored.map(|d| d.bytes().to_vec()),
        Some(dictionary.bytes().to_vec())
    );
    // A second sweep finds them there and writes nothing.
    assert!(!store.layout().record_again_if_gone().await.unwrap());
}
