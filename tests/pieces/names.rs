//! Short piece names (record format 7): four bytes, which another session
//! of the bucket may share. One session at most owns a short name's
//! beginning; the others keep long names, a delete only removes what the
//! value it finds names, and splits and merges at a byte's last bit make
//! the names anew from their owners.

use super::*;
use sessionpack::session::shape::Node;
use sessionpack::{IdWidth, SessionId};

/// `id` with byte `at` changed: a session of the same bucket whose short
/// piece names begin alike where `at` is none of the bytes they take.
fn sibling(id: &SessionId, at: usize) -> SessionId {
    let mut bytes = id.as_bytes().to_vec();
    bytes[at] ^= 0x55;
    SessionId::parse_with(hex::encode(bytes), IdWidth::Bits160).unwrap()
}

/// Whether the session `id` (a 160-bit id) has its pieces under short
/// names (`None`: no such session in pieces). Its field is the id, or the
/// id but its first byte below a split at a byte's last bit (above it,
/// its first byte rewritten by the splits).
async fn named_short(raw: &mut redis::aio::MultiplexedConnection, id: &SessionId) -> Option<bool> {
    let id = id.as_bytes();
    damage::pieced_sessions(raw)
        .await
        .into_iter()
        .find(|(_, field, _)| {
            (field.len() == id.len() && field[1..] == id[1..])
                || (field.len() == id.len() - 1 && field[..] == id[1..])
        })
        .map(|(_, _, value)| value[5] & 0x40 != 0)
}

fn in_600() -> sessionpack::ttl::Deadline {
    sessionpack::ttl::Deadline::In(600)
}

/// Two sessions of one bucket whose short names would begin alike: the
/// first takes them, the second keeps long names, and both read whole
/// through saves of every size. A delete of the first, seen or not, takes
/// its pieces only; the second then takes the short names at its next
/// save. A delete from a process that saw the first before it went (its
/// names since the second's) leaves the second whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_sharing_short_names_keep_apart() {
    let server = common::server();
    let layout = compact(&server, 2).await;
    let mut raw = common::raw(&server).await;
    let a = layout.new_id().await.unwrap();
    let b = sibling(&a, 8);
    assert_eq!(
        layout.buckets().bucket_of(&a),
        layout.buckets().bucket_of(&b)
    );
    layout
        .insert(&a, &record_of(300, 1), in_600())
        .await
        .unwrap();
    layout
        .insert(&b, &record_of(300, 2), in_600())
        .await
        .unwrap();
    assert_eq!(named_short(&mut raw, &a).await, Some(true));
    assert_eq!(named_short(&mut raw, &b).await, Some(false));
    // Saves of each, growing and shrinking, keep each one's names.
    for (n, len) in [(3, 480), (4, 120), (5, 300)] {
        for id in [&a, &b] {
            let at = layout.load(id).await.unwrap().unwrap().expires_at;
            layout.save(id, &record_of(len, n), at).await.unwrap();
            assert_eq!(
                layout.load(id).await.unwrap().unwrap().record,
                record_of(len, n)
            );
        }
    }
    assert_eq!(named_short(&mut raw, &a).await, Some(true));
    assert_eq!(named_short(&mut raw, &b).await, Some(false));
    let c = census(&mut raw, &layout).await;
    assert_eq!((c.sessions, c.orphans, c.missing), (2, 0, 0));

    // The first goes: the second is whole, and takes the short names at
    // its next save, its long ones gone.
    assert!(layout.delete(&a, Some(300)).await.unwrap());
    assert_eq!(
        layout.load(&b).await.unwrap().unwrap().record,
        record_of(300, 5)
    );
    let at = layout.load(&b).await.unwrap().unwrap().expires_at;
    layout.save(&b, &record_of(300, 6), at).await.unwrap();
    assert_eq!(named_short(&mut raw, &b).await, Some(true));
    let c = census(&mut raw, &layout).await;
    assert_eq!((c.sessions, c.pieces, c.orphans, c.missing), (1, 4, 0, 0));
    // A process that saw the first before it went deletes it again, as it
    // saw it, and one that never saw it too: the names are the second's
    // now, and they stay.
    assert!(!layout.delete(&a, Some(300)).await.unwrap());
    assert!(!layout.delete(&a, None).await.unwrap());
    assert_eq!(
        layout.load(&b).await.unwrap().unwrap().record,
        record_of(300, 6)
    );
    // The first comes back under its id: long names, beside the second's.
    layout
        .insert(&a, &record_of(200, 7), in_600())
        .await
        .unwrap();
    assert_eq!(named_short(&mut raw, &a).await, Some(false));
    assert!(layout.delete(&b, None).await.unwrap());
    assert_eq!(
        layout.load(&a).await.unwrap().unwrap().record,
        record_of(200, 7)
    );
    assert!(layout.delete(&a, None).await.unwrap());
    assert_eq!(census(&mut raw, &layout).await, Census::default());
}

/// A growing store's bucket split at a byte's last bit drops its fields'
/// first byte, and merged back it gains one, the same for every field of
/// a child: short names are made anew from their owners' fields. Two
/// sessions of a child whose names began with different bytes would share
/// them after the merge: no session gives up its short names while it
/// lives (record format 10), so those children are not merged until one
/// of the two ends. A session that shrinks to one value keeps the first
/// name as a hold, which follows it through merges and splits. Every
/// session reads whole after each step, and no piece is left without its
/// session or missing from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn splits_and_merges_at_a_bytes_last_bit_keep_short_names_their_owners() {
    let server = common::server();
    // Buckets split above three fields, so four small sessions split
    // them; the second store, opened at the default limit, merges.
    common::set_hash_entries(&server, 4);
    let two_groups = || CompactConfig::new(1).with_growth();
    let layout = Compact::new(common::manager(&server).await, two_groups())
        .await
        .unwrap();
    let shape = layout.shape().unwrap().clone();
    // Four sessions of one first byte (one bucket down to the byte's last
    // bit); `b` differs from `a` in its second byte only, which begins
    // their short names below that bit.
    let a = layout.new_id().await.unwrap();
    let b = sibling(&a, 1);
    let mut ids = vec![a, b];
    while ids.len() < 4 {
        let id = layout.new_id().await.unwrap();
        if id.as_bytes()[0] == a.as_bytes()[0] {
            ids.push(id);
        }
    }
    let mut want: HashMap<SessionId, Vec<u8>> = HashMap::new();
    for (n, id) in ids.iter().enumerate() {
        let record = record_of(20, n as u8);
        layout.insert(id, &record, in_600()).await.unwrap();
        want.insert(*id, record);
    }
    let group = shape.group_of(&a);
    let epoch =
        async |layout: &Compact<Conn>| (*layout.fetch_shapes(&[group]).await.unwrap()[0]).clone();
    // Down to depth 7 (the inserts may have split the first levels): the
    // last split is at the first byte's last bit.
    loop {
        let current = epoch(&layout).await;
        let node = shape.leaf(&current, &a);
        if node.depth() == 7 {
            break;
        }
        let depth = node.depth();
        assert!(
            layout.split(node, current.epoch()).await.unwrap(),
            "depth {depth}"
        );
    }
    let below = shape.leaf(&epoch(&layout).await, &a);
    assert_eq!(below.depth(), 7);
    assert_eq!(shape.leaf(&epoch(&layout).await, &b), below);

    common::set_hash_entries(&server, 512);
    let roomy = Compact::new(common::manager(&server).await, two_groups())
        .await
        .unwrap();
    let mut raw = common::raw(&server).await;
    let check = async |raw: &mut redis::aio::MultiplexedConnection,
                       want: &HashMap<SessionId, Vec<u8>>| {
        let reader = Compact::new(common::manager(&server).await, two_groups())
            .await
            .unwrap();
        for (id, record) in want {
            assert_eq!(&reader.load(id).await.unwrap().unwrap().record, record);
        }
        let c = census(raw, &reader).await;
        assert_eq!((c.orphans, c.missing), (0, 0), "{c:?}");
    };
    // In pieces now, each under short names of its own.
    for (n, id) in [a, b].iter().enumerate() {
        let record = record_of(300, 10 + n as u8);
        let at = roomy.load(id).await.unwrap().unwrap().expires_at;
        roomy.save(id, &record, at).await.unwrap();
        want.insert(*id, record);
        assert_eq!(named_short(&mut raw, id).await, Some(true));
    }
    check(&mut raw, &want).await;

    // Not merged back above the byte's last bit while both hold their
    // short names, which would be one pair there.
    let parent = Node {
        group,
        node: below.node / 2,
    };
    let current = epoch(&roomy).await;
    assert!(!roomy.merge(parent, current.epoch()).await.unwrap());
    assert_eq!(shape.leaf(&epoch(&roomy).await, &a), below);
    // Nor once `b` has shrunk to one value: its first name stays, a hold.
    let at = roomy.load(&b).await.unwrap().unwrap().expires_at;
    roomy.save(&b, &record_of(20, 12), at).await.unwrap();
    want.insert(b, record_of(20, 12));
    assert_eq!(named_short(&mut raw, &b).await, None);
    let c = census(&mut raw, &roomy).await;
    assert_eq!((c.holds, c.orphans, c.missing), (1, 0, 0), "{c:?}");
    let current = epoch(&roomy).await;
    assert!(!roomy.merge(parent, current.epoch()).await.unwrap());
    check(&mut raw, &want).await;
    // A save of `b` in pieces again takes long names: the hold is taken.
    let at = roomy.load(&b).await.unwrap().unwrap().expires_at;
    roomy.save(&b, &record_of(300, 13), at).await.unwrap();
    want.insert(b, record_of(300, 13));
    assert_eq!(named_short(&mut raw, &b).await, Some(false));
    check(&mut raw, &want).await;

    // `b` ends: the two merge, `a` keeps its short names.
    assert!(roomy.delete(&b, None).await.unwrap());
    want.remove(&b);
    let current = epoch(&roomy).await;
    assert!(roomy.merge(parent, current.epoch()).await.unwrap());
    assert_eq!(shape.leaf(&epoch(&roomy).await, &a), parent);
    assert_eq!(named_short(&mut raw, &a).await, Some(true));
    check(&mut raw, &want).await;

    // Split there again: the names follow their owners down.
    let current = epoch(&layout).await;
    assert!(layout.split(parent, current.epoch()).await.unwrap());
    assert_eq!(shape.leaf(&epoch(&layout).await, &a).depth(), 7);
    check(&mut raw, &want).await;
    // `a` shrinks to one value below: its hold follows it up and down.
    let at = roomy.load(&a).await.unwrap().unwrap().expires_at;
    roomy.save(&a, &record_of(20, 21), at).await.unwrap();
    want.insert(a, record_of(20, 21));
    for step in ["merge", "split"] {
        let current = epoch(&roomy).await;
        let node = shape.leaf(&current, &a);
        // (`layout` splits at the lowered limit, `roomy` merges at the
        // default one.)
        let done = if step == "merge" {
            roomy.merge(parent, current.epoch()).await.unwrap()
        } else {
            layout.split(node, current.epoch()).await.unwrap()
        };
        assert!(done, "{step}");
        let c = census(&mut raw, &roomy).await;
        assert_eq!((c.holds, c.orphans, c.missing), (1, 0, 0), "{step}: {c:?}");
        check(&mut raw, &want).await;
    }
    // Saves and deletes below find their pieces; `a`'s end takes its hold.
    for (n, id) in ids.iter().enumerate() {
        if let Some(stored) = roomy.load(id).await.unwrap() {
            let record = record_of(100, 30 + n as u8);
            roomy.save(id, &record, stored.expires_at).await.unwrap();
            want.insert(*id, record);
        }
    }
    check(&mut raw, &want).await;
    // `a` ends: its hold, which no session's prefix keeps now, is left to
    // the sweeper's next pass over the bucket, which removes pieces no
    // live session names.
    assert!(roomy.delete(&a, None).await.unwrap());
    want.remove(&a);
    check(&mut raw, &want).await;
    let c = census(&mut raw, &roomy).await;
    assert_eq!((c.holds, c.orphans, c.missing), (1, 0, 0), "{c:?}");
}

/// The session cap, which removes pieces no value names with the sessions
/// it evicts, keeps a hold while its session lives: a session that shrank
/// to one value keeps its first short name through an eviction of others
/// in its bucket, so no session of the same prefix takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cap_keeps_a_live_sessions_hold() {
    let server = common::server();
    let layout = compact(&server, 2).await;
    let mut raw = common::raw(&server).await;
    let kept = layout.new_id().await.unwrap();
    layout
        .insert(&kept, &record_of(150, 1), in_600())
        .await
        .unwrap();
    let at = layout.load(&kept).await.unwrap().unwrap().expires_at;
    layout.save(&kept, &record_of(20, 2), at).await.unwrap();
    let c = census(&mut raw, &layout).await;
    assert_eq!((c.sessions, c.holds, c.orphans), (1, 1, 0), "{c:?}");
    // Two sessions of its bucket that end sooner, which the cap evicts.
    for at in [8, 9] {
        let other = sibling(&kept, at);
        layout
            .insert(
                &other,
                &record_of(20, at as u8),
                sessionpack::ttl::Deadline::In(300),
            )
            .await
            .unwrap();
    }
    let sweeper = Sweeper::new(layout.clone(), SweepConfig::default().with_max_sessions(1));
    let report = sweeper.enforce_cap().await.unwrap();
    assert_eq!(report.evicted, 2, "{report:?}");
    let c = census(&mut raw, &layout).await;
    assert_eq!((c.sessions, c.holds, c.orphans), (1, 1, 0), "{c:?}");
    assert_eq!(
        layout.load(&kept).await.unwrap().unwrap().record,
        record_of(20, 2)
    );
}

/// Where the server has `HGETDEL`, a delete of a session this process
/// has not read takes its value, then the short-named pieces the value
/// names, and keeps them only if with the value's head they give its
/// check: two `HGETDEL`s, no script. A value that claims short names
/// another session holds (what a sweep and a create of that session
/// between the two steps would leave) takes nothing of that session's:
/// its pieces are put back, and it reads whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_delete_takes_only_pieces_that_make_its_record() {
    let server = common::server();
    let layout = compact(&server, 2).await;
    if layout.plain_deletes().is_none() {
        println!("skipped: this server has no HGETDEL (Redis 8.0, Valkey 9.0)");
        return;
    }
    let mut raw = common::raw(&server).await;
    // Unseen, its own pieces: all go.
    let id = layout.new_id().await.unwrap();
    layout
        .insert(&id, &record_of(300, 7), in_600())
        .await
        .unwrap();
    assert_eq!(named_short(&mut raw, &id).await, Some(true));
    let (taken, scripts) = (
        common::calls(&mut raw, "hgetdel").await,
        common::calls(&mut raw, "evalsha").await,
    );
    assert!(layout.delete(&id, None).await.unwrap());
    assert_eq!(common::calls(&mut raw, "hgetdel").await - taken, 2);
    assert_eq!(common::calls(&mut raw, "evalsha").await, scripts);
    let c = census(&mut raw, &layout).await;
    assert_eq!((c.sessions, c.pieces, c.orphans), (0, 0, 0), "{c:?}");

    // Another's: put back.
    let a = layout.new_id().await.unwrap();
    let b = sibling(&a, 8);
    layout
        .insert(&a, &record_of(300, 1), in_600())
        .await
        .unwrap();
    layout
        .insert(&b, &record_of(300, 2), in_600())
        .await
        .unwrap();
    assert_eq!(named_short(&mut raw, &a).await, Some(true));
    assert_eq!(named_short(&mut raw, &b).await, Some(false));
    let bucket = layout.scheme().bucket_key(layout.buckets().bucket_of(&b));
    let field = layout.buckets().field(&b);
    let mut value: Vec<u8> = raw.hget(&bucket, &field).await.unwrap();
    value[5] |= 0x40;
    let _: () = raw.hset(&bucket, &field, value).await.unwrap();
    assert!(layout.delete(&b, None).await.unwrap());
    assert!(layout.load(&b).await.unwrap().is_none());
    assert_eq!(
        layout.load(&a).await.unwrap().unwrap().record,
        record_of(300, 1)
    );
    // What the other value named under its long names stays for the
    // sweeper; nothing of the session that lives is missing.
    let c = census(&mut raw, &layout).await;
    assert_eq!((c.sessions, c.missing), (1, 0), "{c:?}");
    assert!(c.orphans > 0, "{c:?}");
}
