//! Test support: a real `redis-server` per test, and the behaviour suite
//! every layout must pass.
#![allow(dead_code)]

pub mod suite;
pub mod users;
pub mod viewed;

use redis::aio::ConnectionManager;
use sessionpack::session::layout::Bucketed;
use sessionpack::session::layout::BucketedConfig;
use sessionpack_testkit::LocalServer;

/// A fresh server, stopped when dropped.
pub fn server() -> LocalServer {
    LocalServer::start().expect("start redis-server")
}

/// A server that speaks TLS only, or `None`, with the reason printed as a
/// `skipped:` line (which `scripts/test.sh` shows), where its binary was
/// built without TLS.
pub fn tls_server(
    certs: &sessionpack_testkit::TestCerts,
    client_certs: sessionpack_testkit::ClientCerts,
) -> Option<LocalServer> {
    match LocalServer::start_tls(certs, client_certs, &[]) {
        Ok(server) => Some(server),
        Err(sessionpack_testkit::Error::Unsupported(why)) => {
            eprintln!("skipped: {why}");
            None
        }
        Err(e) => panic!("start a TLS server: {e}"),
    }
}

/// A reconnecting connection to `server`.
pub async fn manager(server: &LocalServer) -> ConnectionManager {
    sessionpack::connect(&server.url()).await.expect("connect")
}

/// Waits until the server has answered every request already sent on
/// `conn` (a clone shares its connection, and replies come in order): a
/// future dropped part way may have left scripts in flight, and an audit
/// taken while they run would see a step half observed.
pub async fn drain(conn: &ConnectionManager) {
    let _: String = redis::cmd("PING")
        .query_async(&mut conn.clone())
        .await
        .expect("PING");
}

/// A plain connection for inspecting what the store wrote. Its replies
/// may take a minute (the client's default is half a second): a `SAVE` or
/// a full scan on a loaded machine is slow, not failed.
/// How the server keeps `key` (`OBJECT ENCODING`).
pub async fn encoding(raw: &mut redis::aio::MultiplexedConnection, key: &str) -> String {
    redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg(key)
        .query_async(raw)
        .await
        .unwrap()
}

pub async fn raw(server: &LocalServer) -> redis::aio::MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(std::time::Duration::from_secs(60)));
    server
        .client()
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("connect")
}

/// A bucketed layout with `2^bits` buckets on `server`.
pub async fn bucketed(server: &LocalServer, bits: u8) -> Bucketed<ConnectionManager> {
    Bucketed::new(manager(server).await, BucketedConfig::new(bits))
        .await
        .expect("bucketed layout")
}

/// What each count grew by since `before` (counts of [`calls`] taken in
/// the same order).
pub fn sent_since(before: &[u64], after: &[u64]) -> Vec<u64> {
    after.iter().zip(before).map(|(a, b)| a - b).collect()
}

/// Calls of `command` the server has counted (`INFO commandstats`).
pub async fn calls(conn: &mut redis::aio::MultiplexedConnection, command: &str) -> u64 {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

/// How many of `ids` load through `store` (are live sessions). A call
/// that fails with a transient error (a cluster still settling after a
/// reshard or a failover) is made again, up to twenty times: a session
/// counts as found or not, never as an error of the moment.
pub async fn found<L, A>(store: &sessionpack::Store<L, A>, ids: &[sessionpack::SessionId]) -> usize
where
    L: sessionpack::session::layout::Layout,
    A: serde::Serialize + serde::de::DeserializeOwned + Send + Sync,
{
    let mut attempts = 0;
    loop {
        match store.load_many(ids).await {
            Ok(loaded) => return loaded.iter().filter(|s| s.is_some()).count(),
            Err(e) if e.is_transient() && attempts < 20 => {
                attempts += 1;
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            }
            Err(e) => panic!("load_many: {e:?}"),
        }
    }
}

/// One pass each of `sweepers` sweepers over `layout`, run at once; their
/// reports.
pub async fn concurrent_passes<T, C>(
    layout: T,
    config: sessionpack::session::sweep::SweepConfig,
    sweepers: usize,
) -> Vec<sessionpack::session::sweep::PassReport>
where
    T: Into<sessionpack::session::sweep::SweepTarget<C>> + Clone,
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let passes: Vec<_> = (0..sweepers)
        .map(|_| {
            let s = sessionpack::session::sweep::Sweeper::new(layout.clone(), config.clone());
            tokio::spawn(async move { s.pass().await.unwrap() })
        })
        .collect();
    let mut reports = Vec::new();
    for p in passes {
        reports.push(p.await.unwrap());
    }
    reports
}

/// `INFO stats` field `total_commands_processed`.
pub async fn commands_processed(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("total_commands_processed")
}

/// Runs every suite test against one layout. `$make` is an async fn taking
/// `&LocalServer` and returning the layout; `$corrupt` is a
/// [`suite::Corrupter`] for it.
#[macro_export]
macro_rules! layout_suite {
    ($module:ident, $make:path, $corrupt:path) => {
        mod $module {
            use super::*;

            macro_rules! case {
                ($name:ident) => {
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn $name() {
                        let server = $crate::common::server();
                        let layout = $make(&server).await;
                        $crate::common::suite::$name(&server, layout).await;
                    }
                };
            }

            case!(round_trip);
            case!(bulk_round_trip);
            case!(expires_without_a_sweeper);
            case!(touch_rolls_expiry_forward);
            case!(update_and_save);
            case!(destroy_is_final);
            case!(rotate_moves_the_session);
            case!(concurrent_updates_lose_nothing);
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn corrupt_record_is_an_error() {
                let server = $crate::common::server();
                let layout = $make(&server).await;
                $crate::common::suite::corrupt_record_is_an_error(&server, layout, $corrupt).await;
            }
            case!(too_large_is_refused_before_redis);
            case!(hostile_ids_never_reach_redis);
            case!(survives_a_redis_restart);
            case!(absurd_lifetimes_are_refused);
            case!(rotate_keeps_a_touch_made_meanwhile);
            case!(identities_of_every_form);
            case!(lifetimes_idle_and_absolute);
        }
    };
}

/// Runs one command on `server` from synchronous code.
pub fn raw_command(server: &LocalServer, cmd: &redis::Cmd) {
    let mut conn = server.client().unwrap().get_connection().unwrap();
    let _: redis::Value = cmd.query(&mut conn).unwrap();
}

/// Sets the server's `maxmemory-policy`.
/// Sets `hash-max-listpack-entries`: a growing store splits its buckets
/// at half of it, so a small limit makes many splits of few sessions.
pub fn set_hash_entries(server: &LocalServer, entries: u64) {
    raw_command(
        server,
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("hash-max-listpack-entries")
            .arg(entries),
    );
}

pub fn set_eviction_policy(server: &LocalServer, policy: &str) {
    raw_command(
        server,
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory-policy")
            .arg(policy),
    );
}

/// What an audit of a bucketed namespace found out of step.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Audit {
    /// HASH fields with no expiry entry in their bucket's ZSET.
    pub fields_without_expiry: u64,
    /// ZSET entries with no HASH field.
    pub expiries_without_field: u64,
    /// Out-of-line record keys whose bucket holds no marker for them.
    pub records_without_entry: u64,
    /// Live sessions: entries in both keys.
    pub sessions: u64,
}

/// Reads every bucket and out-of-line key of `b` and counts what is out of
/// step. Buckets whose keys hold another type are passed over.
pub async fn audit(
    raw: &mut redis::aio::MultiplexedConnection,
    b: &sessionpack::session::buckets::Buckets,
) -> Audit {
    use std::collections::HashSet;
    let mut audit = Audit::default();
    for bucket in 0..b.count() {
        let fields: redis::RedisResult<Vec<Vec<u8>>> = redis::cmd("HKEYS")
            .arg(b.hash_key(bucket))
            .query_async(raw)
            .await;
        let members: redis::RedisResult<Vec<Vec<u8>>> = redis::cmd("ZRANGE")
            .arg(b.zset_key(bucket))
            .arg(0)
            .arg(-1)
            .query_async(raw)
            .await;
        let (Ok(fields), Ok(members)) = (fields, members) else {
            continue;
        };
        let fields: HashSet<Vec<u8>> = fields.into_iter().collect();
        let members: HashSet<Vec<u8>> = members.into_iter().collect();
        audit.fields_without_expiry += fields.difference(&members).count() as u64;
        audit.expiries_without_field += members.difference(&fields).count() as u64;
        audit.sessions += fields.intersection(&members).count() as u64;
    }
    let pattern = format!("{}:{{*}}:o:*", b.namespace());
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(&pattern)
        .query_async(raw)
        .await
        .unwrap();
    for key in keys {
        let (head, field_hex) = key.rsplit_once(":o:").unwrap();
        let tag = &head[head.find('{').unwrap() + 1..head.find('}').unwrap()];
        let bucket = u32::from_str_radix(tag, 16).unwrap();
        let field = hex::decode(field_hex).unwrap();
        let marker: Option<Vec<u8>> = redis::cmd("HGET")
            .arg(b.hash_key(bucket))
            .arg(&field)
            .query_async(raw)
            .await
            .unwrap_or(None);
        if marker.as_deref() != Some(&[0xc1]) {
            audit.records_without_entry += 1;
        }
    }
    audit
}

/// A TCP link to `server` that holds every chunk it carries, either way,
/// for `delay`: a process far from Redis, whose steps another process can
/// overtake. Stops with the test's runtime.
pub async fn slow_link(server: &LocalServer, delay: std::time::Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let target = server.url();
    let addr = target
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_owned();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(upstream) = tokio::net::TcpStream::connect(&addr).await else {
                continue;
            };
            let (cr, cw) = client.into_split();
            let (ur, uw) = upstream.into_split();
            let pump = |mut from: tokio::net::tcp::OwnedReadHalf,
                        mut to: tokio::net::tcp::OwnedWriteHalf| async move {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n) = from.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    tokio::time::sleep(delay).await;
                    if to.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            };
            tokio::spawn(pump(cr, uw));
            tokio::spawn(pump(ur, cw));
        }
    });
    format!("redis://127.0.0.1:{port}/")
}

/// A command written as words, as `sessionpack acl` prints one.
pub fn words(line: &str) -> redis::Cmd {
    let mut words = line.split_whitespace();
    let mut cmd = redis::cmd(words.next().unwrap_or_default());
    for word in words {
        cmd.arg(word);
    }
    cmd
}
