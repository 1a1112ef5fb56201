//! Calls and sweepers waiting on a failed-over or paused primary go on with the new one.

use super::*;

/// A call on `store` succeeds within a few attempts (the first may time out
/// on a connection the fault left stuck, which that timeout replaces), and
/// no later call fails three times running.
async fn calls_recover<L>(store: &Store<L, String>, after: &str)
where
    L: sessionpack::session::layout::Layout,
{
    let probe = SessionId::generate().unwrap();
    let mut failed = Vec::new();
    while failed.len() < 3 {
        match store.load(&probe).await {
            Ok(found) => {
                assert!(found.is_none());
                break;
            }
            Err(e @ Error::Unavailable(_)) => failed.push(e.to_string()),
            Err(e) => panic!("after {after}: not a transient error: {e:?}"),
        }
    }
    assert!(
        failed.len() < 3,
        "after {after}: calls still fail: {failed:?}"
    );
    // The cluster may still be settling (the sweeper keeps meeting
    // redirections), so a later call may time out too: each timeout
    // replaces the connection, and no call fails three times running.
    let mut in_a_row = 0;
    for _ in 0..50 {
        match store.load(&probe).await {
            Ok(_) => in_a_row = 0,
            Err(e @ Error::Unavailable(_)) => {
                in_a_row += 1;
                assert!(in_a_row < 3, "after {after}: three timeouts running: {e:?}");
            }
            Err(e) => panic!("after {after}: not a transient error: {e:?}"),
        }
    }
}

/// Only the sweeper runs while 2,000 slots move, and then while a primary
/// is paused until its replica takes over: afterwards calls on the same
/// connection succeed again, and the sweeper passes again. (The cluster
/// client used to wedge for good on either fault: every call timed out,
/// nothing sent.)
///
/// `bulk` opens the same store over a new connection that waits long for
/// its replies: the 20,000 sessions it creates are setup, and on a loaded
/// machine a pipeline of them may take longer than the short timeouts the
/// faults are tested with. A new one each time, so it starts from the
/// slot map after the reshard.
async fn sweeper_survives_reshard_and_pause<L>(
    c: &LocalCluster,
    layout: L,
    bulk: impl AsyncFn() -> L,
) where
    L: sessionpack::session::layout::Layout
        + sessionpack::session::sweep::Sweepable
        + Clone
        + Into<sessionpack::session::sweep::SweepTarget<cluster::Cluster>>,
{
    let short = async || {
        Store::<_, String>::new(bulk().await)
            .without_sweeper()
            .with_ttl(Duration::from_secs(1))
    };
    let batch: Vec<(u64, String)> = (0..20_000).map(|i| (i, "x".repeat(20))).collect();
    short().await.create_many(&batch).await.unwrap();
    let sweeper = sweeping(layout.clone());
    let store: Store<_, String> = Store::new(layout).without_sweeper().with_ttl(TTL);

    let primaries = c.primaries();
    tokio::task::block_in_place(|| c.reshard(primaries[0], primaries[1], 2000)).unwrap();
    calls_recover(&store, "the reshard").await;
    sweeper_passes(&sweeper, "the reshard").await;
    short().await.create_many(&batch).await.unwrap();

    pause_until_replica_takes_over(c, c.primaries()[2]).await;
    calls_recover(&store, "the pause").await;
    sweeper_passes(&sweeper, "the pause").await;
    let stats = sweeper.shutdown().await;
    println!("{stats:?}");
}

/// A primary paused and left paused after its replica took over: the
/// calls that waited on it are sent again to the new primary and succeed
/// while it is still paused, where they used to wait out their whole
/// response timeout (here two minutes, so no call ends by timing out
/// before the checks). Every worker writes a counter to sessions of its
/// own on every primary; once the old primary is back (demoted, and
/// resynchronised from the new one), each session holds what its last
/// acknowledged write wrote, or the write in flight when it failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_waiting_on_a_failed_over_primary_go_to_the_new_one() {
    let patient =
        sessionpack::ConnectOptions::default().with_response_timeout(Duration::from_secs(120));
    for growing in [false, true] {
        let c = LocalCluster::start(3, 1).expect("a local cluster");
        let conn = cluster::connect_with(&c.urls(), &patient).await.unwrap();
        // Connections opened before the pause and not used until the old
        // primary is replaced: they still route to it.
        let mut idle = Vec::new();
        for _ in 0..2 {
            idle.push(cluster::connect_with(&c.urls(), &patient).await.unwrap());
        }
        if growing {
            let layout = Compact::new(conn, CompactConfig::growing()).await.unwrap();
            let store = Store::new(layout).without_sweeper().with_ttl(TTL);
            calls_move_to_the_new_primary(&c, store, idle).await;
        } else {
            let layout = Bucketed::new(conn, BucketedConfig::new(8)).await.unwrap();
            let store = Store::new(layout).without_sweeper().with_ttl(TTL);
            calls_move_to_the_new_primary(&c, store, idle).await;
        }
    }
}

async fn calls_move_to_the_new_primary<L>(
    c: &LocalCluster,
    store: Store<L, u64>,
    idle: Vec<cluster::Cluster>,
) where
    L: sessionpack::session::layout::Layout + Clone + 'static,
{
    const WORKERS: u64 = 8;
    const EACH: u64 = 30;
    let mut owned = Vec::new();
    for w in 0..WORKERS {
        let mut ids = Vec::new();
        for i in 0..EACH {
            ids.push(store.create(w * EACH + i, 0).await.unwrap().id);
        }
        owned.push(ids);
    }
    tokio::task::block_in_place(|| c.wait_in_sync(Duration::from_secs(30))).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let rounds: Arc<Vec<AtomicU64>> = Arc::new((0..WORKERS).map(|_| AtomicU64::new(0)).collect());
    let workers: Vec<_> = owned
        .into_iter()
        .enumerate()
        .map(|(w, ids)| {
            let (store, stop, rounds) = (store.clone(), stop.clone(), rounds.clone());
            tokio::spawn(async move {
                // Per session: the value acknowledged last, and one whose
                // write failed after it (either may be stored).
                let mut written: Vec<(u64, Option<u64>)> = vec![(0, None); ids.len()];
                let mut errors = Vec::new();
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    for (i, id) in ids.iter().enumerate() {
                        n += 1;
                        let session = match store.load(id).await {
                            Ok(Some(s)) => s,
                            Ok(None) => panic!("a live session is gone"),
                            Err(e) => {
                                errors.push(e);
                                continue;
                            }
                        };
                        let next = sessionpack::session::store::Session {
                            attrs: n,
                            ..session
                        };
                        match store.save(&next).await {
                            Ok(true) => written[i] = (n, None),
                            Ok(false) => panic!("a live session is gone"),
                            Err(e) => {
                                written[i].1 = Some(n);
                                errors.push(e);
                            }
                        }
                    }
                    rounds[w].fetch_add(1, Ordering::Relaxed);
                }
                (ids, written, errors)
            })
        })
        .collect();
    let each_round = async |what: &str| {
        let from: Vec<u64> = rounds.iter().map(|r| r.load(Ordering::Relaxed)).collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        while rounds
            .iter()
            .zip(&from)
            .any(|(r, &from)| r.load(Ordering::Relaxed) < from + 2)
        {
            assert!(
                Instant::now() < deadline,
                "{what}: a worker made no two rounds in a minute: {rounds:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    each_round("before the pause").await;

    let victim = c.primaries()[0];
    let replica = c
        .nodes()
        .iter()
        .find(|n| c.role(n) == Some(Role::Replica(victim.port())))
        .expect("the victim's replica");
    signal(victim, "-STOP");
    until_primary(c, replica).await;
    // Still paused: every worker's calls (each round touches sessions on
    // every primary) complete on the new primary.
    each_round("the old primary still paused").await;
    // Commands with no key, on connections that still route to the paused
    // primary: the cluster client sends `SCRIPT LOAD` to every primary and
    // would send `TIME` to a node at random; neither waits on it.
    let [mut scripts, mut clock] = <[cluster::Cluster; 2]>::try_from(idle).unwrap();
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return 1")
        .query_async(&mut scripts)
        .await
        .expect("SCRIPT LOAD answered by every primary serving slots");
    assert_eq!(sha.len(), 40);
    for _ in 0..12 {
        let _: (u64, u64) = redis::cmd("TIME")
            .query_async(&mut clock)
            .await
            .expect("TIME answered while the old primary is paused");
    }
    assert_eq!(
        (scripts.replacements(), clock.replacements()),
        (1, 1),
        "each connection was replaced once, when a call waited on the paused primary"
    );
    signal(victim, "-CONT");
    tokio::task::block_in_place(|| c.wait_until_ready(Duration::from_secs(60))).unwrap();
    each_round("the old primary back").await;
    stop.store(true, Ordering::Relaxed);

    for worker in workers {
        let (ids, written, errors) = worker.await.unwrap();
        for e in &errors {
            assert!(
                e.is_transient() && !e.to_string().contains("timed out"),
                "a call failed otherwise than while the cluster settled: {e:?}"
            );
        }
        for (id, (acked, in_flight)) in ids.iter().zip(written) {
            let stored = store.load(id).await.unwrap().expect("a live session").attrs;
            assert!(
                stored == acked || Some(stored) == in_flight,
                "a session holds {stored}: its last acknowledged write was {acked}, \
                 the one that failed after it {in_flight:?}"
            );
        }
    }
}

fn short_timeouts() -> sessionpack::ConnectOptions {
    sessionpack::ConnectOptions::default().with_response_timeout(Duration::from_secs(2))
}

/// A connection for setup in bulk, whose replies may take a minute.
async fn patient(c: &LocalCluster) -> cluster::Cluster {
    let options =
        sessionpack::ConnectOptions::default().with_response_timeout(Duration::from_secs(60));
    cluster::connect_with(&c.urls(), &options).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucketed_sweepers_connection_recovers_from_a_reshard_and_a_paused_primary() {
    let c = LocalCluster::start(3, 1).expect("a local cluster");
    let conn = cluster::connect_with(&c.urls(), &short_timeouts())
        .await
        .unwrap();
    let layout = Bucketed::new(conn, BucketedConfig::new(12)).await.unwrap();
    let bulk = async || {
        Bucketed::new(patient(&c).await, BucketedConfig::new(12))
            .await
            .unwrap()
    };
    sweeper_survives_reshard_and_pause(&c, layout, bulk).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compact_sweepers_connection_recovers_from_a_reshard_and_a_paused_primary() {
    let c = LocalCluster::start(3, 1).expect("a local cluster");
    let conn = cluster::connect_with(&c.urls(), &short_timeouts())
        .await
        .unwrap();
    let layout = Compact::new(conn, CompactConfig::new(16)).await.unwrap();
    let bulk = async || {
        Compact::new(patient(&c).await, CompactConfig::new(16))
            .await
            .unwrap()
    };
    sweeper_survives_reshard_and_pause(&c, layout, bulk).await;
}
