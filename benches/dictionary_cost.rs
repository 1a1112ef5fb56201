//! What packing costs the client: a compact layout's `pack` and `unpack`
//! of an app's session data (a csrf token, a locale, a flash message beside
//! the login: 132 bytes) with a dictionary trained on 4,000 others, beside
//! encoding the same data map with the tower store's codec, for scale; in
//! a new namespace (its tokens lifted out, record format 6) and in one of
//! record format 5 (packed whole).
//! Rounds interleaved, the best round of each kept; the server (started for
//! the run) only receives the dictionary.
//!
//! ```text
//! cargo bench --bench dictionary_cost --features compression
//! ```

use std::collections::HashMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sessionpack::session::buckets::Buckets;
use sessionpack::session::dictionary::{Dictionary, LIFTED_FORMAT};
use sessionpack::session::layout::Layout;
use sessionpack::{Compact, CompactConfig, SessionId};

/// Calls per round and rounds for `cargo bench`; a run without `--bench`
/// (the test suite's) only checks that each variant runs.
const FULL: (u32, usize) = (200_000, 5);
const SMOKE: (u32, usize) = (100, 1);

/// The `n`-th app session: random digest and token, a locale and a flash
/// message from short lists.
fn session(n: u64) -> HashMap<String, Value> {
    let mix = |x: u64| {
        let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let bytes = |len: u64, salt: u64| -> Vec<u8> {
        (0..len)
            .map(|i| mix(n << 20 | salt << 10 | i) as u8)
            .collect()
    };
    let token: String = bytes(32, 1).iter().map(|b| format!("{b:02x}")).collect();
    let locales = ["en-US", "de-DE", "fr-FR", "en-GB", "pt-BR"];
    let flashes = ["Welcome back", "Item removed", "Order placed"];
    serde_json::from_value(json!({
        "axum-login.data": {"user_id": 1_000_000 + n, "auth_hash": bytes(32, 2)},
        "csrf_token": token,
        "locale": locales[(mix(n) % 5) as usize],
        "flash": flashes[(mix(n + 1) % 3) as usize],
    }))
    .unwrap()
}

/// The time per call of `calls` calls begun at `start`, kept in `best`
/// if it is the round's best so far.
fn keep_best(best: &mut Option<Duration>, calls: u32, start: Instant) {
    let per_call = start.elapsed() / calls;
    *best = Some(best.map_or(per_call, |b| b.min(per_call)));
}

fn micros(best: Option<Duration>) -> f64 {
    best.unwrap_or_default().as_secs_f64() * 1e6
}

fn main() {
    let (calls, rounds) = if std::env::args().any(|a| a == "--bench") {
        FULL
    } else {
        SMOKE
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let server = sessionpack_testkit::LocalServer::start().expect("a local redis-server");
        let conn = sessionpack::connect(&server.url()).await.unwrap();
        let samples: Vec<Vec<u8>> = (10_000..14_000)
            .map(|n| sessionpack::json_map::encode(&session(n)).unwrap())
            .collect();
        let dictionary = Dictionary::train(1, &samples, 16 * 1024).unwrap();
        // A new namespace lifts its tokens out (record format 6); one
        // recorded at format 5 packs its records whole, as before.
        let lifting = Compact::new(conn.clone(), CompactConfig::new(8))
            .await
            .unwrap()
            .with_dictionary(&dictionary)
            .await
            .unwrap();
        let mut meta = Compact::<sessionpack::Connection>::meta(&Buckets::new("whole", 8).unwrap());
        meta.format = LIFTED_FORMAT - 1;
        meta.claim(&conn, "whole").await.unwrap();
        let whole = Compact::new(conn, CompactConfig::new(8).with_namespace("whole"))
            .await
            .unwrap()
            .with_dictionary(&dictionary)
            .await
            .unwrap();
        assert_eq!(whole.format(), LIFTED_FORMAT - 1);
        let data_map = session(7);
        let data = sessionpack::json_map::encode(&data_map).unwrap();
        let id = SessionId::from_bytes([3u8; 20]);
        let mut encode = None;
        let mut forms = Vec::new();
        for layout in [&lifting, &whole] {
            let packed = layout.pack(data.clone()).await;
            assert!(packed.len() < data.len());
            assert_eq!(&*layout.unpack(&id, &packed).await.unwrap(), &data[..]);
            forms.push((layout, packed, None, None));
        }
        let mut train = None;
        for _ in 0..rounds {
            let start = Instant::now();
            for _ in 0..calls {
                black_box(sessionpack::json_map::encode(black_box(&data_map)).unwrap());
            }
            keep_best(&mut encode, calls, start);
            for (layout, packed, pack, unpack) in &mut forms {
                let start = Instant::now();
                for _ in 0..calls {
                    black_box(layout.pack(black_box(data.clone())).await);
                }
                keep_best(pack, calls, start);
                let start = Instant::now();
                for _ in 0..calls {
                    black_box(layout.unpack(&id, black_box(&packed[..])).await.unwrap());
                }
                keep_best(unpack, calls, start);
            }
            // What a learning store spends once, on its first 1000 samples.
            let start = Instant::now();
            black_box(Dictionary::train(1, &samples[..1000], 16 * 1024).unwrap());
            keep_best(&mut train, 1, start);
        }
        println!(
            "{} bytes of data; per call: encode the data map {:.2} µs; \
             learning a dictionary from 1000 samples: {:.1} ms",
            data.len(),
            micros(encode),
            micros(train) / 1000.0,
        );
        for ((_, packed, pack, unpack), form) in
            forms.iter().zip(["lifted (format 6)", "whole (format 5)"])
        {
            println!(
                "{form}: {} bytes packed; pack {:.2} µs, unpack {:.2} µs",
                packed.len(),
                micros(*pack),
                micros(*unpack),
            );
        }
    });
}
