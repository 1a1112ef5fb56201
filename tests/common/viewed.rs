//! Scenarios for recently viewed items, run on one server
//! (`tests/viewed.rs`) and on a cluster (`tests/cluster.rs`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sessionpack::session::sweep::{SweepConfig, Sweeper};
use sessionpack::users::UserIndexConfig;
use sessionpack::viewed::{CHUNK_BYTES, ViewedConfig};
use sessionpack::{Compact, CompactConfig, SessionId, Store};

/// Attributes that make a record binary, or (long) out of line.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Page {
    #[serde(rename = "p")]
    pub page: String,
}

pub async fn layout<C>(conn: C, namespace: &str) -> Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let config = CompactConfig::new(4)
        .with_namespace(namespace)
        .with_viewed(ViewedConfig::default());
    Compact::new(conn, config).await.expect("compact layout")
}

/// The book's `update_token` on the same server, for the item part: `ZADD
/// viewed:<token> <timestamp> <item>`, then `ZREMRANGEBYRANK` to keep 25.
async fn book_view<C>(conn: &C, token: &str, at: u64, item: u64)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let key = format!("viewed:{token}");
    let _: () = redis::pipe()
        .zadd(&key, item, at)
        .ignore()
        .cmd("ZREMRANGEBYRANK")
        .arg(&key)
        .arg(0)
        .arg(-26)
        .ignore()
        .query_async(&mut conn.clone())
        .await
        .unwrap();
}

async fn book_list<C>(conn: &C, token: &str) -> Vec<u64>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    redis::cmd("ZREVRANGE")
        .arg(format!("viewed:{token}"))
        .arg(0)
        .arg(-1)
        .query_async(&mut conn.clone())
        .await
        .unwrap()
}

/// Every chunk field of `layout`'s buckets that no session of its bucket
/// holds: what a removal left behind.
pub async fn orphans<C>(layout: &Compact<C>) -> Vec<(String, Vec<u8>)>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let mut conn = layout.connection().clone();
    let mut out = Vec::new();
    for bucket in 0..layout.buckets().count() {
        let bucket_key = layout.scheme().bucket_key(bucket);
        for key in chunk_keys(layout, bucket) {
            let fields: Vec<Vec<u8>> = redis::cmd("HKEYS")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            for field in fields {
                let held: bool = redis::cmd("HEXISTS")
                    .arg(&bucket_key)
                    .arg(&field)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                if !held {
                    out.push((key.clone(), field));
                }
            }
        }
    }
    out
}

fn chunk_keys<C>(layout: &Compact<C>, bucket: u32) -> Vec<String>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    (0..layout.viewed_chunks())
        .map(|c| layout.scheme().viewed_key(bucket, c))
        .collect()
}

/// How many of `id`'s chunk fields exist.
pub async fn chunk_fields<C>(layout: &Compact<C>, id: &SessionId) -> usize
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let bucket = layout.buckets().bucket_of(id);
    let field = layout.buckets().field(id);
    let mut n = 0;
    for key in chunk_keys(layout, bucket) {
        let held: bool = redis::cmd("HEXISTS")
            .arg(&key)
            .arg(&field)
            .query_async(&mut layout.connection().clone())
            .await
            .unwrap();
        n += usize::from(held);
    }
    n
}

/// The book's list and the store's agree view after view: the newest 25,
/// newest first, a repeat view moving its item to the front; items of every
/// length; chunks within the listpack value limit and still listpacks.
pub async fn the_newest_items_are_kept_as_the_book_keeps_them<C>(conn: C)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let layout = layout(conn.clone(), "vbook").await;
    let store: Store<_, Page> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(600));
    let session = store.create(7, Page::default()).await.unwrap();
    let token = session.id.to_hex();
    // A catalogue with repeats, and ids of 1 to 8 bytes.
    let catalogue: Vec<u64> = (0..40u64)
        .map(|n| match n % 5 {
            0 => n,
            1 => n << 20,
            2 => n << 40,
            3 => u64::MAX - n,
            _ => 1000 + n,
        })
        .collect();
    for step in 0..120u64 {
        let item = catalogue[((step * 7) % 23 + step / 3) as usize % catalogue.len()];
        let expiry = store.view(&session.id, &item).await.unwrap();
        assert!(expiry.is_some(), "step {step}: the session is live");
        book_view(&conn, &token, step + 1, item).await;
        if step % 10 == 9 || step < 3 {
            let ours = store.viewed::<u64>(&session.id).await.unwrap().unwrap();
            assert_eq!(ours, book_list(&conn, &token).await, "after view {step}");
        }
    }
    let ours = store.viewed::<u64>(&session.id).await.unwrap().unwrap();
    assert_eq!(ours.len(), 25);
    let bucket = layout.buckets().bucket_of(&session.id);
    let field = layout.buckets().field(&session.id);
    let mut used = 0;
    for key in chunk_keys(&layout, bucket) {
        let len: usize = redis::cmd("HSTRLEN")
            .arg(&key)
            .arg(&field)
            .query_async(&mut conn.clone())
            .await
            .unwrap();
        assert!(len <= CHUNK_BYTES, "{key}: {len} bytes");
        if len > 0 {
            used += 1;
            let encoding: String = redis::cmd("OBJECT")
                .arg("ENCODING")
                .arg(&key)
                .query_async(&mut conn.clone())
                .await
                .unwrap();
            assert_eq!(encoding, "listpack", "{key}");
        }
    }
    // The documented packing: newest first, a length byte and the item,
    // a new chunk where the next item would pass 64 bytes.
    let mut expected = 0;
    let mut fill = CHUNK_BYTES;
    for n in &ours {
        let len = 1 + sessionpack::viewed::Item::encode(n).len();
        if fill + len > CHUNK_BYTES {
            expected += 1;
            fill = 0;
        }
        fill += len;
    }
    assert_eq!(used, expected, "chunks used for {ours:?}");
    // A view rolls the expiry as a touch does.
    let before = store.load(&session.id).await.unwrap().unwrap().expires_at;
    let store_long = Store::<_, Page>::new(layout.clone()).with_ttl(Duration::from_secs(3600));
    let after = store_long.view(&session.id, &1u64).await.unwrap().unwrap();
    assert!(after >= before + 2_900, "{before} -> {after}");
    assert_eq!(
        store.load(&session.id).await.unwrap().unwrap().expires_at,
        after
    );
    assert_eq!(
        store.viewed::<u64>(&session.id).await.unwrap().unwrap()[0],
        1
    );
    // Without an idle timeout a view records the item and leaves the expiry.
    let fixed = Store::<_, Page>::new(layout.clone()).with_lifetimes(None, None);
    assert_eq!(fixed.view(&session.id, &2u64).await.unwrap(), Some(after));
    // Several views at once, oldest first, repeats included.
    let many = store.create(9, Page::default()).await.unwrap();
    let batch: Vec<u64> = (0..30).chain([3, 29, 3]).collect();
    store.view_many(&many.id, &batch).await.unwrap().unwrap();
    let mut model: Vec<u64> = Vec::new();
    for &item in &batch {
        model.retain(|&x| x != item);
        model.insert(0, item);
        model.truncate(25);
    }
    assert_eq!(model[..3], [3, 29, 28]);
    assert_eq!(store.viewed::<u64>(&many.id).await.unwrap().unwrap(), model);
    // A session with no views has an empty list; a gone one has none.
    let fresh = store.create(8, Page::default()).await.unwrap();
    assert_eq!(store.viewed::<u64>(&fresh.id).await.unwrap(), Some(vec![]));
    store.destroy(&fresh.id).await.unwrap();
    assert_eq!(store.viewed::<u64>(&fresh.id).await.unwrap(), None);
    assert_eq!(store.view(&fresh.id, &3u64).await.unwrap(), None);
    assert_eq!(chunk_fields(&layout, &fresh.id).await, 0, "nothing written");
}

/// A list goes with its session on every path that removes one: destroy,
/// expiry found by a view, the sweeper, the session cap (inline and out of
/// line), a revocation; a rotation carries it over. Nothing is left.
pub async fn items_go_with_their_session<C>(conn: C)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let config = CompactConfig::new(3)
        .with_namespace("vgone")
        .with_viewed(ViewedConfig::new(25, 4))
        .with_user_index(UserIndexConfig {
            bits: 2,
            grace_secs: 1,
            skew_secs: 1,
        });
    let layout = Compact::new(conn.clone(), config).await.unwrap();
    let store: Store<_, Page> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(600));
    // Items of two bytes each: 25 of them take 75 bytes, two chunks.
    let viewed = |n: u64| (0..30).map(move |i| 256 + n * 100 + i);
    let mut ids = Vec::new();
    for user in 0..6u64 {
        let page = if user % 2 == 0 {
            Page::default()
        } else {
            // Out of line: the cap evicts it with its own script.
            Page {
                page: "p".repeat(200),
            }
        };
        let s = store.create(user, page).await.unwrap();
        for item in viewed(user) {
            store.view(&s.id, &(item as u32)).await.unwrap().unwrap();
        }
        assert_eq!(chunk_fields(&layout, &s.id).await, 2, "25 items of 2 bytes");
        ids.push(s.id);
    }
    // Destroy.
    assert!(store.destroy(&ids[0]).await.unwrap());
    assert_eq!(chunk_fields(&layout, &ids[0]).await, 0, "destroyed");
    // Rotation carries the list.
    let before: Vec<u32> = store.viewed(&ids[1]).await.unwrap().unwrap();
    let rotated = store.rotate(&ids[1]).await.unwrap().unwrap();
    assert_eq!(
        store.viewed::<u32>(&rotated).await.unwrap().unwrap(),
        before
    );
    assert_eq!(chunk_fields(&layout, &ids[1]).await, 0, "the old id's list");
    ids[1] = rotated;
    // Revocation.
    store.revoke_all(&2).await.unwrap();
    assert_eq!(chunk_fields(&layout, &ids[2]).await, 0, "revoked");
    // Expiry: found by a view, and by the sweeper.
    let short_a = store
        .create_with_ttl(10, Page::default(), Duration::from_secs(1))
        .await
        .unwrap();
    let short_b = store
        .create_with_ttl(
            11,
            Page {
                page: "q".repeat(200),
            },
            Duration::from_secs(1),
        )
        .await
        .unwrap();
    // Views that leave the expiry (no idle timeout), so these expire.
    let fixed: Store<_, Page> = Store::new(layout.clone())
        .without_sweeper()
        .with_lifetimes(None, None);
    for s in [&short_a, &short_b] {
        for item in 0..5u32 {
            fixed.view(&s.id, &item).await.unwrap().unwrap();
        }
    }
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    assert_eq!(store.viewed::<u32>(&short_a.id).await.unwrap(), None);
    assert_eq!(store.view(&short_a.id, &9u32).await.unwrap(), None);
    assert_eq!(chunk_fields(&layout, &short_a.id).await, 0, "reclaimed");
    assert_eq!(chunk_fields(&layout, &short_b.id).await, 1, "not swept yet");
    let sweeper = Sweeper::new(layout.clone(), SweepConfig::default());
    sweeper.sweep_range_full(0..sweeper.units()).await.unwrap();
    assert_eq!(chunk_fields(&layout, &short_b.id).await, 0, "swept");
    // The cap: keep 2 of the 3 left, and the lists of the kept ones.
    let capped = Sweeper::new(layout.clone(), SweepConfig::default().with_max_sessions(2));
    capped.enforce_cap().await.unwrap();
    let mut kept = 0;
    for id in &[ids[1], ids[3], ids[4], ids[5]] {
        match store.viewed::<u32>(id).await.unwrap() {
            Some(items) => {
                kept += 1;
                assert_eq!(items.len(), 25);
            }
            None => assert_eq!(chunk_fields(&layout, id).await, 0, "evicted"),
        }
    }
    assert!(kept <= 2, "{kept} kept");
    assert_eq!(
        orphans(&layout).await,
        vec![],
        "lists left without a session"
    );
}

/// Views from many tasks on one session interleave without losing the
/// list's shape, and views racing a destroy leave nothing behind.
pub async fn concurrent_views_keep_the_list_whole<C>(conn: C)
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let layout = layout(conn, "vrace").await;
    let store = Arc::new(Store::<_, Page>::new(layout.clone()).with_ttl(Duration::from_secs(600)));
    let session = store.create(1, Page::default()).await.unwrap();
    let tasks: Vec<_> = (0..8u64)
        .map(|t| {
            let store = store.clone();
            let id = session.id;
            tokio::spawn(async move {
                for i in 0..40u64 {
                    store.view(&id, &(t << 32 | i)).await.unwrap().unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let items = store.viewed::<u64>(&session.id).await.unwrap().unwrap();
    assert_eq!(items.len(), 25);
    assert_eq!(items.iter().collect::<HashSet<_>>().len(), 25, "distinct");
    for t in 0..8u64 {
        let own: Vec<u64> = items.iter().filter(|&&x| x >> 32 == t).copied().collect();
        assert!(own.windows(2).all(|w| w[0] > w[1]), "task {t}: {own:?}");
        if let Some(&last) = own.first() {
            assert_eq!(last & 0xffff_ffff, 39, "task {t}'s newest is its last");
        }
    }
    // Views racing destroys: many sessions, each destroyed mid-stream.
    for _round in 0..5 {
        let sessions: Vec<SessionId> = {
            let mut v = Vec::new();
            for u in 0..6 {
                v.push(store.create(u, Page::default()).await.unwrap().id);
            }
            v
        };
        let viewers: Vec<_> = sessions
            .iter()
            .map(|&id| {
                let store = store.clone();
                tokio::spawn(async move {
                    for i in 0..60u64 {
                        if store.view(&id, &i).await.unwrap().is_none() {
                            break;
                        }
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(5)).await;
        for id in &sessions {
            store.destroy(id).await.unwrap();
        }
        for v in viewers {
            v.await.unwrap();
        }
        for id in &sessions {
            assert_eq!(chunk_fields(&layout, id).await, 0);
        }
    }
    assert_eq!(orphans(&layout).await, vec![]);
}
