//! Integrity under faults and races, against real servers: what eviction,
//! foreign keys, stopped sweepers, stalled clients, restarts and rolling
//! deploys must not break.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use sessionpack::session::layout::Bucketed;
use sessionpack::session::layout::BucketedConfig;
use sessionpack::session::layout::Layout;
use sessionpack::session::meta::StoreMeta;
use sessionpack::session::sweep::{SweepConfig, Sweeper};
use sessionpack::{Error, SessionId, Store};
use sessionpack_testkit::LocalServer;

fn long() -> Duration {
    Duration::from_secs(3600)
}

/// Sessions with records too large for a listpack entry.
fn fat(len: usize) -> String {
    "f".repeat(len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_that_lost_its_zset_is_repaired_by_the_sweeper() {
    let server = common::server();
    let layout = common::bucketed(&server, 3).await;
    let store: Store<_, String> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(long());
    let mut sessions = Vec::new();
    for i in 0..400u64 {
        let attrs = if i % 7 == 0 { fat(200) } else { String::new() };
        sessions.push(store.create(i, attrs).await.unwrap());
    }
    let b = layout.buckets().clone();
    let lost = b.bucket_of(&sessions[0].id);
    let mut raw = common::raw(&server).await;
    // What an allkeys-* eviction does: one key of the bucket goes.
    let _: () = raw.del(b.zset_key(lost)).await.unwrap();
    // And in another bucket, the HASH goes and the ZSET stays.
    let other = (lost + 1) % b.count();
    let _: () = raw.del(b.hash_key(other)).await.unwrap();
    let before = common::audit(&mut raw, &b).await;
    assert!(before.fields_without_expiry > 0 && before.expiries_without_field > 0);

    let sweeper = Sweeper::new(layout.clone(), SweepConfig::default());
    let report = sweeper.sweep_range(0..b.count()).await.unwrap();
    assert_eq!(
        report.repaired,
        before.fields_without_expiry + before.expiries_without_field
    );
    let after = common::audit(&mut raw, &b).await;
    assert_eq!(after.fields_without_expiry, 0);
    assert_eq!(after.expiries_without_field, 0);
    assert_eq!(after.records_without_entry, 0, "orphaned records deleted");
    // Sessions of the untouched buckets are all still there.
    for s in &sessions {
        let bucket = b.bucket_of(&s.id);
        let found = store.load(&s.id).await.unwrap();
        assert_eq!(found.is_some(), bucket != lost && bucket != other);
    }
    assert_eq!(after.sessions, before.sessions);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_left_half_evicted_by_allkeys_policies_are_swept_clean() {
    let server =
        LocalServer::start_with(&["--maxmemory", "4mb", "--maxmemory-policy", "allkeys-random"])
            .unwrap();
    let layout = common::bucketed(&server, 10).await;
    assert_eq!(layout.eviction_policy(), Some("allkeys-random"));
    let mut raw = common::raw(&server).await;
    let store: Store<_, ()> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(600));
    let batch: Vec<(u64, ())> = (0..2000).map(|i| (i, ())).collect();
    let evicted = || async {
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .query_async(&mut common::raw(&server).await)
            .await
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("evicted_keys:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap()
    };
    // Fill past maxmemory until keys are evicted (by count, not by time:
    // the sessions live ten minutes).
    for _ in 0..1000 {
        if evicted().await >= 200 {
            break;
        }
        let _ = store.create_many(&batch).await;
    }
    assert!(evicted().await >= 200, "the server evicted keys");
    let b = layout.buckets().clone();
    let half = common::audit(&mut raw, &b).await;
    assert!(
        half.fields_without_expiry + half.expiries_without_field > 0,
        "eviction split buckets: {half:?}"
    );
    // No more eviction from here, so what the sweep mends stays mended.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .query_async(&mut raw)
        .await
        .unwrap();
    let sweeper = Sweeper::new(layout.clone(), SweepConfig::default());
    let report = sweeper.sweep_range(0..b.count()).await.unwrap();
    assert!(report.repaired > 0, "{report:?}");
    // Every bucket is whole again: each session in both keys or in neither.
    let whole = common::audit(&mut raw, &b).await;
    assert_eq!(
        (whole.fields_without_expiry, whole.expiries_without_field),
        (0, 0),
        "{whole:?}"
    );
    assert!(whole.sessions > 0, "{whole:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capped_pass_stopped_at_any_point_leaves_no_record_behind() {
    let server = common::server();
    let conn = common::manager(&server).await;
    let layout = Bucketed::new(conn.clone(), BucketedConfig::new(5))
        .await
        .unwrap();
    let b = layout.buckets().clone();
    let mut raw = common::raw(&server).await;
    let config = SweepConfig::default().with_max_sessions(500);
    let mut stopped_mid_pass = 0;
    for stop_after_ms in [1u64, 2, 3, 5, 8, 12, 20, 30] {
        // Every record out of line, and a cap that evicts most of them.
        let store: Store<_, String> = Store::new(layout.clone())
            .without_sweeper()
            .with_ttl(long());
        let batch: Vec<(u64, String)> = (0..3000).map(|i| (i, fat(100))).collect();
        store.create_many(&batch).await.unwrap();
        let sweeper = Sweeper::new(layout.clone(), config.clone());
        let outcome =
            tokio::time::timeout(Duration::from_millis(stop_after_ms), sweeper.enforce_cap()).await;
        if outcome.is_err() {
            stopped_mid_pass += 1;
        }
        common::drain(&conn).await;
        let audit = common::audit(&mut raw, &b).await;
        assert_eq!(
            audit.records_without_entry, 0,
            "stopped after {stop_after_ms} ms"
        );
        assert_eq!(audit.fields_without_expiry, 0);
        let _: () = redis::cmd("FLUSHDB").query_async(&mut raw).await.unwrap();
    }
    assert!(stopped_mid_pass > 0, "no pass was stopped part way");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_a_session_with_an_absurd_expiry_writes_nothing() {
    let server = common::server();
    let layout = common::bucketed(&server, 4).await;
    let store: Store<_, ()> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(long());
    let s = store.create(1, ()).await.unwrap();
    let b = layout.buckets();
    let mut raw = common::raw(&server).await;
    // Written by hand, or by an older version: an expiry past 2106.
    let _: () = raw
        .zadd(b.zset_key(b.bucket_of(&s.id)), b.field(&s.id), 1.8e19)
        .await
        .unwrap();
    let keys: u64 = redis::cmd("DBSIZE").query_async(&mut raw).await.unwrap();
    assert!(matches!(
        store.rotate(&s.id).await,
        Err(Error::InvalidTtl { .. })
    ));
    let after: u64 = redis::cmd("DBSIZE").query_async(&mut raw).await.unwrap();
    assert_eq!(keys, after);
    assert_eq!(common::audit(&mut raw, b).await.sessions, 1, "no copy left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotations_racing_touches_never_drop_the_touch() {
    let server = common::server();
    let layout = common::bucketed(&server, 6).await;
    let short: Store<_, ()> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(100));
    let long: Arc<Store<_, ()>> = Arc::new(
        Store::new(layout.clone())
            .without_sweeper()
            .with_ttl(long()),
    );
    let batch: Vec<(u64, ())> = (0..400).map(|i| (i, ())).collect();
    let ids = short.create_many(&batch).await.unwrap();
    let mut tasks = Vec::new();
    for id in ids {
        let store = long.clone();
        let rotate = tokio::spawn({
            let store = store.clone();
            async move { store.rotate(&id).await.unwrap() }
        });
        let touch = tokio::spawn(async move { store.touch(&id).await.unwrap() });
        tasks.push((rotate, touch));
    }
    let mut touched_first = 0;
    for (rotate, touch) in tasks {
        let new_id = rotate.await.unwrap().expect("rotated");
        let moved = long.load(&new_id).await.unwrap().expect("live");
        if let Some(touched) = touch.await.unwrap() {
            // The touch found the old id live, so it landed before the
            // rotation removed it: the new id carries it.
            touched_first += 1;
            assert!(moved.expires_at >= touched, "touch dropped");
        }
    }
    assert!(touched_first > 0, "no touch raced a rotation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loads_never_miss_a_record_moving_in_or_out_of_line() {
    let server = common::server();
    let layout = common::bucketed(&server, 2).await;
    let store: Arc<Store<_, String>> =
        Arc::new(Store::new(layout).without_sweeper().with_ttl(long()));
    let s = store.create(1, String::new()).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn({
        let (store, stop) = (store.clone(), stop.clone());
        async move {
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let attrs = if flips.is_multiple_of(2) {
                    fat(300)
                } else {
                    String::new()
                };
                store
                    .update(&s.id, |a| *a = attrs.clone())
                    .await
                    .unwrap()
                    .expect("live");
                flips += 1;
            }
            flips
        }
    });
    let missed = Arc::new(AtomicU64::new(0));
    let mut readers = Vec::new();
    for _ in 0..3 {
        let (store, missed) = (store.clone(), missed.clone());
        readers.push(tokio::spawn(async move {
            for _ in 0..4000 {
                if store.load(&s.id).await.unwrap().is_none() {
                    missed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for r in readers {
        r.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let flips = writer.await.unwrap();
    assert!(flips > 100, "{flips} moves raced the loads");
    assert_eq!(
        missed.load(Ordering::Relaxed),
        0,
        "a live session read as gone"
    );
}

/// A connection that, once armed, holds back the reply to its next
/// pipeline for a while: a client stalled (a paused VM, a blocked runtime)
/// between sending a request and taking in its reply.
#[derive(Clone)]
struct Stalling {
    inner: redis::aio::MultiplexedConnection,
    stall: Arc<std::sync::Mutex<Option<Duration>>>,
}

impl redis::aio::ConnectionLike for Stalling {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        self.inner.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        Box::pin(async move {
            let replies = self
                .inner
                .req_packed_commands(pipeline, offset, count)
                .await;
            let stall = self.stall.lock().unwrap().take();
            if let Some(stall) = stall {
                tokio::time::sleep(stall).await;
            }
            replies
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_stalled_on_a_time_reply_never_returns_an_expired_session() {
    let server = common::server();
    let conn = Stalling {
        inner: common::raw(&server).await,
        stall: Arc::default(),
    };
    let layout = Bucketed::new(conn.clone(), BucketedConfig::new(4))
        .await
        .unwrap();
    let store: Store<_, ()> = Store::new(layout)
        .without_sweeper()
        .with_ttl(Duration::from_secs(3));
    let s = store.create(1, ()).await.unwrap();
    // The first load reads the server's time with the session, and its
    // reply is taken in past the session's expiry.
    *conn.stall.lock().unwrap() = Some(Duration::from_millis(4500));
    let found = store.load(&s.id).await.unwrap();
    let (now, _): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut common::raw(&server).await)
        .await
        .unwrap();
    assert!(now >= s.expires_at, "the stall outlasted the session");
    assert_eq!(found, None, "an expired session was returned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_skips_its_bucket_and_not_the_sweep() {
    let server = common::server();
    let layout = common::bucketed(&server, 4).await;
    let b = layout.buckets().clone();
    let one: Store<_, ()> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(1));
    let batch: Vec<(u64, ())> = (0..1600).map(|i| (i, ())).collect();
    let ids = one.create_many(&batch).await.unwrap();
    let mut raw = common::raw(&server).await;
    // Another program's string where bucket 3's ZSET was.
    let _: () = raw.del(b.zset_key(3)).await.unwrap();
    let _: () = raw.set(b.zset_key(3), "theirs").await.unwrap();
    let in_3 = ids.iter().filter(|id| b.bucket_of(id) == 3).count() as u64;
    let hash_3: u64 = raw.hlen(b.hash_key(3)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;

    let config = SweepConfig::default()
        .with_segments(4)
        .with_max_sessions(10);
    let sweeper = Sweeper::new(layout.clone(), config);
    let report = sweeper.pass().await.expect("the pass goes on");
    assert_eq!(report.reclaimed, 1600 - in_3);
    assert!(report.bad_buckets >= 1, "{report:?}");
    assert_eq!(report.bad[0].bucket, 3);
    assert!(report.bad[0].error.contains("WRONGTYPE"), "{report:?}");
    // The bad bucket was left exactly as it was.
    let theirs: String = raw.get(b.zset_key(3)).await.unwrap();
    assert_eq!(theirs, "theirs");
    assert_eq!(raw.hlen::<_, u64>(b.hash_key(3)).await.unwrap(), hash_3);
    // The cap counts and evicts around it too. (Sessions whose id falls
    // in the bad bucket cannot be created: their store call says so.)
    let live: Store<_, ()> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(long());
    let mut created = 0;
    while created < 100 {
        match live.create(1, ()).await {
            Ok(_) => created += 1,
            Err(Error::WrongType { .. }) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    let capped = sweeper.enforce_cap().await.unwrap();
    assert!(capped.bad_buckets >= 1);
    assert_eq!(capped.evicted, 90, "{capped:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_an_expired_bucket_spares_a_foreign_key_in_its_place() {
    let server = common::server();
    let layout = common::bucketed(&server, 1).await;
    let b = layout.buckets().clone();
    let one: Store<_, ()> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(1));
    let batch: Vec<(u64, ())> = (0..200).map(|i| (i, ())).collect();
    one.create_many(&batch).await.unwrap();
    let mut raw = common::raw(&server).await;
    let _: () = raw.del(b.hash_key(0)).await.unwrap();
    let _: () = raw.set(b.hash_key(0), "theirs").await.unwrap();
    let zset_0: u64 = raw.zcard(b.zset_key(0)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let sweeper = Sweeper::new(layout.clone(), SweepConfig::default());
    let report = sweeper.sweep_range(0..2).await.unwrap();
    assert_eq!(report.bad_buckets, 1);
    assert_eq!(report.reclaimed, 200 - zset_0);
    let theirs: String = raw.get(b.hash_key(0)).await.unwrap();
    assert_eq!(theirs, "theirs");
    assert_eq!(raw.zcard::<_, u64>(b.zset_key(0)).await.unwrap(), zset_0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_is_exact_with_four_sweepers_and_one_expiry_second() {
    let server = common::server();
    // 64 buckets: every bucket is sampled, so the cap is exact.
    let layout = common::bucketed(&server, 6).await;
    let store: Store<_, String> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(long());
    // Sessions sharing one expiry second (one pipelined batch), a few
    // with records out of line.
    let batch: Vec<(u64, String)> = (0..8000)
        .map(|i| (i, if i % 50 == 0 { fat(100) } else { String::new() }))
        .collect();
    store.create_many(&batch).await.unwrap();
    let config = SweepConfig::default()
        .with_segments(8)
        .with_max_sessions(5000);
    let evicted: u64 = common::concurrent_passes(layout.clone(), config.clone(), 4)
        .await
        .iter()
        .map(|r| r.evicted)
        .sum();
    let mut raw = common::raw(&server).await;
    let audit = common::audit(&mut raw, layout.buckets()).await;
    assert_eq!(audit.sessions, 5000, "evicted {evicted}");
    assert_eq!(evicted, 3000);
    assert_eq!(audit.records_without_entry, 0);
    // Again: at the cap, nothing more goes.
    let again = Sweeper::new(layout.clone(), config).enforce_cap().await;
    assert_eq!(again.unwrap().evicted, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sampled_cap_with_ties_holds_within_its_bound() {
    let server = common::server();
    // 2^13 buckets: the cutoff comes from a sample of 4096 of them.
    let layout = common::bucketed(&server, 13).await;
    let store: Store<_, ()> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(long());
    let n = 30_000u64;
    let batch: Vec<(u64, ())> = (0..n).map(|i| (i, ())).collect();
    store.create_many(&batch).await.unwrap();
    let cap = 20_000u64;
    let sweeper = Sweeper::new(
        layout.clone(),
        SweepConfig::default().with_max_sessions(cap),
    );
    sweeper.enforce_cap().await.unwrap();
    let mut raw = common::raw(&server).await;
    let kept = common::audit(&mut raw, layout.buckets()).await.sessions;
    // Sampled (expiry, field) quantile: about half the sessions sampled.
    let q = (n - cap) as f64 / n as f64;
    let bound = 3.0 * n as f64 * (q * (1.0 - q) / (n as f64 / 2.0)).sqrt();
    assert!(
        (kept as f64 - cap as f64).abs() <= bound,
        "kept {kept}, bound {bound}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_sweeper_sweeps_every_segment_every_pass() {
    let server = common::server();
    let layout = common::bucketed(&server, 8).await;
    let config = SweepConfig::default()
        .with_segments(32)
        .with_interval(Duration::from_secs(30));
    let sweeper = Sweeper::new(layout.clone(), config.clone());
    for pass in 0..3 {
        let r = sweeper.pass().await.unwrap();
        assert_eq!(
            (r.segments_swept, r.segments_skipped),
            (32, 0),
            "pass {pass}"
        );
    }
    // Another sweeper still finds them all leased.
    let other = Sweeper::new(layout, config).pass().await.unwrap();
    assert_eq!((other.segments_swept, other.segments_skipped), (0, 32));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_loading_its_data_is_unavailable_then_serves() {
    // Loading slowed down and answering clients while it loads, so the
    // window is wide enough to call into.
    let server = Arc::new(
        LocalServer::start_with(&[
            "--key-load-delay",
            "5000",
            "--loading-process-events-interval-bytes",
            "1024",
        ])
        .unwrap(),
    );
    let layout = common::bucketed(&server, 8).await;
    let store: Store<_, ()> = Store::new(layout).without_sweeper().with_ttl(long());
    let batch: Vec<(u64, ())> = (0..10_000).map(|i| (i, ())).collect();
    let ids = store.create_many(&batch).await.unwrap();
    let mut raw = common::raw(&server).await;
    let _: () = redis::cmd("SAVE").query_async(&mut raw).await.unwrap();
    let restarting = tokio::task::spawn_blocking({
        let server = server.clone();
        move || server.restart()
    });
    let mut loading = 0;
    let started = Instant::now();
    while !restarting.is_finished() && started.elapsed() < Duration::from_secs(30) {
        match store.load(&ids[0]).await {
            Err(Error::Unavailable(e)) => {
                if e.code() == Some("LOADING") {
                    loading += 1;
                }
            }
            Err(e) => panic!("not a transient error: {e:?}"),
            Ok(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    restarting.await.unwrap().unwrap();
    assert!(loading > 0, "no call met the server loading");
    assert!(
        store.load(&ids[9_999]).await.unwrap().is_some(),
        "serves again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_and_new_code_share_sessions_during_a_deploy() {
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct V1 {
        visits: u32,
    }
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct V2 {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nick: Option<u32>,
        visits: u32,
        #[serde(default)]
        theme: String,
    }
    let server = common::server();
    let layout = common::bucketed(&server, 4).await;
    let v1: Store<_, V1> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(long());
    let v2: Store<_, V2> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(long());
    let old = v1.create(1, V1 { visits: 3 }).await.unwrap();
    let new = v2
        .create(
            2,
            V2 {
                nick: None,
                visits: 5,
                theme: "dark".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        v1.load(&new.id).await.unwrap().unwrap().attrs,
        V1 { visits: 5 }
    );
    let read = v2.load(&old.id).await.unwrap().unwrap().attrs;
    assert_eq!((read.nick, read.visits, read.theme.as_str()), (None, 3, ""));
    // Old code updating a new record keeps what it does not know? No: it
    // writes what it knows; new code reads its defaults back, not garbage.
    v1.update(&new.id, |a| a.visits += 1).await.unwrap();
    let back = v2.load(&new.id).await.unwrap().unwrap().attrs;
    assert_eq!((back.nick, back.visits), (None, 6));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_opened_with_other_bucket_bits_is_refused() {
    let server = common::server();
    let conn = common::manager(&server).await;
    let layout = Bucketed::new(conn.clone(), BucketedConfig::new(16))
        .await
        .unwrap();
    let meta = StoreMeta::read(&conn, "sp").await.unwrap().unwrap();
    assert_eq!(
        (meta.layout.as_str(), meta.bucket_bits, meta.id_bits),
        ("bucketed", 16, 160)
    );
    for bits in [15, 17] {
        match Bucketed::new(conn.clone(), BucketedConfig::new(bits)).await {
            Err(Error::Config(msg)) => assert!(msg.contains("16 bucket bits"), "{msg}"),
            other => panic!("expected a Config error, got {other:?}"),
        }
    }
    // Nor may a store of another id width share it.
    let narrow = BucketedConfig::new(16).with_id_width(sessionpack::IdWidth::Bits128);
    match Bucketed::new(conn.clone(), narrow).await {
        Err(Error::Config(msg)) => assert!(msg.contains("160-bit ids"), "{msg}"),
        other => panic!("expected a Config error, got {other:?}"),
    }
    // The same bits, and another namespace, open.
    Bucketed::new(conn.clone(), BucketedConfig::new(16))
        .await
        .unwrap();
    Bucketed::new(
        conn.clone(),
        BucketedConfig::new(17).with_namespace("other"),
    )
    .await
    .unwrap();
    // Metadata of another type is a clear error, not a guess.
    let _: () = common::raw(&server)
        .await
        .set("broken:meta", "x")
        .await
        .unwrap();
    assert!(matches!(
        Bucketed::new(conn, BucketedConfig::new(16).with_namespace("broken")).await,
        Err(Error::WrongType { .. })
    ));
    drop(layout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_lifetimes_reach_no_layout_call() {
    let server = common::server();
    let layout = common::bucketed(&server, 4).await;
    for secs in [0, sessionpack::ttl::MAX_TTL_SECS + 1, u64::MAX] {
        let id = SessionId::generate().unwrap();
        assert!(matches!(
            layout
                .insert(&id, &[1], sessionpack::ttl::Deadline::In(secs))
                .await,
            Err(Error::InvalidTtl { .. })
        ));
        assert!(matches!(
            layout.touch(&id, secs).await,
            Err(Error::InvalidTtl { .. })
        ));
    }
    let id = SessionId::generate().unwrap();
    assert!(matches!(
        layout
            .insert(
                &id,
                &[1],
                sessionpack::ttl::Deadline::At(u64::from(u32::MAX) + 1)
            )
            .await,
        Err(Error::InvalidTtl { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_or_persisted_lease_keys_do_not_stop_sweeping() {
    let server = common::server();
    let layout = common::bucketed(&server, 4).await;
    let one: Store<_, ()> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(1));
    let batch: Vec<(u64, ())> = (0..800).map(|i| (i, ())).collect();
    one.create_many(&batch).await.unwrap();
    let mut raw = common::raw(&server).await;
    // Another program's HASH where segment 0's lease goes, a lease that lost
    // its expiry (PERSIST) for segment 1, and a LIST where the cap's goes.
    let _: () = raw.hset("sp:sweep:4:0", "theirs", 1).await.unwrap();
    let _: () = raw.set("sp:sweep:4:1", "stuck").await.unwrap();
    let _: () = raw.rpush("sp:sweep:cap", "theirs").await.unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let config = SweepConfig::default()
        .with_segments(4)
        .with_max_sessions(1_000);
    let report = Sweeper::new(layout.clone(), config).pass().await.unwrap();
    assert_eq!(report.segments_swept, 4, "{report:?}");
    assert_eq!(report.reclaimed, 800);
    assert_eq!(report.lease_errors.len(), 2, "{report:?}");
    let theirs: u64 = raw.hget("sp:sweep:4:0", "theirs").await.unwrap();
    assert_eq!(theirs, 1, "a foreign key is left alone");
    let ttl: i64 = raw.pttl("sp:sweep:4:1").await.unwrap();
    assert!(ttl > 0, "the stuck lease was taken over with a lifetime");
    let list: Vec<String> = raw.lrange("sp:sweep:cap", 0, -1).await.unwrap();
    assert_eq!(list, ["theirs"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_refusing_writes_is_a_transient_error_and_loses_nothing() {
    let server =
        LocalServer::start_with(&["--maxmemory", "3mb", "--maxmemory-policy", "noeviction"])
            .unwrap();
    let layout = common::bucketed(&server, 6).await;
    let store: Store<_, ()> = Store::new(layout).without_sweeper().with_ttl(long());
    let mut created = Vec::new();
    let refused = loop {
        match store.create(created.len() as u64, ()).await {
            Ok(s) => created.push(s),
            Err(e) => break e,
        }
        assert!(created.len() < 200_000, "the server never filled up");
    };
    assert!(refused.is_transient(), "{refused:?}");
    assert!(matches!(&refused, Error::Unavailable(e) if e.code() == Some("OOM")));
    // Reads still work, and every acknowledged session is there.
    let ids: Vec<SessionId> = created.iter().map(|s| s.id).collect();
    let found = store.load_many(&ids).await.unwrap();
    assert!(found.iter().all(Option::is_some));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_with_an_id_of_another_width_writes_nothing() {
    let server = common::server();
    let conn = common::manager(&server).await;
    let narrow = sessionpack::IdWidth::Bits128;
    let bucketed = Bucketed::new(
        conn.clone(),
        BucketedConfig::new(4)
            .with_namespace("b")
            .with_id_width(narrow),
    )
    .await
    .unwrap();
    let compact = sessionpack::Compact::new(
        conn,
        sessionpack::CompactConfig::new(4)
            .with_namespace("c")
            .with_id_width(narrow),
    )
    .await
    .unwrap();
    let mut raw = common::raw(&server).await;
    let keys: u64 = redis::cmd("DBSIZE").query_async(&mut raw).await.unwrap();
    let record = sessionpack::session::record::encode(&1u64, &()).unwrap();
    let mut batch: Vec<(SessionId, Vec<u8>)> = (0..2000)
        .map(|_| (SessionId::generate_with(narrow).unwrap(), record.clone()))
        .collect();
    batch.push((SessionId::generate().unwrap(), record));
    assert!(matches!(
        bucketed.insert_many(&batch, 600).await,
        Err(Error::InvalidId(_))
    ));
    assert!(matches!(
        compact.insert_many(&batch, 600).await,
        Err(Error::InvalidId(_))
    ));
    let after: u64 = redis::cmd("DBSIZE").query_async(&mut raw).await.unwrap();
    assert_eq!(keys, after, "nothing written");
}
