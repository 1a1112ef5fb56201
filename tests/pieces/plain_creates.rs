//! Creates with plain commands in a store on one server
//! (`src/session/layout/compact/plain_create.rs`): one `HSETEX FNX` of
//! the value and its pieces beside the index entry's `ZADD LT` where the
//! server has `HSETEX`; where it has not, one `HSETNX` of a record kept
//! whole, and `compact_fnx.lua` (`HMGET`, `HSET`) of one in pieces. What
//! the write finds taken goes to the full script, which decides as
//! before.

use super::plain::{data, has_hsetex, in_10_min, sibling, stores_in};
use super::*;
use sessionpack::Error;
use sessionpack::map_store::MapStore;

/// Every create of a record kept in its bucket is plain where the server
/// has `HSETEX`; where it has not, one of a record kept whole is, and one
/// in pieces is `compact_fnx.lua` (two commands, not the full script's
/// `HSETNX` and the rest); each reads back, and nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_in_a_fixed_store_is_one_plain_command() {
    let server = common::server();
    let mut raw = common::raw(&server).await;
    let (store, _) = stores_in(&server, "made").await;
    let hsetex = has_hsetex(&mut raw).await;
    let (expected, command) = if hsetex {
        ("HSETEX FNX", "hsetex")
    } else {
        eprintln!(
            "skipped: HSETEX creates (the server has no HSETEX): HSETNX of whole records, \
             compact_fnx.lua of records in pieces"
        );
        ("HSETNX / compact_fnx.lua", "hsetnx")
    };
    assert_eq!(store.layout().plain_creates(), Some(expected));
    // Twice: the first time loads the scripts (a first call is counted
    // twice), the second counts them.
    let mut made = Vec::new();
    for (n, text) in [20usize, 80, 150, 20, 80, 150].into_iter().enumerate() {
        let counts = async |raw: &mut redis::aio::MultiplexedConnection| {
            let mut counts = Vec::new();
            for name in [command, "evalsha", "hmget", "hset"] {
                counts.push(common::calls(raw, name).await);
            }
            counts
        };
        let before = counts(&mut raw).await;
        let id = store
            .create_data(rand::random(), &data(text, n as u64), in_10_min(), || {
                panic!("taken")
            })
            .await
            .unwrap();
        let after = counts(&mut raw).await;
        let sent = common::sent_since(&before, &after);
        // Kept whole up to about 50 characters, in pieces beyond.
        if n >= 3 {
            assert_eq!(
                sent,
                if hsetex || text < 50 {
                    vec![1, 0, 0, 0]
                } else {
                    // compact_fnx.lua: its HMGET and HSET, no HSETNX (the
                    // full script's first write).
                    vec![0, 1, 1, 1]
                },
                "a create of {text} characters: {command}, evalsha, hmget, hset"
            );
        }
        assert_eq!(
            store.load_data(id).await.unwrap().unwrap().0,
            data(text, n as u64)
        );
        made.push(id);
    }
    let c = census(&mut raw, store.layout()).await;
    assert_eq!(
        (c.sessions, c.orphans, c.missing, c.converted),
        (6, 0, 0, 0),
        "{c:?}"
    );
    for id in made {
        store.delete_data(id).await.unwrap();
    }
    assert_eq!(
        census(&mut raw, store.layout()).await.but_holds(),
        Census::default()
    );

    let growing = MapStore::new(
        common::manager(&server).await,
        CompactConfig::growing().with_namespace("grows"),
    )
    .await
    .unwrap()
    .without_sweeper();
    // A growing store's too, routed by a shape read moments before
    // (tests/growth/plain.rs).
    assert_eq!(growing.layout().plain_creates(), Some(expected));
}

/// A plain create that finds a name taken writes nothing, and the script
/// decides: a taken id gives the caller a fresh one and leaves the first
/// session as it was; a short piece name another session holds sends the
/// record to long names. Nothing is left behind either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_create_that_finds_a_name_taken_writes_nothing() {
    let server = common::server();
    let mut raw = common::raw(&server).await;
    let (a, b) = stores_in(&server, "taken").await;
    let hsetex = has_hsetex(&mut raw).await;
    let first = a
        .create_data(rand::random(), &data(150, 0), in_10_min(), || {
            panic!("taken")
        })
        .await
        .unwrap();
    // The same id again: a fresh one.
    let fresh = rand::random();
    let again = b
        .create_data(first, &data(20, 1), in_10_min(), || fresh)
        .await
        .unwrap();
    assert_eq!(again, fresh);
    assert_eq!(a.load_data(first).await.unwrap().unwrap().0, data(150, 0));
    assert_eq!(b.load_data(fresh).await.unwrap().unwrap().0, data(20, 1));

    // The first shrinks to one value and keeps its first short name as a
    // hold; a session whose short names would begin alike takes long
    // ones, by the script.
    a.load_data(first).await.unwrap().unwrap();
    assert!(a.save_data(first, &data(10, 2), in_10_min()).await.unwrap());
    let scripts = common::calls(&mut raw, "evalsha").await;
    let second = sibling(first);
    let made = b
        .create_data(second, &data(150, 3), in_10_min(), || panic!("taken"))
        .await
        .unwrap();
    assert_eq!(made, second);
    if hsetex {
        assert!(common::calls(&mut raw, "evalsha").await > scripts);
    }
    assert_eq!(b.load_data(second).await.unwrap().unwrap().0, data(150, 3));
    assert_eq!(a.load_data(first).await.unwrap().unwrap().0, data(10, 2));
    let c = census(&mut raw, a.layout()).await;
    assert_eq!(
        (c.sessions, c.holds, c.orphans, c.missing),
        (3, 1, 0, 0),
        "{c:?}"
    );
}

/// A create whose group index key is not the store's (a string under its
/// name) fails typed, and leaves no session behind where no sweep would
/// find it, plain or scripted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_beside_a_foreign_index_key_fails_typed_and_leaves_nothing() {
    let server = common::server();
    let mut raw = common::raw(&server).await;
    let (store, _) = stores_in(&server, "foreign").await;
    let index = store.layout().scheme().index_key(0);
    let _: () = raw.set(&index, "not an index").await.unwrap();
    for text in [20usize, 150] {
        let err = store
            .create_data(rand::random(), &data(text, 0), in_10_min(), || {
                panic!("taken")
            })
            .await
            .unwrap_err();
        assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    }
    let c = census(&mut raw, store.layout()).await;
    assert_eq!(c, Census::default(), "{c:?}");
    let kept: String = raw.get(&index).await.unwrap();
    assert_eq!(kept, "not an index");
}
