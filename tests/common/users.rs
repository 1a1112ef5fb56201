//! Scenarios for the per-user index, run on one server (`tests/users.rs`)
//! and on a cluster (`tests/cluster.rs`).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sessionpack::identity::Name;
use sessionpack::session::layout::Inserted;
use sessionpack::session::layout::Layout;
use sessionpack::session::sweep::{SweepConfig, Sweeper};
use sessionpack::ttl::Deadline;
use sessionpack::users::{UserIndexAudit, UserIndexConfig};
use sessionpack::{Compact, CompactConfig, SessionId, Store};

/// A one-second grace and skew, so the hold (three seconds) can be waited
/// out in a test.
pub fn config() -> UserIndexConfig {
    UserIndexConfig {
        bits: 3,
        grace_secs: 1,
        skew_secs: 1,
    }
}

/// Long enough for a tombstone written now to expire by any server's
/// whole-second clock.
pub fn hold() -> Duration {
    Duration::from_secs(config().hold_secs() + 2)
}

/// Fixed buckets, few enough that a user's sessions share some.
pub fn fixed() -> CompactConfig {
    CompactConfig::new(6)
}

/// `base`'s buckets under `namespace`, with a user index.
pub async fn layout<C>(conn: C, base: CompactConfig, namespace: &str) -> Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    let config = base.with_namespace(namespace).with_user_index(config());
    Compact::new(conn, config).await.expect("compact layout")
}

async fn server_now<C: redis::aio::ConnectionLike + Clone + Send>(conn: &C) -> u64 {
    let (secs, _): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut conn.clone())
        .await
        .unwrap();
    secs
}

/// Attributes that make a record binary, or (long) out of line.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Device {
    #[serde(rename = "d")]
    pub device: String,
}

/// An audit that finds the index sound and settled.
pub fn assert_clean(audit: &UserIndexAudit) {
    assert_eq!(
        audit.unindexed, 0,
        "live sessions without an entry: {audit:?}"
    );
    assert_eq!(audit.orphans, 0, "entries outliving the hold: {audit:?}");
    assert_eq!(audit.misplaced, 0, "entries in the wrong place: {audit:?}");
}

/// A full sweep leaves the index exactly in step with the sessions; a
/// second, after the hold, leaves no tombstone.
async fn settle<C>(layout: &Compact<C>) -> UserIndexAudit
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let sweeper = Sweeper::new(layout.clone(), SweepConfig::default());
    let report = sweeper.sweep_range_full(0..sweeper.units()).await.unwrap();
    assert_eq!(report.bad_buckets, 0, "{report:?}");
    let audit = layout.audit_users().await.unwrap();
    assert_clean(&audit);
    assert_eq!(audit.sessions, audit.entries, "{audit:?}");
    tokio::time::sleep(hold()).await;
    sweeper.sweep_range_full(0..sweeper.units()).await.unwrap();
    let audit = layout.audit_users().await.unwrap();
    assert_clean(&audit);
    assert_eq!(
        audit.tombstones, 0,
        "tombstones outlived the hold: {audit:?}"
    );
    audit
}

/// A user's sessions are listed with their sign-in time, last use and
/// label, whatever the record's form (integer, binary, out of line); other
/// users' are not; revoking all but one keeps exactly that one; revoking
/// all leaves none; other users and identity forms are untouched.
pub async fn list_label_and_revoke<C>(conn: C, base: CompactConfig)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let layout = layout(conn.clone(), base, "listing").await;
    let ttl = Duration::from_secs(600);
    let plain: Store<_, (), u64> = Store::new(layout.clone()).without_sweeper().with_ttl(ttl);
    let devices: Store<_, Device, u64> = Store::new(layout.clone()).without_sweeper().with_ttl(ttl);
    let names: Store<_, (), Name> = Store::for_identities(layout.clone())
        .without_sweeper()
        .with_ttl(ttl);
    let before = server_now(&conn).await;
    let user = 70_000u64;
    let mut ids = HashSet::new();
    ids.insert(plain.create(user, ()).await.unwrap().id);
    ids.insert(plain.create(user, ()).await.unwrap().id);
    let phone = devices
        .create(
            user,
            Device {
                device: "phone".into(),
            },
        )
        .await
        .unwrap();
    ids.insert(phone.id);
    let long = Device {
        device: "x".repeat(200),
    };
    ids.insert(devices.create(user, long).await.unwrap().id);
    let other = plain.create(5, ()).await.unwrap();
    let ada = Name::new("ada@example.com").unwrap();
    let named = names.create(ada.clone(), ()).await.unwrap();
    let after = server_now(&conn).await;

    assert!(
        devices
            .set_label(&phone, Some("Firefox on Linux"))
            .await
            .unwrap()
    );
    let too_long = "y".repeat(sessionpack::users::MAX_LABEL_BYTES + 1);
    assert!(matches!(
        devices.set_label(&phone, Some(&too_long)).await,
        Err(sessionpack::Error::LabelTooLong { len: 33, limit: 32 })
    ));
    plain.touch(&phone.id).await.unwrap().expect("live");

    let listed = plain.sessions_of(&user).await.unwrap();
    assert_eq!(
        listed.iter().map(|s| s.id).collect::<HashSet<_>>(),
        ids,
        "the user's four sessions, no other"
    );
    for s in &listed {
        assert!(
            (before - 1..=after + 1).contains(&s.signed_in_at),
            "signed in at {} outside {before}..={after}",
            s.signed_in_at
        );
        let last_seen = s.last_seen.expect("an idle timeout");
        assert!(last_seen >= s.signed_in_at && last_seen <= after + 2);
        assert!(s.expires_at >= last_seen + 599);
        let label = (s.id == phone.id).then(|| "Firefox on Linux".to_owned());
        assert_eq!(s.label, label);
    }
    assert_eq!(
        plain
            .sessions_of(&5)
            .await
            .unwrap()
            .iter()
            .map(|s| s.id)
            .collect::<Vec<_>>(),
        vec![other.id]
    );
    assert_eq!(names.sessions_of(&ada).await.unwrap().len(), 1);
    assert_clean(&layout.audit_users().await.unwrap());

    let r = plain.revoke_others(&user, &phone.id).await.unwrap();
    assert_eq!((r.removed, r.kept), (3, 1), "{r:?}");
    let left = plain.sessions_of(&user).await.unwrap();
    assert_eq!(
        left.iter().map(|s| s.id).collect::<Vec<_>>(),
        vec![phone.id]
    );
    for id in ids.iter().filter(|id| **id != phone.id) {
        assert_eq!(plain.load(id).await.unwrap(), None);
    }
    let r = plain.revoke_all(&user).await.unwrap();
    assert_eq!(r.removed, 1, "{r:?}");
    assert!(plain.sessions_of(&user).await.unwrap().is_empty());
    assert_eq!(devices.load(&phone.id).await.unwrap(), None);
    assert!(plain.load(&other.id).await.unwrap().is_some());
    assert!(names.load(&named.id).await.unwrap().is_some());
    let audit = layout.audit_users().await.unwrap();
    assert_clean(&audit);
    assert_eq!(audit.sessions, 2, "{audit:?}");

    // A save that gives a session another owner indexes it under that
    // owner: listed, and revoked with the owner's sessions.
    let mut moved = plain.create(9, ()).await.unwrap();
    moved.identity = 10;
    assert!(plain.save(&moved).await.unwrap());
    let listed = plain.sessions_of(&10).await.unwrap();
    assert_eq!(
        listed.iter().map(|s| s.id).collect::<Vec<_>>(),
        vec![moved.id]
    );
    assert_eq!(plain.revoke_all(&10).await.unwrap().removed, 1);
    assert_eq!(plain.load(&moved.id).await.unwrap(), None);
    assert_eq!(
        plain.revoke_all(&9).await.unwrap().removed,
        0,
        "not 9's any more"
    );

    // A store opened without the index over the same namespace is refused.
    let plain_config = CompactConfig::new(6).with_namespace("listing");
    let refused = Compact::new(conn.clone(), plain_config).await;
    assert!(matches!(refused, Err(sessionpack::Error::Config(_))));
    // A store without an index says so.
    let bare = Compact::new(conn, CompactConfig::new(6).with_namespace("bare"))
        .await
        .unwrap();
    let bare: Store<_, (), u64> = Store::new(bare).without_sweeper();
    assert!(matches!(
        bare.sessions_of(&user).await,
        Err(sessionpack::Error::Config(_))
    ));
}

/// A create whose entry a revocation read before its session landed is
/// refused by the tombstone the revocation left; a session that comes
/// later than the grace after its entry is refused as late; entries of
/// sessions destroyed, expired or never written are swept; tombstones
/// expire and go.
pub async fn creates_in_flight_are_blocked_and_leftovers_swept<C>(conn: C, base: CompactConfig)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    out_of_line_creates_are_refused_alike(conn.clone(), base.clone()).await;
    let layout = layout(conn.clone(), base, "inflight").await;
    let store: Store<_, (), u64> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(600));
    let users = layout.user_index().unwrap().clone();
    let user = 70_001u64;
    let record = sessionpack::session::record::encode(&user, &()).unwrap();
    let (bucket, check) = users.place(&record);
    let write_entry = |id: SessionId| {
        let (key, mut conn) = (users.key(bucket), conn.clone());
        async move {
            let _: () = redis::cmd("HSET")
                .arg(key)
                .arg(id.as_bytes())
                .arg(check.to_string())
                .query_async(&mut conn)
                .await
                .unwrap();
        }
    };

    // The first step of a create: the entry, and no session yet.
    let id = layout.new_id().await.unwrap();
    let indexed_at = server_now(&conn).await;
    write_entry(id).await;
    let r = store.revoke_all(&user).await.unwrap();
    assert_eq!((r.absent, r.removed), (1, 0), "{r:?}");
    assert_eq!(
        layout
            .insert_after_entry(&id, &record, Deadline::In(600), indexed_at)
            .await
            .unwrap(),
        Inserted::IdTaken,
        "the second step lands after the revocation: refused"
    );
    assert_eq!(store.load(&id).await.unwrap(), None);
    let audit = layout.audit_users().await.unwrap();
    assert_eq!(audit.tombstones, 1, "{audit:?}");
    // The create draws a new id, indexed after the revocation: listed.
    let fresh = store.create(user, ()).await.unwrap();
    let listed = store.sessions_of(&user).await.unwrap();
    assert_eq!(
        listed.iter().map(|s| s.id).collect::<Vec<_>>(),
        vec![fresh.id]
    );

    // A session later than the grace after its entry (or with an entry
    // time far ahead) is refused; one on time lands.
    let now = server_now(&conn).await;
    for at in [now - 10, now + 10] {
        let late = layout.new_id().await.unwrap();
        assert_eq!(
            layout
                .insert_after_entry(&late, &record, Deadline::In(600), at)
                .await
                .unwrap(),
            Inserted::Late
        );
        assert_eq!(store.load(&late).await.unwrap(), None);
    }
    let on_time = layout.new_id().await.unwrap();
    write_entry(on_time).await;
    let landed = layout
        .insert_after_entry(&on_time, &record, Deadline::In(600), now)
        .await
        .unwrap();
    assert!(matches!(landed, Inserted::Created { .. }), "{landed:?}");

    // Leftovers: a destroyed session, an expired one, and an entry whose
    // create never came (a crashed process).
    let destroyed = store.create(user, ()).await.unwrap();
    assert!(store.destroy(&destroyed.id).await.unwrap());
    let short = store.clone().with_ttl(Duration::from_secs(1));
    short.create(user, ()).await.unwrap();
    write_entry(layout.new_id().await.unwrap()).await;
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let audit = layout.audit_users().await.unwrap();
    assert_eq!(audit.orphans, 3, "destroyed, expired, crashed: {audit:?}");
    assert_eq!(audit.unindexed, 0);
    let audit = settle(&layout).await;
    assert_eq!(
        audit.sessions, 2,
        "the fresh and on-time sessions: {audit:?}"
    );
    assert_eq!(audit.entries, 2, "{audit:?}");
}

/// A record too long for its bucket goes out of line, in the full insert
/// script; a record kept in its bucket, in the short one. Both refuse a
/// create whose entry a revocation read (its tombstone) and a session
/// later than the grace after its entry, and land one on time.
async fn out_of_line_creates_are_refused_alike<C>(conn: C, base: CompactConfig)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let layout = layout(conn.clone(), base, "inflight-out").await;
    let users = layout.user_index().unwrap().clone();
    let user = 70_002u64;
    // Beyond the 512 bytes a record in pieces may take: out of line.
    let long = sessionpack::session::record::encode(&user, &"x".repeat(2_000)).unwrap();
    // The owner's entry goes where a record of the owner alone places it.
    let head = sessionpack::session::record::encode(&user, &()).unwrap();
    let (bucket, check) = users.place(&head);
    let id = layout.new_id().await.unwrap();
    let _: () = redis::cmd("HSET")
        .arg(users.key(bucket))
        .arg(id.as_bytes())
        .arg(check.to_string())
        .query_async(&mut conn.clone())
        .await
        .unwrap();
    let indexed_at = server_now(&conn).await;
    let store: Store<_, String, u64> = Store::new(layout.clone()).without_sweeper();
    let r = store.revoke_all(&user).await.unwrap();
    assert_eq!((r.absent, r.removed), (1, 0), "{r:?}");
    let insert = |id: SessionId, at: u64| {
        let (layout, long) = (layout.clone(), long.clone());
        async move {
            layout
                .insert_after_entry(&id, &long, Deadline::In(600), at)
                .await
                .unwrap()
        }
    };
    assert_eq!(insert(id, indexed_at).await, Inserted::IdTaken);
    let now = server_now(&conn).await;
    assert_eq!(
        insert(layout.new_id().await.unwrap(), now - 10).await,
        Inserted::Late
    );
    let on_time = layout.new_id().await.unwrap();
    let landed = insert(on_time, now).await;
    assert!(matches!(landed, Inserted::Created { .. }), "{landed:?}");
    let stored = layout.load(&on_time).await.unwrap().unwrap();
    assert_eq!(stored.record, long);
}

/// What the race recorded of one session id.
#[derive(Clone, Copy)]
struct Made {
    id: SessionId,
    user: u64,
    /// When the create or rotation that made it had returned.
    done: Instant,
    /// When the create its line began with had returned: a rotation's
    /// copy is the same sign-in as the session it copied.
    signed: Instant,
}

/// Clears the race's running flag when dropped, on return or panic.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// Revoke-all races creates, touches, rotations and two sweepers on twelve
/// users, several tasks each, until enough of each has happened (counts,
/// not a time window: a slow machine runs longer, not less). After every
/// revocation, no session of that user whose create returned before the
/// revocation began can be loaded.
/// At the end, every session id ever made either is gone or is listed
/// for its user, no listing holds an id never made, and the index audit
/// is clean.
pub async fn revoke_all_races_traffic<C>(conn: C, base: CompactConfig, namespace: &str)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let layout = layout(conn.clone(), base, namespace).await;
    let ttl = Duration::from_secs(600);
    let plain: Store<_, (), u64> = Store::new(layout.clone()).without_sweeper().with_ttl(ttl);
    let devices: Store<_, Device, u64> = Store::new(layout.clone()).without_sweeper().with_ttl(ttl);
    let users: Vec<u64> = (0..12)
        .map(|i| if i % 3 == 0 { i + 1 } else { 70_000 + i })
        .collect();
    let made: Arc<Mutex<Vec<Made>>> = Arc::default();
    // Every task runs until the revokers have seen enough: the race is
    // over when it has made, revoked and removed these many.
    let running = Arc::new(AtomicBool::new(true));
    let enough = |made: usize, revocations: u64, removed: u64| {
        made >= 400 && revocations >= 100 && removed >= 100
    };
    let pick = |n: usize| rand::random_range(0..n);
    let mut tasks = tokio::task::JoinSet::new();

    for t in 0..4 {
        let (plain, devices, made, users) =
            (plain.clone(), devices.clone(), made.clone(), users.clone());
        let running = running.clone();
        tasks.spawn(async move {
            let mut n = 0u64;
            while running.load(Ordering::Relaxed) {
                let user = users[pick(users.len())];
                let id = if (n + t).is_multiple_of(2) {
                    plain.create(user, ()).await.unwrap().id
                } else {
                    let device = Device {
                        device: "d".repeat(pick(100)),
                    };
                    devices.create(user, device).await.unwrap().id
                };
                let done = Instant::now();
                made.lock().unwrap().push(Made {
                    id,
                    user,
                    done,
                    signed: done,
                });
                n += 1;
            }
            (n, 0)
        });
    }
    for _ in 0..2 {
        let (plain, made, running) = (plain.clone(), made.clone(), running.clone());
        tasks.spawn(async move {
            let (mut rotated, mut touched) = (0, 0);
            while running.load(Ordering::Relaxed) {
                let target = {
                    let m = made.lock().unwrap();
                    if m.is_empty() {
                        None
                    } else {
                        Some(m[pick(m.len())])
                    }
                };
                let Some(target) = target else {
                    tokio::task::yield_now().await;
                    continue;
                };
                if plain.touch(&target.id).await.unwrap().is_some() {
                    touched += 1;
                }
                if let Some(id) = plain.rotate(&target.id).await.unwrap() {
                    made.lock().unwrap().push(Made {
                        id,
                        user: target.user,
                        done: Instant::now(),
                        signed: target.signed,
                    });
                    rotated += 1;
                }
            }
            (rotated, touched)
        });
    }
    for _ in 0..2 {
        let sweeper = Sweeper::new(layout.clone(), SweepConfig::default());
        let running = running.clone();
        tasks.spawn(async move {
            let mut passes = 0;
            while running.load(Ordering::Relaxed) {
                sweeper.sweep_range_full(0..sweeper.units()).await.unwrap();
                passes += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (passes, 0)
        });
    }
    let (revoked, gone) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let revokers: Vec<_> = (0..2)
        .map(|_| {
            let (plain, made, users) = (plain.clone(), made.clone(), users.clone());
            let (layout, running) = (layout.clone(), running.clone());
            let (revoked, gone) = (revoked.clone(), gone.clone());
            tokio::spawn(async move {
                // A revoker that panics stops the race too, so the test
                // fails rather than waits on the other tasks for ever.
                let _stop = StopOnDrop(running.clone());
                let (mut revocations, mut removed, mut escaped) = (0u64, 0u64, 0usize);
                let mut done = Vec::new();
                while running.load(Ordering::Relaxed) {
                    let user = users[pick(users.len())];
                    let began = Instant::now();
                    let r = plain.revoke_all(&user).await.unwrap();
                    done.push((user, began));
                    let before: Vec<SessionId> = made
                        .lock()
                        .unwrap()
                        .iter()
                        .filter(|m| m.user == user && m.done < began)
                        .map(|m| m.id)
                        .collect();
                    // The layout's load: records of either attribute type.
                    let loaded = layout.load_many(&before).await.unwrap();
                    escaped += loaded.iter().filter(|s| s.is_some()).count();
                    revocations += 1;
                    removed += r.removed;
                    let all_revocations = revoked.fetch_add(1, Ordering::Relaxed) + 1;
                    let all_removed = gone.fetch_add(r.removed, Ordering::Relaxed) + r.removed;
                    let made_so_far = made.lock().unwrap().len();
                    if enough(made_so_far, all_revocations, all_removed) {
                        running.store(false, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                (revocations, removed, escaped, done)
            })
        })
        .collect();
    let mut counts = Vec::new();
    while let Some(done) = tasks.join_next().await {
        counts.push(done.unwrap());
    }
    let (mut revocations, mut removed) = (0, 0);
    let mut done = Vec::new();
    for r in revokers {
        let (n, gone, escaped, revoked) = r.await.unwrap();
        assert_eq!(escaped, 0, "sessions made before a revocation survived it");
        revocations += n;
        removed += gone;
        done.extend(revoked);
    }
    let made = made.lock().unwrap().clone();
    // Whatever rotated meanwhile: no session whose sign-in came before a
    // revocation of its user loads once every task has stopped.
    let signed_before: Vec<SessionId> = made
        .iter()
        .filter(|m| {
            done.iter()
                .any(|&(u, began)| u == m.user && m.signed < began)
        })
        .map(|m| m.id)
        .collect();
    let survivors = layout.load_many(&signed_before).await.unwrap();
    assert_eq!(
        survivors.iter().filter(|s| s.is_some()).count(),
        0,
        "a rotation of a session signed in before a revocation survived it"
    );
    // The counts the race stopped at, as each task tallied them.
    assert!(
        revocations >= 100 && removed >= 100,
        "{revocations} revocations removed {removed}"
    );
    assert!(made.len() >= 400, "only {} sessions made", made.len());

    let audit = settle(&layout).await;
    let mut listed: HashMap<SessionId, u64> = HashMap::new();
    for &user in &users {
        for s in plain.sessions_of(&user).await.unwrap() {
            assert!(listed.insert(s.id, user).is_none(), "listed twice");
        }
    }
    let ids: Vec<SessionId> = made.iter().map(|m| m.id).collect();
    let live = layout.load_many(&ids).await.unwrap();
    let mut alive = 0;
    for (m, s) in made.iter().zip(&live) {
        if s.is_some() {
            alive += 1;
            assert_eq!(listed.get(&m.id), Some(&m.user), "a live session unlisted");
        }
    }
    assert_eq!(listed.len(), alive, "a listing holds an id never made");
    assert_eq!(audit.sessions as usize, alive, "{audit:?}");
    eprintln!(
        "{} made, {revocations} revocations removed {removed}, {alive} left; tasks {counts:?}; {audit:?}",
        made.len()
    );
}

/// A rotation racing a revocation of its user never outlives it: a
/// session is rotated and its user revoked a random 0 to `reach` µs later,
/// again and again; once both have returned, no session of that user
/// loads, and nothing of the rotation's is listed. Rotations that finished
/// first and ones that found the session revoked both occur: `reach`
/// starts at 3 ms and doubles or halves while one outcome has not, so the
/// race is run both ways on a machine of any speed.
pub async fn rotations_never_outlive_a_revocation<C>(conn: C, base: CompactConfig, namespace: &str)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let layout = layout(conn, base, namespace).await;
    let store: Store<_, Device, u64> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(600));
    let (mut rotated, mut refused) = (0, 0);
    let mut reach = 3000u64;
    let mut trial = 0u64;
    while trial < 300 || (trial < 3000 && (rotated == 0 || refused == 0)) {
        trial += 1;
        if trial.is_multiple_of(50) && rotated == 0 {
            reach *= 2;
        } else if trial.is_multiple_of(50) && refused == 0 {
            reach = (reach / 2).max(1);
        }
        let user = 80_000 + trial % 7;
        let device = Device {
            device: "d".repeat((trial % 3 * 40) as usize),
        };
        let s = store.create(user, device).await.unwrap();
        let rotating = {
            let store = store.clone();
            tokio::spawn(async move { store.rotate(&s.id).await.unwrap() })
        };
        tokio::time::sleep(Duration::from_micros(rand::random_range(0..reach))).await;
        store.revoke_all(&user).await.unwrap();
        match rotating.await.unwrap() {
            Some(new_id) => {
                rotated += 1;
                assert!(
                    store.load(&new_id).await.unwrap().is_none(),
                    "trial {trial}: the rotated session survived the revocation"
                );
            }
            None => refused += 1,
        }
        assert!(store.load(&s.id).await.unwrap().is_none());
        assert_eq!(
            store.sessions_of(&user).await.unwrap(),
            Vec::new(),
            "trial {trial}: a session of the user is listed"
        );
    }
    eprintln!("{rotated} rotations returned a new id, {refused} found the session revoked");
    assert!(
        rotated > 0 && refused > 0,
        "{rotated} / {refused}: the race was not run both ways"
    );
    let audit = settle(&layout).await;
    assert_eq!(audit.sessions, 0, "{audit:?}");
}

/// A revocation far from Redis (`far` delays each step by milliseconds)
/// and a rotation close to it (`near`), started in the revocation's stride:
/// the rotation often reads, copies and removes the old id between the
/// revocation's read of the user's entries and its step on that id. Once
/// both have returned, neither id loads and nothing is listed.
pub async fn a_rotation_overtaking_a_slow_revocation_is_revoked<C>(near: C, far: C)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let near: Store<_, (), u64> = Store::new(layout(near, fixed(), "slow").await).without_sweeper();
    let far: Store<_, (), u64> = Store::new(layout(far, fixed(), "slow").await).without_sweeper();
    let (mut overtook, mut refused) = (0, 0);
    for trial in 0..60u64 {
        let user = 90_000 + trial;
        let s = near.create(user, ()).await.unwrap();
        let revoking = {
            let far = far.clone();
            tokio::spawn(async move { far.revoke_all(&user).await.unwrap() })
        };
        tokio::time::sleep(Duration::from_micros(rand::random_range(1000..20_000))).await;
        let rotated = near.rotate(&s.id).await.unwrap();
        let revoked = revoking.await.unwrap();
        match rotated {
            Some(new_id) => {
                // The copy existed when the revocation reached the old id.
                overtook += u64::from(revoked.removed > 0);
                assert!(
                    near.load(&new_id).await.unwrap().is_none(),
                    "trial {trial}: the rotated copy survived ({revoked:?})"
                );
            }
            None => refused += 1,
        }
        assert!(near.load(&s.id).await.unwrap().is_none());
        assert!(near.sessions_of(&user).await.unwrap().is_empty());
    }
    eprintln!("{overtook} rotations overtook the revocation, {refused} were refused");
    assert!(overtook > 0, "no rotation overtook the revocation");
}
