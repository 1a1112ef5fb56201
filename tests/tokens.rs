//! One-time tokens against a real redis-server: issue, peek, consume
//! exactly once under concurrent consumers, expiry, bulk issue, payloads
//! out of line, hostile input.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sessionpack::session::sweep::{SweepConfig, Sweeper};
use sessionpack::tokens::Tokens;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Verify {
    act_id: String,
    email: String,
}

fn verify(n: u64) -> Verify {
    Verify {
        act_id: n.to_string(),
        email: format!("user{n}@example.org"),
    }
}

const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_consumed_once_and_then_is_gone() {
    let server = common::server();
    let tokens: Tokens<_, Verify> = Tokens::open(common::manager(&server).await, 6)
        .await
        .unwrap();
    let token = tokens.issue(&verify(1234), HOUR).await.unwrap();
    assert_eq!(token.to_hex().len(), 32);
    assert_eq!(tokens.peek(&token).await.unwrap(), Some(verify(1234)));
    assert_eq!(
        tokens.peek(&token).await.unwrap(),
        Some(verify(1234)),
        "a peek leaves it"
    );
    assert_eq!(
        tokens.consume_text(&token.to_hex()).await.unwrap(),
        Some(verify(1234))
    );
    assert_eq!(tokens.consume(&token).await.unwrap(), None, "consumed once");
    assert_eq!(tokens.peek(&token).await.unwrap(), None);
    // A token never issued, and hostile text that never reaches Redis.
    let never = sessionpack::SessionId::generate_with(sessionpack::IdWidth::Bits128).unwrap();
    assert_eq!(tokens.consume(&never).await.unwrap(), None);
    for bad in [
        "c17bd6",
        "",
        "../../etc/passwd",
        &"A".repeat(32),
        &"0".repeat(1 << 16),
    ] {
        assert!(matches!(
            tokens.consume_text(bad).await,
            Err(sessionpack::Error::InvalidId(_))
        ));
    }
    // Revoked unconsumed.
    let revoked = tokens.issue(&verify(7), HOUR).await.unwrap();
    assert!(tokens.revoke(&revoked).await.unwrap());
    assert_eq!(tokens.consume(&revoked).await.unwrap(), None);
    assert!(!tokens.revoke(&revoked).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_many_concurrent_consumers_exactly_one_wins() {
    let server = common::server();
    let tokens: Tokens<_, Verify> = Tokens::open(common::manager(&server).await, 4)
        .await
        .unwrap();
    let long = Verify {
        act_id: "9".into(),
        email: format!("{}@example.org", "x".repeat(200)),
    };
    for payload in [verify(42), long] {
        for _ in 0..20 {
            let token = tokens.issue(&payload, HOUR).await.unwrap();
            let won = Arc::new(std::sync::atomic::AtomicU32::new(0));
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..16 {
                // A connection each, so the calls race on the server.
                let conn = common::manager(&server).await;
                let (won, payload) = (won.clone(), payload.clone());
                tasks.spawn(async move {
                    let mine: Tokens<_, Verify> = Tokens::open(conn, 4).await.unwrap();
                    if let Some(got) = mine.consume(&token).await.unwrap() {
                        assert_eq!(got, payload);
                        won.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                });
            }
            while let Some(r) = tasks.join_next().await {
                r.unwrap();
            }
            assert_eq!(won.load(std::sync::atomic::Ordering::SeqCst), 1);
        }
    }
    // No record key is left behind by the long payloads.
    let mut raw = common::raw(&server).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("tok:*:o:*")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(keys.is_empty(), "{keys:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_tokens_consume_as_none_and_are_swept() {
    let server = common::server();
    let tokens: Tokens<_, Verify> = Tokens::open(common::manager(&server).await, 4)
        .await
        .unwrap();
    let payloads: Vec<Verify> = (0..500).map(verify).collect();
    let issued = std::time::Instant::now();
    let short = tokens
        .issue_many(&payloads, Duration::from_secs(1))
        .await
        .unwrap();
    let long = tokens.issue_many(&payloads[..100], HOUR).await.unwrap();
    assert_eq!(short.iter().chain(&long).collect::<HashSet<_>>().len(), 600);
    // Live, unless this machine took its second to get here.
    match tokens.peek(&short[7]).await.unwrap() {
        Some(found) => assert_eq!(found, verify(7)),
        None => assert!(issued.elapsed() >= Duration::from_secs(1), "gone early"),
    }
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    assert_eq!(
        tokens.consume(&short[7]).await.unwrap(),
        None,
        "expired, unswept"
    );
    let sweeper = Sweeper::new(tokens.layout().clone(), SweepConfig::default());
    let report = sweeper.sweep_range_full(0..sweeper.units()).await.unwrap();
    // The consume of an expired token leaves it to the sweeper.
    assert_eq!(report.reclaimed, 500);
    for (i, token) in long.iter().enumerate() {
        assert_eq!(tokens.consume(token).await.unwrap(), Some(verify(i as u64)));
    }
    assert!(matches!(
        tokens.issue(&verify(1), Duration::MAX).await,
        Err(sessionpack::Error::InvalidTtl { .. })
    ));
}
