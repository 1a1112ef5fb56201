//! Metrics on a real `redis-server`, read from a recorder installed for
//! each test: every call counted by operation and outcome and timed,
//! records placed inline or out of line, revocations, what a sweeper pass
//! did (and one that failed), and the tower-sessions store's saves.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use redis::AsyncCommands;
use serde_json::Value;
use sessionpack::session::layout::Layout;
use sessionpack::session::sweep::{SweepConfig, Sweeper};
use sessionpack::tower::TowerStore;
use sessionpack::users::UserIndexConfig;
use sessionpack::{Compact, CompactConfig, Error, SessionId, Store};

/// What the recorder saw since the last look, by name and labels.
struct Seen(HashMap<(String, Vec<(String, String)>), DebugValue>);

impl Seen {
    fn take(snapshotter: &Snapshotter) -> Self {
        let mut seen = HashMap::new();
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let key = key.key();
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            seen.insert((key.name().to_owned(), labels), value);
        }
        Self(seen)
    }

    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<&DebugValue> {
        let mut labels: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        labels.sort();
        self.0.get(&(name.to_owned(), labels))
    }

    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        match self.get(name, labels) {
            Some(DebugValue::Counter(n)) => *n,
            None => 0,
            Some(other) => panic!("{name} is no counter: {other:?}"),
        }
    }

    fn calls(&self, op: &str, outcome: &str) -> u64 {
        self.counter(
            sessionpack::metrics::CALLS,
            &[("op", op), ("outcome", outcome)],
        )
    }

    fn timings(&self, op: &str) -> Vec<f64> {
        match self.get(sessionpack::metrics::CALL_DURATION, &[("op", op)]) {
            Some(DebugValue::Histogram(values)) => values.iter().map(|v| v.into_inner()).collect(),
            None => Vec::new(),
            Some(other) => panic!("no histogram: {other:?}"),
        }
    }

    fn gauge(&self, name: &str) -> Option<f64> {
        match self.get(name, &[]) {
            Some(DebugValue::Gauge(v)) => Some(v.into_inner()),
            None => None,
            Some(other) => panic!("{name} is no gauge: {other:?}"),
        }
    }
}

async fn compact(
    server: &sessionpack_testkit::LocalServer,
    config: CompactConfig,
) -> Compact<redis::aio::ConnectionManager> {
    Compact::new(common::manager(server).await, config)
        .await
        .expect("compact layout")
}

#[tokio::test]
async fn each_call_is_counted_by_operation_and_outcome_and_timed() {
    let recorder = DebuggingRecorder::new();
    let seen = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let server = common::server();
    let layout = compact(
        &server,
        CompactConfig::new(4).with_user_index(UserIndexConfig::new(2)),
    )
    .await;
    let store: Store<_, String> = Store::new(layout.clone()).without_sweeper();
    Seen::take(&seen);

    let mut sessions = Vec::new();
    for user in [7, 7, 7, 8] {
        sessions.push(store.create(user, "short".into()).await.unwrap());
    }
    let gone = SessionId::parse_with("ab".repeat(20), layout.id_width()).unwrap();
    assert!(store.load(&sessions[0].id).await.unwrap().is_some());
    assert!(store.load(&gone).await.unwrap().is_none());
    assert!(matches!(
        store.load_cookie("not-an-id").await,
        Err(Error::InvalidId(_))
    ));
    let mut long = sessions[1].clone();
    long.attrs = "x".repeat(300);
    assert!(store.save(&long).await.unwrap());
    assert!(store.touch(&gone).await.unwrap().is_none());
    assert!(store.destroy(&sessions[2].id).await.unwrap());
    assert!(!store.destroy(&sessions[2].id).await.unwrap());
    let s = Seen::take(&seen);
    assert_eq!(s.calls("create", "ok"), 4);
    assert_eq!(s.calls("load", "ok"), 1);
    assert_eq!(s.calls("load", "missing"), 1);
    assert_eq!(s.calls("load", "invalid_id"), 1);
    assert_eq!(s.calls("save", "ok"), 1);
    assert_eq!(s.calls("touch", "missing"), 1);
    assert_eq!(s.calls("destroy", "ok"), 1);
    assert_eq!(s.calls("destroy", "missing"), 1);
    // Every call is timed, the failed one too.
    let loads = s.timings("load");
    assert_eq!(loads.len(), 3);
    assert!(loads.iter().all(|t| *t >= 0.0 && *t < 60.0), "{loads:?}");
    assert_eq!(s.timings("create").len(), 4);
    // Four short records inline; the 300-byte one in pieces (the
    // server's hash-max-listpack-value is 64).
    let written = |placement| {
        s.counter(
            sessionpack::metrics::RECORDS_WRITTEN,
            &[("layout", "compact"), ("placement", placement)],
        )
    };
    assert_eq!(
        (written("inline"), written("pieces"), written("out_of_line")),
        (4, 1, 0)
    );

    // "Log out everywhere": user 7 has two live sessions left.
    let revoked = store.revoke_all(&7).await.unwrap();
    assert_eq!(revoked.removed, 2);
    let s = Seen::take(&seen);
    assert_eq!(s.calls("revoke_all", "ok"), 1);
    assert_eq!(s.counter(sessionpack::metrics::SESSIONS_REVOKED, &[]), 2);

    // Another program's string where user 8's session bucket should be.
    let key = layout
        .scheme()
        .bucket_key(layout.buckets().bucket_of(&sessions[3].id));
    let mut raw = common::raw(&server).await;
    let _: () = raw.del(&key).await.unwrap();
    let _: () = raw.set(&key, "theirs").await.unwrap();
    assert!(matches!(
        store.load(&sessions[3].id).await,
        Err(Error::WrongType { .. })
    ));
    let s = Seen::take(&seen);
    assert_eq!(s.calls("load", "wrong_type"), 1);
    assert_eq!(s.calls("load", "ok"), 0);
}

#[tokio::test]
async fn a_sweeper_pass_reports_what_it_did_and_a_failed_one_its_error() {
    let recorder = DebuggingRecorder::new();
    let seen = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let server = common::server();
    let layout = compact(&server, CompactConfig::new(8)).await;
    // Long-lived sessions touched down to one second: none can expire
    // before all are made.
    let long: Store<_, ()> = Store::new(layout.clone()).without_sweeper();
    let short: Store<_, ()> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(1));
    let batch: Vec<(u64, ())> = (0..50).map(|i| (i, ())).collect();
    let ids = long.create_many(&batch).await.unwrap();
    for id in &ids {
        short.touch(id).await.unwrap();
    }
    while common::found(&long, &ids).await > 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A bucket with no sessions of ours, taken by another program's key.
    let used: std::collections::HashSet<u32> = ids
        .iter()
        .map(|id| layout.buckets().bucket_of(id))
        .collect();
    let free = (0..layout.buckets().count())
        .find(|b| !used.contains(b))
        .expect("a bucket none of 50 sessions fell in");
    let mut raw = common::raw(&server).await;
    let _: () = raw
        .set(layout.scheme().bucket_key(free), "theirs")
        .await
        .unwrap();
    Seen::take(&seen);

    let sweeper = Sweeper::new(layout.clone(), SweepConfig::default());
    let report = sweeper.pass().await.unwrap();
    assert_eq!(report.reclaimed, 50);
    assert_eq!(report.bad_buckets, 1);
    let s = Seen::take(&seen);
    let count = |name| s.counter(name, &[]);
    use sessionpack::metrics as m;
    assert_eq!(s.counter(m::SWEEP_PASSES, &[("outcome", "ok")]), 1);
    assert_eq!(count(m::SWEEP_RECLAIMED), 50);
    assert_eq!(count(m::SWEEP_BAD_BUCKETS), 1);
    assert_eq!(count(m::SWEEP_BUCKETS), report.buckets);
    assert_eq!(count(m::SWEEP_REPAIRED), report.repaired);
    assert_eq!(count(m::SWEEP_EVICTED), 0);
    assert_eq!(count(m::USER_INDEX_REPAIRED), 0);
    assert_eq!(s.gauge(m::SWEEP_LAG), Some(report.lag_secs as f64));
    assert!(
        matches!(s.get(m::SWEEP_DURATION, &[]), Some(DebugValue::Histogram(v)) if v.len() == 1)
    );

    // Redis gone: the pass fails, counted under its error's kind.
    server.stop();
    let failed = sweeper.pass().await.unwrap_err();
    let s = Seen::take(&seen);
    assert_eq!(
        s.counter(m::SWEEP_PASSES, &[("outcome", failed.kind())]),
        1,
        "{failed}"
    );
    assert_eq!(s.counter(m::SWEEP_PASSES, &[("outcome", "ok")]), 0);
}

#[tokio::test]
async fn tower_saves_within_the_threshold_are_counted_as_skipped() {
    let recorder = DebuggingRecorder::new();
    let seen = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let server = common::server();
    let store = TowerStore::new(common::manager(&server).await, CompactConfig::new(4))
        .await
        .unwrap()
        .with_write_threshold(0.5);
    let data: HashMap<String, Value> = [("locale".to_owned(), Value::from("de"))].into();
    let at = sessionpack::clock::unix_now() as i64 + 3600;
    let id = store
        .create_data(42, &data, at, rand::random)
        .await
        .unwrap();
    assert!(store.load_data(id).await.unwrap().is_some());
    // Unchanged, and the expiry moved by less than half the lifetime.
    assert!(!store.save_data(id, &data, at + 60).await.unwrap());
    store.delete_data(id).await.unwrap();
    // A save of a deleted session sends, and finds nothing.
    assert!(store.save_data(id, &data, at).await.unwrap());
    assert!(store.load_data(id).await.unwrap().is_none());
    let s = Seen::take(&seen);
    assert_eq!(s.calls("create", "ok"), 1);
    assert_eq!(s.calls("load", "ok"), 1);
    assert_eq!(s.calls("load", "missing"), 1);
    assert_eq!(s.calls("save", "skipped"), 1);
    assert_eq!(s.calls("save", "missing"), 1);
    assert_eq!(s.calls("destroy", "ok"), 1);
}

/// The guide's metrics chapter lists every metric with its kind, unit and labels.
#[test]
fn the_guide_lists_every_metric() {
    let guide = include_str!("../docs/guide/metrics.md");
    for m in sessionpack::metrics::METRICS {
        let row = guide
            .lines()
            .find(|l| l.starts_with(&format!("| `{}` ", m.name)))
            .unwrap_or_else(|| panic!("docs/guide/metrics.md has no row for {}", m.name));
        let kind = format!("{:?}", m.kind).to_lowercase();
        assert!(row.contains(&format!("| {kind} |")), "{row}");
        assert!(row.contains(&format!("| {} |", m.unit)), "{row}");
        for label in m.labels {
            assert!(row.contains(&format!("`{label}`")), "{row}");
        }
    }
}

/// `records_written` counts each record whose write is done, once: not a
/// write the store refused (a save of a session gone), and not each
/// attempt of one that followed its bucket through splits (a growing
/// store with a user index, 16 creates in flight).
#[tokio::test]
async fn records_written_counts_each_write_done_once() {
    let recorder = DebuggingRecorder::new();
    let seen = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let server = common::server();
    let layout = compact(
        &server,
        CompactConfig::default()
            .with_growth()
            .with_user_index(UserIndexConfig::new(2)),
    )
    .await;
    let store: Store<_, String> = Store::new(layout.clone()).without_sweeper();
    Seen::take(&seen);

    // 16 in flight on this thread (the recorder is the thread's).
    let mut sessions = Vec::new();
    let mut in_flight = tokio::task::JoinSet::new();
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {
            for user in 0..2000u64 {
                let store = store.clone();
                in_flight.spawn_local(async move { store.create(user, "short".into()).await });
                if in_flight.len() >= 16 {
                    sessions.push(in_flight.join_next().await.unwrap().unwrap().unwrap());
                }
            }
            while let Some(created) = in_flight.join_next().await {
                sessions.push(created.unwrap().unwrap());
            }
        })
        .await;
    let shape = layout.shape().expect("a growing store");
    let mut buckets = 0;
    for group in 0..shape.group_count() {
        buckets += layout.group_buckets(group).await.unwrap().len();
    }
    assert!(buckets > 16, "the store never split: {buckets} buckets");
    for s in &sessions[..300] {
        assert!(store.destroy(&s.id).await.unwrap());
    }
    // Every third saved: 100 of them destroyed above, 567 live.
    let mut saved = 0;
    for s in sessions.iter().step_by(3) {
        let mut s = s.clone();
        s.attrs = "changed".into();
        saved += u64::from(store.save(&s).await.unwrap());
    }
    assert_eq!(saved, 567);
    let s = Seen::take(&seen);
    let written = s.counter(
        sessionpack::metrics::RECORDS_WRITTEN,
        &[("layout", "compact"), ("placement", "inline")],
    );
    assert_eq!(written, sessions.len() as u64 + saved);
}
