//! The least-privilege ACL rule of each role (`sessionpack::acl`), tested
//! with a restricted user on a real server: the role's work succeeds, and
//! commands and keys outside its rule are refused by the server.

mod common;

use std::time::Duration;

use sessionpack::acl::{Role, Topology, rule, rule_for};
use sessionpack::session::sweep::{SweepConfig, Sweeper};
use sessionpack::takeover::Source;
use sessionpack::users::UserIndexConfig;
use sessionpack::viewed::ViewedConfig;
use sessionpack::{Compact, CompactConfig, Error, IdWidth, Store};
use sessionpack_testkit::LocalServer;

const NAMESPACE: &str = "app1";

fn config() -> CompactConfig {
    CompactConfig::new(4)
        .with_namespace(NAMESPACE)
        .with_user_index(UserIndexConfig {
            bits: 2,
            grace_secs: 1,
            skew_secs: 1,
        })
        .with_viewed(ViewedConfig::new(10, 8))
}

/// Makes user `name` with `role`'s rule for [`NAMESPACE`]; returns its
/// URL.
async fn user(server: &LocalServer, name: &str, roles: &[Role]) -> String {
    let text = rule(roles, NAMESPACE, Topology::Server);
    let () = setuser(name, &text)
        .query_async(&mut common::raw(server).await)
        .await
        .unwrap();
    format!("redis://{name}:{PASSWORD}@127.0.0.1:{}/", server.port())
}

const PASSWORD: &str = "pw-of-the-test";

/// `ACL SETUSER name reset on >PASSWORD <rule>`.
fn setuser(name: &str, rule: &str) -> redis::Cmd {
    common::words(&format!("ACL SETUSER {name} reset on >{PASSWORD} {rule}"))
}

/// What the app does through its store: every operation of sessions,
/// the user index and viewed items.
async fn app_work(url: &str) -> sessionpack::Result<()> {
    let conn = sessionpack::connect(url).await?;
    let layout = Compact::new(conn, config()).await?;
    let store: Store<_, String> = Store::new(layout)
        .without_sweeper()
        .with_ttl(Duration::from_secs(600));
    let mut session = store.create(7, "a".into()).await?;
    let other = store.create(7, "b".into()).await?;
    let brief = store
        .create_with_ttl(8, "c".into(), Duration::from_secs(1))
        .await?;
    assert!(store.load(&session.id).await?.is_some());
    session.attrs = "a2".into();
    assert!(store.save(&session).await?);
    store.touch(&session.id).await?;
    store.update(&session.id, |a| a.push('!')).await?;
    let rotated = store.rotate(&session.id).await?.expect("rotated");
    store.load_many(&[rotated, other.id]).await?;
    store.view(&rotated, &42u64).await?;
    assert_eq!(store.viewed::<u64>(&rotated).await?, Some(vec![42]));
    assert_eq!(store.sessions_of(&7).await?.len(), 2);
    store.revoke_others(&7, &rotated).await?;
    store.revoke_all(&7).await?;
    store.destroy(&brief.id).await?;
    // Records in pieces and out of line, read and removed by a process
    // that never saw them: the paths that read or remove several keys in
    // one step.
    let elsewhere: Store<_, String> =
        Store::new(Compact::new(sessionpack::connect(url).await?, config()).await?)
            .without_sweeper();
    for len in [200, 2_000] {
        let big = store.create(9, noise(len)).await?;
        let read = elsewhere.load(&big.id).await?.expect("live");
        assert_eq!(read.attrs.len(), len);
        elsewhere.destroy(&big.id).await?;
        assert!(store.load(&big.id).await?.is_none());
    }
    Ok(())
}

/// `len` letters that do not compress (a record packed small would stay
/// in its value).
fn noise(len: usize) -> String {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'a' + (x % 26) as u8)
        })
        .collect()
}

/// What the sweeper does: passes over every bucket (reclaiming expired
/// sessions and their index entries), and its leases.
async fn sweeper_work(url: &str) -> sessionpack::Result<u64> {
    let conn = sessionpack::connect(url).await?;
    let layout = Compact::new(conn, config()).await?;
    let sweeper = Sweeper::new(layout, SweepConfig::default().with_max_sessions(1_000));
    let report = sweeper.pass().await?;
    sweeper.enforce_cap().await?;
    sweeper.release_leases().await?;
    Ok(report.reclaimed)
}

/// What `sessionpack users` does: list a user's sessions, revoke them,
/// audit the index.
async fn users_work(url: &str) -> sessionpack::Result<()> {
    let conn = sessionpack::connect(url).await?;
    let layout = Compact::new(conn, config()).await?;
    let store: Store<_, String> = Store::new(layout.clone()).without_sweeper();
    assert_eq!(store.sessions_of(&5).await?.len(), 1);
    store.revoke_all(&5).await?;
    layout.audit_users().await?;
    Ok(())
}

/// Whether `result` is the server refusing a command or key under the
/// user's ACL rule (`NOPERM`).
fn refused<T: std::fmt::Debug>(result: &redis::RedisResult<T>) -> bool {
    matches!(result, Err(e) if e.code() == Some("NOPERM"))
}

/// Commands and keys no role has: each is refused.
async fn outside_every_rule(url: &str) {
    let mut conn = sessionpack::connect(url).await.unwrap();
    let attempts = [
        "SET other:x 1",
        "FLUSHALL ASYNC",
        "KEYS *",
        "CONFIG SET maxmemory-policy allkeys-lru",
        "EVAL return(1) 0",
        // Every step that must be atomic is a script: no role needs a
        // transaction.
        "MULTI",
        "SCRIPT FLUSH",
        &format!("PUBLISH {NAMESPACE}:c m"),
        "ACL LIST",
        "CLIENT LIST",
    ];
    for what in attempts {
        let reply: redis::RedisResult<redis::Value> =
            common::words(what).query_async(&mut conn).await;
        assert!(refused(&reply), "{what} was not refused: {reply:?}");
    }
    // A script reaching outside the namespace is refused inside the
    // script too; the rule cannot be escaped through EVALSHA.
    let mut admin_conn = conn.clone();
    let sha: redis::RedisResult<String> = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return redis.call('SET', 'other:y', 1)")
        .query_async(&mut admin_conn)
        .await;
    let sha = sha.expect("SCRIPT LOAD is granted");
    let reply: redis::RedisResult<redis::Value> = redis::cmd("EVALSHA")
        .arg(&sha)
        .arg(0)
        .query_async(&mut conn)
        .await;
    assert!(
        reply.is_err(),
        "a script wrote outside the namespace: {reply:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_works_within_its_rule_and_nothing_else() {
    let server = common::server();
    let store_url = user(&server, "app", &[Role::Store]).await;
    let sweeper_url = user(&server, "sweeper", &[Role::Sweeper]).await;
    let users_url = user(&server, "ops", &[Role::Users]).await;

    app_work(&store_url)
        .await
        .expect("the store's work under its rule");

    // Sessions for the sweeper to reclaim and the users command to list.
    let conn = sessionpack::connect(&store_url).await.unwrap();
    let store: Store<_, String> =
        Store::new(Compact::new(conn, config()).await.unwrap()).without_sweeper();
    let brief = store
        .create_with_ttl(9, "x".into(), Duration::from_secs(1))
        .await
        .unwrap();
    store.create(5, "y".into()).await.unwrap();
    while store.load(&brief.id).await.unwrap().is_some() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The sweeper reclaims it once the server's clock is past its expiry
    // and the index's grace; a pass that finds it not yet due is run again.
    let mut reclaimed = 0;
    while reclaimed == 0 {
        reclaimed = sweeper_work(&sweeper_url)
            .await
            .expect("the sweeper's work under its rule");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    users_work(&users_url)
        .await
        .expect("the users command's work under its rule");

    for url in [&store_url, &sweeper_url, &users_url] {
        outside_every_rule(url).await;
    }

    // The sweeper's rule does not let it create sessions: the store's
    // own scripts are refused at a command the sweeper has no need of,
    // and the refusal is typed.
    let denied = app_work(&sweeper_url).await;
    assert!(matches!(&denied, Err(Error::NoPermission(_))), "{denied:?}");
    let mut conn = sessionpack::connect(&sweeper_url).await.unwrap();
    let outside = sessionpack::Error::from(
        redis::cmd("GET")
            .arg("other:x")
            .query_async::<Option<String>>(&mut conn)
            .await
            .unwrap_err(),
    );
    assert!(matches!(outside, Error::NoPermission(_)), "{outside:?}");
}

/// The rule for a cluster adds the cluster client's own commands; a
/// store on a local cluster works as a restricted user.
#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_user_needs_the_cluster_rule() {
    let cluster = sessionpack_testkit::LocalCluster::start(3, 0).unwrap();
    for (topology, name) in [
        (Topology::Server, "plain"),
        (Topology::Cluster, "clustered"),
    ] {
        let text = rule(&[Role::Store, Role::Sweeper], NAMESPACE, topology);
        for node in cluster.nodes() {
            let mut admin = node.client().unwrap().get_connection().unwrap();
            let () = setuser(name, &text).query(&mut admin).unwrap();
        }
    }
    let seeds = |name: &str| -> Vec<String> {
        cluster
            .nodes()
            .iter()
            .map(|n| format!("redis://{name}:{PASSWORD}@127.0.0.1:{}/", n.port()))
            .collect()
    };
    let without = sessionpack::conn::cluster::connect(&seeds("plain")).await;
    assert!(
        without.is_err(),
        "a cluster client ran without CLUSTER SLOTS"
    );
    let conn = sessionpack::conn::cluster::connect(&seeds("clustered"))
        .await
        .unwrap();
    let layout = Compact::new(conn, config()).await.unwrap();
    let store: Store<_, String> = Store::new(layout.clone()).without_sweeper();
    let mut ids = Vec::new();
    for user in 0..50u64 {
        ids.push(store.create(user, "v".into()).await.unwrap().id);
    }
    assert!(
        store
            .load_many(&ids)
            .await
            .unwrap()
            .iter()
            .all(Option::is_some)
    );
    Sweeper::new(layout, SweepConfig::default())
        .pass()
        .await
        .unwrap();
    let primaries = sessionpack::conn::Endpoint::Cluster(seeds("clustered"))
        .primaries(&Default::default())
        .await
        .unwrap();
    assert_eq!(primaries.len(), 3);
    assert!(
        primaries
            .iter()
            .all(|u| u.contains(&format!("clustered:{PASSWORD}@"))),
        "{primaries:?}"
    );
}

/// The guide's production chapter shows each role's rule as the library makes it.
#[test]
fn the_guide_shows_each_rule() {
    let guide = include_str!("../docs/guide/production.md");
    let old_keys = [Source::tower_sessions_redis_store().key_glob(IdWidth::Bits128)];
    for role in Role::ALL {
        let old_keys = if role.needs_old_keys() {
            &old_keys[..]
        } else {
            &[]
        };
        let text = rule_for(&[role], "sp", old_keys, Topology::Server);
        assert!(
            guide.contains(&format!("```text\n{text}\n```")),
            "docs/guide/production.md lacks the {} rule: {text}",
            role.name()
        );
    }
}

/// A growing store's splits run under the store's rule, and its merges and
/// the splits its writes left under the sweeper's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_growing_store_splits_and_merges_within_the_rules() {
    let server = common::server();
    common::set_hash_entries(&server, 8);
    let config = || CompactConfig::growing().with_namespace(NAMESPACE);
    let store_url = user(&server, "app", &[Role::Store]).await;
    let sweeper_url = user(&server, "sweeper", &[Role::Sweeper]).await;
    let conn = sessionpack::connect(&store_url).await.unwrap();
    let layout = Compact::new(conn, config()).await.unwrap();
    let store: Store<_, String> = Store::new(layout.clone()).without_sweeper();
    let mut brief = Vec::new();
    for n in 0..300u64 {
        let s = store
            .create_with_ttl(n, "x".into(), Duration::from_secs(1))
            .await
            .unwrap();
        brief.push(s.id);
    }
    let kept = store.create(1, "kept".into()).await.unwrap();
    let shape = layout.shape().unwrap();
    let mut buckets = 0;
    for group in 0..shape.group_count() {
        buckets += layout.group_buckets(group).await.unwrap().len();
    }
    assert!(buckets > 2 * shape.group_count() as usize, "{buckets}");
    while store.load(&brief[brief.len() - 1]).await.unwrap().is_some() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let conn = sessionpack::connect(&sweeper_url).await.unwrap();
    let sweeper = Sweeper::new(
        Compact::new(conn, config()).await.unwrap(),
        SweepConfig::default(),
    );
    let report = sweeper.sweep_range(0..sweeper.units()).await.unwrap();
    assert!(report.merges > 0);
    assert!(store.load(&kept.id).await.unwrap().is_some());

    // Buckets a store left over the threshold (opened at a higher limit,
    // its writes split above it) are the sweeper's to split: under its
    // own rule too.
    common::set_hash_entries(&server, 512);
    let conn = sessionpack::connect(&store_url).await.unwrap();
    let roomy: Store<_, String> =
        Store::new(Compact::new(conn, config()).await.unwrap()).without_sweeper();
    let mut held = Vec::new();
    for n in 0..200u64 {
        held.push(roomy.create(n, "held".into()).await.unwrap().id);
    }
    common::set_hash_entries(&server, 8);
    let conn = sessionpack::connect(&sweeper_url).await.unwrap();
    let sweeper = Sweeper::new(
        Compact::new(conn, config()).await.unwrap(),
        SweepConfig::default(),
    );
    let report = sweeper.sweep_range(0..sweeper.units()).await.unwrap();
    assert!(report.splits > 0, "{report:?}");
    for id in &held {
        assert!(store.load(id).await.unwrap().is_some());
    }
}

/// A sweeper whose user lacks one command of its rule, whichever: its pass
/// either fails as `NoPermission` (the connection's trouble, not a bad
/// bucket's) or has done all its work: the expired sessions reclaimed and
/// the cap enforced. Never a pass that reports success around a refusal
/// (a cap left unenforced, sessions left expired).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweeper_one_command_short_fails_typed_or_does_all_its_work() {
    let server = common::server();
    let mut admin = common::raw(&server).await;
    let mut short: Vec<&str> = Role::Sweeper.commands().to_vec();
    short.extend(["time", "evalsha", "config|get"]);
    // Each case in its own namespace: 3 live sessions and 2 expired ones.
    let mut cases = Vec::new();
    let mut brief_ids = Vec::new();
    for (i, &command) in short.iter().enumerate() {
        let namespace = format!("short{i}");
        let conn = sessionpack::connect(&server.url()).await.unwrap();
        let layout = Compact::new(conn, config().with_namespace(namespace.clone()))
            .await
            .unwrap();
        let store: Store<_, String> = Store::new(layout).without_sweeper();
        let mut live = Vec::new();
        for owner in 0..3u64 {
            live.push(store.create(owner, "live".into()).await.unwrap().id);
        }
        for owner in 3..5u64 {
            let brief = store
                .create_with_ttl(owner, "brief".into(), Duration::from_secs(1))
                .await
                .unwrap();
            brief_ids.push((store.clone(), brief.id));
        }
        cases.push((command, namespace, store, live));
    }
    for (store, id) in &brief_ids {
        while store.load(id).await.unwrap().is_some() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    for (command, namespace, store, live) in cases {
        let name = format!("sweeper{}", namespace.trim_start_matches("short"));
        let text = format!(
            "{} -{command}",
            rule(&[Role::Sweeper], &namespace, Topology::Server)
        );
        let () = setuser(&name, &text).query_async(&mut admin).await.unwrap();
        let url = format!("redis://{name}:{PASSWORD}@127.0.0.1:{}/", server.port());
        let outcome = async {
            let conn = sessionpack::connect(&url).await?;
            let layout = Compact::new(conn, config().with_namespace(namespace.clone())).await?;
            let sweeper = Sweeper::new(layout, SweepConfig::default().with_max_sessions(2));
            let pass = sweeper.pass().await;
            let _ = sweeper.release_leases().await;
            pass
        }
        .await;
        match outcome {
            Err(Error::NoPermission(_)) => {}
            Ok(report) => {
                // Nothing refused on this path: the work is all done.
                assert_eq!(report.bad_buckets, 0, "without {command}: {report:?}");
                assert_eq!(report.evicted, 1, "without {command}: {report:?}");
                let mut kept = 0;
                for id in &live {
                    kept += usize::from(store.load(id).await.unwrap().is_some());
                }
                assert_eq!(kept, 2, "without {command}: the cap of 2 was not kept");
            }
            Err(e) => panic!("without {command}: an untyped or wrongly typed failure: {e:?}"),
        }
    }
}

/// A store of fixed buckets in `namespace`, with no user index or viewed
/// items, reached at `url`.
async fn plain_store(
    url: &str,
    namespace: &str,
) -> sessionpack::Result<Store<Compact<redis::aio::ConnectionManager>, String>> {
    let conn = sessionpack::connect(url).await?;
    let layout = Compact::new(conn, CompactConfig::new(4).with_namespace(namespace)).await?;
    Ok(Store::new(layout).without_sweeper())
}

/// A store user one command short: a create either succeeds whole or fails
/// as `NoPermission` having written no session (no field of any bucket
/// but those of the creates before it), never a session half written or a
/// failure that in fact wrote one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_user_one_command_short_creates_whole_or_fails_typed() {
    let server = common::server();
    let mut admin = common::raw(&server).await;
    let mut short: Vec<&str> = Role::Store.commands().to_vec();
    short.extend(["time", "evalsha", "script|load"]);
    for (i, command) in short.iter().enumerate() {
        let namespace = format!("store{i}");
        let name = format!("app{i}");
        let text = format!(
            "{} -{command}",
            rule(&[Role::Store], &namespace, Topology::Server)
        );
        let () = setuser(&name, &text).query_async(&mut admin).await.unwrap();
        let url = format!("redis://{name}:{PASSWORD}@127.0.0.1:{}/", server.port());
        // Fields of the creates that succeeded: the small session's one.
        let mut made = 0;
        let outcome = async {
            let store = plain_store(&url, &namespace).await?;
            let big = noise(300);
            let a = store.create(1, "small".into()).await?;
            made = 1;
            let b = store.create(2, big.clone()).await?;
            Ok::<_, Error>((a.id, b.id, big))
        }
        .await;
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{namespace}:*"))
            .query_async(&mut admin)
            .await
            .unwrap();
        let mut fields = 0;
        for key in &keys {
            let kind: String = redis::cmd("TYPE")
                .arg(key)
                .query_async(&mut admin)
                .await
                .unwrap();
            if kind == "hash" && !key.ends_with(":meta") {
                let n: u64 = redis::cmd("HLEN")
                    .arg(key)
                    .query_async(&mut admin)
                    .await
                    .unwrap();
                fields += n;
            }
        }
        match outcome {
            Err(Error::NoPermission(_)) => {
                assert_eq!(
                    fields, made,
                    "without {command}: a failed create wrote {keys:?}"
                );
            }
            Ok((a, b, big)) => {
                let store = plain_store(&server.url(), &namespace).await.unwrap();
                assert_eq!(store.load(&a).await.unwrap().unwrap().attrs, "small");
                assert_eq!(store.load(&b).await.unwrap().unwrap().attrs, big);
            }
            Err(other) => panic!("without {command}: {other:?}"),
        }
    }
}
