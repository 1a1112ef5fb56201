//! The sweep daemon: shared leases, metadata, clusters.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sweep_daemons_share_one_store() {
    let server = common::server();
    let layout = common::bucketed(&server, 8).await;
    let short: Store<_, ()> = Store::new(layout.clone()).with_ttl(Duration::from_secs(1));
    let batch: Vec<(u64, ())> = (0..3000).map(|i| (i, ())).collect();
    short.create_many(&batch).await.unwrap();
    let long: Store<_, ()> = Store::new(layout.clone());
    let alive = long.create_many(&batch).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;

    let url: &'static str = Box::leak(server.url().into_boxed_str());
    let args = [
        "sweep",
        "--redis-url",
        url,
        "--bucket-bits",
        "8",
        "--interval-secs",
        "30",
        "--segments",
        "16",
        "--passes",
        "1",
    ];
    let (a, b) = tokio::join!(
        tokio::task::spawn_blocking(move || sessionpack(&args)),
        tokio::task::spawn_blocking(move || sessionpack(&args)),
    );
    // The daemons pass at start; the 30 s interval is the leases' length,
    // so in one pass each they split the segments between them.
    let total: u64 = [a.unwrap(), b.unwrap()]
        .iter()
        .map(|out| {
            let text = stdout(out);
            let line = text
                .lines()
                .find(|l| l.starts_with("pass 1:"))
                .expect("a pass line");
            line.split("totals: ")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert_eq!(total, 3000, "every expired session reclaimed exactly once");
    assert_eq!(common::found(&long, &alive).await, alive.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_daemon_reads_the_stores_bucket_bits_and_refuses_others() {
    let server = common::server();
    let layout = common::bucketed(&server, 6).await;
    let short: Store<_, ()> = Store::new(layout).with_ttl(Duration::from_secs(1));
    let batch: Vec<(u64, ())> = (0..500).map(|i| (i, ())).collect();
    short.create_many(&batch).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let url = server.url();

    // Other bits than the store's: refused, nothing swept.
    let out = sessionpack(&[
        "sweep",
        "--redis-url",
        &url,
        "--bucket-bits",
        "7",
        "--passes",
        "1",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("6 bucket bits"), "{err}");

    // No bits given: the store's own are used.
    let text = stdout(&sessionpack(&[
        "sweep",
        "--redis-url",
        &url,
        "--passes",
        "1",
    ]));
    assert!(text.contains("sweeping 64 buckets"), "{text}");
    assert!(text.contains("500 reclaimed"), "{text}");

    // A namespace that holds no store: a clear error.
    let out = sessionpack(&[
        "sweep",
        "--redis-url",
        &url,
        "--namespace",
        "none",
        "--passes",
        "1",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no store recorded"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_daemon_sweeps_a_compact_store_by_its_metadata() {
    let server = common::server();
    // With viewed items, which the daemon removes with their sessions.
    let layout = sessionpack::Compact::new(
        common::manager(&server).await,
        sessionpack::CompactConfig::new(9)
            .with_id_width(sessionpack::IdWidth::Bits128)
            .with_viewed(sessionpack::viewed::ViewedConfig::default()),
    )
    .await
    .unwrap();
    // Made and viewed with a long lifetime, then touched down to one
    // second: the views cannot miss a session that expired first, however
    // slow the machine.
    let long: Store<_, ()> = Store::new(layout.clone()).with_ttl(Duration::from_secs(600));
    let short: Store<_, ()> = Store::new(layout.clone()).with_ttl(Duration::from_secs(1));
    let batch: Vec<(u64, ())> = (0..700).map(|i| (i, ())).collect();
    let ids = long.create_many(&batch).await.unwrap();
    for id in &ids[..50] {
        long.view_many(id, &[1u64, 2, 3]).await.unwrap().unwrap();
    }
    for id in &ids {
        let expires_at = short.touch(id).await.unwrap().unwrap();
        assert!(
            expires_at <= sessionpack::clock::unix_now() + 2,
            "{expires_at}"
        );
    }
    while common::found(&short, &ids).await > 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let url = server.url();
    let text = stdout(&sessionpack(&[
        "sweep",
        "--redis-url",
        &url,
        "--passes",
        "1",
    ]));
    assert!(text.contains("sweeping 512 buckets"), "{text}");
    assert!(text.contains("700 reclaimed"), "{text}");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("sp:{*")
        .query_async(&mut common::raw(&server).await)
        .await
        .unwrap();
    assert_eq!(keys, Vec::<String>::new(), "bucket and chunk keys left");
}

/// The daemon and the advisor take a named cluster; the daemon reclaims
/// expired sessions from buckets on every primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_daemon_and_the_advisor_take_a_cluster() {
    let cluster = sessionpack_testkit::LocalCluster::start(3, 0).expect("a local cluster");
    let seed = cluster.primaries()[2].url();
    let conn = sessionpack::conn::cluster::connect(&[seed.as_str()])
        .await
        .unwrap();
    let layout = sessionpack::Compact::new(conn, sessionpack::CompactConfig::new(9))
        .await
        .unwrap();
    let short: Store<_, ()> = Store::new(layout.clone()).with_ttl(Duration::from_secs(1));
    let batch: Vec<(u64, ())> = (0..900).map(|i| (i, ())).collect();
    short.create_many(&batch).await.unwrap();
    let alive = Store::<_, ()>::new(layout)
        .create_many(&batch[..50])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let text = stdout(&sessionpack(&[
        "sweep",
        "--cluster-url",
        &seed,
        "--passes",
        "1",
    ]));
    assert!(
        text.contains("sweeping 512 buckets of sp on a cluster of 3 primaries"),
        "{text}"
    );
    assert!(text.contains("900 reclaimed"), "{text}");
    let left: Store<_, ()> = Store::new(
        sessionpack::Compact::new(
            sessionpack::conn::cluster::connect(&[seed.as_str()])
                .await
                .unwrap(),
            sessionpack::CompactConfig::new(9),
        )
        .await
        .unwrap(),
    );
    assert_eq!(common::found(&left, &alive).await, 50);

    // Naming both a server and a cluster is refused before anything runs.
    let out = sessionpack(&["sweep", "--redis-url", &seed, "--cluster-url", &seed]);
    assert!(!out.status.success());

    // A migration refuses a cluster node before it writes anything.
    let sizes = || async {
        let mut sizes = Vec::new();
        for node in cluster.primaries() {
            let mut conn = common::raw(node).await;
            let n: u64 = redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap();
            sizes.push(n);
        }
        sizes
    };
    let before = sizes().await;
    for namespace in ["sp", "fresh", "other"] {
        let out = sessionpack(&["migrate", "--redis-url", &seed, "--namespace", namespace]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(err.contains("Redis Cluster"), "{err}");
    }
    assert_eq!(sizes().await, before, "a refused migration wrote keys");

    let text = stdout(&sessionpack(&[
        "advise",
        "--cluster-url",
        &seed,
        "--sessions",
        "1000000",
    ]));
    assert!(text.contains("from Server"), "{text}");
    assert!(
        text.contains(&format!(
            "On a cluster of 3 primaries (as {seed} reports its slots)"
        )),
        "{text}"
    );
    assert!(text.contains("| compact | 2^"), "{text}");
    // A primary configured differently from the others is named.
    let odd = &cluster.primaries()[1];
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("hash-max-listpack-value")
        .arg("128")
        .query(&mut odd.client().unwrap().get_connection().unwrap())
        .unwrap();
    let out = sessionpack(&["advise", "--cluster-url", &seed]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("disagree") && err.contains(&odd.url()),
        "{err}"
    );
}
