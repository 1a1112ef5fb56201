//! `sessionpack migrate` and the takeover on a real 3+3 Redis Cluster, the
//! old store (tower-sessions-redis-store over fred) on the same cluster:
//! a copy that a reshard and a failover interrupt, and one that a reshard
//! runs beside; old and new instances side by side; a close stopped part
//! way and resumed; nothing lost, nothing left.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sessionpack::CompactConfig;
use sessionpack::conn::ConnectOptions;
use sessionpack::conn::cluster::{self, Cluster};
use sessionpack::identity::Identity;
use sessionpack::takeover::Source;
use sessionpack::tower::TowerStore;
use sessionpack::users::UserIndexConfig;
use sessionpack_cli::migrate::{self, Keyspace, Plan, Report};
use sessionpack_testkit::{LocalCluster, Role};
use time::OffsetDateTime;
use tower_sessions_core_014::SessionStore;
use tower_sessions_core_014::session::{Id, Record};
use tower_sessions_redis_store::RedisStore;
use tower_sessions_redis_store::fred::clients::Client;
use tower_sessions_redis_store::fred::prelude::{ClientLike, Config, ReconnectPolicy};

const SESSIONS: u64 = 400;

/// The old app's store on the cluster, as the peer's docs set it up over
/// fred's cluster client.
async fn peer(c: &LocalCluster) -> RedisStore<Client> {
    let port = c.primaries()[0].port();
    let config = Config::from_url(&format!("redis-cluster://127.0.0.1:{port}")).unwrap();
    let reconnect = ReconnectPolicy::new_constant(0, 100);
    let client = Client::new(config, None, None, Some(reconnect));
    client.init().await.expect("fred connects to the cluster");
    RedisStore::new(client)
}

fn config() -> CompactConfig {
    CompactConfig::new(6).with_user_index(UserIndexConfig::new(4))
}

async fn conn(c: &LocalCluster) -> Cluster {
    cluster::connect(&c.urls()).await.unwrap()
}

/// A store on the cluster, as `migrate` opens it, or with the takeover as
/// a new instance does.
async fn store(c: &LocalCluster, takeover: bool) -> TowerStore<Cluster> {
    let store = TowerStore::new(conn(c).await, config()).await.unwrap();
    if takeover {
        store
            .with_takeover(Source::tower_sessions_redis_store())
            .await
            .unwrap()
    } else {
        store
    }
}

fn plan(close: bool, stop_after: Option<u64>) -> Plan {
    Plan {
        source: Source::tower_sessions_redis_store(),
        dry_run: false,
        delete_copied: close,
        batch: 20,
        restart: false,
        stop_after_batches: stop_after,
    }
}

async fn run(c: &LocalCluster, plan: &Plan) -> Report {
    let keyspace = Keyspace::cluster(c.urls(), ConnectOptions::default())
        .await
        .unwrap();
    migrate::run_on(keyspace, conn(c).await, store(c, false).await, plan, |_| {})
        .await
        .unwrap()
}

fn record(n: u64) -> Record {
    let data: HashMap<String, Value> = HashMap::from([
        (
            "axum-login.data".to_owned(),
            json!({"user_id": n % 20, "auth_hash": vec![n; 32]}),
        ),
        ("visits".to_owned(), json!(0)),
    ]);
    Record {
        id: Id::default(),
        data,
        expiry_date: OffsetDateTime::from_unix_timestamp(
            OffsetDateTime::now_utc().unix_timestamp() + 3600,
        )
        .unwrap(),
    }
}

/// The old app's sessions, [`SESSIONS`] of them.
async fn fill(old: &RedisStore<Client>) -> Vec<Record> {
    let mut records = Vec::new();
    for n in 0..SESSIONS {
        let mut r = record(n);
        old.create(&mut r).await.unwrap();
        records.push(r);
    }
    records
}

fn same(a: &Record, b: &Record) -> bool {
    a.id == b.id
        && a.data == b.data
        && a.expiry_date.unix_timestamp() == b.expiry_date.unix_timestamp()
}

/// Every record loads from `store` as it is.
async fn all_held(store: &impl SessionStore, records: &[Record]) {
    for r in records {
        let loaded = store.load(&r.id).await.unwrap();
        assert!(
            loaded.as_ref().is_some_and(|l| same(l, r)),
            "{} is not as the old app left it: {loaded:?} against {r:?}",
            r.id
        );
    }
}

/// Keys of the old store's form (22 characters) on every primary.
async fn old_keys(c: &LocalCluster) -> usize {
    let mut n = 0;
    for node in c.primaries() {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("?".repeat(22))
            .query_async(&mut common::raw(node).await)
            .await
            .unwrap();
        n += keys.len();
    }
    n
}

/// Stops a primary by its process id and waits until its replica serves
/// its slots.
fn fail_over(c: &LocalCluster) {
    c.wait_in_sync(Duration::from_secs(30)).unwrap();
    let victim = c.primaries()[0];
    let replica = c
        .nodes()
        .iter()
        .find(|n| c.role(n) == Some(Role::Replica(victim.port())))
        .expect("the primary's replica");
    victim.stop();
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.role(replica) != Some(Role::Primary) {
        assert!(Instant::now() < deadline, "the replica never took over");
        std::thread::sleep(Duration::from_millis(50));
    }
    c.wait_until_ready(Duration::from_secs(30)).unwrap();
}

/// A copy stopped part way, the cluster resharded, resumed, a primary
/// failed over, resumed to the end: the slot map changed under it twice,
/// so it scanned again from the first primary each time, and every
/// session, with the old app's writes made meanwhile, is in the store. A
/// second pass beside a reshard that moves slots back finds them all
/// unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_a_reshard_and_a_failover_interrupt_loses_nothing() {
    let c = LocalCluster::start(3, 1).expect("a local 3+3 cluster");
    let old = peer(&c).await;
    let mut records = fill(&old).await;

    let first = run(&c, &plan(false, Some(3))).await;
    assert!(!first.complete, "{first:?}");
    for r in records.iter_mut().step_by(7) {
        r.data.insert("visits".into(), json!(1));
        old.save(r).await.unwrap();
    }
    let (from, to) = (c.primaries()[0].port(), c.primaries()[1].port());
    tokio::task::block_in_place(|| {
        let node = |port| c.nodes().iter().find(|n| n.port() == port).unwrap();
        c.reshard(node(from), node(to), 500).unwrap()
    });
    let second = run(&c, &plan(false, Some(3))).await;
    assert!(second.rescans >= 1, "the reshard went unseen: {second:?}");
    assert!(!second.complete);

    tokio::task::block_in_place(|| fail_over(&c));
    // fred keeps asking the stopped node; the old app's next process
    // connects afresh.
    let old = peer(&c).await;
    for r in records.iter_mut().step_by(5) {
        r.data.insert("visits".into(), json!(2));
        old.save(r).await.unwrap();
    }
    let last = run(&c, &plan(false, None)).await;
    assert!(last.complete, "{last:?}");
    assert!(last.rescans >= 2, "the failover went unseen: {last:?}");
    let copied = last.get("copied") + last.get("updated");
    assert!(copied >= SESSIONS, "{last:?}");
    all_held(&store(&c, false).await, &records).await;

    // A new pass while a reshard moves slots back.
    let reshard = {
        let (from, to) = (c.primaries()[1].port(), c.primaries()[0].port());
        let nodes: Vec<(u16, String)> = c
            .nodes()
            .iter()
            .filter_map(|n| Some((n.port(), c.node_id(n).ok()?)))
            .collect();
        std::thread::spawn(move || reshard_by_cli(&nodes, from, to, 300))
    };
    let again = run(&c, &plan(false, None)).await;
    reshard.join().unwrap();
    assert!(again.complete, "{again:?}");
    assert_eq!(again.get("copied"), 0, "{again:?}");
    all_held(&store(&c, false).await, &records).await;
    eprintln!(
        "rescans: {} then {} then {}, {}",
        first.rescans, second.rescans, last.rescans, again.rescans
    );
}

/// `redis-cli --cluster reshard` run from a thread of its own (the test's
/// cluster handle stays on the test's thread).
fn reshard_by_cli(nodes: &[(u16, String)], from: u16, to: u16, slots: u64) {
    let id = |port: u16| nodes.iter().find(|(p, _)| *p == port).unwrap().1.clone();
    let cli =
        std::env::var_os(sessionpack_testkit::REDIS_CLI_ENV).unwrap_or_else(|| "redis-cli".into());
    let out = std::process::Command::new(cli)
        .args(["--cluster", "reshard", &format!("127.0.0.1:{from}")])
        .args(["--cluster-from", &id(from), "--cluster-to", &id(to)])
        .args(["--cluster-slots", &slots.to_string(), "--cluster-yes"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The takeover on a cluster: new instances beside the old app see each
/// other's writes and deletes, "log out everywhere" reaches old keys in
/// many slots, and the close (`sessionpack migrate --cluster-url
/// --delete-copied`, killed part way, then run again) deletes every old
/// key, counts each once, and drops the marks and counters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_on_a_cluster_closes_with_nothing_left() {
    let c = LocalCluster::start(3, 1).expect("a local 3+3 cluster");
    let old = peer(&c).await;
    let mut records = fill(&old).await;
    let copy = run(&c, &plan(false, None)).await;
    assert_eq!(copy.get("copied"), SESSIONS, "{copy:?}");

    let new = store(&c, true).await;
    // Each side writes, the other loads it.
    for (i, r) in records.iter_mut().enumerate().take(60) {
        r.data.insert("visits".into(), json!(i));
        if i % 2 == 0 {
            new.save(r).await.unwrap();
            assert!(same(&old.load(&r.id).await.unwrap().unwrap(), r));
        } else {
            old.save(r).await.unwrap();
            assert!(same(&new.load(&r.id).await.unwrap().unwrap(), r));
        }
    }
    // Deletes hold on both sides.
    let gone_old = records.pop().unwrap();
    old.delete(&gone_old.id).await.unwrap();
    assert!(new.load(&gone_old.id).await.unwrap().is_none());
    let gone_new = records.pop().unwrap();
    new.delete(&gone_new.id).await.unwrap();
    assert!(old.load(&gone_new.id).await.unwrap().is_none());
    // Created on a new instance: an old one serves it.
    let mut fresh = record(1000);
    new.create(&mut fresh).await.unwrap();
    assert!(same(&old.load(&fresh.id).await.unwrap().unwrap(), &fresh));
    records.push(fresh);
    // User 3 logs out everywhere from a new instance: the old keys of
    // every session of theirs go, in whatever slots they lie.
    let revoked = new.revoke_all(&Identity::Int(3)).await.unwrap();
    let of_3: Vec<Record> = records
        .iter()
        .filter(|r| r.data["axum-login.data"]["user_id"] == json!(3))
        .cloned()
        .collect();
    assert_eq!(revoked.removed, of_3.len() as u64, "{revoked:?}");
    for r in &of_3 {
        assert!(old.load(&r.id).await.unwrap().is_none(), "old serves it");
        assert!(new.load(&r.id).await.unwrap().is_none(), "new serves it");
    }
    records.retain(|r| r.data["axum-login.data"]["user_id"] != json!(3));

    // The close, stopped after two batches, then resumed.
    let left = old_keys(&c).await;
    assert_eq!(left, records.len());
    // The close is killed once it has deleted some keys (or, on a machine
    // fast enough to finish first, not at all: the count must hold either
    // way), then run again.
    let seed = c.primaries()[0].url();
    let mut killed = std::process::Command::new(env!("CARGO_BIN_EXE_sessionpack"))
        .args(["migrate", "--cluster-url", &seed, "--delete-copied"])
        .args(["--batch", "5"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    loop {
        if killed.try_wait().unwrap().is_some() {
            break;
        }
        if old_keys(&c).await < left {
            killed.kill().unwrap();
            killed.wait().unwrap();
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    eprintln!(
        "the close stopped with {} of {left} old keys left",
        old_keys(&c).await
    );
    // The rest through the command, as an operator runs it.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sessionpack"))
        .args([
            "migrate",
            "--cluster-url",
            &seed,
            "--delete-copied",
            "--json",
        ])
        .args(["--batch", "20"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rest: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rest["complete"], true, "{rest}");
    assert_eq!(rest["closed"], true, "{rest}");
    assert_eq!(rest["deleted"], left as u64, "{rest}");
    assert_eq!(old_keys(&c).await, 0);
    for node in c.primaries() {
        let marks: Vec<String> = redis::cmd("KEYS")
            .arg("sp:*:m")
            .query_async(&mut common::raw(node).await)
            .await
            .unwrap();
        assert!(marks.is_empty(), "marks left: {marks:?}");
        let counters: Vec<String> = redis::cmd("KEYS")
            .arg("*:deleted")
            .query_async(&mut common::raw(node).await)
            .await
            .unwrap();
        assert!(counters.is_empty(), "counters left: {counters:?}");
    }
    all_held(&store(&c, true).await, &records).await;
    for r in &of_3 {
        assert!(new.load(&r.id).await.unwrap().is_none(), "revived");
    }
}
