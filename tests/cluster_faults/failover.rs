//! A primary killed under traffic: its replica takes over and the calls recover.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compact_primary_killed_mid_traffic_fails_over_and_calls_recover() {
    let c = LocalCluster::start(3, 1).expect("a local cluster");
    let conn = cluster::connect(&c.urls()).await.unwrap();
    let layout = Compact::new(conn, CompactConfig::new(13)).await.unwrap();
    failover_under_traffic(
        &c,
        Store::new(layout.clone()).without_sweeper().with_ttl(TTL),
        || sweeping(layout),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bucketed_primary_killed_mid_traffic_fails_over_and_calls_recover() {
    let c = LocalCluster::start(3, 1).expect("a local cluster");
    let conn = cluster::connect(&c.urls()).await.unwrap();
    let layout = Bucketed::new(conn, BucketedConfig::new(8)).await.unwrap();
    failover_under_traffic(
        &c,
        Store::new(layout.clone()).without_sweeper().with_ttl(TTL),
        || sweeping(layout),
    )
    .await;
}

/// Kills a primary while a task creates and loads sessions and the
/// sweeper runs; checks the replica takes over, calls fail only with a
/// transient error and then succeed on the same connection, nothing
/// replicated is lost, the sweeper passes after the takeover, and the
/// killed node rejoins as a replica.
async fn failover_under_traffic<L>(
    c: &LocalCluster,
    store: Store<L, ()>,
    sweeper: impl FnOnce() -> sessionpack::session::sweep::SweeperHandle,
) where
    L: sessionpack::session::layout::Layout + Clone + 'static,
{
    let mut before = Vec::new();
    for i in 0..600 {
        before.push(store.create(i, ()).await.unwrap().id);
    }
    tokio::task::block_in_place(|| c.wait_in_sync(Duration::from_secs(10))).unwrap();
    let sweeper = sweeper();

    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let traffic = tokio::spawn({
        let (store, stop, rounds) = (store.clone(), stop.clone(), rounds.clone());
        async move {
            let mut t = Traffic::default();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                rounds.fetch_add(1, Ordering::Relaxed);
                let started = Instant::now();
                let created = store.create(n, ()).await;
                t.longest = t.longest.max(started.elapsed());
                match created {
                    Ok(s) => t.acked.push(s.id),
                    Err(Error::Unavailable(_)) => t.failed += 1,
                    Err(e) => panic!("create: not a transient error: {e:?}"),
                }
                let Some(id) = t.acked.get(n as usize % t.acked.len().max(1)).copied() else {
                    continue;
                };
                let started = Instant::now();
                let loaded = store.load(&id).await;
                t.longest = t.longest.max(started.elapsed());
                match loaded {
                    Ok(Some(_)) => {}
                    Ok(None) => t.missing += 1,
                    Err(Error::Unavailable(_)) => t.failed += 1,
                    Err(e) => panic!("load: not a transient error: {e:?}"),
                }
                tokio::task::yield_now().await;
            }
            t
        }
    });
    rounds_reach(&rounds, 200).await;

    let victim = c.primaries()[0];
    let port = victim.port();
    let replica = c
        .nodes()
        .iter()
        .find(|n| c.role(n) == Some(Role::Replica(port)))
        .expect("the victim's replica");
    victim.stop();
    let killed = Instant::now();
    let deadline = killed + Duration::from_secs(30);
    while c.role(replica) != Some(Role::Primary) {
        assert!(Instant::now() < deadline, "the replica never took over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let promoted = killed.elapsed();
    tokio::task::block_in_place(|| c.wait_until_ready(Duration::from_secs(30))).unwrap();

    // Calls succeed again on the same connection, with no restart.
    let mut recovered = None;
    for _ in 0..2000 {
        match store.create(1, ()).await {
            Ok(s) => {
                recovered = Some(s);
                break;
            }
            Err(Error::Unavailable(_)) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => panic!("not a transient error: {e:?}"),
        }
    }
    let recovered = recovered.expect("calls succeed after the takeover");
    assert!(store.load(&recovered.id).await.unwrap().is_some());
    // The sweeper keeps going: passes complete after the takeover, while
    // the traffic goes on.
    sweeper_passes(&sweeper, "the takeover").await;
    let so_far = rounds.load(Ordering::Relaxed);
    rounds_reach(&rounds, so_far + 200).await;
    stop.store(true, Ordering::Relaxed);
    let t = traffic.await.unwrap();

    // What was replicated before the kill is all there.
    assert_eq!(
        common::found(&store, &before).await,
        before.len(),
        "a replicated session was lost"
    );
    // Acknowledged writes lost by asynchronous replication: the last ones
    // the victim acknowledged before it died, if any.
    let lost = t.acked.len() - common::found(&store, &t.acked).await;
    println!(
        "takeover after {promoted:?}; {} creates acknowledged, {} lost on failover ({} loads missed one), {} calls failed with a transient error, the longest call took {:?}",
        t.acked.len(),
        lost,
        t.missing,
        t.failed,
        t.longest
    );
    // The traffic met the dead primary: calls failed, or waited through
    // the node timeout.
    assert!(
        t.failed > 0 || t.longest >= Duration::from_secs(1),
        "the takeover window was not seen: {} failed, the longest call {:?}",
        t.failed,
        t.longest
    );
    assert!(
        t.acked.len() > lost + 100,
        "traffic went on: {} acked, {lost} lost",
        t.acked.len()
    );

    sweeper.shutdown().await;

    // The killed node comes back as a replica of the new primary.
    victim.resume().unwrap();
    tokio::task::block_in_place(|| c.wait_until_ready(Duration::from_secs(30))).unwrap();
    assert_eq!(c.role(victim), Some(Role::Replica(replica.port())));
}
