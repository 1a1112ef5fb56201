//! Plain writes of sessions a process read (record format 10,
//! `src/session/layout/compact/plain.rs`), through the store the
//! tower-sessions and actix-session stores are made of: a save is one
//! `HSETEX FXX` where the server has it (one two-command script where it
//! has not), a delete of a record in pieces one two-command script; what
//! changed since the read goes by the full scripts, and short names one
//! session gave up stay its own while it lives.

use super::*;
use serde_json::Value;
use sessionpack::map_store::MapStore;

/// Two processes' stores on one namespace of four fixed buckets: each
/// remembers what it read, as an app's instances do.
async fn two_stores(server: &LocalServer) -> (MapStore<Conn>, MapStore<Conn>) {
    stores_in(server, "sp").await
}

/// [`two_stores`] in `namespace`.
pub(super) async fn stores_in(
    server: &LocalServer,
    namespace: &str,
) -> (MapStore<Conn>, MapStore<Conn>) {
    let open = async || {
        let config = CompactConfig::new(2).with_namespace(namespace);
        MapStore::new(common::manager(server).await, config)
            .await
            .unwrap()
            .without_sweeper()
    };
    (open().await, open().await)
}

/// A session's data whose record takes `text` characters and a few bytes:
/// one value up to about 50, one piece up to about 110, two up to 170.
pub(super) fn data(text: usize, seed: u64) -> HashMap<String, Value> {
    let text: String = (0..text)
        .map(|i| char::from(b'a' + ((seed * 7 + i as u64 * 13) % 26) as u8))
        .collect();
    HashMap::from([("t".to_owned(), Value::String(text))])
}

pub(super) fn in_10_min() -> i64 {
    (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600) as i64
}

/// `id` with its ninth byte changed: a session of the same bucket whose
/// short piece names begin alike (they take the field's first byte and
/// two of its last six).
pub(super) fn sibling(id: i128) -> i128 {
    id ^ (0x55 << (8 * 7))
}

/// Whether the server has `HSETEX`, as `COMMAND INFO` tells.
pub(super) async fn has_hsetex(raw: &mut redis::aio::MultiplexedConnection) -> bool {
    let info: Vec<redis::Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("HSETEX")
        .query_async(raw)
        .await
        .unwrap();
    info.first().is_some_and(|v| *v != redis::Value::Nil)
}

/// A save of a session the process read, its record keeping its number
/// of pieces, is one `HSETEX` where the server has it and one script of
/// two commands where it has not; one that gains a piece goes by the full
/// script. Every save reads back, and nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_save_of_a_session_read_is_one_plain_command() {
    let server = common::server();
    let mut raw = common::raw(&server).await;
    let (store, _) = two_stores(&server).await;
    let hsetex = has_hsetex(&mut raw).await;
    let expected = if hsetex {
        "HSETEX FXX"
    } else {
        eprintln!("skipped: HSETEX saves (the server has no HSETEX): compact_resave.lua instead");
        "compact_resave.lua"
    };
    assert_eq!(store.layout().plain_saves(), Some(expected));
    // Twice: the first time loads the scripts (a first call is counted
    // twice), the second counts them.
    for (n, text) in [20usize, 80, 150, 20, 80, 150].into_iter().enumerate() {
        let id = 0x1234_5678_9abc_def0_1122_3344_5566_7788_i128 + n as i128;
        let id = store
            .create_data(id, &data(text, 0), in_10_min(), rand::random)
            .await
            .unwrap();
        // A fresh read, then a save of the same size: plain.
        store.load_data(id).await.unwrap().unwrap();
        let before = (
            common::calls(&mut raw, "hsetex").await,
            common::calls(&mut raw, "evalsha").await,
        );
        assert!(
            store
                .save_data(id, &data(text, 1), in_10_min())
                .await
                .unwrap()
        );
        let after = (
            common::calls(&mut raw, "hsetex").await,
            common::calls(&mut raw, "evalsha").await,
        );
        let plain = if hsetex { (1, 0) } else { (0, 1) };
        if n >= 3 {
            assert_eq!(
                (after.0 - before.0, after.1 - before.1),
                plain,
                "a save of {text} characters"
            );
        }
        assert_eq!(store.load_data(id).await.unwrap().unwrap().0, data(text, 1));
        // One piece more: the full script decides, and reads back.
        let before = common::calls(&mut raw, "hsetex").await;
        assert!(
            store
                .save_data(id, &data(text + 60, 2), in_10_min())
                .await
                .unwrap()
        );
        assert_eq!(common::calls(&mut raw, "hsetex").await, before);
        assert_eq!(
            store.load_data(id).await.unwrap().unwrap().0,
            data(text + 60, 2)
        );
        let c = census(&mut raw, store.layout()).await;
        assert_eq!((c.orphans, c.missing), (0, 0), "{c:?}");
        store.delete_data(id).await.unwrap();
        assert!(store.load_data(id).await.unwrap().is_none());
    }
    assert_eq!(
        census(&mut raw, store.layout()).await.but_holds(),
        Census::default()
    );
}

/// A session this process created plainly is remembered as it was
/// written, as one it read is: its save is the plain save (one `HSETEX
/// FXX`, or `compact_resave.lua`'s `HEXISTS` and `HSET`), not the full
/// script, and its delete one `HGETDEL` of its value and pieces where the
/// server has it, not a second for the pieces its value names (a
/// sign-in's id rotation deletes the session it created moments before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_created_here_saves_and_deletes_as_one_read_here() {
    let server = common::server();
    let mut raw = common::raw(&server).await;
    let (store, _) = two_stores(&server).await;
    let hsetex = has_hsetex(&mut raw).await;
    let hgetdel = store.layout().plain_deletes().is_some();
    if !hgetdel {
        eprintln!("skipped: HGETDEL deletes (the server has none): compact_unset.lua instead");
    }
    let names = ["hsetex", "evalsha", "hexists", "hget", "hgetdel"];
    let counts = async |raw: &mut redis::aio::MultiplexedConnection| {
        let mut counts = Vec::new();
        for name in names {
            counts.push(common::calls(raw, name).await);
        }
        counts
    };
    let create = async |text: usize, seed: u64| {
        store
            .create_data(rand::random(), &data(text, seed), in_10_min(), || {
                panic!("taken")
            })
            .await
            .unwrap()
    };
    // Twice: the first time loads the scripts (a first call is counted
    // twice), the second counts them. Kept whole, in one piece, in two.
    for (n, text) in [20usize, 80, 150, 20, 80, 150].into_iter().enumerate() {
        let id = create(text, 0).await;
        let before = counts(&mut raw).await;
        assert!(
            store
                .save_data(id, &data(text, 1), in_10_min())
                .await
                .unwrap()
        );
        let saved = common::sent_since(&before, &counts(&mut raw).await);
        let id2 = create(text, 2).await;
        let before = counts(&mut raw).await;
        store.delete_data(id2).await.unwrap();
        let deleted = common::sent_since(&before, &counts(&mut raw).await);
        if n >= 3 {
            // hsetex, evalsha, hexists, hget, hgetdel
            let plain_save = if hsetex {
                vec![1, 0, 0, 0, 0]
            } else {
                vec![0, 1, 1, 0, 0]
            };
            assert_eq!(saved, plain_save, "a save of {text} characters");
            if hgetdel {
                assert_eq!(
                    deleted,
                    vec![0, 0, 0, 0, 1],
                    "a delete of {text} characters"
                );
            }
        }
        assert_eq!(store.load_data(id).await.unwrap().unwrap().0, data(text, 1));
        assert!(store.load_data(id2).await.unwrap().is_none());
        store.delete_data(id).await.unwrap();
    }
    assert_eq!(
        census(&mut raw, store.layout()).await.but_holds(),
        Census::default()
    );
}

/// A plain save never brings back a session deleted since the process
/// read it: its field is gone, so nothing is written; a delete of a
/// record read in pieces is one `HGETDEL` of its value and pieces where
/// the server has it, else one two-command script, and leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_save_never_brings_back_a_session_gone_since_its_read() {
    let server = common::server();
    let mut raw = common::raw(&server).await;
    let (a, b) = two_stores(&server).await;
    // Twice: the first time loads the scripts (a first call is counted
    // twice), the second counts them.
    for (n, text) in [20usize, 150, 20, 150].into_iter().enumerate() {
        let id = a
            .create_data(rand::random(), &data(text, 0), in_10_min(), rand::random)
            .await
            .unwrap();
        a.load_data(id).await.unwrap().unwrap();
        b.load_data(id).await.unwrap().unwrap();
        let scripts = common::calls(&mut raw, "evalsha").await;
        let taken = common::calls(&mut raw, "hgetdel").await;
        b.delete_data(id).await.unwrap();
        // A record read whole goes by one HDEL, one in pieces by one
        // script; both by one HGETDEL where the server has it.
        let sent = common::calls(&mut raw, "evalsha").await - scripts;
        let hgetdel = common::calls(&mut raw, "hgetdel").await - taken;
        if n >= 2 {
            let plain = b.layout().plain_deletes().is_some();
            assert_eq!(
                (sent, hgetdel),
                if plain {
                    (0, 1)
                } else {
                    (u64::from(text > 100), 0)
                },
                "a delete of {text} characters"
            );
        }
        a.save_data(id, &data(text, 1), in_10_min()).await.unwrap();
        assert!(a.load_data(id).await.unwrap().is_none());
        assert!(b.load_data(id).await.unwrap().is_none());
    }
    assert_eq!(
        census(&mut raw, a.layout()).await.but_holds(),
        Census::default()
    );
}

/// Short names a session gives up while it lives stay its own, a hold: a
/// session of the same bucket whose names would begin alike takes long
/// ones meanwhile, and a process that read the first in pieces and saves
/// it as it read it never writes over the second. With two pieces read,
/// the save's second name is gone and the full script decides; with one,
/// the plain save takes the names back. The sweeper keeps a hold while its
/// session lives and removes it after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_names_given_up_stay_the_sessions_own_while_it_lives() {
    let server = common::server();
    let mut raw = common::raw(&server).await;
    let (a, b) = two_stores(&server).await;
    let hsetex = has_hsetex(&mut raw).await;
    for (round, text) in [150usize, 80].into_iter().enumerate() {
        // Holds of sessions that ended are left to the sweeper.
        let left = census(&mut raw, a.layout()).await.holds;
        let first = a
            .create_data(rand::random(), &data(text, 0), in_10_min(), rand::random)
            .await
            .unwrap();
        // `a` reads it in pieces under short names; `b` shrinks it to one
        // value, leaving its first name a hold.
        a.load_data(first).await.unwrap().unwrap();
        b.load_data(first).await.unwrap().unwrap();
        assert!(b.save_data(first, &data(10, 1), in_10_min()).await.unwrap());
        let c = census(&mut raw, a.layout()).await;
        assert_eq!((c.holds, c.orphans, c.missing), (left + 1, 0, 0), "{c:?}");
        // A session whose names would begin alike: long ones.
        let second = sibling(first);
        let made = b
            .create_data(second, &data(150, 2), in_10_min(), || panic!("taken"))
            .await
            .unwrap();
        assert_eq!(made, second);
        let c = census(&mut raw, a.layout()).await;
        assert_eq!((c.holds, c.orphans, c.missing), (left + 1, 0, 0), "{c:?}");
        // `a` saves the first as it read it.
        assert!(
            a.save_data(first, &data(text, 3), in_10_min())
                .await
                .unwrap()
        );
        assert_eq!(a.load_data(first).await.unwrap().unwrap().0, data(text, 3));
        assert_eq!(b.load_data(second).await.unwrap().unwrap().0, data(150, 2));
        let c = census(&mut raw, a.layout()).await;
        // `HSETEX FXX` names both pieces, and the second is gone: the full
        // script wrote long names, the hold stays. With one piece, or by
        // the script that checks the field alone, the first took its short
        // names back, the hold its first piece again.
        let holds = u64::from(round == 0 && hsetex);
        assert_eq!(
            (c.holds, c.orphans, c.missing),
            (left + holds, 0, 0),
            "{c:?}"
        );
        a.delete_data(first).await.unwrap();
        b.delete_data(second).await.unwrap();
    }

    // The sweeper keeps a hold while its session lives, and removes it
    // once the session is gone: a session of the bucket that expires
    // brings the sweeper there (a namespace of its own, holding no other
    // holds).
    let (a, _) = stores_in(&server, "held").await;
    let kept = a
        .create_data(rand::random(), &data(150, 0), in_10_min(), rand::random)
        .await
        .unwrap();
    assert!(a.save_data(kept, &data(10, 1), in_10_min()).await.unwrap());
    let sweep_bucket = async |store: &MapStore<Conn>, seed: u64| {
        let brief = sibling(kept) ^ i128::from(seed);
        let soon = in_10_min() - 598;
        store
            .create_data(brief, &data(10, 2), soon, || panic!("taken"))
            .await
            .unwrap();
        while store.load_data(brief).await.unwrap().is_some() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        while store.sweep().await.unwrap().reclaimed == 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    sweep_bucket(&a, 1).await;
    let c = census(&mut raw, a.layout()).await;
    assert_eq!((c.holds, c.orphans), (1, 0), "kept while it lives: {c:?}");
    a.delete_data(kept).await.unwrap();
    sweep_bucket(&a, 2).await;
    let c = census(&mut raw, a.layout()).await;
    assert_eq!(
        (c.holds, c.orphans),
        (0, 0),
        "removed once it is gone: {c:?}"
    );
}

/// Plain writes racing splits, merges and sweeps in a growing store, from
/// two processes whose memories of each session go stale: each of four
/// callers owns its sessions and, for each step, reads a session through
/// one process and saves it (a size drawn at random: whole, one piece or
/// more) or deletes it through either, creating new sessions as it goes,
/// while a sweeper passes and sessions end. Every session then reads as
/// its last write left it, or gone if deleted, and no value names a
/// missing piece. (Pieces a stale plain save leaves without a value are
/// the sweeper's, as for any write racing another: counted, not failed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn plain_writes_racing_splits_and_merges_lose_nothing() {
    use rand::{Rng, SeedableRng};
    let server = common::server();
    // Buckets split above fifteen fields: many splits, and merges as
    // sessions go.
    common::set_hash_entries(&server, 16);
    let open = async || {
        MapStore::new(
            common::manager(&server).await,
            CompactConfig::growing().with_namespace("race"),
        )
        .await
        .unwrap()
        .without_sweeper()
    };
    let stores = Arc::new([open().await, open().await]);
    let sweeper = open().await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sweeping = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut passes = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                sweeper.sweep().await.unwrap();
                passes += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            passes
        })
    };
    let mut callers = Vec::new();
    for caller in 0..4u64 {
        let stores = stores.clone();
        callers.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(caller);
            // Each session's last write: its data, or none once deleted.
            let mut last: HashMap<i128, Option<HashMap<String, Value>>> = HashMap::new();
            let size =
                |rng: &mut rand::rngs::StdRng| [10, 30, 80, 150, 250][rng.random_range(0..5)];
            for step in 0..400u64 {
                let live: Vec<i128> = last
                    .iter()
                    .filter(|(_, d)| d.is_some())
                    .map(|(id, _)| *id)
                    .collect();
                if live.len() < 30 || rng.random_bool(0.1) {
                    let text = size(&mut rng);
                    let d = data(text, caller * 1000 + step);
                    let store = &stores[rng.random_range(0..2)];
                    let id = store
                        .create_data(rng.random(), &d, in_10_min(), rand::random)
                        .await
                        .unwrap();
                    last.insert(id, Some(d));
                    continue;
                }
                let id = live[rng.random_range(0..live.len())];
                let reader = &stores[rng.random_range(0..2)];
                let (read, _) = reader.load_data(id).await.unwrap().expect("live");
                assert_eq!(
                    Some(&read),
                    last[&id].as_ref(),
                    "caller {caller} step {step}"
                );
                let writer = &stores[rng.random_range(0..2)];
                if rng.random_bool(0.15) {
                    writer.delete_data(id).await.unwrap();
                    last.insert(id, None);
                } else {
                    let d = data(size(&mut rng), caller * 1000 + step);
                    writer.save_data(id, &d, in_10_min()).await.unwrap();
                    last.insert(id, Some(d));
                }
            }
            last
        }));
    }
    let mut every = HashMap::new();
    for caller in callers {
        every.extend(caller.await.unwrap());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let passes = sweeping.await.unwrap();
    assert!(passes > 0);
    let fresh = open().await;
    let mut deleted = 0;
    for (id, want) in &every {
        let got = fresh.load_data(*id).await.unwrap().map(|(d, _)| d);
        assert_eq!(&got, want);
        deleted += usize::from(want.is_none());
    }
    assert!(
        deleted > 0 && deleted < every.len(),
        "{deleted} of {}",
        every.len()
    );
    let mut raw = common::raw(&server).await;
    // More buckets (keys holding the marker) than the 16 groups began
    // with: the race ran against splits.
    let keys: Vec<String> = raw.keys("race:*").await.unwrap();
    let (mut buckets, mut marks) = (0, 0);
    for key in &keys {
        let marked: redis::RedisResult<bool> = raw.hexists(key, "").await;
        buckets += usize::from(marked.unwrap_or(false));
        // Keys the splits and merges replaced, left as marks (record
        // format 11), which plain creates routed by an older shape meet.
        let mark: redis::RedisResult<bool> = raw.hexists(key, &[0xffu8][..]).await;
        marks += usize::from(mark.unwrap_or(false));
    }
    assert!(buckets > 16, "{buckets} buckets");
    assert!(marks > 0, "no marks");
    let c = census(&mut raw, fresh.layout()).await;
    assert_eq!(c.missing, 0, "{c:?}");
    eprintln!("after the race: {c:?}, {buckets} buckets, {passes} sweeper passes");
}
