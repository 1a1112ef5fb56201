//! Criterion benches of the library's hot paths: create, load and touch
//! for each layout, one at a time and in batches, against a dedicated
//! `redis-server` started for the run.
// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sessionpack::{SessionId, Store};
use sessionpack_cli::baselines::{AnyLayout, LayoutKind};
use sessionpack_testkit::LocalServer;

const BATCH: usize = 100;
const PRELOAD: usize = 20_000;

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let server = LocalServer::start().expect("start redis-server");
    let url = server.url();
    let stores: Vec<(LayoutKind, Store<AnyLayout<_>, ()>, Vec<SessionId>)> = rt.block_on(async {
        let mut out = Vec::new();
        for (db, kind) in LayoutKind::ALL.into_iter().enumerate() {
            // A database each: a namespace holds one store.
            let conn = sessionpack::connect(&format!("{url}{db}"))
                .await
                .expect("connect");
            let store = Store::new(kind.open(conn, 10).await.expect("layout"));
            let seed: Vec<(u64, ())> = (0..PRELOAD as u64).map(|i| (i, ())).collect();
            let ids = store.create_many(&seed).await.expect("preload");
            out.push((kind, store, ids));
        }
        out
    });

    let mut group = c.benchmark_group("single");
    group.throughput(Throughput::Elements(1));
    group.measurement_time(Duration::from_secs(3));
    for (kind, store, ids) in &stores {
        let mut i = 0usize;
        group.bench_function(BenchmarkId::new(kind.name(), "create"), |b| {
            b.to_async(&rt)
                .iter(|| async { store.create(7, ()).await.expect("create") })
        });
        group.bench_function(BenchmarkId::new(kind.name(), "load"), |b| {
            b.to_async(&rt).iter(|| {
                i = (i + 1) % ids.len();
                let id = ids[i];
                async move { store.load(&id).await.expect("load") }
            })
        });
        group.bench_function(BenchmarkId::new(kind.name(), "touch"), |b| {
            b.to_async(&rt).iter(|| {
                i = (i + 1) % ids.len();
                let id = ids[i];
                async move { store.touch(&id).await.expect("touch") }
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("batch");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.measurement_time(Duration::from_secs(3));
    let batch: Vec<(u64, ())> = (0..BATCH as u64).map(|i| (i, ())).collect();
    for (kind, store, ids) in &stores {
        group.bench_function(
            BenchmarkId::new(kind.name(), format!("create_many {BATCH}")),
            |b| {
                b.to_async(&rt)
                    .iter(|| async { store.create_many(&batch).await.expect("create_many") })
            },
        );
        let mut at = 0usize;
        group.bench_function(
            BenchmarkId::new(kind.name(), format!("load_many {BATCH}")),
            |b| {
                b.to_async(&rt).iter(|| {
                    at = (at + BATCH) % (ids.len() - BATCH);
                    let chunk = &ids[at..at + BATCH];
                    async move { store.load_many(chunk).await.expect("load_many") }
                })
            },
        );
    }
    group.finish();
}

criterion_group!(store, benches);
criterion_main!(store);
