//! Recently viewed items on one real `redis-server`: the book's list kept
//! view for view, gone with the session on every path, concurrent views,
//! and hostile input. The shared scenarios also run on a cluster in
//! `cluster.rs`.

mod common;

use std::time::Duration;

use common::viewed::{self, Page};
use sessionpack::viewed::ViewedConfig;
use sessionpack::{Compact, CompactConfig, Error, SessionId, Store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_newest_items_are_kept_as_the_book_keeps_them() {
    let server = common::server();
    viewed::the_newest_items_are_kept_as_the_book_keeps_them(common::manager(&server).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_go_with_their_session() {
    let server = common::server();
    viewed::items_go_with_their_session(common::manager(&server).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_views_keep_the_list_whole() {
    let server = common::server();
    viewed::concurrent_views_keep_the_list_whole(common::manager(&server).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_input_is_refused_and_writes_nothing() {
    let server = common::server();
    let conn = common::manager(&server).await;
    let layout = viewed::layout(conn.clone(), "vbad").await;
    let store: Store<_, Page> = Store::new(layout.clone()).with_ttl(Duration::from_secs(600));
    let s = store.create(1, Page::default()).await.unwrap();
    // Items the store does not keep.
    for item in ["", "123456789"] {
        assert!(
            matches!(
                store.view(&s.id, &item.to_owned()).await,
                Err(Error::ItemTooLong { limit: 8, .. })
            ),
            "{item:?}"
        );
    }
    assert_eq!(viewed::chunk_fields(&layout, &s.id).await, 0);
    // An id of another width.
    let narrow = SessionId::generate_with(sessionpack::IdWidth::Bits128).unwrap();
    assert!(matches!(
        store.view(&narrow, &1u64).await,
        Err(Error::InvalidId(_))
    ));
    // A chunk key of another type: a typed error, and the session's expiry
    // and list untouched.
    store.view(&s.id, &5u64).await.unwrap().unwrap();
    let before = store.load(&s.id).await.unwrap().unwrap().expires_at;
    let bucket = layout.buckets().bucket_of(&s.id);
    let chunk0 = layout.scheme().viewed_key(bucket, 0);
    let mut raw = common::raw(&server).await;
    let _: () = redis::cmd("RENAME")
        .arg(&chunk0)
        .arg("kept")
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(&chunk0)
        .arg("x")
        .query_async(&mut raw)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert!(matches!(
        store.view(&s.id, &6u64).await,
        Err(Error::WrongType { .. })
    ));
    assert_eq!(
        store.load(&s.id).await.unwrap().unwrap().expires_at,
        before,
        "nothing written"
    );
    assert!(matches!(
        store.viewed::<u64>(&s.id).await,
        Err(Error::WrongType { .. })
    ));
    // A destroy still removes the session, leaving the foreign key alone.
    let other = store.create(2, Page::default()).await.unwrap();
    let _: () = redis::cmd("DEL")
        .arg(&chunk0)
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = redis::cmd("RENAME")
        .arg("kept")
        .arg(&chunk0)
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(
        store.viewed::<u64>(&s.id).await.unwrap(),
        Some(vec![5]),
        "the list as it was"
    );
    // A corrupt chunk: a typed error on read, never a panic.
    let field = layout.buckets().field(&s.id);
    let _: () = redis::cmd("HSET")
        .arg(&chunk0)
        .arg(&field)
        .arg(b"\x09ab".as_slice())
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(matches!(
        store.viewed::<u64>(&s.id).await,
        Err(Error::CorruptRecord { .. })
    ));
    // Items of another type than stored.
    store.destroy(&s.id).await.unwrap();
    store.view(&other.id, &"a name".to_owned()).await.unwrap();
    assert!(matches!(
        store.viewed::<u32>(&other.id).await,
        Err(Error::CorruptRecord { .. })
    ));
    assert_eq!(
        store.viewed::<String>(&other.id).await.unwrap(),
        Some(vec!["a name".to_owned()])
    );
}

/// A chunk key evicted (or deleted) loses the items it held, never shows
/// items that are no longer the list's, and the session's removal still
/// takes everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_chunk_loses_items_but_never_shows_stale_ones() {
    let server = common::server();
    let layout = viewed::layout(common::manager(&server).await, "vevict").await;
    let store: Store<_, Page> = Store::new(layout.clone()).with_ttl(Duration::from_secs(600));
    let s = store.create(1, Page::default()).await.unwrap();
    let items: Vec<u64> = (0..25).map(|n| 100_000 + n).collect();
    store.view_many(&s.id, &items).await.unwrap().unwrap();
    assert_eq!(viewed::chunk_fields(&layout, &s.id).await, 2);
    let bucket = layout.buckets().bucket_of(&s.id);
    let mut raw = common::raw(&server).await;
    let _: () = redis::cmd("DEL")
        .arg(layout.scheme().viewed_key(bucket, 0))
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(store.viewed::<u64>(&s.id).await.unwrap(), Some(vec![]));
    store.view(&s.id, &7u64).await.unwrap().unwrap();
    assert_eq!(
        store.viewed::<u64>(&s.id).await.unwrap(),
        Some(vec![7]),
        "the stale chunk 1 is not read"
    );
    // Filling chunk 0 again (15 items of 4 bytes leave no room for an
    // 8-byte one) makes the script read on: the stale chunk is gone.
    let more: Vec<u64> = (0..14).map(|n| 200_000 + n).collect();
    store.view_many(&s.id, &more).await.unwrap().unwrap();
    let list = store.viewed::<u64>(&s.id).await.unwrap().unwrap();
    assert_eq!(list.len(), 15, "{list:?}");
    store.view(&s.id, &300_000u64).await.unwrap().unwrap();
    let list = store.viewed::<u64>(&s.id).await.unwrap().unwrap();
    assert_eq!(list.len(), 16, "no stale item came back: {list:?}");
    assert!(
        list.iter().all(|n| !(100_000..200_000).contains(n)),
        "{list:?}"
    );
    store.destroy(&s.id).await.unwrap();
    assert_eq!(viewed::chunk_fields(&layout, &s.id).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_without_lists_or_with_others_is_refused() {
    let server = common::server();
    let conn = common::manager(&server).await;
    let plain = Compact::new(conn.clone(), CompactConfig::new(4).with_namespace("vplain"))
        .await
        .unwrap();
    let store: Store<_, Page> = Store::new(plain);
    let s = store.create(1, Page::default()).await.unwrap();
    assert!(matches!(
        store.view(&s.id, &1u64).await,
        Err(Error::Config(_))
    ));
    viewed::layout(conn.clone(), "vmeta").await;
    for config in [
        CompactConfig::new(4).with_namespace("vmeta"),
        CompactConfig::new(4)
            .with_namespace("vmeta")
            .with_viewed(ViewedConfig::new(10, 8)),
        CompactConfig::new(4)
            .with_namespace("vplain")
            .with_viewed(ViewedConfig::default()),
    ] {
        assert!(
            matches!(
                Compact::new(conn.clone(), config).await,
                Err(Error::Config(_))
            ),
            "opened with other viewed items than recorded"
        );
    }
    for bad in [
        ViewedConfig::new(0, 8),
        ViewedConfig::new(25, 64),
        ViewedConfig::new(255, 40),
    ] {
        let config = CompactConfig::new(4)
            .with_namespace("vnew")
            .with_viewed(bad);
        assert!(matches!(
            Compact::new(conn.clone(), config).await,
            Err(Error::Config(_))
        ));
    }
}

/// Items are read back only as the kind they were viewed as: text read as
/// a number is an error, not a made-up number. A list written before items
/// carried their kind still reads, and a repeat view of one of its items
/// moves it rather than keeping it twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn items_are_read_back_only_as_their_own_kind() {
    let server = common::server();
    let layout = viewed::layout(common::manager(&server).await, "vkind").await;
    let store: Store<_, Page> = Store::new(layout.clone()).with_ttl(Duration::from_secs(600));
    let s = store.create(1, Page::default()).await.unwrap();
    let names = ["abc".to_string(), "xyz".to_string()];
    store.view_many(&s.id, &names).await.unwrap().unwrap();
    let refused = store.viewed::<u64>(&s.id).await.unwrap_err();
    assert!(
        matches!(refused, Error::CorruptRecord { .. }),
        "{refused:?}"
    );
    let refused = store.viewed::<u32>(&s.id).await.unwrap_err();
    assert!(
        matches!(refused, Error::CorruptRecord { .. }),
        "{refused:?}"
    );
    assert_eq!(
        store.viewed::<String>(&s.id).await.unwrap().unwrap(),
        ["xyz", "abc"]
    );
    assert_eq!(
        store.viewed::<Vec<u8>>(&s.id).await.unwrap().unwrap(),
        [b"xyz".to_vec(), b"abc".to_vec()]
    );

    // A list as an earlier version stored it: length bytes with no kind.
    let t = store.create(2, Page::default()).await.unwrap();
    let bucket = layout.buckets().bucket_of(&t.id);
    let field = layout.buckets().field(&t.id);
    let legacy = [&[3u8][..], b"abc", &[2], &[1, 2]].concat();
    let _: () = redis::cmd("HSET")
        .arg(layout.scheme().viewed_key(bucket, 0))
        .arg(field)
        .arg(legacy)
        .query_async(&mut common::raw(&server).await)
        .await
        .unwrap();
    assert_eq!(
        store.viewed::<String>(&t.id).await.unwrap().unwrap(),
        ["abc", "\u{1}\u{2}"]
    );
    store
        .view(&t.id, &"abc".to_string())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store.viewed::<Vec<u8>>(&t.id).await.unwrap().unwrap(),
        [b"abc".to_vec(), vec![1, 2]],
        "moved to the front, not kept twice"
    );
}
