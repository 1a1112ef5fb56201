//! Writes that wait for a replica (`WAIT`), on a real primary and replica.

mod common;

use std::time::{Duration, Instant};

use sessionpack::conn::wait::WaitForReplicas;
use sessionpack::{Compact, CompactConfig, Error, Store};
use sessionpack_testkit::LocalServer;

fn in_sync(replica: &LocalServer) -> bool {
    let mut conn = replica.client().unwrap().get_connection().unwrap();
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut conn)
        .unwrap();
    info.contains("master_link_status:up")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_wait_for_the_replica_and_say_when_it_did_not_confirm() {
    let primary = common::server();
    let port = primary.port().to_string();
    let replica = LocalServer::start_with(&["--replicaof", "127.0.0.1", &port]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !in_sync(&replica) {
        assert!(Instant::now() < deadline, "the replica never synced");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut raw = common::raw(&primary).await;
    // Long enough that a loaded machine's replica confirms in time: the
    // unconfirmed case below waits it out once.
    let conn = WaitForReplicas::new(common::manager(&primary).await, 1, Duration::from_secs(5));
    let layout = Compact::new(conn, CompactConfig::new(6)).await.unwrap();
    let store: Store<_, String> = Store::new(layout).with_ttl(Duration::from_secs(600));

    // The first create finds its script unloaded (`NOSCRIPT`, a `WAIT`
    // with it); counted from the next.
    store.create(3, "c".into()).await.unwrap();
    let waits = common::calls(&mut raw, "wait").await;
    let kept = store.create(1, "a".into()).await.unwrap();
    let doomed = store.create(2, "b".into()).await.unwrap();
    assert_eq!(
        common::calls(&mut raw, "wait").await,
        waits + 2,
        "each create waited"
    );
    // A write confirmed by the replica is on the replica.
    let mut on_replica = replica.client().unwrap().get_connection().unwrap();
    let keys: u64 = redis::cmd("DBSIZE").query(&mut on_replica).unwrap();
    assert!(keys >= 2, "the replica holds the buckets");
    // Reads do not wait.
    let waits = common::calls(&mut raw, "wait").await;
    assert!(store.load(&kept.id).await.unwrap().is_some());
    assert_eq!(common::calls(&mut raw, "wait").await, waits);

    // With the replica gone, a write is made but reported unconfirmed.
    replica.stop();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match store.destroy(&doomed.id).await {
            Err(Error::NotReplicated(_)) => break,
            // The primary may still count the replica for a moment.
            Ok(_) => {}
            Err(e) => panic!("expected NotReplicated, got {e:?}"),
        }
        assert!(Instant::now() < deadline, "never reported unconfirmed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        store.load(&doomed.id).await.unwrap().is_none(),
        "made on the primary"
    );
    assert!(store.load(&kept.id).await.unwrap().is_some());
}
