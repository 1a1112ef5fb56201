//! An axum app with login, a protected page and logout, its sessions kept
//! by sessionpack through axum-login and tower-sessions.
//!
//! ```text
//! cargo run -p axum-login-example
//! curl -c jar -d 'name=ferris&password=crab' localhost:3000/login
//! curl -b jar localhost:3000/me
//! curl -b jar localhost:3000/devices
//! curl -b jar -X POST localhost:3000/logout-everywhere
//! curl -c jar -b jar localhost:3000/items/42
//! curl -b jar localhost:3000/recent
//! curl localhost:3000/metrics
//! ```
//!
//! `REDIS_URL` names the server (default `redis://127.0.0.1:6379/`),
//! `ADDR` the address to listen on (default `127.0.0.1:3000`). For a
//! `rediss://` server signed by a private CA, `REDIS_TLS_CA` names the CA's
//! PEM file; for one that asks for a client certificate, `REDIS_TLS_CERT`
//! and `REDIS_TLS_KEY` name it and its key. Sessions' data is packed with
//! a dictionary the store learns from its first 1000 sessions
//! (`SESSION_LEARN_SAMPLES` sets how many; 0 learns none), where that makes
//! it shorter; or with the one `SESSION_DICTIONARY` names, which
//! `sessionpack dictionary train` wrote, under `SESSION_DICTIONARY_ID`
//! (default 1).

mod app;

use sessionpack::CompactConfig;
use sessionpack::session::dictionary::Learning;
use sessionpack::tower::TowerStore;
use sessionpack::users::UserIndexConfig;
use sessionpack::viewed::ViewedConfig;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Errors go to stderr: a failed request's cause, the store's warnings.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .init();
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let metrics = app::install_metrics()?;
    let conn = app::connect(&url, |name| std::env::var_os(name)).await?;
    // Rolling expiry writes only when it moves by a tenth of the lifetime.
    // A user index: "your devices" and "log out everywhere"; and each
    // session's last 25 viewed items.
    let mut config = CompactConfig::default()
        .with_user_index(UserIndexConfig::default())
        .with_viewed(ViewedConfig::default());
    let samples = std::env::var("SESSION_LEARN_SAMPLES").map_or(Ok(1000), |n| n.parse())?;
    if samples > 0 && std::env::var_os("SESSION_DICTIONARY").is_none() {
        config = config.with_learned_dictionary(Learning {
            samples,
            ..Learning::default()
        });
    }
    let mut store = TowerStore::new(conn, config)
        .await?
        .with_write_threshold(0.1);
    if let Some(path) = std::env::var_os("SESSION_DICTIONARY") {
        let id = std::env::var("SESSION_DICTIONARY_ID").map_or(Ok(1), |id| id.parse())?;
        let bytes = std::fs::read(&path)
            .map_err(|e| format!("SESSION_DICTIONARY {}: {e}", path.to_string_lossy()))?;
        let dictionary = sessionpack::session::dictionary::Dictionary::new(id, bytes)?;
        store = store.with_dictionary(&dictionary).await?;
    }
    // The store sweeps its expired sessions itself (every process of the
    // app shares the work through leases), until it is dropped.
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    // The bound address, so that `ADDR=127.0.0.1:0` names a free port.
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(
        listener,
        app::app(store, time::Duration::minutes(30), metrics),
    )
    .await?;
    Ok(())
}
