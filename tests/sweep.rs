//! The sweeper, the session cap and the lease lock, on a real server.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use sessionpack::session::sweep::{SweepConfig, Sweeper};
use sessionpack::{SessionId, Store, lock};
use sessionpack_cli::baselines::BookLoginHash;

fn long() -> Duration {
    Duration::from_secs(600)
}

async fn totals(
    raw: &mut redis::aio::MultiplexedConnection,
    b: &sessionpack::session::buckets::Buckets,
) -> (u64, u64) {
    let (mut h, mut z) = (0, 0);
    for bucket in 0..b.count() {
        h += raw.hlen::<_, u64>(b.hash_key(bucket)).await.unwrap();
        z += raw.zcard::<_, u64>(b.zset_key(bucket)).await.unwrap();
    }
    (h, z)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_sessions_leave_every_key_and_live_ones_stay() {
    let server = common::server();
    let layout = common::bucketed(&server, 4).await;
    let store: Store<_, String> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(long());
    let mut short = Vec::new();
    let mut live = Vec::new();
    let first_created = std::time::Instant::now();
    for i in 0..300u64 {
        let fat = "x".repeat(if i % 10 == 0 { 500 } else { 3 });
        short.push(
            store
                .create_with_ttl(i, fat.clone(), Duration::from_secs(1))
                .await
                .unwrap(),
        );
        live.push(store.create(i, fat).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let sweeper = Sweeper::new(layout.clone(), SweepConfig::default());
    let report = sweeper.sweep_range(0..16).await.unwrap();
    assert_eq!(report.reclaimed, 300);
    assert_eq!(report.buckets, 16);
    // The oldest expired a second after the first create, at the
    // earliest; in whole seconds.
    let since_first = first_created.elapsed().as_secs();
    assert!(report.lag_secs <= since_first + 1, "{report:?}");

    let mut raw = common::raw(&server).await;
    let b = layout.buckets();
    assert_eq!(totals(&mut raw, b).await, (300, 300));
    for s in &short {
        let bucket = b.bucket_of(&s.id);
        let field = b.field(&s.id);
        let in_hash: bool = raw.hexists(b.hash_key(bucket), &field).await.unwrap();
        assert!(!in_hash);
        let out_of_line: bool = raw.exists(b.out_of_line_key(bucket, &field)).await.unwrap();
        assert!(!out_of_line, "Redis expired the out-of-line record with it");
    }
    for s in &live {
        assert_eq!(store.load(&s.id).await.unwrap().as_ref(), Some(s));
    }
    // A second pass finds nothing more.
    assert_eq!(sweeper.sweep_range(0..16).await.unwrap().reclaimed, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn touches_racing_sweeps_lose_no_live_session_and_revive_no_expired_one() {
    let server = common::server();
    let layout = common::bucketed(&server, 6).await;
    let store: Arc<Store<_, ()>> = Arc::new(
        Store::new(layout.clone())
            .without_sweeper()
            .with_ttl(long()),
    );
    // Kept alive by touches only: created (in pipelined batches, so all
    // at once) to expire in 3 s.
    let batch: Vec<(u64, ())> = (0..3000).map(|i| (i, ())).collect();
    let three: Store<_, ()> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(3));
    let kept = Arc::new(three.create_many(&batch).await.unwrap());
    // Left to expire in 1 s, then touched after they expired.
    let one: Store<_, ()> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(1));
    let doomed: Vec<SessionId> = one.create_many(&batch[..2000]).await.unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let sweeper = Sweeper::new(layout.clone(), SweepConfig::default());
    let sweeping = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut reclaimed = 0;
            while !stop.load(Ordering::Relaxed) {
                reclaimed += sweeper.sweep_range(0..64).await.unwrap().reclaimed;
            }
            reclaimed
        })
    };
    let mut touchers = Vec::new();
    let rounds = Arc::new(AtomicU64::new(0));
    for t in 0..4usize {
        let store = store.clone();
        let kept = kept.clone();
        let stop = stop.clone();
        let rounds = rounds.clone();
        touchers.push(tokio::spawn(async move {
            // Once a touch has kept a session alive, no later touch may find
            // it gone. One first reached after its initial 3 s had run out
            // (a slow machine) is rightly gone, and is not counted as kept.
            let mut alive = HashSet::new();
            let mut touches = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for id in kept.iter().skip(t).step_by(4) {
                    let renewed = store.touch(id).await.unwrap().is_some();
                    if renewed {
                        alive.insert(*id);
                    } else {
                        assert!(!alive.contains(id), "a live session was swept");
                    }
                    touches += 1;
                }
                rounds.fetch_add(1, Ordering::Relaxed);
            }
            (touches, alive)
        }));
    }
    // Past every original expiry, and every toucher a round past it: the
    // kept sessions live on touches alone.
    tokio::time::sleep(Duration::from_millis(4100)).await;
    let so_far = rounds.load(Ordering::Relaxed);
    while rounds.load(Ordering::Relaxed) < so_far + 4 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Expired by now: touching must not revive them, sweep or no sweep.
    let mut revived = 0;
    for id in &doomed {
        if store.touch(id).await.unwrap().is_some() {
            revived += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut touches = 0;
    let mut alive: Vec<SessionId> = Vec::new();
    for t in touchers {
        let (n, ids) = t.await.unwrap();
        touches += n;
        alive.extend(ids);
    }
    let reclaimed = sweeping.await.unwrap();
    assert_eq!(revived, 0);
    assert!(touches >= 3000, "{touches} touches");
    // How many were reached in time depends on the machine; some were.
    assert!(!alive.is_empty(), "none kept alive");
    let late = (kept.len() - alive.len()) as u64;
    assert!(reclaimed <= 2000 + late);
    let found = store.load_many(&alive).await.unwrap();
    assert!(
        found.iter().all(Option::is_some),
        "every touched session is alive"
    );
    assert!(
        store
            .load_many(&doomed)
            .await
            .unwrap()
            .iter()
            .all(Option::is_none)
    );
    // Whatever the racing sweeps left, one more pass clears it. A touch
    // that finds a session expired removes it too, so the sweeps reclaim
    // at most the expired ones; what is left is exactly the live ones.
    let sweeper = Sweeper::new(layout.clone(), SweepConfig::default());
    let rest = sweeper.sweep_range(0..64).await.unwrap().reclaimed;
    assert!(reclaimed + rest <= 2000 + late);
    let mut raw = common::raw(&server).await;
    let n = alive.len() as u64;
    assert_eq!(totals(&mut raw, layout.buckets()).await, (n, n));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_sweepers_share_the_work_once_per_interval() {
    for sweepers in [2usize, 4] {
        let server = common::server();
        let layout = common::bucketed(&server, 8).await;
        let store: Store<_, ()> = Store::new(layout.clone())
            .without_sweeper()
            .with_ttl(Duration::from_secs(1));
        let expired: Vec<(u64, ())> = (0..5000).map(|i| (i, ())).collect();
        store.create_many(&expired).await.unwrap();
        let live: Store<_, ()> = Store::new(layout.clone())
            .without_sweeper()
            .with_ttl(long());
        let alive = live.create_many(&expired).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2100)).await;

        let config = SweepConfig::default()
            .with_segments(32)
            .with_interval(Duration::from_secs(30));
        let reports = common::concurrent_passes(layout.clone(), config.clone(), sweepers).await;
        let swept: u32 = reports.iter().map(|r| r.segments_swept).sum();
        let skipped: u32 = reports.iter().map(|r| r.segments_skipped).sum();
        let buckets: u64 = reports.iter().map(|r| r.buckets).sum();
        let reclaimed: u64 = reports.iter().map(|r| r.reclaimed).sum();
        assert_eq!(swept, 32, "each segment swept exactly once: {reports:?}");
        assert_eq!(skipped as usize, 32 * (sweepers - 1));
        assert_eq!(buckets, 256, "each bucket swept once");
        assert_eq!(reclaimed, 5000);
        assert!(
            live.load_many(&alive)
                .await
                .unwrap()
                .iter()
                .all(Option::is_some)
        );
        // Within the same interval, every segment is leased: nothing to do.
        let again = Sweeper::new(layout.clone(), config);
        let r = again.pass().await.unwrap();
        assert_eq!((r.segments_swept, r.segments_skipped), (0, 32));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_keeps_the_most_recently_used() {
    let server = common::server();
    // 64 buckets: all are sampled, so the cutoff is exact.
    let layout = common::bucketed(&server, 6).await;
    let store: Store<_, String> = Store::new(layout.clone()).without_sweeper();
    let mut sessions = Vec::new();
    for i in 0..3000u64 {
        // Distinct expiries, one second apart: recency order is known.
        let attrs = if i % 100 == 0 {
            "y".repeat(300)
        } else {
            String::new()
        };
        let s = store
            .create_with_ttl(i, attrs, Duration::from_secs(10_000 + i))
            .await
            .unwrap();
        sessions.push(s);
    }
    let sweeper = Sweeper::new(
        layout.clone(),
        SweepConfig::default().with_max_sessions(1000),
    );
    let evicted = sweeper.enforce_cap().await.unwrap().evicted;
    assert_eq!(evicted, 2000);
    let ids: Vec<SessionId> = sessions.iter().map(|s| s.id).collect();
    let found = store.load_many(&ids).await.unwrap();
    for (i, f) in found.iter().enumerate() {
        assert_eq!(f.is_some(), i >= 2000, "session {i}");
    }
    // Evicted out-of-line records are deleted, not left to expire.
    let mut raw = common::raw(&server).await;
    let b = layout.buckets();
    for s in &sessions[..2000] {
        let key = b.out_of_line_key(b.bucket_of(&s.id), &b.field(&s.id));
        assert!(!raw.exists::<_, bool>(key).await.unwrap());
    }
    assert_eq!(
        sweeper.enforce_cap().await.unwrap().evicted,
        0,
        "at the cap: nothing to do"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sampled_cap_holds_within_its_stated_bound() {
    let server = common::server();
    // 2^13 buckets: the cutoff comes from a sample of 4096 of them.
    let layout = common::bucketed(&server, 13).await;
    let n = 60_000u64;
    for chunk_start in (0..n).step_by(1000) {
        // 60 expiry seconds, 1000 sessions each: ties at the cutoff matter.
        let s: Store<_, ()> = Store::new(layout.clone())
            .without_sweeper()
            .with_ttl(Duration::from_secs(5000 + chunk_start / 1000));
        let batch: Vec<(u64, ())> = (0..1000).map(|i| (chunk_start + i, ())).collect();
        s.create_many(&batch).await.unwrap();
    }
    let cap = 45_000u64;
    let sweeper = Sweeper::new(
        layout.clone(),
        SweepConfig::default().with_max_sessions(cap),
    );
    sweeper.enforce_cap().await.unwrap();
    let mut raw = common::raw(&server).await;
    let (kept, _) = totals(&mut raw, layout.buckets()).await;
    // Bound from enforce_cap's docs: 3 n sqrt(q (1 - q) / s) with about
    // half the sessions sampled; ties at the cutoff second are split.
    let q = (n - cap) as f64 / n as f64;
    let sampled = n as f64 / 2.0;
    let bound = 3.0 * n as f64 * (q * (1.0 - q) / sampled).sqrt();
    assert!(kept <= cap + bound as u64, "kept {kept}");
    assert!(
        kept as f64 >= cap as f64 - bound,
        "kept {kept}, bound {bound}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn the_task_runs_each_interval_survives_restarts_and_stops() {
    let server = common::server();
    // Paused time jumps to the next timer whenever the runtime waits, so
    // this connection has no timeouts of its own to trip.
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_response_timeout(None)
        .set_connection_timeout(None)
        .set_number_of_retries(1);
    let conn = redis::aio::ConnectionManager::new_with_config(server.client().unwrap(), config)
        .await
        .unwrap();
    let layout = sessionpack::session::layout::Bucketed::new(
        conn,
        sessionpack::session::layout::BucketedConfig::new(4),
    )
    .await
    .unwrap();
    let config = SweepConfig::default()
        .with_interval(Duration::from_secs(60))
        .with_segments(4);
    tokio::time::pause();
    let handle = Sweeper::new(layout, config).spawn();
    let mut stats = handle.subscribe();

    // Nothing happens before the first interval has passed.
    tokio::time::advance(Duration::from_secs(59)).await;
    tokio::task::yield_now().await;
    assert_eq!(handle.stats().passes, 0);
    tokio::time::advance(Duration::from_secs(2)).await;
    stats.changed().await.unwrap();
    assert_eq!(handle.stats().passes, 1);
    assert_eq!(handle.stats().last.unwrap().buckets, 16);

    // Redis goes away: the pass fails and the task carries on.
    server.stop();
    while handle.stats().failed_passes == 0 {
        tokio::time::advance(Duration::from_secs(60)).await;
        stats.changed().await.unwrap();
    }
    assert!(handle.stats().last_error.is_some());

    // Back again: passes succeed once the connection is re-established.
    server.resume().unwrap();
    let mut rounds = 0;
    while handle.stats().passes < 2 {
        rounds += 1;
        assert!(rounds < 50, "{:?}", handle.stats());
        tokio::time::advance(Duration::from_secs(60)).await;
        stats.changed().await.unwrap();
    }
    let end = handle.shutdown().await;
    assert!(end.passes >= 2 && end.failed_passes >= 1, "{end:?}");
}

#[tokio::test]
async fn the_lock_is_exclusive_and_only_its_holder_releases_it() {
    let server = common::server();
    let conn = common::manager(&server).await;
    let a = lock::try_acquire(&conn, "lock:res", Duration::from_millis(300))
        .await
        .unwrap()
        .unwrap();
    assert!(
        lock::try_acquire(&conn, "lock:res", Duration::from_secs(5))
            .await
            .unwrap()
            .is_none()
    );
    assert!(a.extend(Duration::from_millis(300)).await.unwrap());
    tokio::time::sleep(Duration::from_millis(400)).await;
    // a's lease ran out; b takes the lock; a's late release must not free it.
    let b = lock::try_acquire(&conn, "lock:res", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert!(!a.extend(Duration::from_secs(1)).await.unwrap());
    assert!(!a.release().await.unwrap());
    assert!(
        lock::try_acquire(&conn, "lock:res", Duration::from_secs(5))
            .await
            .unwrap()
            .is_none()
    );
    assert!(b.release().await.unwrap());
    assert!(
        lock::try_acquire(&conn, "lock:res", Duration::from_secs(5))
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_books_cleanup_keeps_the_newest() {
    let server = common::server();
    let book = BookLoginHash::book(common::manager(&server).await, "sp");
    let store: Store<_, ()> = Store::new(book.clone()).without_sweeper();
    let mut ids = Vec::new();
    for i in 0..350u64 {
        ids.push(
            store
                .create_with_ttl(i, (), Duration::from_secs(1000 + i))
                .await
                .unwrap()
                .id,
        );
    }
    assert_eq!(book.clean_sessions(100).await.unwrap(), 250);
    let found = store.load_many(&ids).await.unwrap();
    let kept: HashSet<usize> = found
        .iter()
        .enumerate()
        .filter(|(_, f)| f.is_some())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(kept, (250..350).collect());
    assert_eq!(book.clean_sessions(0).await.unwrap(), 100);
}

/// The segment lease keys in `server`'s default namespace.
async fn lease_keys(server: &sessionpack_testkit::LocalServer) -> Vec<String> {
    common::raw(server).await.keys("sp:sweep:*").await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweeper_that_stops_gives_its_leases_back() {
    let server = common::server();
    let layout = common::bucketed(&server, 6).await;
    // Leases an hour long: only a release can remove them in this test.
    let config = SweepConfig::default()
        .with_segments(8)
        .with_interval(Duration::from_secs(3600))
        .with_run_at_start(true);

    // Passes made by hand, then released by hand.
    let by_hand = Sweeper::new(layout.clone(), config.clone());
    assert_eq!(by_hand.pass().await.unwrap().segments_swept, 8);
    assert_eq!(lease_keys(&server).await.len(), 8);
    assert_eq!(by_hand.release_leases().await.unwrap(), 8);
    assert_eq!(lease_keys(&server).await, Vec::<String>::new());
    assert_eq!(by_hand.release_leases().await.unwrap(), 0, "none held now");

    // A spawned sweeper shut down: gone when shutdown returns.
    let handle = Sweeper::new(layout.clone(), config.clone()).spawn();
    let mut stats = handle.subscribe();
    stats.changed().await.unwrap();
    assert_eq!(handle.stats().last.unwrap().segments_swept, 8);
    assert_eq!(lease_keys(&server).await.len(), 8);
    handle.shutdown().await;
    assert_eq!(lease_keys(&server).await, Vec::<String>::new());

    // A sweeper started next sweeps every segment at once.
    let next = Sweeper::new(layout.clone(), config.clone());
    let r = next.pass().await.unwrap();
    assert_eq!((r.segments_swept, r.segments_skipped), (8, 0));
    // It gives back only its own: a lease another holds stays.
    let other = Sweeper::new(layout.clone(), config.clone());
    assert_eq!(other.pass().await.unwrap().segments_skipped, 8);
    assert_eq!(other.release_leases().await.unwrap(), 0);
    assert_eq!(lease_keys(&server).await.len(), 8);
    next.release_leases().await.unwrap();

    // A dropped handle: the task gives them back as it ends.
    let handle = Sweeper::new(layout.clone(), config).spawn();
    let mut stats = handle.subscribe();
    stats.changed().await.unwrap();
    assert_eq!(lease_keys(&server).await.len(), 8);
    drop(handle);
    // The task ends on its own after the drop; wait for it, not for a time.
    stats.changed().await.unwrap_err();
    assert_eq!(lease_keys(&server).await, Vec::<String>::new());
}

/// Where leases are left behind: a process whose runtime stops before its
/// sweeper task can give them back (an actix-web app's `main` returning
/// ends the runtime with it), or whose release fails (Redis restarting).
/// Each lease was written with its expiry (`SET NX PX`, and a lease key
/// without one is taken over), so what is left runs out within one
/// interval of the last pass, when the next sweeper takes those segments.
#[test]
fn leases_a_stopped_runtime_left_run_out_within_one_interval() {
    let server = common::server();
    let interval = Duration::from_secs(3600);
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    };
    let first = runtime();
    let handle = first.block_on(async {
        let layout = common::bucketed(&server, 6).await;
        let config = SweepConfig::default()
            .with_segments(8)
            .with_interval(interval)
            .with_run_at_start(true);
        let handle = Sweeper::new(layout, config).spawn();
        handle.subscribe().changed().await.unwrap();
        handle
    });
    // The runtime goes first, with the task in it: nothing gives back.
    drop(first);
    drop(handle);
    runtime().block_on(async {
        let keys = lease_keys(&server).await;
        assert_eq!(keys.len(), 8, "the leases were given back: {keys:?}");
        let mut raw = common::raw(&server).await;
        for key in keys {
            let left: i64 = raw.pttl(&key).await.unwrap();
            assert!(
                left > 0 && left <= interval.as_millis() as i64,
                "{key}: {left} ms left"
            );
        }
    });
}

/// A store as the quickstart opens it (a growing compact store, nothing
/// spawned by the app) removes its expired sessions itself, keeps the
/// live ones, and its sweeper stops, giving its leases back, when the
/// last clone of the store is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_sweeps_by_itself_and_stops_when_dropped() {
    let server = common::server();
    let open = || async {
        sessionpack::Compact::new(
            common::manager(&server).await,
            sessionpack::CompactConfig::default(),
        )
        .await
        .unwrap()
    };
    // Sessions written by a process that runs no sweeper: 40 that expire
    // at once and 10 that live.
    let writer: Store<_, String> = Store::new(open().await).without_sweeper();
    assert!(writer.sweep_stats().is_none());
    let mut live = Vec::new();
    for i in 0..40u64 {
        writer
            .create_with_ttl(i, "x".repeat(90), Duration::from_secs(1))
            .await
            .unwrap();
    }
    for i in 0..10u64 {
        live.push(writer.create(i, "kept".into()).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(2100)).await;

    // Leases an hour long: only the stopping sweeper can remove them.
    let config = SweepConfig::default()
        .with_interval(Duration::from_secs(3600))
        .with_run_at_start(true);
    let store: Store<_, String> = Store::new(open().await).with_sweep_config(config);
    let clone = store.clone();
    let mut stats = store.subscribe_sweeps().expect("a store sweeps by default");
    stats.changed().await.unwrap();
    let swept = store.sweep_stats().unwrap();
    assert_eq!((swept.passes, swept.failed_passes), (1, 0), "{swept:?}");
    assert_eq!(swept.reclaimed, 40, "{swept:?}");
    for s in &live {
        assert_eq!(clone.load(&s.id).await.unwrap().as_ref(), Some(s));
    }
    assert!(!lease_keys(&server).await.is_empty());

    // One clone dropped: the sweeper runs on for the other.
    drop(store);
    assert!(clone.sweep_stats().is_some());
    assert!(!lease_keys(&server).await.is_empty());
    // The last: the task ends (its sender goes) and gives its leases back.
    drop(clone);
    stats.changed().await.unwrap_err();
    assert_eq!(lease_keys(&server).await, Vec::<String>::new());
}

/// Layouts whose keys Redis expires itself start no sweeper.
#[tokio::test]
async fn a_key_per_session_store_starts_no_sweeper() {
    let server = common::server();
    let layout = sessionpack_cli::baselines::KeyPerSession::new(
        common::manager(&server).await,
        sessionpack_cli::baselines::Encoding::PackedSetex,
    );
    let store: Store<_, ()> = Store::new(layout);
    assert!(store.sweep_stats().is_none());
}

/// A pass counts each expired session it removes once, as reclaimed,
/// whether the user index's sweep found it first or the buckets' sweep
/// did: with and without an index, the same sessions give the same count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_sessions_count_as_reclaimed_with_or_without_a_user_index() {
    use sessionpack::users::UserIndexConfig;
    use sessionpack::{Compact, CompactConfig};
    let server = common::server();
    for indexed in [false, true] {
        let mut config = CompactConfig::new(4).with_namespace(format!("reclaim{indexed}"));
        if indexed {
            config = config.with_user_index(UserIndexConfig {
                bits: 2,
                grace_secs: 1,
                skew_secs: 0,
            });
        }
        let layout = Compact::new(common::manager(&server).await, config)
            .await
            .unwrap();
        let store: Store<_, String> = Store::new(layout.clone())
            .without_sweeper()
            .with_ttl(long());
        let mut brief = Vec::new();
        for owner in 0..3u64 {
            brief.push(
                store
                    .create_with_ttl(owner, "brief".into(), Duration::from_secs(1))
                    .await
                    .unwrap()
                    .id,
            );
            store.create(owner, "live".into()).await.unwrap();
        }
        while common::found(&store, &brief).await > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Full passes (the index's sweep runs on those) until all three
        // are counted; an index entry inside its grace is judged a pass
        // later, and a session is counted wherever it is removed.
        let sweeper = Sweeper::new(layout.clone(), SweepConfig::default());
        let units = sweeper.units();
        let mut reclaimed = 0;
        let mut dropped = 0;
        let mut passes = 0;
        while reclaimed < 3 || (indexed && dropped < 3) {
            let report = sweeper.sweep_range_full(0..units).await.unwrap();
            reclaimed += report.reclaimed;
            dropped += report.index_dropped;
            passes += 1;
            assert!(passes < 600, "never reclaimed: {reclaimed} {dropped}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(reclaimed, 3, "indexed: {indexed}");
        if indexed {
            assert_eq!(dropped, 3);
            let audit = layout.audit_users().await.unwrap();
            assert_eq!((audit.sessions, audit.entries), (3, 3), "{audit:?}");
            assert_eq!((audit.orphans, audit.unindexed), (0, 0), "{audit:?}");
        }
        let again = sweeper.sweep_range_full(0..units).await.unwrap();
        assert_eq!((again.reclaimed, again.index_dropped), (0, 0));
    }
}
