//! Rate limits against a real redis-server: the exact log never admits
//! more than the limit in any window of the server's clock, its retry set
//! stays bounded and its keys expire; GCRA holds the long-run rate, admits
//! at most a burst more in a window, and its Retry-After is honest.

mod common;

use std::time::{Duration, Instant};

use sessionpack::ratelimit::{Decision, Gcra, Limit, SlidingLog};

/// The most admitted requests in any window of `window_ms` ending at an
/// admitted one, from the server's timestamps.
fn most_in_a_window(admitted: &[u64], window_ms: u64) -> usize {
    admitted
        .iter()
        .map(|&t| {
            admitted
                .iter()
                .filter(|&&u| u + window_ms > t && u <= t)
                .count()
        })
        .max()
        .unwrap_or(0)
}

async fn keys(server: &sessionpack_testkit::LocalServer) -> Vec<String> {
    let mut raw = common::raw(server).await;
    redis::cmd("KEYS")
        .arg("rl:*")
        .query_async(&mut raw)
        .await
        .unwrap()
}

/// Bursts of 12 requests every 150 ms for `run`, one client.
async fn bursts<F, Fut>(run: Duration, mut check: F) -> (Vec<u64>, Vec<Decision>)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Decision>,
{
    let (mut admitted, mut refused) = (Vec::new(), Vec::new());
    let started = Instant::now();
    while started.elapsed() < run {
        for _ in 0..12 {
            let d = check().await;
            if d.allowed {
                admitted.push(d.at_ms);
            } else {
                refused.push(d);
            }
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    (admitted, refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exact_log_never_admits_more_than_the_limit_in_a_window() {
    let server = common::server();
    let limit = Limit::new(5, Duration::from_millis(500)).unwrap();
    let log = SlidingLog::new(common::manager(&server).await, "rl", limit);
    let (admitted, refused) = bursts(Duration::from_millis(2_500), || async {
        log.check("client-1").await.unwrap()
    })
    .await;
    assert_eq!(most_in_a_window(&admitted, 500), 5);
    // About 5 per 500 ms over 2.5 s.
    assert!(
        (20..=35).contains(&admitted.len()),
        "{} admitted",
        admitted.len()
    );
    assert!(
        refused
            .iter()
            .all(|d| d.retry_after > Duration::ZERO && d.retry_after <= Duration::from_millis(600))
    );
    // A flood: the retry set never holds more than the limit.
    for _ in 0..1000 {
        log.check("flood").await.unwrap();
    }
    let mut raw = common::raw(&server).await;
    let held: u64 = redis::cmd("ZCARD")
        .arg("rl:{flood}:retry")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(held <= 5, "{held} retry slots");
    // Quiet clients' keys expire.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(keys(&server).await, Vec::<String>::new());
    for bad in ["", "a{b}", &"x".repeat(65)] {
        assert!(matches!(
            log.check(bad).await,
            Err(sessionpack::Error::Config(_))
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_holds_the_rate_admits_one_burst_and_advises_honestly() {
    let server = common::server();
    let limit = Limit::new(5, Duration::from_millis(500)).unwrap();
    let gcra = Gcra::new(common::manager(&server).await, "rl", 4, limit).unwrap();
    let (admitted, refused) = bursts(Duration::from_millis(2_500), || async {
        gcra.check("client-1").await.unwrap()
    })
    .await;
    let most = most_in_a_window(&admitted, 500);
    assert!((5..=9).contains(&most), "{most} in one window");
    assert!(
        (20..=35).contains(&admitted.len()),
        "{} admitted",
        admitted.len()
    );
    assert!(
        refused
            .iter()
            .all(|d| d.retry_after <= Duration::from_millis(100))
    );
    // A fresh client gets its burst (5), then one more per 100 ms: count
    // what is admitted before the first refusal against the time it took.
    let started = Instant::now();
    let mut allowed = 0u128;
    let refused = loop {
        let d = gcra.check("patient").await.unwrap();
        if !d.allowed {
            break d;
        }
        allowed += 1;
        assert!(allowed < 10_000, "never refused");
    };
    let most = 5 + started.elapsed().as_millis() / 100 + 1;
    assert!(
        (5..=most).contains(&allowed),
        "{allowed} admitted, at most {most}"
    );
    // Waiting the advice is enough.
    tokio::time::sleep(refused.retry_after + Duration::from_millis(5)).await;
    assert!(
        gcra.check("patient").await.unwrap().allowed,
        "the advice was too short"
    );
    // Many clients share a few buckets; lapsed ones are swept.
    for i in 0..200 {
        gcra.check(&format!("user-{i}")).await.unwrap();
    }
    assert!(keys(&server).await.len() <= 16, "at most one key a bucket");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(gcra.sweep().await.unwrap() >= 200);
    assert_eq!(keys(&server).await, Vec::<String>::new());
    // The sweeper task does the same on its own, and stops when dropped.
    let sweeper = gcra.spawn_sweeper(Duration::from_millis(200));
    for i in 0..50 {
        gcra.check(&format!("visitor-{i}")).await.unwrap();
    }
    assert!(!keys(&server).await.is_empty());
    // Swept by the task: wait for it (bounded only against a hang).
    let started = Instant::now();
    while !keys(&server).await.is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not swept by the task"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(sweeper);
    gcra.check("late").await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(keys(&server).await.len(), 1, "the task has stopped");
}
