//! The compact layout inspected in Redis, and its index-guided sweeper.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use sessionpack::session::layout::Layout;
use sessionpack::session::sweep::{SweepConfig, Sweeper};
use sessionpack::{Compact, CompactConfig, IdWidth, SessionId, Store};
use sessionpack_testkit::LocalServer;

async fn compact(server: &LocalServer, bits: u8) -> Compact<redis::aio::ConnectionManager> {
    Compact::new(common::manager(server).await, CompactConfig::new(bits))
        .await
        .expect("compact layout")
}

/// Every bucket key and index entry of a compact namespace: (bucket, field
/// count, earliest expiry) and the index's (bucket, score).
async fn inspect(
    raw: &mut redis::aio::MultiplexedConnection,
    layout: &Compact<redis::aio::ConnectionManager>,
) -> (Vec<(u32, u64)>, Vec<(u32, u64)>) {
    let scheme = layout.scheme();
    let mut buckets = Vec::new();
    let mut index = Vec::new();
    for g in 0..scheme.groups() {
        let entries: Vec<(u32, f64)> = raw
            .zrange_withscores(scheme.index_key(g), 0, -1)
            .await
            .unwrap();
        let base = scheme.group_buckets(g).start;
        index.extend(entries.into_iter().map(|(m, s)| (base + m, s as u64)));
        for bucket in scheme.group_buckets(g) {
            // Sessions and markers; not the pieces of long records, whose
            // fields are one byte longer than a session's, or four bytes
            // (short names), and end in their number.
            let fields: Vec<Vec<u8>> = raw.hkeys(scheme.bucket_key(bucket)).await.unwrap();
            let piece = |f: &Vec<u8>| {
                (f.len() == layout.buckets().field_len() + 1 || f.len() == 4)
                    && f.last().is_some_and(|&b| b <= 15)
            };
            let n = fields.iter().filter(|f| !piece(f)).count() as u64;
            if n > 0 {
                buckets.push((bucket, n));
            }
        }
    }
    (buckets, index)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_values_and_index_are_as_documented() {
    let server = common::server();
    let layout = compact(&server, 10).await;
    let store: Store<_, ()> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(3600));
    let big = store.create(1_234_567, ()).await.unwrap();
    let small = store.create(42, ()).await.unwrap();
    let mut raw = common::raw(&server).await;
    let scheme = layout.scheme();
    let b = layout.buckets();
    for s in [&big, &small] {
        let bucket = b.bucket_of(&s.id);
        // 2^10 buckets in 2^3 groups of 128: the tag is the group.
        let key = scheme.bucket_key(bucket);
        assert_eq!(key, format!("sp:{{{:x}}}:{:x}", bucket >> 7, bucket & 127));
        assert_eq!(
            common::encoding(&mut raw, &key).await,
            "listpack",
            "bucket stays a listpack"
        );
        let index = scheme.index_key(bucket >> 7);
        assert_eq!(common::encoding(&mut raw, &index).await, "listpack");
        let score: f64 = raw.zscore(&index, bucket & 127).await.unwrap();
        assert!(score as u64 <= s.expires_at, "the index bounds the expiry");
    }
    let field = b.field(&big.id);
    assert_eq!(
        field.len(),
        19,
        "160-bit id less the 10-bit prefix's whole byte"
    );
    // An identity of 7 digits: one listpack integer, identity * 10^10 + expiry.
    let value: String = raw
        .hget(scheme.bucket_key(b.bucket_of(&big.id)), &field)
        .await
        .unwrap();
    assert_eq!(value, format!("1234567{:010}", big.expires_at));
    // A small identity: 4 expiry bytes and the 1-byte MessagePack integer.
    let value: Vec<u8> = raw
        .hget(
            scheme.bucket_key(b.bucket_of(&small.id)),
            b.field(&small.id),
        )
        .await
        .unwrap();
    let mut expected = (small.expires_at as u32).to_be_bytes().to_vec();
    expected.push(42);
    assert_eq!(value, expected);
    // Bucket keys carry no expiry; the store's metadata says what it is.
    let ttl: i64 = raw
        .ttl(scheme.bucket_key(b.bucket_of(&big.id)))
        .await
        .unwrap();
    assert_eq!(ttl, -1);
    let layout_name: String = raw.hget("sp:meta", "layout").await.unwrap();
    assert_eq!(layout_name, "compact");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_visits_only_the_buckets_its_index_names() {
    let server = common::server();
    let layout = compact(&server, 10).await;
    let long: Store<_, ()> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(3600));
    let batch: Vec<(u64, ())> = (0..20_000).map(|i| (i, ())).collect();
    let alive = long.create_many(&batch).await.unwrap();
    // Short-lived sessions in a few buckets only: every 64th.
    let b = layout.buckets().clone();
    let record = sessionpack::session::record::encode(&7u64, &()).unwrap();
    let mut doomed_buckets = HashSet::new();
    for i in 0..300u32 {
        let bucket = (i % 16) * 64;
        let id = b.with_bucket(&SessionId::generate().unwrap(), bucket);
        let inserted = layout
            .insert(&id, &record, sessionpack::ttl::Deadline::In(1))
            .await
            .unwrap();
        assert!(matches!(
            inserted,
            sessionpack::session::layout::Inserted::Created { .. }
        ));
        doomed_buckets.insert(bucket);
    }
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let sweeper = Sweeper::new(layout.clone(), SweepConfig::default());
    assert_eq!(sweeper.units(), 8, "2^10 buckets in 8 groups");
    let report = sweeper.sweep_range(0..8).await.unwrap();
    assert_eq!(report.reclaimed, 300);
    // Only the 16 buckets holding short-lived sessions were visited.
    assert_eq!(report.buckets as usize, doomed_buckets.len());
    assert_eq!(common::found(&long, &alive).await, alive.len());
    // The index now holds each bucket's true earliest expiry.
    let mut raw = common::raw(&server).await;
    let (buckets, index) = inspect(&mut raw, &layout).await;
    assert_eq!(
        buckets.len(),
        index.len(),
        "one index entry per live bucket"
    );
    let again = sweeper.sweep_range(0..8).await.unwrap();
    assert_eq!((again.reclaimed, again.buckets), (0, 0), "nothing is due");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_or_stale_index_entry_never_leaves_a_session_unswept() {
    let server = common::server();
    let layout = compact(&server, 9).await;
    let short: Store<_, ()> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(1));
    let batch: Vec<(u64, ())> = (0..5_000).map(|i| (i, ())).collect();
    short.create_many(&batch).await.unwrap();
    let scheme = layout.scheme().clone();
    let mut raw = common::raw(&server).await;
    // Group 0's index deleted by hand, group 1's entries rescored far ahead.
    let _: () = raw.del(scheme.index_key(0)).await.unwrap();
    for m in 0..128u32 {
        let _: () = redis::cmd("ZADD")
            .arg(scheme.index_key(1))
            .arg("XX")
            .arg(4_000_000_000u64)
            .arg(m)
            .query_async(&mut raw)
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let config = SweepConfig {
        full_pass_every: 2,
        segments: 4,
        ..SweepConfig::default()
    };
    let sweeper = Sweeper::new(layout.clone(), config);
    // Index-guided: groups 0 and 1 are not found.
    let guided = sweeper.sweep_range(0..4).await.unwrap();
    let missed: u64 = 5_000 - guided.reclaimed;
    assert!(missed > 1_000, "reclaimed {}", guided.reclaimed);
    // A full pass finds them and restores the index.
    let full = sweeper.sweep_range_full(0..4).await.unwrap();
    assert_eq!(full.reclaimed, missed);
    let (buckets, index) = inspect(&mut raw, &layout).await;
    assert!(
        buckets.is_empty() && index.is_empty(),
        "{buckets:?} {index:?}"
    );
    // The task makes full passes on its own: the first, then every 2nd.
    let live: Store<_, ()> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(3600));
    let kept = live.create_many(&batch[..1000]).await.unwrap();
    let _: () = raw.del(scheme.index_key(2)).await.unwrap();
    let first = Sweeper::new(layout.clone(), SweepConfig::default().with_segments(4));
    first.pass().await.unwrap();
    let (buckets, index) = inspect(&mut raw, &layout).await;
    assert_eq!(
        buckets.len(),
        index.len(),
        "the first pass restored the index"
    );
    assert_eq!(common::found(&live, &kept).await, kept.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn touches_racing_sweeps_and_destroys_lose_nothing_and_revive_nothing() {
    let server = common::server();
    let layout = compact(&server, 6).await;
    let three: Store<_, ()> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(3));
    let one: Store<_, ()> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(1));
    let long: Arc<Store<_, ()>> = Arc::new(
        Store::new(layout.clone())
            .without_sweeper()
            .with_ttl(Duration::from_secs(600)),
    );
    let batch: Vec<(u64, ())> = (0..3000).map(|i| (100_000 + i, ())).collect();
    let kept = Arc::new(three.create_many(&batch).await.unwrap());
    let doomed = one.create_many(&batch[..2000]).await.unwrap();
    let destroyed = long.create_many(&batch[..500]).await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let sweeping = {
        let stop = stop.clone();
        let sweeper = Sweeper::new(layout.clone(), SweepConfig::default());
        tokio::spawn(async move {
            let mut reclaimed = 0;
            let mut full = false;
            while !stop.load(Ordering::Relaxed) {
                let r = if full {
                    sweeper.sweep_range_full(0..1).await
                } else {
                    sweeper.sweep_range(0..1).await
                };
                reclaimed += r.unwrap().reclaimed;
                full = !full;
            }
            reclaimed
        })
    };
    let destroying = {
        let long = long.clone();
        tokio::spawn(async move {
            for id in &destroyed {
                assert!(long.destroy(id).await.unwrap());
            }
            destroyed
        })
    };
    let mut touchers = Vec::new();
    let rounds = Arc::new(AtomicU64::new(0));
    for t in 0..4usize {
        let (long, kept, stop, rounds) = (long.clone(), kept.clone(), stop.clone(), rounds.clone());
        touchers.push(tokio::spawn(async move {
            // One first reached after its initial 3 s had run out (a slow
            // machine) is rightly gone, and is not counted as kept.
            let mut alive = HashSet::new();
            while !stop.load(Ordering::Relaxed) {
                for id in kept.iter().skip(t).step_by(4) {
                    if long.touch(id).await.unwrap().is_some() {
                        alive.insert(*id);
                    } else {
                        assert!(!alive.contains(id), "a live session was swept");
                    }
                }
                rounds.fetch_add(1, Ordering::Relaxed);
            }
            alive
        }));
    }
    // Past every original expiry, and every toucher a round past it.
    tokio::time::sleep(Duration::from_millis(4100)).await;
    let so_far = rounds.load(Ordering::Relaxed);
    while rounds.load(Ordering::Relaxed) < so_far + 4 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut revived = 0;
    for id in &doomed {
        if long.touch(id).await.unwrap().is_some() {
            revived += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut alive: Vec<SessionId> = Vec::new();
    for t in touchers {
        alive.extend(t.await.unwrap());
    }
    sweeping.await.unwrap();
    let destroyed = destroying.await.unwrap();
    assert_eq!(revived, 0);
    // How many were reached in time depends on the machine; some were.
    assert!(!alive.is_empty(), "none kept alive");
    assert_eq!(common::found(&long, &alive).await, alive.len());
    assert_eq!(common::found(&long, &doomed).await, 0);
    assert_eq!(common::found(&long, &destroyed).await, 0);
    // A full sweep now leaves exactly the kept sessions.
    Sweeper::new(layout.clone(), SweepConfig::default())
        .sweep_range_full(0..1)
        .await
        .unwrap();
    let mut raw = common::raw(&server).await;
    let (buckets, _) = inspect(&mut raw, &layout).await;
    let total: u64 = buckets.iter().map(|(_, n)| n).sum();
    assert_eq!(total, alive.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_key_of_another_type_is_skipped_and_reported() {
    let server = common::server();
    let layout = compact(&server, 8).await;
    let one: Store<_, ()> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(1));
    let batch: Vec<(u64, ())> = (0..2000).map(|i| (i, ())).collect();
    let ids = one.create_many(&batch).await.unwrap();
    let b = layout.buckets().clone();
    let scheme = layout.scheme().clone();
    let victim = b.bucket_of(&ids[0]);
    let mut raw = common::raw(&server).await;
    let lost: u64 = raw.hlen(scheme.bucket_key(victim)).await.unwrap();
    let _: () = raw.del(scheme.bucket_key(victim)).await.unwrap();
    let _: () = raw.set(scheme.bucket_key(victim), "theirs").await.unwrap();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let report = Sweeper::new(layout.clone(), SweepConfig::default())
        .sweep_range(0..2)
        .await
        .unwrap();
    assert_eq!(report.reclaimed, 2000 - lost);
    assert_eq!(report.bad_buckets, 1);
    assert_eq!(report.bad[0].bucket, victim);
    let theirs: String = raw.get(scheme.bucket_key(victim)).await.unwrap();
    assert_eq!(theirs, "theirs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn narrow_ids_store_four_bytes_less() {
    let server = common::server();
    let conn = common::manager(&server).await;
    let narrow = Compact::new(
        conn,
        CompactConfig::new(8)
            .with_namespace("n")
            .with_id_width(IdWidth::Bits128),
    )
    .await
    .unwrap();
    let store: Store<_, ()> = Store::new(narrow.clone()).without_sweeper();
    let s = store.create(5, ()).await.unwrap();
    assert_eq!(s.id.to_hex().len(), 32);
    assert_eq!(narrow.buckets().field(&s.id).len(), 15);
    assert!(store.load_cookie(&s.id.to_hex()).await.unwrap().is_some());
    let wide = SessionId::generate().unwrap();
    assert!(store.load_cookie(&wide.to_hex()).await.is_err());
}

/// Out-of-line record keys whose bucket holds no entry for them.
async fn records_without_entry(
    raw: &mut redis::aio::MultiplexedConnection,
    layout: &Compact<redis::aio::ConnectionManager>,
) -> u64 {
    let keys: Vec<String> = raw.keys("sp:{*}:*:o:*").await.unwrap();
    let mut orphans = 0;
    for key in keys {
        let (bucket_key, field_hex) = key.rsplit_once(":o:").unwrap();
        let field = hex::decode(field_hex).unwrap();
        let value: Option<Vec<u8>> = raw.hget(bucket_key, &field).await.unwrap();
        if value.is_none_or(|v| v.last() != Some(&0xc1)) {
            orphans += 1;
        }
    }
    let _ = layout;
    orphans
}

async fn sessions_held(
    raw: &mut redis::aio::MultiplexedConnection,
    layout: &Compact<redis::aio::ConnectionManager>,
) -> u64 {
    let (buckets, _) = inspect(raw, layout).await;
    buckets.iter().map(|(_, n)| n).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_is_exact_with_four_sweepers_and_one_expiry_second() {
    let server = common::server();
    let layout = compact(&server, 8).await;
    let store: Store<_, String> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(3600));
    let batch: Vec<(u64, String)> = (0..8000)
        .map(|i| {
            (
                i,
                if i % 50 == 0 {
                    "f".repeat(100)
                } else {
                    String::new()
                },
            )
        })
        .collect();
    store.create_many(&batch).await.unwrap();
    let config = SweepConfig::default()
        .with_segments(2)
        .with_max_sessions(5000);
    let evicted: u64 = common::concurrent_passes(layout.clone(), config, 4)
        .await
        .iter()
        .map(|r| r.evicted)
        .sum();
    let mut raw = common::raw(&server).await;
    assert_eq!(
        sessions_held(&mut raw, &layout).await,
        5000,
        "evicted {evicted}"
    );
    assert_eq!(evicted, 3000);
    assert_eq!(records_without_entry(&mut raw, &layout).await, 0);
    let (buckets, index) = inspect(&mut raw, &layout).await;
    assert_eq!(buckets.len(), index.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capped_pass_stopped_at_any_point_leaves_no_record_behind() {
    let server = common::server();
    let conn = common::manager(&server).await;
    let layout = Compact::new(conn.clone(), CompactConfig::new(9))
        .await
        .unwrap();
    let mut raw = common::raw(&server).await;
    let config = SweepConfig::default().with_max_sessions(500);
    let mut stopped = 0;
    for stop_after_ms in [1u64, 2, 3, 5, 8, 12, 20, 30] {
        let store: Store<_, String> = Store::new(layout.clone())
            .without_sweeper()
            .with_ttl(Duration::from_secs(3600));
        let batch: Vec<(u64, String)> = (0..3000).map(|i| (i, "f".repeat(100))).collect();
        store.create_many(&batch).await.unwrap();
        let sweeper = Sweeper::new(layout.clone(), config.clone());
        let outcome =
            tokio::time::timeout(Duration::from_millis(stop_after_ms), sweeper.enforce_cap()).await;
        stopped += u32::from(outcome.is_err());
        common::drain(&conn).await;
        assert_eq!(
            records_without_entry(&mut raw, &layout).await,
            0,
            "stopped after {stop_after_ms} ms"
        );
        let _: () = redis::cmd("FLUSHDB").query_async(&mut raw).await.unwrap();
    }
    assert!(stopped > 0, "no pass was stopped part way");
}

/// An insert sent twice (its reply lost, the call sent again) finds its
/// own session and reports it created, at the expiry it got, in every form
/// and on both paths (plain commands or the short create script, and the
/// insert script for an expiry close
/// to now or a record out of line); another record under the id is a
/// taken id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_insert_sent_twice_is_created_once() {
    use sessionpack::SessionId;
    use sessionpack::session::layout::Inserted;
    use sessionpack::session::layout::Layout;
    use sessionpack::ttl::Deadline;
    let server = common::server();
    let layout = compact(&server, 6).await;
    let records = [
        sessionpack::session::record::encode(&70_000u64, &()).unwrap(),
        sessionpack::session::record::encode(&5u64, &"a note").unwrap(),
        // In pieces, and out of line.
        sessionpack::session::record::encode(&5u64, &"x".repeat(200)).unwrap(),
        sessionpack::session::record::encode(&5u64, &"y".repeat(700)).unwrap(),
    ];
    let mut raw = common::raw(&server).await;
    for record in &records {
        let next = records.iter().position(|r| r == record).unwrap() + 1;
        let other = &records[next % records.len()];
        // In(600) takes the plain path for inline records.
        insert_twice(&layout, record, other, Deadline::In(600))
            .await
            .expect("an expiry ten minutes away passed");
        // At(next second) takes the script: too close to now for the
        // clock estimate to call. A slow machine can pass that second
        // between the calls; the server's clock says when it has, and the
        // round is then run again from the start of a new second.
        let mut rounds = 0;
        loop {
            let secs = next_server_second(&mut raw).await;
            match insert_twice(&layout, record, other, Deadline::At(secs + 1)).await {
                Ok(()) => break,
                Err(what) => {
                    let now = next_server_second(&mut raw).await;
                    assert!(now > secs, "{what} before its expiry passed");
                    rounds += 1;
                    assert!(rounds < 20, "{what}: no round finished within a second");
                }
            }
        }
    }

    /// Inserts a new id twice, then another record under it. An `Err`
    /// names what found the session expired.
    async fn insert_twice(
        layout: &Compact<redis::aio::ConnectionManager>,
        record: &[u8],
        other: &[u8],
        expiry: Deadline,
    ) -> Result<(), String> {
        let id = SessionId::generate().unwrap();
        let first = layout.insert(&id, record, expiry).await.unwrap();
        let expires_at = match first {
            Inserted::Created { expires_at } => expires_at,
            Inserted::AlreadyExpired => return Err("the first insert".into()),
            other => panic!("{other:?}"),
        };
        match layout.insert(&id, record, expiry).await.unwrap() {
            Inserted::AlreadyExpired => return Err("the second insert".into()),
            again => assert_eq!(again, Inserted::Created { expires_at }, "{expiry:?}"),
        }
        match layout.insert(&id, other, expiry).await.unwrap() {
            Inserted::AlreadyExpired => return Err("the other record's insert".into()),
            taken => assert_eq!(taken, Inserted::IdTaken),
        }
        match layout.load(&id).await.unwrap() {
            Some(stored) => assert_eq!(stored.record, *record),
            None => return Err("the load".into()),
        }
        Ok(())
    }
}

/// Waits for the server's clock to start a new second, and returns it.
async fn next_server_second(raw: &mut redis::aio::MultiplexedConnection) -> u64 {
    let (start, _): (u64, u64) = redis::cmd("TIME").query_async(raw).await.unwrap();
    loop {
        let (secs, _): (u64, u64) = redis::cmd("TIME").query_async(raw).await.unwrap();
        if secs > start {
            return secs;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A value in neither of the layout's forms (another program wrote it):
/// every call on that session is a `CorruptRecord` and writes nothing, and
/// the sweeper skips and reports that one bucket while it sweeps the
/// others of its group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_in_neither_form_is_corrupt_everywhere_and_stops_no_sweep() {
    use sessionpack::Error;
    let server = common::server();
    let layout = compact(&server, 10).await;
    let scheme = layout.scheme().clone();
    let b = layout.buckets().clone();
    let store: Store<_, ()> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(3600));
    let short: Store<_, ()> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(1));
    // Sessions until buckets 300, 301 and 302 (one group: 256..384) each
    // hold a short-lived one and 301 a long-lived one too.
    let mut in_bucket: std::collections::HashMap<u32, Vec<SessionId>> = Default::default();
    let mut victim = None;
    while [300, 301, 302]
        .iter()
        .any(|n| in_bucket.get(n).is_none_or(Vec::is_empty))
        || victim.is_none()
    {
        let s = short.create(1, ()).await.unwrap();
        in_bucket.entry(b.bucket_of(&s.id)).or_default().push(s.id);
        let long = store.create(2, ()).await.unwrap();
        if b.bucket_of(&long.id) == 301 && victim.is_none() {
            victim = Some(long);
        } else {
            store.destroy(&long.id).await.unwrap();
        }
    }
    let victim = victim.unwrap();
    let key = scheme.bucket_key(301);
    let mut raw = common::raw(&server).await;
    for garbage in [&b"x"[..], b"12x", b"\x7f\x00", b""] {
        let _: () = raw.hset(&key, b.field(&victim.id), garbage).await.unwrap();
        let corrupt = |r: &str, e: Result<bool, Error>| match e {
            Err(Error::CorruptRecord { location, .. }) => {
                assert!(!location.contains(&victim.id.to_hex()), "id redacted")
            }
            other => panic!("{r} of {garbage:?}: expected CorruptRecord, got {other:?}"),
        };
        corrupt("load", store.load(&victim.id).await.map(|s| s.is_some()));
        corrupt("touch", store.touch(&victim.id).await.map(|s| s.is_some()));
        corrupt("save", store.save(&victim).await);
        corrupt("destroy", store.destroy(&victim.id).await);
        corrupt(
            "update",
            store.update(&victim.id, |_| ()).await.map(|s| s.is_some()),
        );
        corrupt(
            "rotate",
            store.rotate(&victim.id).await.map(|s| s.is_some()),
        );
        let kept: Vec<u8> = raw.hget(&key, b.field(&victim.id)).await.unwrap();
        assert_eq!(kept, garbage, "the bytes are left for inspection");
    }
    let _: () = raw.hset(&key, b.field(&victim.id), "x").await.unwrap();
    // Wait, by the server's clock, for the short sessions to expire.
    let all_short: Vec<SessionId> = in_bucket.values().flatten().copied().collect();
    while common::found(&short, &all_short).await > 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sweeper = Sweeper::new(layout.clone(), SweepConfig::default());
    for _ in 0..2 {
        let report = sweeper.pass().await.unwrap();
        assert_eq!(report.bad_buckets, 1, "{report:?}");
        assert_eq!(report.bad[0].bucket, 301);
        assert!(report.bad[0].error.contains("CORRUPT"), "{:?}", report.bad);
        for n in [300, 302] {
            let left: u64 = raw.hlen(scheme.bucket_key(n)).await.unwrap();
            assert_eq!(left, 0, "bucket {n} swept");
        }
        let left: u64 = raw.hlen(&key).await.unwrap();
        assert_eq!(
            left,
            1 + in_bucket[&301].len() as u64,
            "bucket 301 changed in nothing"
        );
    }
}

/// What the store logs is readable as a value too: nothing on a clean
/// server with small records; the out-of-line share and an evicting policy
/// when they come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_reports_what_the_store_would_log() {
    let server = common::server();
    let layout = compact(&server, 4).await;
    let health = layout.health();
    assert_eq!(health.eviction_policy.as_deref(), Some("noeviction"));
    assert_eq!(
        health.limits.source,
        sessionpack::limits::LimitsSource::Server
    );
    assert_eq!(health.warnings(), Vec::<String>::new());

    let store: Store<_, String> = Store::new(layout.clone()).without_sweeper();
    for i in 0..10 {
        store.create(i, "s".into()).await.unwrap();
    }
    // Records of up to 512 bytes stay in their buckets, in pieces.
    for i in 0..5 {
        store.create(i, "p".repeat(200)).await.unwrap();
    }
    assert_eq!(layout.health().warnings(), Vec::<String>::new());
    for i in 0..5 {
        store.create(i, "x".repeat(600)).await.unwrap();
    }
    let health = layout.health();
    assert_eq!((health.writes, health.out_of_line), (20, 5));
    assert!(health.longest_value > 600);
    let warnings = health.warnings();
    assert!(
        warnings.len() == 1 && warnings[0].contains("5 of 20 records"),
        "{warnings:?}"
    );

    common::set_eviction_policy(&server, "allkeys-lru");
    let reopened = compact(&server, 4).await;
    let warnings = reopened.health().warnings();
    assert!(
        warnings.iter().any(|w| w.contains("allkeys-lru")),
        "{warnings:?}"
    );
}

/// Saves and touches of every form of record (an identity-only integer, a
/// short record, one too long for a listpack value) keep the record
/// whole and move the expiry, later or earlier (the index follows it
/// down); on a session deleted, or expired and not yet swept, they write
/// nothing and bring nothing back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saves_and_touches_move_only_the_expiry_of_every_form() {
    let server = common::server();
    let layout = compact(&server, 4).await;
    let store: Store<_, String> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(3600));
    let mut raw = common::raw(&server).await;
    let scheme = layout.scheme();
    let b = layout.buckets();
    let identity_only: Store<_, ()> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(3600));
    let mut created = vec![identity_only.create(1_234_567, ()).await.unwrap().id];
    for attrs in [String::new(), "en-GB".to_owned(), "x".repeat(3000)] {
        created.push(store.create(1_234_567, attrs).await.unwrap().id);
    }
    for id in created {
        let stored = layout.load(&id).await.unwrap().expect("created");
        let (record, expires_at) = (stored.record, stored.expires_at);
        let later = expires_at + 5_000;
        assert_eq!(layout.touch_until(&id, later).await.unwrap(), Some(later));
        let stored = layout.load(&id).await.unwrap().expect("touched");
        assert_eq!(stored.record, record, "{} bytes: the record", record.len());
        assert_eq!(stored.expires_at, later);
        let earlier = expires_at - 600;
        assert_eq!(
            layout.save(&id, &record, earlier).await.unwrap(),
            sessionpack::session::layout::Written::Done
        );
        let stored = layout.load(&id).await.unwrap().expect("saved");
        assert_eq!(
            (stored.record, stored.expires_at),
            (record.clone(), earlier)
        );
        let bucket = b.bucket_of(&id);
        let index = scheme.index_key(scheme.group_of(bucket));
        let score: f64 = raw.zscore(&index, scheme.member(bucket)).await.unwrap();
        assert!(score as u64 <= earlier, "the index follows the expiry down");

        layout.delete(&id, None).await.unwrap();
        assert_eq!(layout.touch_until(&id, later).await.unwrap(), None);
        assert_eq!(
            layout.save(&id, &record, later).await.unwrap(),
            sessionpack::session::layout::Written::Missing
        );
        assert!(layout.load(&id).await.unwrap().is_none(), "nothing revived");
    }
    // Expired by the server's clock, not yet swept: still left alone.
    for attrs in [String::new(), "en-GB".to_owned(), "x".repeat(3000)] {
        let created = store
            .create_with_ttl(7, attrs, Duration::from_secs(1))
            .await
            .unwrap();
        let record = layout
            .load(&created.id)
            .await
            .unwrap()
            .expect("created")
            .record;
        while next_server_second(&mut raw).await <= created.expires_at {}
        let far = created.expires_at + 3_600;
        assert_eq!(layout.touch_until(&created.id, far).await.unwrap(), None);
        assert_eq!(
            layout.save(&created.id, &record, far).await.unwrap(),
            sessionpack::session::layout::Written::Missing
        );
        assert!(layout.load(&created.id).await.unwrap().is_none());
    }
}
