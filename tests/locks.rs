//! Named locks against a real redis-server: mutual exclusion under
//! contention, fencing tokens that only grow, holders racing expiry and
//! release, waiting, and guards that release when dropped.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sessionpack::lock::{Lock, Retry};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holders_exclude_each_other_and_fences_only_grow() {
    let server = common::server();
    let inside = Arc::new(AtomicBool::new(false));
    let last_fence = Arc::new(AtomicU64::new(0));
    let entries = Arc::new(AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let lock = Lock::new(common::manager(&server).await, "orders").unwrap();
        let (inside, last_fence, entries) = (inside.clone(), last_fence.clone(), entries.clone());
        tasks.spawn(async move {
            for _ in 0..25 {
                let guard = lock
                    .acquire(
                        Duration::from_secs(5),
                        Retry::for_up_to(Duration::from_secs(30)),
                    )
                    .await
                    .unwrap();
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                let previous = last_fence.swap(guard.fence(), Ordering::SeqCst);
                assert!(
                    guard.fence() > previous,
                    "fence {} after {previous}",
                    guard.fence()
                );
                entries.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
                inside.store(false, Ordering::SeqCst);
                assert!(guard.release().await.unwrap());
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
    assert_eq!(entries.load(Ordering::SeqCst), 200);
    assert_eq!(
        last_fence.load(Ordering::SeqCst),
        200,
        "one fence per acquisition"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_past_its_lease_cannot_extend_or_release_the_next_ones() {
    let server = common::server();
    let lock = Lock::new(common::manager(&server).await, "report").unwrap();
    let lease = Duration::from_millis(200);
    let taken = Instant::now();
    let stale = lock.try_acquire(lease).await.unwrap().unwrap();
    // Held, unless this machine stalled past the lease in between.
    if let Some(early) = lock.try_acquire(Duration::from_secs(60)).await.unwrap() {
        assert!(taken.elapsed() >= lease, "taken while held");
        assert!(early.release().await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let next = lock
        .try_acquire(Duration::from_secs(60))
        .await
        .unwrap()
        .expect("expired: free");
    assert!(next.fence() > stale.fence());
    assert!(
        !stale.extend(Duration::from_secs(5)).await.unwrap(),
        "lost: no extend"
    );
    assert!(!stale.release().await.unwrap(), "lost: no release");
    assert!(
        lock.try_acquire(Duration::from_secs(5))
            .await
            .unwrap()
            .is_none(),
        "still next's"
    );
    assert!(next.extend(Duration::from_secs(60)).await.unwrap());
    assert!(next.release().await.unwrap());
    assert!(
        lock.try_acquire(Duration::from_secs(5))
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_gives_up_with_a_typed_error_and_a_dropped_guard_releases() {
    let server = common::server();
    let lock = Lock::new(common::manager(&server).await, "import").unwrap();
    let held = lock
        .try_acquire(Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    let started = Instant::now();
    match lock
        .acquire(
            Duration::from_secs(5),
            Retry::for_up_to(Duration::from_millis(300)),
        )
        .await
    {
        Err(sessionpack::Error::LockTimeout { key, waited }) => {
            assert_eq!(key, "lock:{import}");
            assert!(waited >= Duration::from_millis(300));
        }
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(held);
    // The release runs in the background: the lock is free well before
    // its 30 s lease would end.
    let again = lock
        .acquire(
            Duration::from_secs(5),
            Retry::for_up_to(Duration::from_secs(5)),
        )
        .await
        .unwrap();
    assert!(again.fence() >= 2);
    assert!(Lock::new(common::manager(&server).await, "a{b}").is_err());
    assert!(Lock::new(common::manager(&server).await, "").is_err());
}

/// Names and lifetimes out of range are refused with typed errors before
/// anything is written: no lock, no fence counter kept for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_names_and_lifetimes_are_refused_and_write_nothing() {
    use sessionpack::Error;
    let server = common::server();
    let conn = common::manager(&server).await;
    for name in [
        String::new(),
        "x".repeat(1 << 20),
        "a{b".into(),
        "x".repeat(257),
    ] {
        let refused = Lock::new(conn.clone(), &name).unwrap_err();
        assert!(
            matches!(refused, Error::InvalidLockName { len, .. } if len == name.len()),
            "{refused:?}"
        );
    }
    Lock::new(conn.clone(), &"x".repeat(256)).unwrap();

    let lock = Lock::new(conn.clone(), "orders").unwrap();
    for ttl in [Duration::ZERO, Duration::from_micros(999), Duration::MAX] {
        let refused = lock.try_acquire(ttl).await.unwrap_err();
        assert!(matches!(refused, Error::InvalidTtl { .. }), "{refused:?}");
        let refused = lock.acquire(ttl, Retry::default()).await.unwrap_err();
        assert!(matches!(refused, Error::InvalidTtl { .. }), "{refused:?}");
        let refused = sessionpack::lock::try_acquire(&conn, "bare", ttl)
            .await
            .unwrap_err();
        assert!(matches!(refused, Error::InvalidTtl { .. }), "{refused:?}");
    }
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut common::raw(&server).await)
        .await
        .unwrap();
    assert_eq!(keys, Vec::<String>::new(), "nothing written");

    // A held lock is not extended to zero or forever either.
    let guard = lock
        .try_acquire(Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    for ttl in [Duration::ZERO, Duration::MAX] {
        let refused = guard.extend(ttl).await.unwrap_err();
        assert!(matches!(refused, Error::InvalidTtl { .. }), "{refused:?}");
    }
    assert!(
        guard.release().await.unwrap(),
        "still held after the refusals"
    );
}
