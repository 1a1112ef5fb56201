//! `sessionpack migrate` against sessions the real peer crate
//! (tower-sessions-redis-store 0.16) wrote to a real server.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::collections::{BTreeMap, HashMap};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use redis::aio::ConnectionManager;
use serde_json::{Value, json};
use sessionpack_testkit::LocalServer;
use time::OffsetDateTime;
use tower_sessions_core_014::SessionStore;
use tower_sessions_core_014::session::{Id, Record};
use tower_sessions_redis_store::RedisStore;
use tower_sessions_redis_store::fred::clients::Client;
use tower_sessions_redis_store::fred::prelude::{ClientLike, Config};

use sessionpack::CompactConfig;
use sessionpack::identity::Identity;
use sessionpack::session::dictionary::Dictionary;
use sessionpack::takeover::Source;
use sessionpack::tower::{TowerStore, tower_id};
use sessionpack::users::UserIndexConfig;
use sessionpack_cli::migrate::{self, Plan, Report};

/// The peer store on `server`, as its docs set it up.
async fn peer(server: &LocalServer) -> RedisStore<Client> {
    let client = Client::new(Config::from_url(&server.url()).unwrap(), None, None, None);
    client.init().await.expect("fred connects");
    RedisStore::new(client)
}

/// Session data of several shapes: an axum-login session, one with a csrf
/// token, locale and flash, one long enough to go out of line, one of
/// nested values.
fn data_of(n: u64) -> HashMap<String, Value> {
    let login = json!({"user_id": n, "auth_hash": vec![n as u8; 32]});
    let mut data = HashMap::from([("axum-login.data".to_owned(), login)]);
    match n % 4 {
        1 => {
            data.insert("csrf".into(), json!(format!("{n:064x}")));
            data.insert("locale".into(), json!("de-CH"));
            data.insert("flash".into(), json!(["saved", n]));
        }
        2 => {
            data.insert("note".into(), json!("x".repeat(300 + n as usize % 50)));
        }
        3 => {
            data.insert(
                "cart".into(),
                json!({"items": [{"sku": n, "qty": 2}], "total": 9.5}),
            );
        }
        _ => {}
    }
    data
}

/// Creates `count` peer sessions with expiries spread over a day; returns
/// their records.
async fn fill(peer: &RedisStore<Client>, count: u64) -> Vec<Record> {
    let now = OffsetDateTime::now_utc().unix_timestamp();
    let mut records = Vec::new();
    for n in 0..count {
        let mut record = Record {
            id: Id::default(),
            data: data_of(n),
            expiry_date: OffsetDateTime::from_unix_timestamp(now + 600 + (n as i64 * 97) % 86_400)
                .unwrap(),
        };
        peer.create(&mut record).await.unwrap();
        records.push(record);
    }
    records
}

async fn tower_store(server: &LocalServer) -> TowerStore<ConnectionManager> {
    TowerStore::new(common::manager(server).await, CompactConfig::new(6))
        .await
        .unwrap()
}

fn plan() -> Plan {
    Plan {
        source: Source::tower_sessions_redis_store(),
        dry_run: false,
        delete_copied: false,
        batch: 64,
        restart: false,
        stop_after_batches: None,
    }
}

async fn migrate_with(server: &LocalServer, plan: &Plan) -> Report {
    let store = tower_store(server).await;
    migrate::run(common::manager(server).await, store, plan, |_| {})
        .await
        .expect("migrate")
}

/// Every record loads from the store with its data and its expiry second.
async fn assert_in_store(store: &TowerStore<ConnectionManager>, records: &[Record]) {
    for record in records {
        let loaded = SessionStore::load(store, &record.id)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("session {} not in the store", record.id));
        assert_eq!(loaded.data, record.data);
        assert_eq!(
            loaded.expiry_date.unix_timestamp(),
            record.expiry_date.unix_timestamp()
        );
    }
}

/// Every key and its contents (strings and hashes), the migration's state
/// key left out.
async fn keyspace(server: &LocalServer) -> BTreeMap<Vec<u8>, Vec<Vec<u8>>> {
    let mut raw = common::raw(server).await;
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut raw)
        .await
        .unwrap();
    let mut out = BTreeMap::new();
    for key in keys {
        if key.windows(9).any(|w| w == b":migrate:") {
            continue;
        }
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(&mut raw)
            .await
            .unwrap();
        let mut contents: Vec<Vec<u8>> = match kind.as_str() {
            "string" => vec![
                redis::cmd("GET")
                    .arg(&key)
                    .query_async(&mut raw)
                    .await
                    .unwrap(),
            ],
            "hash" => redis::cmd("HGETALL")
                .arg(&key)
                .query_async(&mut raw)
                .await
                .unwrap(),
            "zset" => redis::cmd("ZRANGE")
                .arg(&key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query_async(&mut raw)
                .await
                .unwrap(),
            other => vec![other.as_bytes().to_vec()],
        };
        let ttl: i64 = redis::cmd("PEXPIRETIME")
            .arg(&key)
            .query_async(&mut raw)
            .await
            .unwrap();
        contents.push(ttl.to_string().into_bytes());
        out.insert(key, contents);
    }
    out
}

/// Keys the peer crate did not write: under an id-shaped name a value
/// that is no record, a hash, a record without expiry; and keys of other
/// data.
async fn write_junk(server: &LocalServer) -> Vec<String> {
    let mut raw = common::raw(server).await;
    let source = Source::tower_sessions_redis_store();
    let id = |b: u8| {
        source
            .key_of(&sessionpack::SessionId::from_slice(&[b; 16]).unwrap())
            .unwrap()
    };
    let (garbage, hash, persistent) = (id(1), id(2), id(3));
    let record = rmp_serde::to_vec(&Record {
        id: Id(5),
        data: data_of(5),
        expiry_date: OffsetDateTime::now_utc(),
    })
    .unwrap();
    let _: () = redis::pipe()
        .cmd("SET")
        .arg(&garbage)
        .arg("not msgpack")
        .arg("EX")
        .arg(3600)
        .cmd("HSET")
        .arg(&hash)
        .arg("f")
        .arg("v")
        .cmd("SET")
        .arg(&persistent)
        .arg(record)
        .cmd("SET")
        .arg("user:17")
        .arg("other data")
        .query_async(&mut raw)
        .await
        .unwrap();
    vec![garbage, hash, persistent, "user:17".into()]
}

mod close;
mod copy;
