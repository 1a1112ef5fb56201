//! The behaviour every layout must show, against a real server.

use std::time::Duration;

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use serde::{Deserialize, Serialize};
use sessionpack::session::layout::Layout;
use sessionpack::session::sweep::Sweepable;
use sessionpack::{Error, SessionId, Store};
use sessionpack_testkit::LocalServer;

/// Application attributes used by the suite.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Attrs {
    pub counter: u32,
    pub cart: Vec<u32>,
    pub note: String,
}

fn store<L: Layout + Sweepable>(layout: L) -> Store<L, Attrs> {
    Store::new(layout).with_ttl(Duration::from_secs(600))
}

pub async fn round_trip<L: Layout + Sweepable>(_: &LocalServer, layout: L) {
    let store = store(layout);
    let attrs = Attrs {
        counter: 3,
        cart: vec![7, 8, 9],
        note: "ünïcode ✓".into(),
    };
    let created = store.create(42, attrs.clone()).await.unwrap();
    assert_eq!(created.identity, 42);
    let loaded = store
        .load(&created.id)
        .await
        .unwrap()
        .expect("live session");
    assert_eq!(loaded, created);
    assert_eq!(loaded.attrs, attrs);

    // The cookie form finds the same session.
    let by_cookie = store.load_cookie(&created.id.to_hex()).await.unwrap();
    assert_eq!(by_cookie.as_ref(), Some(&created));

    // An id never issued finds nothing.
    let stranger = SessionId::generate_with(store.layout().id_width()).unwrap();
    assert_eq!(store.load(&stranger).await.unwrap(), None);

    // Identity-only sessions work with unit attributes.
    let plain: Store<&L, ()> = Store::new(store.layout());
    let s = plain.create(u64::MAX, ()).await.unwrap();
    assert_eq!(plain.load(&s.id).await.unwrap().unwrap().identity, u64::MAX);
}

pub async fn bulk_round_trip<L: Layout + Sweepable>(_: &LocalServer, layout: L) {
    let store = store(layout);
    let items: Vec<(u64, Attrs)> = (0..2500)
        .map(|i| {
            (
                i,
                Attrs {
                    counter: i as u32,
                    ..Attrs::default()
                },
            )
        })
        .collect();
    let ids = store.create_many(&items).await.unwrap();
    assert_eq!(ids.len(), items.len());
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "ids are distinct");

    let mut query = ids.clone();
    query.push(SessionId::generate_with(store.layout().id_width()).unwrap());
    let loaded = store.load_many(&query).await.unwrap();
    assert_eq!(loaded.len(), query.len());
    for (i, session) in loaded[..ids.len()].iter().enumerate() {
        let session = session.as_ref().expect("bulk-created session loads");
        assert_eq!(session.id, ids[i]);
        assert_eq!(session.identity, i as u64);
        assert_eq!(session.attrs.counter, i as u32);
    }
    assert_eq!(loaded.last().unwrap(), &None);
}

pub async fn expires_without_a_sweeper<L: Layout + Sweepable>(_: &LocalServer, layout: L) {
    let store = store(layout);
    let short = store
        .create_with_ttl(1, Attrs::default(), Duration::from_secs(1))
        .await
        .unwrap();
    let long = store.create(2, Attrs::default()).await.unwrap();
    assert!(store.load(&short.id).await.unwrap().is_some());
    tokio::time::sleep(Duration::from_millis(2100)).await;

    assert_eq!(store.load(&short.id).await.unwrap(), None);
    assert!(store.load_many(&[short.id]).await.unwrap()[0].is_none());
    // Nothing brings an expired session back.
    assert_eq!(store.touch(&short.id).await.unwrap(), None);
    assert_eq!(
        store.update(&short.id, |a| a.counter += 1).await.unwrap(),
        None
    );
    assert!(!store.save(&short).await.unwrap());
    assert_eq!(store.rotate(&short.id).await.unwrap(), None);
    assert_eq!(store.load(&short.id).await.unwrap(), None);
    assert!(!store.destroy(&short.id).await.unwrap());

    assert!(store.load(&long.id).await.unwrap().is_some());
}

pub async fn touch_rolls_expiry_forward<L: Layout + Sweepable>(_: &LocalServer, layout: L) {
    let unix = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    // A session lives at least its TTL and less than TTL + 1 second. A
    // call that finds it gone must come after its expiry: on a machine that
    // stalls the test may see less, never something wrong.
    let store = store(layout).with_ttl(Duration::from_secs(3));
    let s = store.create(1, Attrs::default()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let Some(renewed) = store.touch(&s.id).await.unwrap() else {
        assert!(unix() >= s.expires_at, "gone before its expiry");
        return;
    };
    assert!(renewed > s.expires_at, "{renewed} > {}", s.expires_at);
    // Past the original expiry: alive thanks to the touch.
    while unix() <= s.expires_at {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    match store.load(&s.id).await.unwrap() {
        Some(loaded) => assert_eq!(loaded.expires_at, renewed),
        None => assert!(unix() >= renewed, "gone before its renewed expiry"),
    }
}

pub async fn update_and_save<L: Layout + Sweepable>(_: &LocalServer, layout: L) {
    let store = store(layout);
    let s = store.create(9, Attrs::default()).await.unwrap();
    let updated = store
        .update(&s.id, |a| {
            a.counter += 5;
            a.cart.push(11);
        })
        .await
        .unwrap()
        .expect("live");
    assert_eq!(updated.attrs.counter, 5);
    assert_eq!(updated.expires_at, s.expires_at, "update keeps expiry");
    assert_eq!(
        store.load(&s.id).await.unwrap().unwrap().attrs,
        updated.attrs
    );

    let mut replaced = updated.clone();
    replaced.attrs.note = "x".repeat(200); // moves past any inline limit
    assert!(store.save(&replaced).await.unwrap());
    assert_eq!(
        store.load(&s.id).await.unwrap().unwrap().attrs,
        replaced.attrs
    );
    replaced.attrs.note.clear(); // and back
    assert!(store.save(&replaced).await.unwrap());
    assert_eq!(store.load(&s.id).await.unwrap().unwrap(), replaced);
}

pub async fn destroy_is_final<L: Layout + Sweepable>(_: &LocalServer, layout: L) {
    let store = store(layout);
    let s = store.create(5, Attrs::default()).await.unwrap();
    let other = store.create(6, Attrs::default()).await.unwrap();
    assert!(store.destroy(&s.id).await.unwrap());
    assert_eq!(store.load(&s.id).await.unwrap(), None);
    assert!(!store.destroy(&s.id).await.unwrap());
    // Writes after log-out must not resurrect it.
    assert_eq!(store.touch(&s.id).await.unwrap(), None);
    assert_eq!(store.update(&s.id, |a| a.counter = 1).await.unwrap(), None);
    assert!(!store.save(&s).await.unwrap());
    assert_eq!(store.rotate(&s.id).await.unwrap(), None);
    assert_eq!(store.load(&s.id).await.unwrap(), None);
    assert!(store.load(&other.id).await.unwrap().is_some());

    // Destroy also works for a record stored out of line.
    let big = store
        .create(
            7,
            Attrs {
                note: "y".repeat(10_000),
                ..Attrs::default()
            },
        )
        .await
        .unwrap();
    assert!(store.destroy(&big.id).await.unwrap());
    assert_eq!(store.load(&big.id).await.unwrap(), None);
}

pub async fn rotate_moves_the_session<L: Layout + Sweepable>(_: &LocalServer, layout: L) {
    let store = store(layout);
    for note_len in [0, 5_000] {
        let s = store
            .create(
                77,
                Attrs {
                    counter: 1,
                    note: "z".repeat(note_len),
                    ..Attrs::default()
                },
            )
            .await
            .unwrap();
        let new_id = store.rotate(&s.id).await.unwrap().expect("rotated");
        assert_ne!(new_id, s.id);
        assert_eq!(store.load(&s.id).await.unwrap(), None, "old id is dead");
        let moved = store.load(&new_id).await.unwrap().expect("new id lives");
        assert_eq!(moved.identity, 77);
        assert_eq!(moved.attrs, s.attrs);
        assert_eq!(moved.expires_at, s.expires_at, "rotation keeps expiry");
        assert_eq!(store.touch(&s.id).await.unwrap(), None);
    }
    let missing = SessionId::generate_with(store.layout().id_width()).unwrap();
    assert_eq!(store.rotate(&missing).await.unwrap(), None);
}

pub async fn concurrent_updates_lose_nothing<L: Layout + Sweepable + 'static>(
    _: &LocalServer,
    layout: L,
) {
    const TASKS: u32 = 16;
    const EACH: u32 = 25;
    let store = std::sync::Arc::new(store(layout).with_update_attempts(1000));
    let s = store.create(1, Attrs::default()).await.unwrap();
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let store = store.clone();
        let id = s.id;
        tasks.push(tokio::spawn(async move {
            for _ in 0..EACH {
                store
                    .update(&id, |a| {
                        a.counter += 1;
                        a.cart.push(t);
                    })
                    .await
                    .unwrap()
                    .expect("live");
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let end = store.load(&s.id).await.unwrap().unwrap();
    assert_eq!(end.attrs.counter, TASKS * EACH);
    assert_eq!(end.attrs.cart.len() as u32, TASKS * EACH);
    for t in 0..TASKS {
        assert_eq!(
            end.attrs.cart.iter().filter(|&&x| x == t).count() as u32,
            EACH
        );
    }
}

/// Writes bytes no store would write where a layout keeps `id`'s record.
pub type Corrupter = fn(&LocalServer, &SessionId, &[u8]);

pub async fn corrupt_record_is_an_error<L: Layout + Sweepable>(
    server: &LocalServer,
    layout: L,
    corrupt: Corrupter,
) {
    let store = store(layout);
    let s = store.create(3, Attrs::default()).await.unwrap();
    let fine = store.create(4, Attrs::default()).await.unwrap();
    for garbage in [
        &b"\xa3abc"[..],
        b"\x03\x93\x01",
        b"\x03\xdd\xff\xff\xff\xff",
        b"{\"json\":1}",
    ] {
        corrupt(server, &s.id, garbage);
        for _ in 0..2 {
            // The bytes are left in place: the second read sees them too.
            match store.load(&s.id).await {
                Err(Error::CorruptRecord { location, .. }) => {
                    assert!(!location.contains(&s.id.to_hex()), "id redacted");
                }
                other => panic!("expected CorruptRecord, got {other:?}"),
            }
        }
        assert!(matches!(
            store.update(&s.id, |a| a.counter += 1).await,
            Err(Error::CorruptRecord { .. })
        ));
        assert!(matches!(
            store.load_many(&[s.id]).await,
            Err(Error::CorruptRecord { .. })
        ));
        assert!(store.load(&fine.id).await.unwrap().is_some());
    }
    // A corrupt session can still be destroyed.
    assert!(store.destroy(&s.id).await.unwrap());
    assert_eq!(store.load(&s.id).await.unwrap(), None);
}

pub async fn too_large_is_refused_before_redis<L: Layout + Sweepable>(
    server: &LocalServer,
    layout: L,
) {
    let store = store(layout).with_max_record_bytes(64 * 1024);
    let mut raw = super::raw(server).await;
    let s = store.create(1, Attrs::default()).await.unwrap();
    let before = super::commands_processed(&mut raw).await;
    let huge = Attrs {
        note: "h".repeat(100_000),
        ..Attrs::default()
    };
    assert!(matches!(
        store.create(1, huge.clone()).await,
        Err(Error::TooLarge { limit: 65536, .. })
    ));
    let mut fat = s.clone();
    fat.attrs = huge.clone();
    assert!(matches!(
        store.save(&fat).await,
        Err(Error::TooLarge { .. })
    ));
    let after = super::commands_processed(&mut raw).await;
    assert_eq!(after - before, 1, "only the INFO call itself reached Redis");
    // An update reads first, then refuses to write.
    assert!(matches!(
        store.update(&s.id, |a| a.note = huge.note.clone()).await,
        Err(Error::TooLarge { .. })
    ));
    assert_eq!(store.load(&s.id).await.unwrap().unwrap(), s, "nothing lost");
}

/// Strings a cookie could carry: random bytes, wrong lengths, unicode,
/// near-misses of the real form, and very long ones.
fn hostile_ids() -> Vec<String> {
    let mut runner = TestRunner::deterministic();
    let strategies = [
        proptest::string::string_regex(".{0,80}").unwrap().boxed(),
        proptest::string::string_regex("[0-9a-fA-F]{38,42}")
            .unwrap()
            .boxed(),
        proptest::string::string_regex("[0-9a-f]{39}[^0-9a-f]")
            .unwrap()
            .boxed(),
        // Well-formed ids of the other width.
        proptest::string::string_regex("[0-9a-f]{32}|[0-9a-f]{40}")
            .unwrap()
            .boxed(),
        proptest::string::string_regex("\\PC{40}").unwrap().boxed(),
        proptest::collection::vec(proptest::num::u8::ANY, 0..64)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned())
            .boxed(),
    ];
    let mut out = Vec::new();
    for strategy in &strategies {
        for _ in 0..300 {
            out.push(strategy.new_tree(&mut runner).unwrap().current());
        }
    }
    out.push("0".repeat(1 << 20));
    out.push("0123456789ABCDEF0123456789abcdef01234567".into());
    out.push(format!("{}\0", "a".repeat(39)));
    out.push(" 0123456789abcdef0123456789abcdef0123456".into());
    out
}

pub async fn hostile_ids_never_reach_redis<L: Layout + Sweepable>(server: &LocalServer, layout: L) {
    let width = layout.id_width();
    let store = store(layout);
    let mut raw = super::raw(server).await;
    let before = super::commands_processed(&mut raw).await;
    let mut refused = 0;
    for text in hostile_ids() {
        let valid = text.len() == width.hex_len()
            && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if valid {
            continue; // a random string that happens to be well-formed
        }
        match store.load_cookie(&text).await {
            Err(Error::InvalidId(_)) => refused += 1,
            other => panic!("{:?}: expected InvalidId, got {other:?}", text.get(..50)),
        }
        assert!(SessionId::parse_with(&text, width).is_err());
    }
    assert!(refused > 1000);
    let after = super::commands_processed(&mut raw).await;
    assert_eq!(after - before, 1, "only the INFO call itself reached Redis");
}

pub async fn survives_a_redis_restart<L: Layout + Sweepable>(server: &LocalServer, layout: L) {
    let store = store(layout);
    let s = store.create(1, Attrs::default()).await.unwrap();
    assert!(store.load(&s.id).await.unwrap().is_some());
    server.restart().unwrap();
    // The first calls may fail while the connection is re-established;
    // each failure must be a typed error, and the store must recover.
    let mut recovered = None;
    for _ in 0..100 {
        match store.create(2, Attrs::default()).await {
            Ok(created) => {
                recovered = Some(created);
                break;
            }
            Err(e) => assert!(matches!(e, Error::Unavailable(_)), "unexpected {e:?}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let created = recovered.expect("store works again after the restart");
    assert_eq!(store.load(&created.id).await.unwrap().unwrap().identity, 2);
    // The restarted server is empty: the old session is gone, not an error.
    assert_eq!(store.load(&s.id).await.unwrap(), None);
    // Bulk calls reload scripts the new server has never seen.
    let ids = store.create_many(&[(5, Attrs::default())]).await.unwrap();
    assert!(store.load_many(&ids).await.unwrap()[0].is_some());
}

pub async fn absurd_lifetimes_are_refused<L: Layout + Sweepable>(server: &LocalServer, layout: L) {
    let mut raw = server
        .client()
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys_before: u64 = redis::cmd("DBSIZE").query_async(&mut raw).await.unwrap();
    let store = store(layout);
    for ttl in [
        Duration::from_secs(u64::MAX),
        Duration::MAX,
        Duration::from_secs(sessionpack::ttl::MAX_TTL_SECS + 1),
    ] {
        let forever = Store::<&L, Attrs>::new(store.layout()).with_ttl(ttl);
        assert!(matches!(
            forever.create(1, Attrs::default()).await,
            Err(Error::InvalidTtl { .. })
        ));
        assert!(matches!(
            store.create_with_ttl(1, Attrs::default(), ttl).await,
            Err(Error::InvalidTtl { .. })
        ));
        assert!(matches!(
            forever.create_many(&[(1, Attrs::default())]).await,
            Err(Error::InvalidTtl { .. })
        ));
    }
    let keys_after: u64 = redis::cmd("DBSIZE").query_async(&mut raw).await.unwrap();
    assert_eq!(keys_before, keys_after, "nothing was written");

    // A live session is not touched to forever either, and keeps its expiry.
    let s = store.create(2, Attrs::default()).await.unwrap();
    let forever = Store::<&L, Attrs>::new(store.layout()).with_ttl(Duration::MAX);
    assert!(matches!(
        forever.touch(&s.id).await,
        Err(Error::InvalidTtl { .. })
    ));
    assert_eq!(
        store.load(&s.id).await.unwrap().unwrap().expires_at,
        s.expires_at
    );
    // The longest lifetime accepted works.
    let longest = sessionpack::ttl::MAX_TTL_SECS;
    let s = store
        .create_with_ttl(3, Attrs::default(), Duration::from_secs(longest))
        .await
        .unwrap();
    assert!(store.load(&s.id).await.unwrap().is_some());
}

/// A layout that touches one session, with a long lifetime, just before the
/// first insert it is asked for: the interleaving of a touch landing while a
/// rotation copies that session.
struct TouchBeforeInsert<L> {
    inner: L,
    target: SessionId,
    ttl_secs: u64,
    touched: std::sync::Mutex<Option<u64>>,
}

impl<L: Sweepable> Sweepable for TouchBeforeInsert<L> {
    fn spawn_sweeper(
        &self,
        config: sessionpack::session::sweep::SweepConfig,
    ) -> Option<sessionpack::session::sweep::SweeperHandle> {
        self.inner.spawn_sweeper(config)
    }
}

impl<L: Layout> Layout for TouchBeforeInsert<L> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn id_width(&self) -> sessionpack::IdWidth {
        self.inner.id_width()
    }
    async fn new_id(&self) -> sessionpack::Result<SessionId> {
        self.inner.new_id().await
    }
    fn stamps_ids(&self) -> bool {
        self.inner.stamps_ids()
    }
    async fn insert(
        &self,
        id: &SessionId,
        record: &[u8],
        expiry: sessionpack::ttl::Deadline,
    ) -> sessionpack::Result<sessionpack::session::layout::Inserted> {
        let first = self.touched.lock().unwrap().is_none();
        if first {
            let renewed = self.inner.touch(&self.target, self.ttl_secs).await?;
            *self.touched.lock().unwrap() = Some(renewed.expect("live when touched"));
        }
        self.inner.insert(id, record, expiry).await
    }
    async fn load(
        &self,
        id: &SessionId,
    ) -> sessionpack::Result<Option<sessionpack::session::layout::Stored>> {
        self.inner.load(id).await
    }
    async fn touch(&self, id: &SessionId, ttl_secs: u64) -> sessionpack::Result<Option<u64>> {
        self.inner.touch(id, ttl_secs).await
    }
    async fn replace(
        &self,
        id: &SessionId,
        record: &[u8],
        expected: Option<&[u8]>,
    ) -> sessionpack::Result<sessionpack::session::layout::Written> {
        self.inner.replace(id, record, expected).await
    }
    async fn remove(
        &self,
        id: &SessionId,
        expected: Option<&sessionpack::session::layout::Stored>,
    ) -> sessionpack::Result<sessionpack::session::layout::Written> {
        self.inner.remove(id, expected).await
    }
}

pub async fn rotate_keeps_a_touch_made_meanwhile<L: Layout + Sweepable>(
    _: &LocalServer,
    layout: L,
) {
    let short = store(&layout).with_ttl(Duration::from_secs(100));
    for note_len in [0, 5_000] {
        let attrs = Attrs {
            note: "t".repeat(note_len),
            ..Attrs::default()
        };
        let s = short.create(8, attrs).await.unwrap();
        let racing = TouchBeforeInsert {
            inner: &layout,
            target: s.id,
            ttl_secs: 10_000,
            touched: std::sync::Mutex::new(None),
        };
        let rotating: Store<_, Attrs> = Store::new(&racing);
        let new_id = rotating.rotate(&s.id).await.unwrap().expect("rotated");
        let touched = racing.touched.lock().unwrap().expect("touched");
        assert!(touched > s.expires_at + 9_000);
        let moved = short.load(&new_id).await.unwrap().expect("moved");
        assert_eq!(
            moved.expires_at, touched,
            "the touch moved with the session"
        );
        assert_eq!(short.load(&s.id).await.unwrap(), None);
    }
}

/// Sessions owned by UUIDs, names and a mix round-trip through every
/// operation; a name over the limit is refused when made; a store of one
/// form reading a session of another gets a typed error, not a wrong owner.
pub async fn identities_of_every_form<L: Layout + Sweepable>(_: &LocalServer, layout: L) {
    use sessionpack::identity::{Identity, MAX_NAME_BYTES, Name, Uuid};
    let uuids: Store<&L, Attrs, Uuid> =
        Store::for_identities(&layout).with_ttl(Duration::from_secs(600));
    let owner = Uuid([0x5a; 16]);
    let attrs = Attrs {
        counter: 1,
        ..Attrs::default()
    };
    let s = uuids.create(owner, attrs.clone()).await.unwrap();
    assert_eq!(uuids.load(&s.id).await.unwrap().unwrap(), s);
    let updated = uuids
        .update(&s.id, |a| a.counter += 1)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((updated.identity, updated.attrs.counter), (owner, 2));
    assert!(uuids.touch(&s.id).await.unwrap().is_some());
    let moved = uuids.rotate(&s.id).await.unwrap().unwrap();
    assert_eq!(uuids.load(&moved).await.unwrap().unwrap().identity, owner);

    let names: Store<&L, (), Name> = Store::for_identities(&layout);
    let longest = Name::new("n".repeat(MAX_NAME_BYTES)).unwrap();
    // From the shortest name (one byte; an empty one is no one's) to the
    // longest.
    assert!(Name::new("").is_err());
    let batch: Vec<(Name, ())> = ["ada@example.com", "ü", "x"]
        .into_iter()
        .map(|n| (Name::new(n).unwrap(), ()))
        .chain([(longest.clone(), ())])
        .collect();
    let ids = names.create_many(&batch).await.unwrap();
    let loaded = names.load_many(&ids).await.unwrap();
    let owners: Vec<Name> = loaded.into_iter().map(|s| s.unwrap().identity).collect();
    assert_eq!(
        owners,
        batch.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>()
    );
    assert!(Name::new("n".repeat(MAX_NAME_BYTES + 1)).is_err());

    // A store of any form reads all three.
    let any: Store<&L, (), Identity> = Store::for_identities(&layout);
    let int = any.create(Identity::Int(7), ()).await.unwrap();
    assert_eq!(
        any.load(&ids[0]).await.unwrap().unwrap().identity,
        Identity::Name("ada@example.com".into())
    );
    assert_eq!(
        any.load(&int.id).await.unwrap().unwrap().identity,
        Identity::Int(7)
    );

    // An integer store reading a name's session: a typed error.
    let ints: Store<&L, ()> = Store::new(&layout);
    match ints.load(&ids[0]).await {
        Err(Error::CorruptRecord { reason, .. }) => {
            assert!(
                reason.contains("a name where an integer was expected"),
                "{reason}"
            )
        }
        other => panic!("expected a corrupt record, got {other:?}"),
    }
    assert!(names.destroy(&ids[0]).await.unwrap());
    assert!(names.load(&ids[0]).await.unwrap().is_none());
}

/// The idle timeout and the absolute lifetime, each alone and together: a
/// touch rolls the expiry only with an idle timeout, and never past the
/// absolute deadline (sign-in plus the lifetime); past it, loads, batch
/// loads and touches find nothing; a rotation keeps the sign-in time, so
/// the deadline with it.
pub async fn lifetimes_idle_and_absolute<L: Layout + Sweepable>(_: &LocalServer, layout: L) {
    let secs = |s| Duration::from_secs(s);
    let unix = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    // Both: idle 600 s, absolute 60 s (no call here takes that long).
    let both: Store<&L, Attrs> =
        Store::new(&layout).with_lifetimes(Some(secs(600)), Some(secs(60)));
    let before = unix();
    let s = both.create(70_000, Attrs::default()).await.unwrap();
    let stamp = u64::from(s.id.stamp());
    assert!(
        (before.saturating_sub(1)..=unix() + 1).contains(&stamp),
        "stamped at sign-in"
    );
    // A create is given the deadline itself; a touch the lifetime left by
    // this process's clock, which the time the call takes can carry past
    // it (Store::with_lifetimes), as can the two clocks' rounding: this
    // one's down to the second, the server's up (a session lives at least
    // its lifetime).
    assert!(s.expires_at <= stamp + 60, "created past its deadline");
    let call = std::time::Instant::now();
    let touched = both.touch(&s.id).await.unwrap().expect("live");
    let slack = call.elapsed().as_secs() + 2;
    assert!(
        touched <= stamp + 60 + slack,
        "a touch went past the deadline"
    );
    let rotated = both.rotate(&s.id).await.unwrap().expect("rotated");
    assert_eq!(
        rotated.stamp(),
        s.id.stamp(),
        "a rotation keeps the sign-in time"
    );
    let call = std::time::Instant::now();
    let touched = both.touch(&rotated).await.unwrap().expect("live");
    let slack = call.elapsed().as_secs() + 2;
    assert!(
        touched <= stamp + 60 + slack,
        "a rotation moved the deadline"
    );

    // Absolute 2 s: past the deadline nothing is found, whatever the
    // server's expiry says. (On a slow machine the deadline may pass
    // during these calls; what follows holds either way.)
    let short: Store<&L, Attrs> =
        Store::new(&layout).with_lifetimes(Some(secs(600)), Some(secs(2)));
    let s = short.create(70_001, Attrs::default()).await.unwrap();
    let stamp = u64::from(s.id.stamp());
    let batch = short
        .create_many(&[(70_001, Attrs::default())])
        .await
        .unwrap();
    let rotated = short.rotate(&s.id).await.unwrap();
    if rotated.is_none() {
        assert!(unix() >= stamp + 2, "no rotation before the deadline");
    }
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    while unix() < stamp + 3 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for id in [Some(s.id), rotated].into_iter().flatten() {
        assert_eq!(short.load(&id).await.unwrap(), None);
        assert_eq!(short.touch(&id).await.unwrap(), None);
    }
    assert_eq!(short.load_many(&batch).await.unwrap(), vec![None]);

    // Absolute only: touches do not extend.
    let fixed: Store<&L, Attrs> = Store::new(&layout).with_lifetimes(None, Some(secs(600)));
    let s = fixed.create(70_002, Attrs::default()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(fixed.touch(&s.id).await.unwrap(), Some(s.expires_at));
    // Idle only (the default): a touch rolls the expiry.
    let rolling: Store<&L, Attrs> = Store::new(&layout).with_lifetimes(Some(secs(600)), None);
    let touched = rolling.touch(&s.id).await.unwrap().expect("live");
    assert!(touched > s.expires_at, "{touched} > {}", s.expires_at);
}
