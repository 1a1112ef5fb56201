//! Missing, spliced, stale and cut pieces are corrupt to every reader.

use super::*;

/// A record with a piece gone (damage: pieces go with their value in one
/// step) is `CorruptRecord` to every call that reads it, a rotation
/// included, and nothing carries the damage to a new id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_missing_a_piece_is_corrupt_to_every_reader() {
    let server = common::server();
    for config in fixed_and_growing() {
        missing_a_piece(&server, config).await;
    }
}

async fn missing_a_piece(server: &LocalServer, config: CompactConfig) {
    let layout = Compact::new(common::manager(server).await, config)
        .await
        .unwrap();
    let store: Store<_, String> = Store::new(layout.clone()).without_sweeper();
    let session = store.create(1, "p".repeat(300)).await.unwrap();
    let mut raw = common::raw(server).await;
    let mut pieces = first_pieces(&mut raw).await.into_iter();
    let (key, piece) = pieces.next().expect("the record was not in pieces");
    assert!(pieces.next().is_none(), "one session, one first piece");
    let removed: u64 = raw.hdel(&key, &piece).await.unwrap();
    assert_eq!(removed, 1);
    let keys_before: Vec<String> = raw.keys("*").await.unwrap();

    fn corrupt<T>(r: &sessionpack::Result<T>) -> bool {
        matches!(r, Err(sessionpack::Error::CorruptRecord { .. }))
    }
    let loaded = store.load(&session.id).await;
    assert!(corrupt(&loaded), "{loaded:?}");
    let rotated = store.rotate(&session.id).await;
    assert!(corrupt(&rotated), "{rotated:?}");
    let updated = store.update(&session.id, |a| a.push('!')).await;
    assert!(corrupt(&updated), "{updated:?}");
    let many = store.load_many(&[session.id]).await;
    assert!(corrupt(&many), "{many:?}");
    let keys_after: Vec<String> = raw.keys("*").await.unwrap();
    assert_eq!(keys_after.len(), keys_before.len(), "a call wrote a key");
}

/// The first piece of each session stored in pieces, wherever its bucket
/// is: the bucket's key and the piece's field, as its value names it,
/// where the piece is there.
async fn first_pieces(raw: &mut redis::aio::MultiplexedConnection) -> HashSet<(String, Vec<u8>)> {
    let mut found = HashSet::new();
    for (key, field, value) in pieced_sessions(raw).await {
        let piece = piece_name(&field, 1, value[5] & 0x40 != 0);
        if raw.hexists(&key, &piece).await.unwrap() {
            found.insert((key, piece));
        }
    }
    found
}

/// Each session stored in pieces, wherever its bucket is: the bucket's key,
/// the session's field and its value.
pub(super) async fn pieced_sessions(
    raw: &mut redis::aio::MultiplexedConnection,
) -> Vec<(String, Vec<u8>, Vec<u8>)> {
    let mut found = Vec::new();
    let keys: Vec<String> = raw.keys("*").await.unwrap();
    for key in keys {
        let Ok(pairs) = raw.hgetall::<_, HashMap<Vec<u8>, Vec<u8>>>(&key).await else {
            continue;
        };
        for (field, value) in pairs {
            let pieced = field.len() > 4
                && value.len() >= 6
                && !value[0].is_ascii_digit()
                && value[4] == 0xc3
                && value[5] & 0x3f > 0;
            if pieced {
                found.push((key.clone(), field, value));
            }
        }
    }
    found
}

/// A record in pieces carries a check of its bytes: a piece spliced from
/// another session's record of the same length, a stale piece of the
/// session's own earlier record, or a piece cut short is `CorruptRecord`
/// to every call that reads the record (a rotation included, which
/// carries nothing to a new id), on fixed and growing buckets alike. Each
/// of these read as the session before, with the wrong bytes inside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spliced_stale_or_cut_piece_is_corrupt_to_every_reader() {
    let server = common::server();
    for config in fixed_and_growing() {
        damaged_pieces(&server, config).await;
    }
}

async fn damaged_pieces(server: &LocalServer, config: CompactConfig) {
    let layout = Compact::new(common::manager(server).await, config)
        .await
        .unwrap();
    let store: Store<_, String> = Store::new(layout.clone()).without_sweeper();
    let mut raw = common::raw(server).await;
    // Creates a session of `text` and returns it with its first piece.
    let mut scan = raw.clone();
    let mut known = first_pieces(&mut scan).await;
    let mut create = async |text: String| {
        let session = store.create(1, text).await.unwrap();
        let now = first_pieces(&mut scan).await;
        let mut new: Vec<_> = now.difference(&known).cloned().collect();
        known = now;
        assert_eq!(new.len(), 1, "the record was not in pieces");
        (session.id, new.pop().unwrap())
    };
    let (donor, (donor_key, donor_piece)) = create("d".repeat(300)).await;
    let (spliced, (key, piece)) = create("s".repeat(300)).await;
    let other: Vec<u8> = raw.hget(&donor_key, &donor_piece).await.unwrap();
    let _: () = raw.hset(&key, &piece, &other).await.unwrap();

    let (stale, (key, piece)) = create("o".repeat(300)).await;
    let old: Vec<u8> = raw.hget(&key, &piece).await.unwrap();
    assert!(
        store
            .update(&stale, |t| *t = "n".repeat(300))
            .await
            .unwrap()
            .is_some()
    );
    let _: () = raw.hset(&key, &piece, &old).await.unwrap();

    let (cut, (key, piece)) = create("c".repeat(300)).await;
    let whole: Vec<u8> = raw.hget(&key, &piece).await.unwrap();
    let _: () = raw
        .hset(&key, &piece, &whole[..whole.len() - 1])
        .await
        .unwrap();

    fn corrupt<T: std::fmt::Debug>(what: &str, r: sessionpack::Result<T>) {
        assert!(
            matches!(r, Err(sessionpack::Error::CorruptRecord { .. })),
            "{what}: {r:?}"
        );
    }
    let keys_before: Vec<String> = raw.keys("*").await.unwrap();
    for (what, id) in [("spliced", spliced), ("stale", stale), ("cut", cut)] {
        corrupt(what, store.load(&id).await);
        corrupt(what, store.load_many(&[id]).await);
        corrupt(what, store.update(&id, |t| t.push('!')).await);
        corrupt(what, store.rotate(&id).await);
    }
    let keys_after: Vec<String> = raw.keys("*").await.unwrap();
    assert_eq!(keys_after.len(), keys_before.len(), "a call wrote a key");
    // The donor is whole; a consume of a damaged entry is refused too.
    assert_eq!(
        store.load(&donor).await.unwrap().unwrap().attrs,
        "d".repeat(300)
    );
    corrupt("taken", layout.take(&spliced).await);
}

/// A namespace recorded before records in pieces carried a check (record
/// format 3, or 4 for a growing store) is opened as recorded: its pieces
/// are written without one, as the processes of that version beside this
/// one read them, and read back whole. A new namespace's carry one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_of_an_earlier_format_keeps_pieces_without_a_check() {
    let server = common::server();
    let mut raw = common::raw(&server).await;
    for (config, earlier) in [
        (CompactConfig::new(4).with_namespace("fixed"), 3),
        (CompactConfig::growing().with_namespace("grown"), 4),
    ] {
        let namespace = config.namespace.clone();
        for format in [earlier, sessionpack::session::meta::FORMAT_VERSION] {
            let _: () = redis::cmd("FLUSHALL").query_async(&mut raw).await.unwrap();
            let conn = common::manager(&server).await;
            drop(Compact::new(conn.clone(), config.clone()).await.unwrap());
            let key = StoreMeta::key(&namespace);
            let _: () = raw.hset(&key, "format", format).await.unwrap();
            let layout = Compact::new(conn.clone(), config.clone()).await.unwrap();
            assert_eq!(layout.format(), format);
            let id = layout.new_id().await.unwrap();
            let record = record_of(300, 3);
            layout
                .insert(&id, &record, sessionpack::ttl::Deadline::In(600))
                .await
                .unwrap();
            assert_eq!(layout.load(&id).await.unwrap().unwrap().record, record);
            let (_, _, value) = pieced_sessions(&mut raw).await.pop().unwrap();
            let checked = value[5] & 0x80 != 0;
            assert_eq!(
                checked,
                format >= CHECKED_FORMAT,
                "{namespace} format {format}"
            );
            let short = value[5] & 0x40 != 0;
            assert_eq!(
                short,
                format >= SHORT_PIECES_FORMAT,
                "{namespace} format {format}"
            );
            let recorded = StoreMeta::read(&conn, &namespace).await.unwrap().unwrap();
            assert_eq!(recorded.format, format, "opening it changed nothing");
        }
    }
}
