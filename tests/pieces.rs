//! Records too long for one listpack value, kept in their bucket in pieces
//! at the server's default limits (`hash-max-listpack-value` 64): every
//! size round-trips through every write, a load is one `HMGET`, no write
//! leaves a piece behind or a bucket converted, and what races a write
//! sees either the old record or the new one, whole.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use sessionpack::session::layout::Layout;
use sessionpack::session::layout::compact::{CHECKED_FORMAT, GroupedBuckets, MAX_PIECED_RECORD};
use sessionpack::session::meta::StoreMeta;
use sessionpack::session::sweep::{SweepConfig, Sweeper};
use sessionpack::{Compact, CompactConfig, Store};
use sessionpack_testkit::LocalServer;

type Conn = redis::aio::ConnectionManager;

async fn compact(server: &LocalServer, bits: u8) -> Compact<Conn> {
    Compact::new(common::manager(server).await, CompactConfig::new(bits))
        .await
        .expect("compact layout")
}

/// What every bucket holds: sessions (fields of a session's length), the
/// pieces their values name, pieces no value names, pieces a value names
/// that are missing, and buckets no longer listpacks.
#[derive(Debug, Default, PartialEq)]
struct Census {
    sessions: u64,
    pieces: u64,
    orphans: u64,
    missing: u64,
    converted: u64,
}

async fn census(raw: &mut redis::aio::MultiplexedConnection, layout: &Compact<Conn>) -> Census {
    let field_len = layout.buckets().field_len();
    let mut census = Census::default();
    // Every hash, so a growing store's buckets are counted wherever its
    // shape has put them; only fields of a session's length (and one
    // more, for pieces) count, which no other hash of a namespace has.
    let keys: Vec<String> = raw.keys("*").await.unwrap();
    for key in keys {
        let Ok(pairs) = raw.hgetall::<_, HashMap<Vec<u8>, Vec<u8>>>(&key).await else {
            continue;
        };
        let holds_sessions = pairs
            .keys()
            .any(|f| f.len() == field_len || f.len() == field_len + 1);
        if !holds_sessions {
            continue;
        }
        if common::encoding(raw, &key).await != "listpack" {
            census.converted += 1;
        }
        let mut named = HashSet::new();
        for (field, value) in &pairs {
            if field.len() != field_len {
                continue;
            }
            census.sessions += 1;
            if value.len() >= 6 && value[4] == 0xc3 && !value[0].is_ascii_digit() {
                // The count's high bit says a check begins the payload.
                for i in 1..=value[5] & 0x7f {
                    let mut piece = field.clone();
                    piece.push(i);
                    if pairs.contains_key(&piece) {
                        census.pieces += 1;
                    } else {
                        census.missing += 1;
                    }
                    named.insert(piece);
                }
            }
        }
        for field in pairs.keys() {
            let is_piece = field.len() == field_len + 1 && field.last().is_some_and(|&b| b <= 15);
            if is_piece && !named.contains(field) {
                census.orphans += 1;
            }
        }
    }
    census
}

/// A record of `len` bytes whose bytes say which write made it.
fn record_of(len: usize, seed: u8) -> Vec<u8> {
    // An integer identity (one byte), then MessagePack-like bytes.
    let mut record = vec![0x05];
    record.extend((0..len.saturating_sub(1)).map(|i| seed.wrapping_add(i as u8)));
    record.truncate(len);
    record
}

/// Sessions `0..count` with records of `len` bytes (`record_of(len, n)`),
/// live ten minutes: their ids, in order.
async fn insert_each(layout: &Compact<Conn>, len: usize, count: u8) -> Vec<sessionpack::SessionId> {
    let mut ids = Vec::new();
    for n in 0..count {
        let id = layout.new_id().await.unwrap();
        layout
            .insert(&id, &record_of(len, n), sessionpack::ttl::Deadline::In(600))
            .await
            .unwrap();
        ids.push(id);
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_size_round_trips_through_every_write() {
    let server = common::server();
    let layout = compact(&server, 4).await;
    let mut raw = common::raw(&server).await;
    // Around each boundary: one value (60), a first piece (61, 122), each
    // further piece, the last size kept in pieces and the first out of
    // line; and records beginning with the markers' bytes.
    let mut sizes: Vec<usize> = vec![1, 2, 59, 60, 61, 62, 121, 122, 123, 186, 187, 300];
    sizes.extend([
        MAX_PIECED_RECORD - 1,
        MAX_PIECED_RECORD,
        MAX_PIECED_RECORD + 1,
        2000,
    ]);
    let mut records: Vec<Vec<u8>> = sizes.iter().map(|&n| record_of(n, n as u8)).collect();
    records.push(vec![0xc3]);
    records.push(vec![0xc3, 0x02, 0x41]);
    records.push(vec![0xc1]);
    records.push([vec![0xc3], vec![7; 200]].concat());
    for (n, record) in records.iter().enumerate() {
        let id = layout.new_id().await.unwrap();
        let created = layout
            .insert(&id, record, sessionpack::ttl::Deadline::In(600))
            .await
            .unwrap();
        assert!(
            matches!(
                created,
                sessionpack::session::layout::Inserted::Created { .. }
            ),
            "{n}"
        );
        assert_eq!(&layout.load(&id).await.unwrap().unwrap().record, record);
        // Replaced by every other size in turn, up and down.
        for other in records.iter().cycle().skip(n + 1).take(records.len()) {
            let written = layout.replace(&id, other, None).await.unwrap();
            assert_eq!(written, sessionpack::session::layout::Written::Done);
            let stored = layout.load(&id).await.unwrap().unwrap();
            assert_eq!(&stored.record, other, "{} after {}", other.len(), n);
            assert_eq!(census(&mut raw, &layout).await.orphans, 0);
            // A save, at a later expiry.
            let at = stored.expires_at + 1;
            let saved = layout.save(&id, record, at).await.unwrap();
            assert_eq!(saved, sessionpack::session::layout::Written::Done);
            let stored = layout.load(&id).await.unwrap().unwrap();
            assert_eq!((&stored.record, stored.expires_at), (record, at));
            let written = layout.replace(&id, other, Some(record)).await.unwrap();
            assert_eq!(written, sessionpack::session::layout::Written::Done);
        }
        let stored = layout.load(&id).await.unwrap().unwrap();
        // A conditional remove matches the whole record.
        let wrong = sessionpack::session::layout::Stored {
            record: record_of(stored.record.len() + 1, 1),
            expires_at: stored.expires_at,
        };
        assert_eq!(
            layout.remove(&id, Some(&wrong)).await.unwrap(),
            sessionpack::session::layout::Written::Conflict
        );
        assert_eq!(
            layout.remove(&id, Some(&stored)).await.unwrap(),
            sessionpack::session::layout::Written::Done
        );
        assert!(layout.load(&id).await.unwrap().is_none());
    }
    let left = census(&mut raw, &layout).await;
    assert_eq!(left, Census::default(), "nothing left behind");
    let side: Vec<String> = raw.keys("sp:*:o:*").await.unwrap();
    assert!(side.is_empty(), "{side:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pieced_sessions_stay_in_listpacks_and_load_in_one_command() {
    let server = common::server();
    let layout = compact(&server, 4).await;
    let store: Store<_, String> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(600));
    let mut raw = common::raw(&server).await;
    // 400 sessions of 16 buckets, each record 103 to 114 bytes: 58 in the
    // value, the rest in one piece.
    let mut sessions = Vec::new();
    for i in 0..400u64 {
        let attrs = format!("{i:0>width$}", width = 100 + (i % 10) as usize);
        sessions.push(store.create(i + 1, attrs).await.unwrap());
    }
    let c = census(&mut raw, &layout).await;
    assert_eq!(
        (c.sessions, c.pieces, c.orphans, c.missing, c.converted),
        (400, 400, 0, 0, 0)
    );
    let side: Vec<String> = raw.keys("sp:*:o:*").await.unwrap();
    assert!(side.is_empty());

    // Once a pieced record has been read, each load asks for its value
    // and one piece in one HMGET, and nothing else.
    assert!(store.load(&sessions[0].id).await.unwrap().is_some());
    let (hmget, hget) = (
        common::calls(&mut raw, "hmget").await,
        common::calls(&mut raw, "hget").await,
    );
    for s in &sessions[1..101] {
        let loaded = store.load(&s.id).await.unwrap().unwrap();
        assert_eq!(loaded.attrs, s.attrs);
    }
    assert_eq!(common::calls(&mut raw, "hmget").await - hmget, 100);
    assert_eq!(common::calls(&mut raw, "hget").await - hget, 0);
}

/// A process deletes a session it saw short moments after another saved it
/// long: the pieces the delete did not know of are left, and the
/// sweeper's next visit of the bucket removes them. A delete of a session
/// the process has not seen leaves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pieces_a_stale_delete_left_are_swept() {
    let server = common::server();
    let layout = compact(&server, 2).await;
    let mut raw = common::raw(&server).await;
    let mut ids = Vec::new();
    for _ in 0..20 {
        let id = layout.new_id().await.unwrap();
        layout
            .insert(&id, &record_of(30, 1), sessionpack::ttl::Deadline::In(600))
            .await
            .unwrap();
        let at = layout.load(&id).await.unwrap().unwrap().expires_at;
        // Another process grows it to four pieces.
        layout.save(&id, &record_of(300, 2), at).await.unwrap();
        // This one deletes it as it saw it: 30 bytes, one value.
        assert!(layout.delete(&id, Some(30)).await.unwrap());
        ids.push(id);
    }
    assert_eq!(census(&mut raw, &layout).await.orphans, 80);
    // Live sessions in pieces beside them (in all four buckets, but by a
    // chance of 1 in 20,000): the sweep sorts the pieces out, rather than
    // dropping a bucket whole.
    let live = insert_each(&layout, 300, 40).await;
    // A full pass visits every bucket (a due one is visited by every pass:
    // the index keeps the deleted sessions' expiries as lower bounds).
    Sweeper::new(layout.clone(), SweepConfig::default())
        .sweep_range_full(0..layout.scheme().groups())
        .await
        .unwrap();
    let c = census(&mut raw, &layout).await;
    assert_eq!((c.sessions, c.orphans, c.missing), (40, 0, 0));
    for (n, id) in live.iter().enumerate() {
        let stored = layout.load(id).await.unwrap().unwrap();
        assert_eq!(stored.record, record_of(300, n as u8));
        assert!(layout.delete(id, Some(300)).await.unwrap());
    }
    // The fields a session takes are gone with it, in each form.
    let id = layout.new_id().await.unwrap();
    layout
        .insert(&id, &record_of(300, 4), sessionpack::ttl::Deadline::In(600))
        .await
        .unwrap();
    assert!(layout.delete(&id, Some(300)).await.unwrap());
    assert!(!layout.delete(&id, None).await.unwrap());
    // Unseen, by a process that has read no pieced record: the field and
    // every piece go at once, whatever the record's length, with no sweep.
    let fresh = compact(&server, 2).await;
    for len in [100, 300, MAX_PIECED_RECORD] {
        let id = layout.new_id().await.unwrap();
        layout
            .insert(&id, &record_of(len, 4), sessionpack::ttl::Deadline::In(600))
            .await
            .unwrap();
        assert!(census(&mut raw, &layout).await.pieces > 0);
        assert!(fresh.delete(&id, None).await.unwrap());
        assert!(layout.load(&id).await.unwrap().is_none());
        let c = census(&mut raw, &layout).await;
        assert_eq!((c.pieces, c.orphans, c.missing), (0, 0, 0), "{len} bytes");
    }
}

/// A batch load reads each value with as many pieces as the last pieced
/// record had, and the records with more in one more round trip: every
/// size comes back whole, gone and expired ones as none, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_load_returns_records_of_every_size_whole() {
    let server = common::server();
    let layout = compact(&server, 3).await;
    let mut raw = common::raw(&server).await;
    let sizes = [10, 100, 400, 61, 250, MAX_PIECED_RECORD, 2000, 130];
    let mut ids = Vec::new();
    let mut records = Vec::new();
    for n in 0..240usize {
        let id = layout.new_id().await.unwrap();
        let record = record_of(sizes[n % sizes.len()], n as u8);
        let created = layout
            .insert_new(&id, &record, sessionpack::ttl::Deadline::In(600))
            .await
            .unwrap();
        assert!(matches!(
            created,
            sessionpack::session::layout::Inserted::Created { .. }
        ));
        ids.push(id);
        records.push(Some(record));
    }
    // One deleted, one expired (its value's expiry rewritten to the past).
    assert!(layout.delete(&ids[5], None).await.unwrap());
    records[5] = None;
    let bucket = layout
        .scheme()
        .bucket_key(layout.buckets().bucket_of(&ids[9]));
    let field = layout.buckets().field(&ids[9]);
    let value: Vec<u8> = raw.hget(&bucket, &field).await.unwrap();
    let mut past = value.clone();
    past[..4].copy_from_slice(&1_000_000_000u32.to_be_bytes());
    let _: () = raw.hset(&bucket, &field, past).await.unwrap();
    records[9] = None;
    // From a process that has read nothing, then from one that has.
    for _ in 0..2 {
        let fresh = compact(&server, 3).await;
        let found = fresh.load_many(&ids).await.unwrap();
        let found: Vec<Option<Vec<u8>>> = found.into_iter().map(|s| s.map(|s| s.record)).collect();
        assert_eq!(found, records);
        let again = layout.load_many(&ids).await.unwrap();
        assert_eq!(again.len(), ids.len());
        for (got, want) in again.into_iter().zip(&records) {
            assert_eq!(got.map(|s| s.record).as_ref(), want.as_ref());
        }
    }
}

/// A create writes its value first and its pieces only once the value is
/// in, in one script: under an id a stale delete left pieces under, the
/// new record is read whole and nothing stale stays; under a live
/// session, nothing is written and the id is reported taken. A foreign
/// key where the index goes leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_under_a_drawn_id_never_mixes_with_what_is_there() {
    let server = common::server();
    let layout = compact(&server, 2).await;
    let mut raw = common::raw(&server).await;
    let in_600 = sessionpack::ttl::Deadline::In(600);
    // Four pieces a stale delete left under `id` (see above).
    let id = layout.new_id().await.unwrap();
    layout.insert(&id, &record_of(30, 1), in_600).await.unwrap();
    let at = layout.load(&id).await.unwrap().unwrap().expires_at;
    layout.save(&id, &record_of(300, 2), at).await.unwrap();
    assert!(layout.delete(&id, Some(30)).await.unwrap());
    assert_eq!(census(&mut raw, &layout).await.orphans, 4);

    // Six pieces, four of them there already: written over, whether the
    // id was just drawn or others may know it.
    let long = record_of(400, 3);
    let created = layout.insert_new(&id, &long, in_600).await.unwrap();
    assert!(matches!(
        created,
        sessionpack::session::layout::Inserted::Created { .. }
    ));
    assert_eq!(layout.load(&id).await.unwrap().unwrap().record, long);
    let c = census(&mut raw, &layout).await;
    assert_eq!((c.sessions, c.pieces, c.orphans), (1, 6, 0));
    assert!(layout.delete(&id, None).await.unwrap());
    let created = layout.insert(&id, &long, in_600).await.unwrap();
    assert!(matches!(
        created,
        sessionpack::session::layout::Inserted::Created { .. }
    ));
    assert_eq!(layout.load(&id).await.unwrap().unwrap().record, long);
    let c = census(&mut raw, &layout).await;
    assert_eq!((c.sessions, c.pieces, c.orphans), (1, 6, 0));

    // Under a live session of one piece: it is left exactly as it was,
    // and nothing of the longer record is written.
    let live = layout.new_id().await.unwrap();
    let short = record_of(100, 4);
    let created = layout.insert_new(&live, &short, in_600).await.unwrap();
    assert!(matches!(
        created,
        sessionpack::session::layout::Inserted::Created { .. }
    ));
    let created = layout.insert_new(&live, &long, in_600).await.unwrap();
    assert_eq!(created, sessionpack::session::layout::Inserted::IdTaken);
    assert_eq!(layout.load(&live).await.unwrap().unwrap().record, short);
    let c = census(&mut raw, &layout).await;
    assert_eq!((c.sessions, c.pieces, c.orphans, c.missing), (2, 7, 0, 0));
    // The same create sent twice (its reply lost) is done.
    let twice = layout.new_id().await.unwrap();
    for _ in 0..2 {
        let created = layout.insert_new(&twice, &long, in_600).await.unwrap();
        assert!(matches!(
            created,
            sessionpack::session::layout::Inserted::Created { .. }
        ));
    }

    // Another program's string where a group's index goes: the create
    // fails with a typed error and takes its value and pieces back out.
    let scheme: &GroupedBuckets = layout.scheme();
    let foreign = layout.new_id().await.unwrap();
    let index = scheme.index_key(scheme.group_of(layout.buckets().bucket_of(&foreign)));
    let before = census(&mut raw, &layout).await;
    let _: () = raw.del(&index).await.unwrap();
    let _: () = raw.set(&index, "theirs").await.unwrap();
    let failed = layout.insert_new(&foreign, &long, in_600).await;
    assert!(
        matches!(failed, Err(sessionpack::Error::WrongType { .. })),
        "{failed:?}"
    );
    assert!(layout.load(&foreign).await.unwrap().is_none());
    assert_eq!(census(&mut raw, &layout).await, before);
}

/// Expired pieced sessions go with their pieces, and the session cap
/// counts sessions, not the fields their pieces take.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_and_the_cap_take_pieces_with_their_sessions() {
    let server = common::server();
    // About 22 sessions, under 120 fields, a bucket: none converts.
    let layout = compact(&server, 5).await;
    let store: Store<_, String> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(3600));
    let mut raw = common::raw(&server).await;
    let batch: Vec<(u64, String)> = (0..600)
        .map(|i| (i, "p".repeat(60 + (i as usize * 7) % 400)))
        .collect();
    store.create_many(&batch).await.unwrap();
    let brief: Store<_, String> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(1));
    let short: Vec<(u64, String)> = (0..100).map(|i| (i, "q".repeat(200))).collect();
    let expiring = brief.create_many(&short).await.unwrap();
    assert_eq!(census(&mut raw, &layout).await.sessions, 700);
    // Wait until the server's clock has passed them all.
    let ids = expiring;
    while common::found(&brief, &ids).await > 0 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let report = Sweeper::new(layout.clone(), SweepConfig::default())
        .pass()
        .await
        .unwrap();
    assert_eq!(report.reclaimed, 100);
    let c = census(&mut raw, &layout).await;
    assert_eq!(
        (c.sessions, c.orphans, c.missing, c.converted),
        (600, 0, 0, 0)
    );
    assert!(c.pieces > 600, "{c:?}");

    let capped = Sweeper::new(
        layout.clone(),
        SweepConfig::default().with_max_sessions(250),
    )
    .pass()
    .await
    .unwrap();
    assert_eq!(capped.evicted, 350);
    let c = census(&mut raw, &layout).await;
    assert_eq!((c.sessions, c.orphans, c.missing), (250, 0, 0));
}

/// Loads racing saves that change the record's size (and so its pieces)
/// see one write's record whole, never pieces of two.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn loads_racing_saves_see_whole_records() {
    let server = common::server();
    let layout = compact(&server, 2).await;
    let id = layout.new_id().await.unwrap();
    layout
        .insert(&id, &record_of(100, 0), sessionpack::ttl::Deadline::In(600))
        .await
        .unwrap();
    let at = layout.load(&id).await.unwrap().unwrap().expires_at;
    // Each write's record: its length and its bytes follow from its seed.
    let written = |seed: u8| record_of(20 + usize::from(seed) * 37 % 480, seed);
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let layout = layout.clone();
            tokio::spawn(async move {
                for round in 0..150u32 {
                    let seed = (round * 2 + w) as u8;
                    layout.save(&id, &written(seed), at).await.unwrap();
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let layout = layout.clone();
            tokio::spawn(async move {
                let mut seen = 0;
                for _ in 0..300 {
                    let record = layout.load(&id).await.unwrap().unwrap().record;
                    let seed = record.get(1).map_or(0, |&b| b);
                    let whole = record == written(seed) || record == record_of(100, 0);
                    assert!(whole, "a record of {} bytes mixes writes", record.len());
                    seen += 1;
                }
                seen
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    for r in readers {
        assert_eq!(r.await.unwrap(), 300);
    }
    let mut raw = common::raw(&server).await;
    let c = census(&mut raw, &layout).await;
    assert_eq!((c.sessions, c.orphans, c.missing), (1, 0, 0));
}

/// A namespace recorded by a version that kept long records out of line
/// (record format 1) keeps them so, for the processes of that version
/// still beside this one; a newer format than this version's is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_of_record_format_1_keeps_records_out_of_line() {
    let server = common::server();
    let conn = common::manager(&server).await;
    let config = CompactConfig::new(4).with_namespace("old");
    let mut meta =
        Compact::<Conn>::meta(&sessionpack::session::buckets::Buckets::new("old", 4).unwrap());
    meta.format = 1;
    meta.claim(&conn, "old").await.unwrap();
    let layout = Compact::new(conn.clone(), config).await.unwrap();
    let id = layout.new_id().await.unwrap();
    layout
        .insert(&id, &record_of(300, 9), sessionpack::ttl::Deadline::In(600))
        .await
        .unwrap();
    assert_eq!(
        layout.load(&id).await.unwrap().unwrap().record,
        record_of(300, 9)
    );
    let mut raw = common::raw(&server).await;
    let side: Vec<String> = raw.keys("old:*:o:*").await.unwrap();
    assert_eq!(side.len(), 1);
    let recorded = StoreMeta::read(&conn, "old").await.unwrap().unwrap();
    assert_eq!(recorded.format, 1, "opening it changed nothing");

    let mut newer =
        Compact::<Conn>::meta(&sessionpack::session::buckets::Buckets::new("new", 4).unwrap());
    newer.format = sessionpack::session::meta::FORMAT_VERSION + 1;
    newer.claim(&conn, "new").await.unwrap();
    let refused = Compact::new(conn, CompactConfig::new(4).with_namespace("new")).await;
    assert!(
        matches!(refused, Err(sessionpack::Error::Config(_))),
        "{refused:?}"
    );
}

/// A one-time token's consume returns a pieced entry whole and leaves no
/// piece behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_returns_a_pieced_entry_whole() {
    let server = common::server();
    let layout = compact(&server, 2).await;
    let id = layout.new_id().await.unwrap();
    layout
        .insert(&id, &record_of(400, 5), sessionpack::ttl::Deadline::In(600))
        .await
        .unwrap();
    let layout = Arc::new(layout);
    let takers: Vec<_> = (0..4)
        .map(|_| {
            let layout = layout.clone();
            tokio::spawn(async move { layout.take(&id).await.unwrap() })
        })
        .collect();
    let mut got = Vec::new();
    for t in takers {
        if let Some(stored) = t.await.unwrap() {
            got.push(stored.record);
        }
    }
    assert_eq!(got, vec![record_of(400, 5)]);
    let mut raw = common::raw(&server).await;
    assert_eq!(census(&mut raw, &layout).await, Census::default());
}

/// A growing store deletes a session it has not read with plain commands,
/// since a bucket holding the session's field is current; only a miss
/// asks for the bucket's marker, in a script. Pieces go with the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unseen_delete_in_a_growing_store_sends_no_script_when_the_session_is_there() {
    let server = common::server();
    let layout = Compact::new(common::manager(&server).await, CompactConfig::growing())
        .await
        .unwrap();
    let mut raw = common::raw(&server).await;
    let ids = insert_each(&layout, 300, 20).await;
    // The script loaded (a first call is counted twice): a miss.
    let none = layout.new_id().await.unwrap();
    assert!(!layout.delete(&none, None).await.unwrap());
    let before = common::calls(&mut raw, "evalsha").await;
    for id in &ids {
        assert!(layout.delete(id, None).await.unwrap());
    }
    assert_eq!(common::calls(&mut raw, "evalsha").await - before, 0);
    assert!(!layout.delete(&none, None).await.unwrap());
    assert_eq!(common::calls(&mut raw, "evalsha").await - before, 1);
    for id in &ids {
        assert!(layout.load(id).await.unwrap().is_none());
    }
    let c = census(&mut raw, &layout).await;
    assert_eq!((c.sessions, c.pieces, c.orphans), (0, 0, 0));
}

/// A touch of a record in pieces takes the short script, which moves the
/// expiry in its value and keeps every piece: one script a touch, on
/// fixed and growing buckets alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn touches_of_records_in_pieces_take_one_script_each() {
    let server = common::server();
    for config in fixed_and_growing() {
        let layout = Compact::new(common::manager(&server).await, config)
            .await
            .unwrap();
        let mut raw = common::raw(&server).await;
        let ids = insert_each(&layout, 300, 40).await;
        let at = layout.load(&ids[0]).await.unwrap().unwrap().expires_at + 1_000;
        // The script loaded (a first call is counted twice), on an id of
        // no session: nothing moves.
        let none = layout.new_id().await.unwrap();
        assert_eq!(layout.touch_until(&none, at).await.unwrap(), None);
        let before = common::calls(&mut raw, "evalsha").await;
        for id in &ids {
            assert_eq!(layout.touch_until(id, at).await.unwrap(), Some(at));
        }
        let scripts = common::calls(&mut raw, "evalsha").await - before;
        assert_eq!(scripts, ids.len() as u64);
        for (n, id) in ids.iter().enumerate() {
            let stored = layout.load(id).await.unwrap().unwrap();
            assert_eq!(stored.record, record_of(300, n as u8));
            assert_eq!(stored.expires_at, at);
        }
    }
}

/// A save of a record in pieces takes the short script too, whether it
/// keeps its pieces, needs fewer (the rest go in the same step) or none;
/// one needing more pieces than before takes it on fixed buckets, and on
/// growing ones is handed to the full script, which replies with the
/// bucket's field count the store splits by. No piece is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saves_of_records_in_pieces_take_the_short_script() {
    let server = common::server();
    for (config, growing) in fixed_and_growing().into_iter().zip([false, true]) {
        let layout = Compact::new(common::manager(&server).await, config)
            .await
            .unwrap();
        let mut raw = common::raw(&server).await;
        // (record length, scripts the save costs)
        let steps = [
            (300, 1),
            (301, 1),
            (150, 1),
            (40, 1),
            (150, if growing { 2 } else { 1 }),
            (400, if growing { 2 } else { 1 }),
            (400, 1),
        ];
        // Twice: the first time loads the scripts (a first call is
        // counted twice), the second counts them.
        for pass in 0..2 {
            let id = layout.new_id().await.unwrap();
            layout
                .insert(&id, &record_of(300, 1), sessionpack::ttl::Deadline::In(600))
                .await
                .unwrap();
            let mut at = layout.load(&id).await.unwrap().unwrap().expires_at;
            for (n, (len, cost)) in steps.into_iter().enumerate() {
                at += 1;
                let record = record_of(len, n as u8);
                let before = common::calls(&mut raw, "evalsha").await;
                let saved = layout.save(&id, &record, at).await.unwrap();
                assert_eq!(saved, sessionpack::session::layout::Written::Done);
                let scripts = common::calls(&mut raw, "evalsha").await - before;
                if pass == 1 {
                    assert_eq!(scripts, cost, "a save to {len} bytes (growing: {growing})");
                }
                let stored = layout.load(&id).await.unwrap().unwrap();
                assert_eq!((stored.record, stored.expires_at), (record, at));
                let c = census(&mut raw, &layout).await;
                assert_eq!((c.sessions, c.orphans, c.missing), (1, 0, 0), "{len}");
            }
            assert_eq!(
                layout.remove(&id, None).await.unwrap(),
                sessionpack::session::layout::Written::Done
            );
        }
        assert_eq!(census(&mut raw, &layout).await, Census::default());
    }
}

/// A record this long is kept out of line, under a key of its own.
const OUT_OF_LINE: usize = 2000;

/// A touch of a record out of line goes to the full script, which moves
/// its expiry and its record key's; after a few the short script (which
/// takes only records kept in their buckets) is no longer tried first, so
/// such a touch costs one script, and one in 32 still tries it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn touches_of_records_out_of_line_go_to_the_full_script_first() {
    let server = common::server();
    let layout = compact(&server, 4).await;
    let mut raw = common::raw(&server).await;
    let ids = insert_each(&layout, OUT_OF_LINE, 40).await;
    let at = layout.load(&ids[0]).await.unwrap().unwrap().expires_at + 1_000;
    // Both scripts loaded (a first call is counted twice, the one the
    // server did not know yet too), on an id of no session: nothing moves.
    let none = layout.new_id().await.unwrap();
    assert_eq!(layout.touch_until(&none, at).await.unwrap(), None);
    assert_eq!(layout.touch(&none, 600).await.unwrap(), None);
    let before = common::calls(&mut raw, "evalsha").await;
    for id in &ids {
        assert_eq!(layout.touch_until(id, at).await.unwrap(), Some(at));
    }
    let scripts = common::calls(&mut raw, "evalsha").await - before;
    // Four touches try the short script and then the full one; of the 36
    // after them, the one with 32 handed on before it tries the short one
    // again.
    assert_eq!(scripts, 4 * 2 + 36 + 1);
    for (n, id) in ids.iter().enumerate() {
        let stored = layout.load(id).await.unwrap().unwrap();
        assert_eq!(stored.record, record_of(OUT_OF_LINE, n as u8));
        assert_eq!(stored.expires_at, at);
    }
}

/// The same with 16 touches in flight at once: the run of touches handed
/// on is counted as replies come, so only those in flight before it reached
/// its length try the short script first, and the probes stay one touch
/// in 32 (they used to be every touch begun while the count stood at a
/// multiple of 32: 1.4 scripts a touch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn touches_in_flight_at_once_cost_about_one_script_each() {
    const IN_FLIGHT: usize = 16;
    const ROUNDS: usize = 40;
    let server = common::server();
    let layout = compact(&server, 4).await;
    let mut raw = common::raw(&server).await;
    let ids = insert_each(&layout, OUT_OF_LINE, IN_FLIGHT as u8).await;
    let at = layout.load(&ids[0]).await.unwrap().unwrap().expires_at + 1_000;
    let none = layout.new_id().await.unwrap();
    assert_eq!(layout.touch_until(&none, at).await.unwrap(), None);
    assert_eq!(layout.touch(&none, 600).await.unwrap(), None);
    let before = common::calls(&mut raw, "evalsha").await;
    for round in 0..ROUNDS {
        let mut touches = tokio::task::JoinSet::new();
        for id in &ids {
            let (layout, id) = (layout.clone(), *id);
            touches.spawn(async move { layout.touch_until(&id, at + round as u64).await });
        }
        while let Some(touched) = touches.join_next().await {
            assert!(touched.unwrap().unwrap().is_some());
        }
    }
    let scripts = common::calls(&mut raw, "evalsha").await - before;
    let touches = (IN_FLIGHT * ROUNDS) as u64;
    // One script a touch; twice for at most the first round's and the
    // probes (one in 32).
    let most = touches + IN_FLIGHT as u64 + touches.div_ceil(32);
    assert!(
        scripts <= most,
        "{scripts} scripts for {touches} touches (at most {most})"
    );
    for (n, id) in ids.iter().enumerate() {
        let stored = layout.load(id).await.unwrap().unwrap();
        assert_eq!(stored.record, record_of(OUT_OF_LINE, n as u8));
        assert_eq!(stored.expires_at, at + ROUNDS as u64 - 1);
    }
}

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

/// A store of fixed buckets and a growing one, in namespaces of their own.
fn fixed_and_growing() -> [CompactConfig; 2] {
    [
        CompactConfig::new(4),
        CompactConfig::growing().with_namespace("grown"),
    ]
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
/// is: the bucket's key and the piece's field (the session's field and the
/// byte 1).
async fn first_pieces(raw: &mut redis::aio::MultiplexedConnection) -> HashSet<(String, Vec<u8>)> {
    let mut found = HashSet::new();
    let keys: Vec<String> = raw.keys("*").await.unwrap();
    for key in keys {
        let Ok(fields) = raw.hkeys::<_, HashSet<Vec<u8>>>(&key).await else {
            continue;
        };
        for field in &fields {
            let mut first = field.clone();
            first.push(1);
            if !field.is_empty() && fields.contains(&first) {
                found.insert((key.clone(), first));
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
            let (bucket, piece) = first_pieces(&mut raw).await.into_iter().next().unwrap();
            let field = &piece[..piece.len() - 1];
            let value: Vec<u8> = raw.hget(&bucket, field).await.unwrap();
            assert_eq!(value[4], 0xc3);
            let checked = value[5] & 0x80 != 0;
            assert_eq!(
                checked,
                format >= CHECKED_FORMAT,
                "{namespace} format {format}"
            );
            let recorded = StoreMeta::read(&conn, &namespace).await.unwrap().unwrap();
            assert_eq!(recorded.format, format, "opening it changed nothing");
        }
    }
}
