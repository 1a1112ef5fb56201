//! Plain creates in a growing store (record format 11,
//! `src/session/layout/compact/plain_create.rs`): a create routed by a
//! shape read moments before is one plain command, and one routed to a
//! bucket a split or merge has since replaced lands in its mark, is taken
//! back and lands where the shape says; what a mark holds is no session to
//! a load, a save, a touch or a delete.

use super::*;

/// The shape of every group, read now by `layout` (which keeps it).
async fn read_shapes(layout: &Compact<Conn>) -> Vec<Arc<sessionpack::session::shape::GroupShape>> {
    let shape = layout.shape().unwrap();
    let groups: Vec<u32> = (0..shape.group_count()).collect();
    layout.fetch_shapes(&groups).await.unwrap()
}

/// The key and field `id` has by `shapes`, a copy of every group's shape.
fn routed_by(
    layout: &Compact<Conn>,
    shapes: &[Arc<sessionpack::session::shape::GroupShape>],
    id: &SessionId,
) -> (String, Vec<u8>) {
    let shape = layout.shape().unwrap();
    let node = shape.leaf(&shapes[shape.group_of(id) as usize], id);
    (shape.bucket_key(node), shape.field(node, id))
}

/// Once a process has read its groups' shapes, a create is one plain
/// command (`HSETEX FNX`; on a server without it `HSETNX` of a record kept
/// whole, and `compact_fnx.lua` of one in pieces, a script of two
/// commands): a fixed count of creates into buckets with room sends that
/// many and no other script.
#[tokio::test]
async fn a_create_in_a_grown_store_is_one_plain_command() {
    let server = server();
    let writer = open(&server).await;
    insert_all(&writer, 1500).await;
    let mut raw = common::raw(&server).await;
    let plain = writer.plain_creates().expect("plain creates on one server");
    let hsetex = plain == "HSETEX FNX";
    let command = if hsetex {
        "hsetex"
    } else {
        eprintln!(
            "skipped: creates in pieces with HSETEX (the server has none): HSETNX of whole \
             records, compact_fnx.lua (two commands) of records in pieces"
        );
        "hsetnx"
    };
    // Two kept whole, one in pieces (record_for).
    let records = [0, 1, 2];
    let shapes = read_shapes(&writer).await;
    // Ids whose buckets have room, two to a bucket at most: no create
    // splits one (a record takes up to four fields).
    let (split_above, _) = writer.reshape_thresholds().unwrap();
    let mut chosen: Vec<(SessionId, usize)> = Vec::new();
    let mut per_bucket: HashMap<String, u64> = HashMap::new();
    while chosen.len() < 12 {
        let id = writer.new_id().await.unwrap();
        let (key, _) = routed_by(&writer, &shapes, &id);
        let held: u64 = raw.hlen(&key).await.unwrap();
        let taken = per_bucket.entry(key).or_default();
        if held + 4 * (*taken + 1) <= split_above && *taken < 2 {
            *taken += 1;
            chosen.push((id, records[chosen.len() % records.len()]));
        }
    }
    let before = (
        common::calls(&mut raw, command).await,
        common::calls(&mut raw, "evalsha").await,
    );
    for (id, n) in &chosen {
        let made = writer
            .insert_new(id, &record_for(*n), Deadline::In(3600))
            .await
            .unwrap();
        assert!(matches!(made, Inserted::Created { .. }), "{made:?}");
    }
    let after = (
        common::calls(&mut raw, command).await,
        common::calls(&mut raw, "evalsha").await,
    );
    let pieced = chosen.iter().filter(|(_, n)| *n == 2).count() as u64;
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        if hsetex {
            (chosen.len() as u64, 0)
        } else {
            (chosen.len() as u64 - pieced, pieced)
        }
    );
    let reader = open(&server).await;
    for (id, n) in &chosen {
        let stored = reader.load(id).await.unwrap().expect("created");
        assert_eq!(stored.record, record_for(*n));
    }
    let survey = survey(&mut raw, &reader).await;
    assert!(survey.strays.is_empty(), "{:?}", survey.strays);
    assert_eq!(survey.unindexed, 0);
    assert_eq!(survey.sessions, 1500 + chosen.len() as u64);
}

/// A delete in a grown store by a process that has not read the session
/// sends two commands at most: on a server with `HGETDEL`, no script (the
/// value taken, then the pieces it names); elsewhere one script of two
/// (`compact_unset.lua` reads the marker and the value in one `HMGET`,
/// then one `HDEL`).
#[tokio::test]
async fn a_delete_in_a_grown_store_is_two_commands_at_most() {
    let server = server();
    let writer = open(&server).await;
    let ids = insert_all(&writer, 1500).await;
    let deleter = open(&server).await;
    read_shapes(&deleter).await;
    let mut raw = common::raw(&server).await;
    // The script loaded, where it is one (a first call is counted twice).
    assert!(deleter.delete(&ids[0], None).await.unwrap());
    let names = ["hgetdel", "evalsha", "hmget", "hget", "hexists", "hdel"];
    let mut before = Vec::new();
    for name in names {
        before.push(common::calls(&mut raw, name).await);
    }
    for id in &ids[1..21] {
        assert!(deleter.delete(id, None).await.unwrap());
    }
    let mut sent = HashMap::new();
    for (name, was) in names.into_iter().zip(before) {
        sent.insert(name, common::calls(&mut raw, name).await - was);
    }
    if deleter.plain_deletes().is_some() {
        assert_eq!(sent["evalsha"], 0, "{sent:?}");
        assert!((20..=40).contains(&sent["hgetdel"]), "{sent:?}");
    } else {
        let script = (sent["evalsha"], sent["hmget"], sent["hdel"]);
        assert_eq!(script, (20, 20, 20), "{sent:?}");
        assert_eq!(sent["hexists"] + sent["hget"], 0, "{sent:?}");
    }
    for id in &ids[..21] {
        assert!(deleter.load(id).await.unwrap().is_none());
    }
    let survey = survey(&mut raw, &deleter).await;
    assert!(survey.strays.is_empty(), "{:?}", survey.strays);
    assert_eq!(survey.sessions, 1500 - 21);
}

/// A process whose copy of the shape is some seconds old creates among
/// splits: many of its creates go to buckets replaced since, land in their
/// marks, are taken back and land where the shape says. Every session
/// loads, no field stays in a mark, none is unindexed.
#[tokio::test]
async fn a_create_routed_by_an_older_shape_lands_where_the_shape_says() {
    let server = server();
    let writer = open(&server).await;
    insert_all(&writer, 1500).await;
    let stale = open(&server).await;
    let old = read_shapes(&stale).await;
    insert_all(&writer, 1500).await;
    let mut raw = common::raw(&server).await;
    let late = insert_all(&stale, 300).await;
    // Routed by the old shapes, some went to keys that are marks now.
    let mut into_marks = 0;
    for id in &late {
        let (key, _) = routed_by(&stale, &old, id);
        into_marks += usize::from(is_mark(&mut raw, &key).await);
    }
    assert!(into_marks > 0, "no create was routed to a replaced bucket");
    let reader = open(&server).await;
    for (n, id) in late.iter().enumerate() {
        let stored = reader.load(id).await.unwrap().expect("created");
        assert_eq!(stored.record, record_for(n));
    }
    let survey = survey(&mut raw, &reader).await;
    assert!(survey.strays.is_empty(), "{:?}", survey.strays);
    assert!(survey.marks > 0);
    assert_eq!(survey.unindexed, 0);
    assert_eq!(survey.sessions, 3300);
}

/// What a mark holds for a moment (a create's field, written here by hand)
/// is no session: a process whose shape still routes to the mark loads,
/// saves, touches and deletes the session where it is, and never reads or
/// writes the mark's field.
#[tokio::test]
async fn a_field_in_a_mark_is_no_session() {
    let server = server();
    let writer = open(&server).await;
    let ids = insert_all(&writer, 1500).await;
    // Five processes with the shape as it is now, one for each call.
    let mut olds = Vec::new();
    for _ in 0..5 {
        let p = open(&server).await;
        read_shapes(&p).await;
        olds.push(p);
    }
    let shapes = read_shapes(&writer).await;
    insert_all(&writer, 1500).await;
    let mut raw = common::raw(&server).await;
    // Sessions kept whole whose bucket then was split away, one for each
    // process, each with a field of its own in the mark.
    let mut picked: Vec<(usize, String, Vec<u8>)> = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        if i % 4 != 1 || picked.len() == 5 {
            continue;
        }
        let (key, field) = routed_by(&writer, &shapes, id);
        if is_mark(&mut raw, &key).await {
            let _: () = raw
                .hset(&key, &field, b"\xff\xff\xff\xfethe mark's")
                .await
                .unwrap();
            picked.push((i, key, field));
        }
    }
    assert_eq!(picked.len(), 5, "too few sessions of replaced buckets");
    let far = u64::from(u32::MAX) - 1;
    let [load, save, touch, delete, delete_seen] = &picked[..] else {
        unreachable!()
    };
    let stored = olds[0].load(&ids[load.0]).await.unwrap().unwrap();
    assert_eq!(stored.record, record_for(load.0));
    assert_eq!(
        olds[1].save(&ids[save.0], b"saved", far).await.unwrap(),
        sessionpack::session::layout::Written::Done
    );
    assert_eq!(
        olds[2].touch_until(&ids[touch.0], far).await.unwrap(),
        Some(far)
    );
    assert!(olds[3].delete(&ids[delete.0], None).await.unwrap());
    let seen = record_for(delete_seen.0).len();
    assert!(
        olds[4]
            .delete(&ids[delete_seen.0], Some(seen))
            .await
            .unwrap()
    );

    let reader = open(&server).await;
    assert_eq!(
        reader.load(&ids[save.0]).await.unwrap().unwrap().record,
        b"saved"
    );
    assert_eq!(
        reader
            .load(&ids[touch.0])
            .await
            .unwrap()
            .unwrap()
            .expires_at,
        far
    );
    assert_eq!(reader.load(&ids[delete.0]).await.unwrap(), None);
    assert_eq!(reader.load(&ids[delete_seen.0]).await.unwrap(), None);
    // The marks' fields stay a mark's (a delete may have taken its own),
    // and go with them.
    for (_, key, field) in &picked {
        let value: Option<Vec<u8>> = raw.hget(key, field).await.unwrap();
        assert!(
            value.is_none_or(|v| v == b"\xff\xff\xff\xfethe mark's"),
            "{key}"
        );
        let _: () = raw.hdel(key, field).await.unwrap();
    }
    let survey = survey(&mut raw, &reader).await;
    assert!(survey.strays.is_empty(), "{:?}", survey.strays);
    assert_eq!(survey.sessions, 3000 - 2);
}

/// The sweeper drops an index entry naming a mark (a create's entry
/// lowered just as its bucket split), and leaves the mark to its expiry.
#[tokio::test]
async fn the_sweeper_drops_an_entry_naming_a_mark() {
    let server = server();
    let writer = open(&server).await;
    insert_all(&writer, 1500).await;
    let shapes = read_shapes(&writer).await;
    insert_all(&writer, 1500).await;
    let mut raw = common::raw(&server).await;
    let shape = writer.shape().unwrap();
    // A node of the old shapes whose key is a mark now.
    let mut found = None;
    for (group, g) in shapes.iter().enumerate() {
        for node in g.leaves(shape.max_depth()) {
            let node = Node {
                group: group as u32,
                node,
            };
            if is_mark(&mut raw, &shape.bucket_key(node)).await {
                found = Some(node);
                break;
            }
        }
        if found.is_some() {
            break;
        }
    }
    let node = found.expect("a bucket replaced since");
    let index = shape.index_of(node);
    let _: () = raw.zadd(&index, node.index_member(), 1).await.unwrap();
    let sweeper = Sweeper::new(writer.clone(), SweepConfig::default());
    sweeper.sweep_range(0..sweeper.units()).await.unwrap();
    let score: Option<f64> = raw.zscore(&index, node.index_member()).await.unwrap();
    assert_eq!(score, None, "the entry naming a mark stays");
    assert!(is_mark(&mut raw, &shape.bucket_key(node)).await);
}
