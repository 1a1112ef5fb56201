//! Faults on a real local Redis Cluster: a primary killed mid-traffic.

#[path = "../common/mod.rs"]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sessionpack::conn::cluster;
use sessionpack::session::layout::Bucketed;
use sessionpack::session::layout::BucketedConfig;
use sessionpack::session::sweep::{SweepConfig, Sweeper};
use sessionpack::{Compact, CompactConfig, Error, SessionId, Store};
use sessionpack_testkit::{LocalCluster, LocalServer, Role};

/// The traffic's sessions' lifetime: longer than any run, however loaded
/// the machine (a run of these tests took 12 minutes on a busy one, and
/// its first sessions, live ten minutes, were found gone as if lost).
const TTL: Duration = Duration::from_secs(24 * 3600);

/// What the traffic saw.
#[derive(Debug, Default)]
struct Traffic {
    /// Sessions whose create was acknowledged, in order.
    acked: Vec<SessionId>,
    /// Calls that failed, all with a transient error.
    failed: u64,
    /// The longest a call took (the cluster client waits out part of a
    /// takeover, up to its response timeout, before it reports an error).
    longest: Duration,
    /// Loads of an acknowledged session that found nothing while the
    /// cluster was up.
    missing: u64,
}

fn sweeping(
    layout: impl Into<sessionpack::session::sweep::SweepTarget<cluster::Cluster>>,
) -> sessionpack::session::sweep::SweeperHandle {
    Sweeper::new(
        layout,
        SweepConfig::default().with_interval(Duration::from_millis(300)),
    )
    .spawn()
}

/// Waits until the traffic has made `n` rounds.
async fn rounds_reach(rounds: &AtomicU64, n: u64) {
    while rounds.load(Ordering::Relaxed) < n {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the sweeper has finished two more passes.
async fn sweeper_passes(sweeper: &sessionpack::session::sweep::SweeperHandle, after: &str) {
    let mut stats = sweeper.subscribe();
    let from = stats.borrow_and_update().passes;
    let passed = tokio::time::timeout(Duration::from_secs(120), async {
        while stats.borrow_and_update().passes < from + 2 {
            stats.changed().await.unwrap();
        }
    })
    .await;
    assert!(
        passed.is_ok(),
        "after {after}: the sweeper made no pass in two minutes: {:?}",
        sweeper.stats()
    );
}

/// Creates, loads, touches, destroys and rotates sessions (every seventh
/// with a record too long for one value: in turn in pieces and out of
/// line) until `stop`, counting its rounds in `rounds`.
async fn churn<L: sessionpack::session::layout::Layout>(
    store: Store<L, String>,
    stop: Arc<AtomicBool>,
    rounds: Arc<AtomicU64>,
    seed: u64,
) -> Ledger {
    let mut l = Ledger::default();
    let mut n = seed;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        rounds.fetch_add(1, Ordering::Relaxed);
        let attrs = match n % 14 {
            0 => "o".repeat(700),
            7 => "p".repeat(300),
            _ => String::new(),
        };
        match store.create(n, attrs).await {
            Ok(s) => l.live.push(s.id),
            Err(Error::Unavailable(_)) => l.failed += 1,
            Err(e) => panic!("create: {e:?}"),
        }
        if l.live.is_empty() {
            continue;
        }
        let pick = (n as usize * 7919) % l.live.len();
        let id = l.live[pick];
        let outcome = match n % 10 {
            0 | 1 => store.destroy(&id).await.map(|gone| {
                if gone {
                    l.dead.push(l.live.swap_remove(pick));
                } else {
                    l.lost.push(id);
                }
            }),
            2 => store.rotate(&id).await.map(|to| match to {
                Some(to) => {
                    l.dead.push(std::mem::replace(&mut l.live[pick], to));
                }
                None => l.lost.push(id),
            }),
            3..=5 => store.touch(&id).await.map(|at| {
                if at.is_none() {
                    l.lost.push(id);
                }
            }),
            _ => store.load(&id).await.map(|s| {
                if s.is_none() {
                    l.lost.push(id);
                }
            }),
        };
        match outcome {
            Ok(()) => {}
            Err(Error::Unavailable(_)) => {
                l.failed += 1;
                l.uncertain.push(l.live.swap_remove(pick));
            }
            Err(e) => panic!("call: {e:?}"),
        }
    }
    l
}

/// What the traffic knows of the sessions it made.
#[derive(Debug, Default)]
struct Ledger {
    /// Live for certain: created, rotated to, or touched, and not ended.
    live: Vec<SessionId>,
    /// Ended for certain: destroyed, or rotated away from.
    dead: Vec<SessionId>,
    /// A call on them failed with a transient error: either state.
    uncertain: Vec<SessionId>,
    /// Calls that failed with a transient error.
    failed: u64,
    /// Sessions the traffic found gone while they were live (lost).
    lost: Vec<SessionId>,
}

/// Every bucket's fields have an index entry at or below their earliest
/// expiry, and every out-of-line record key its marker in its bucket.
/// Returns the sessions held.
async fn audit_compact(c: &LocalCluster, layout: &Compact<cluster::Cluster>) -> u64 {
    use redis::AsyncCommands;
    let mut conn = layout.connection().clone();
    let scheme = layout.scheme();
    let mut sessions = 0;
    for bucket in 0..layout.buckets().count() {
        let fields: Vec<(Vec<u8>, Vec<u8>)> =
            conn.hgetall(scheme.bucket_key(bucket)).await.unwrap();
        if fields.is_empty() {
            continue;
        }
        sessions += fields.len() as u64;
        let earliest = fields.iter().map(|(_, v)| expiry_of(v)).min().unwrap();
        let index = scheme.index_key(scheme.group_of(bucket));
        let score: Option<f64> = conn.zscore(&index, scheme.member(bucket)).await.unwrap();
        let score =
            score.unwrap_or_else(|| panic!("bucket {bucket} has sessions and no index entry"));
        assert!(
            score <= earliest as f64,
            "bucket {bucket}: index {score} > earliest {earliest}"
        );
    }
    for node in c.primaries() {
        let mut raw = common::raw(node).await;
        let keys: Vec<String> = raw.keys("sp:{*}:*:o:*").await.unwrap();
        for key in keys {
            let (bucket_key, field_hex) = key.rsplit_once(":o:").unwrap();
            let field = hex::decode(field_hex).unwrap();
            let value: Option<Vec<u8>> = conn.hget(bucket_key, &field).await.unwrap();
            assert!(
                value.is_some_and(|v| v.last() == Some(&0xc1)),
                "{key} has no marker in its bucket"
            );
        }
    }
    sessions
}

/// The expiry a compact bucket's value holds, in either form.
fn expiry_of(value: &[u8]) -> u64 {
    match value.first() {
        Some(b'0'..=b'9') => {
            std::str::from_utf8(value).unwrap().parse::<u64>().unwrap() % 10_000_000_000
        }
        _ => u64::from(u32::from_be_bytes(value[..4].try_into().unwrap())),
    }
}

/// Pauses `victim` (`SIGSTOP`, by its process id) until its replica takes
/// over, lets it go, and waits until the cluster is ready again.
async fn pause_until_replica_takes_over(c: &LocalCluster, victim: &LocalServer) {
    let replica = c
        .nodes()
        .iter()
        .find(|n| c.role(n) == Some(Role::Replica(victim.port())))
        .expect("the victim's replica");
    signal(victim, "-STOP");
    until_primary(c, replica).await;
    signal(victim, "-CONT");
    tokio::task::block_in_place(|| c.wait_until_ready(Duration::from_secs(60))).unwrap();
}

/// Sends `sig` to `server`'s process, by its id.
fn signal(server: &LocalServer, sig: &str) {
    let pid = server.pid().expect("the server runs").to_string();
    let status = std::process::Command::new("kill")
        .args([sig, &pid])
        .status()
        .unwrap();
    assert!(status.success(), "kill {sig} {pid}");
}

/// Waits until `replica` has taken its primary's slots over.
async fn until_primary(c: &LocalCluster, replica: &LocalServer) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while c.role(replica) != Some(Role::Primary) {
        assert!(Instant::now() < deadline, "the replica never took over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

mod confirmed;
mod failover;
mod recovery;
mod reshard;
