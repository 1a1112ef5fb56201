//! What metrics cost a store call: `Store::load` over a layout that answers
//! at once (so nothing but the store's own work and the metrics calls is
//! timed) against that layout's own `load`, with no recorder installed and
//! with a Prometheus recorder; and a real load from a `redis-server` started
//! for the run, for scale. All in one process, rounds interleaved, the best
//! round of each kept.
//!
//! ```text
//! cargo bench --bench metrics_cost --features metrics
//! cargo bench --bench metrics_cost          # the same, metrics compiled out
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

use sessionpack::error::Result;
use sessionpack::session::layout::Inserted;
use sessionpack::session::layout::Layout;
use sessionpack::session::layout::Stored;
use sessionpack::session::layout::Written;
use sessionpack::ttl::Deadline;
use sessionpack::{SessionId, Store};

/// Calls per round of the in-process variants, loads per round from the
/// real server, and rounds, for `cargo bench`; a run without `--bench`
/// (the test suite's) only checks that each variant runs.
const FULL: (u32, u32, usize) = (1_000_000, 20_000, 5);
const SMOKE: (u32, u32, usize) = (1_000, 100, 1);

/// A layout that answers every call at once with "no such session".
struct Ready;

/// Nothing to sweep.
impl sessionpack::session::sweep::Sweepable for Ready {
    fn spawn_sweeper(
        &self,
        _: sessionpack::session::sweep::SweepConfig,
    ) -> Option<sessionpack::session::sweep::SweeperHandle> {
        None
    }
}

impl Layout for Ready {
    fn name(&self) -> &'static str {
        "ready"
    }

    async fn insert(&self, _: &SessionId, _: &[u8], _: Deadline) -> Result<Inserted> {
        Ok(Inserted::IdTaken)
    }

    async fn insert_successor(
        &self,
        _: &SessionId,
        _: Option<&SessionId>,
        _: &SessionId,
        _: &[u8],
        _: Deadline,
    ) -> Result<Inserted> {
        Ok(Inserted::IdTaken)
    }

    async fn load(&self, _: &SessionId) -> Result<Option<Stored>> {
        Ok(None)
    }

    async fn touch(&self, _: &SessionId, _: u64) -> Result<Option<u64>> {
        Ok(None)
    }

    async fn replace(&self, _: &SessionId, _: &[u8], _: Option<&[u8]>) -> Result<Written> {
        Ok(Written::Missing)
    }

    async fn remove(&self, _: &SessionId, _: Option<&Stored>) -> Result<Written> {
        Ok(Written::Missing)
    }

    async fn insert_many(&self, items: &[(SessionId, Vec<u8>)], _: u64) -> Result<Vec<Inserted>> {
        Ok(vec![Inserted::IdTaken; items.len()])
    }

    async fn carry_over(&self, _: &SessionId, _: &SessionId) -> Result<()> {
        Ok(())
    }

    async fn load_many(&self, ids: &[SessionId]) -> Result<Vec<Option<Stored>>> {
        Ok(vec![None; ids.len()])
    }
}

/// Nanoseconds per call of the best round.
fn best(rounds: &[Duration], calls: u32) -> f64 {
    let least = rounds.iter().min().expect("rounds");
    least.as_nanos() as f64 / f64::from(calls)
}

fn main() {
    let (calls, server_calls, rounds) = if std::env::args().any(|a| a == "--bench") {
        FULL
    } else {
        SMOKE
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let id = SessionId::generate().expect("id");
    let store: Store<Ready, ()> = Store::new(Ready);
    let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets(sessionpack::metrics::CALL_SECONDS_BUCKETS)
        .expect("buckets")
        .build_recorder();

    let server = sessionpack_testkit::LocalServer::start().expect("start redis-server");
    let real: Store<_, ()> = rt.block_on(async {
        let conn = sessionpack::connect(&server.url()).await.expect("connect");
        let layout = sessionpack::Compact::new(conn, sessionpack::CompactConfig::new(10))
            .await
            .expect("layout");
        Store::new(layout)
    });
    let live = rt.block_on(real.create(7, ())).expect("create").id;

    // How long `$calls` calls of `$call` take, awaited one by one.
    macro_rules! timed {
        ($calls:expr, $call:expr) => {
            rt.block_on(async {
                let started = Instant::now();
                for _ in 0..$calls {
                    black_box($call.await.expect("load"));
                }
                started.elapsed()
            })
        };
    }
    let (mut layout_only, mut bare, mut recorded, mut server_load) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        layout_only.push(timed!(calls, Ready.load(black_box(&id))));
        bare.push(timed!(calls, store.load(black_box(&id))));
        recorded.push({
            let _local = metrics::set_default_local_recorder(&prometheus);
            timed!(calls, store.load(black_box(&id)))
        });
        server_load.push(timed!(server_calls, real.load(&live)));
    }

    let layout_ns = best(&layout_only, calls);
    let bare_ns = best(&bare, calls);
    let recorded_ns = best(&recorded, calls);
    let server_ns = best(&server_load, server_calls);
    let feature = if cfg!(feature = "metrics") {
        "on"
    } else {
        "off"
    };
    println!("feature metrics: {feature}; best of {rounds} rounds");
    println!("| call | ns per call | over the layout's own call |");
    println!("|---|---:|---:|");
    println!("| layout load, answered at once | {layout_ns:.1} | |");
    println!(
        "| Store::load, no recorder | {bare_ns:.1} | {:.1} |",
        bare_ns - layout_ns
    );
    println!(
        "| Store::load, Prometheus recorder | {recorded_ns:.1} | {:.1} |",
        recorded_ns - layout_ns
    );
    println!("| Store::load from redis-server | {server_ns:.0} | |");
    println!(
        "no recorder: {:.3}% of a load from the server; Prometheus recorder: {:.3}%",
        100.0 * (bare_ns - layout_ns).max(0.0) / server_ns,
        100.0 * (recorded_ns - layout_ns).max(0.0) / server_ns
    );
}
