//! `sessionpack demo`: the store end to end, against a real server.

use std::time::Duration;

use clap::Args;
use serde::{Deserialize, Serialize};

use super::Target;
use crate::harness::info::MemorySample;
use sessionpack::error::Result;
use sessionpack::viewed::ViewedConfig;
use sessionpack::{Compact, CompactConfig, Store};

/// Arguments of `sessionpack demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    #[command(flatten)]
    target: Target,
    /// Sessions to bulk-create after the walk-through.
    #[arg(long, default_value_t = 100_000, value_parser = super::count::positive)]
    sessions: u64,
    /// log2 of the bucket count.
    #[arg(long, default_value_t = 12)]
    bucket_bits: u8,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Cart {
    items: Vec<u32>,
}

async fn used_memory(conn: &mut redis::aio::ConnectionManager) -> Result<u64> {
    Ok(MemorySample::read(conn).await?.used_memory)
}

pub(super) async fn run(args: DemoArgs) -> Result<()> {
    let (target, url) = args.target.connect_server("demo").await?;
    target.flush().await?;
    let mut conn = target.open(&url).await?;
    let config = CompactConfig::new(args.bucket_bits).with_viewed(ViewedConfig::default());
    let layout = Compact::new(conn.clone(), config).await?;
    println!(
        "server {} with {} compact buckets; listpack limits {:?}",
        url,
        layout.buckets().count(),
        layout.limits()
    );
    let store: Store<_, Cart> = Store::new(layout).with_ttl(Duration::from_secs(3600));

    let session = store.create(42, Cart::default()).await?;
    println!(
        "created   {:?} for identity 42, expires at {}",
        session.id, session.expires_at
    );
    let updated = store
        .update(&session.id, |cart| cart.items.push(7))
        .await?
        .map(|s| s.attrs.items);
    println!("updated   cart -> {updated:?}");
    println!("touched   expires at {:?}", store.touch(&session.id).await?);
    for item in [1001u64, 1002, 1003, 1001] {
        store.view(&session.id, &item).await?;
    }
    println!(
        "viewed    1001, 1002, 1003, 1001 -> newest first {:?}",
        store.viewed::<u64>(&session.id).await?
    );
    let rotated = store.rotate(&session.id).await?;
    println!(
        "rotated   old id finds {:?}",
        store.load(&session.id).await?.map(|s| s.identity)
    );
    if let Some(new_id) = rotated {
        let loaded = store.load(&new_id).await?;
        println!(
            "          new id {new_id:?} finds identity {:?}, viewed {:?}",
            loaded.map(|s| s.identity),
            store.viewed::<u64>(&new_id).await?
        );
        println!(
            "destroyed {}, its viewed items with it: {:?}",
            store.destroy(&new_id).await?,
            store.viewed::<u64>(&new_id).await?
        );
    }
    match store.load_cookie("not-a-session-id").await {
        Err(e) => println!("hostile   cookie refused: {e}"),
        Ok(found) => println!("hostile   cookie unexpectedly accepted: {found:?}"),
    }
    tokens_demo(conn.clone()).await?;
    locks_and_limits_demo(conn.clone()).await?;

    let before = used_memory(&mut conn).await?;
    let batch: Vec<(u64, Cart)> = (0..args.sessions).map(|i| (i, Cart::default())).collect();
    let started = std::time::Instant::now();
    for chunk in batch.chunks(10_000) {
        store.create_many(chunk).await?;
    }
    let elapsed = started.elapsed();
    let after = used_memory(&mut conn).await?;
    let keys: u64 = redis::cmd("DBSIZE").query_async(&mut conn).await?;
    println!(
        "bulk      {} sessions in {:.2}s ({:.0}/s): {} keys, {:.1} bytes/session of used_memory",
        args.sessions,
        elapsed.as_secs_f64(),
        args.sessions as f64 / elapsed.as_secs_f64(),
        keys,
        after.saturating_sub(before) as f64 / args.sessions.max(1) as f64
    );
    Ok(())
}

/// One-time tokens: issue, peek, consume once, and a second consume.
async fn tokens_demo(conn: redis::aio::ConnectionManager) -> Result<()> {
    use crate::harness::tokens::Verify;
    use sessionpack::tokens::Tokens;
    let tokens: Tokens<_, Verify> = Tokens::open(conn, 8).await?;
    let token = tokens
        .issue(&Verify::nth(234), Duration::from_secs(3600))
        .await?;
    println!(
        "token     issued {token:?} for {:?}",
        tokens.peek(&token).await?.map(|v| v.email)
    );
    println!(
        "          consumed: {:?}; again: {:?}",
        tokens.consume(&token).await?.map(|v| v.act_id),
        tokens.consume(&token).await?.map(|v| v.act_id)
    );
    Ok(())
}

/// A lock with its fencing tokens, and both rate limiters.
async fn locks_and_limits_demo(conn: redis::aio::ConnectionManager) -> Result<()> {
    use sessionpack::lock::Lock;
    use sessionpack::ratelimit::{Gcra, Limit, SlidingLog};
    let lock = Lock::new(conn.clone(), "demo")?;
    let first = lock.try_acquire(Duration::from_secs(10)).await?;
    let second = lock.try_acquire(Duration::from_secs(10)).await?;
    println!(
        "lock      taken with fence {:?}; a second taker gets {:?}",
        first.as_ref().map(|g| g.fence()),
        second.map(|g| g.fence())
    );
    if let Some(guard) = first {
        guard.release().await?;
    }
    let limit = Limit::new(3, Duration::from_secs(1))?;
    let log = SlidingLog::new(conn.clone(), "rl", limit);
    let gcra = Gcra::new(conn, "rl", 4, limit)?;
    let mut seen = Vec::new();
    for _ in 0..4 {
        let (l, g) = (log.check("demo").await?, gcra.check("demo").await?);
        seen.push(format!(
            "{}/{}",
            if l.allowed { "ok" } else { "429" },
            if g.allowed { "ok" } else { "429" }
        ));
    }
    println!(
        "limits    3 per second, 4 requests (log/gcra): {}",
        seen.join(" ")
    );
    Ok(())
}
