//! An actix-web app with login, a protected page, logout, "your devices"
//! and "log out everywhere", its sessions kept by sessionpack through
//! actix-identity and actix-session.
//!
//! ```text
//! cargo run -p actix-login-example
//! curl -c jar -b jar -d 'name=ferris&password=crab' localhost:3000/login
//! curl -b jar localhost:3000/me
//! curl -b jar localhost:3000/devices
//! curl -c jar -b jar -X POST localhost:3000/logout-everywhere
//! ```
//!
//! `REDIS_URL` names the server (default `redis://127.0.0.1:6379/`),
//! `ADDR` the address to listen on (default `127.0.0.1:3000`).

mod app;

use actix_web::cookie::Key;
use sessionpack::CompactConfig;
use sessionpack::actix::ActixStore;
use sessionpack::users::UserIndexConfig;

#[actix_web::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let conn = sessionpack::connect(&url).await?;
    // No bucket count: the buckets grow with the sessions. A user index:
    // "your devices" and "log out everywhere".
    let config = CompactConfig::default().with_user_index(UserIndexConfig::default());
    // The store sweeps its expired sessions itself (every process of the
    // app shares the work through leases), until it is dropped.
    let store = app::store(ActixStore::new(conn, config).await?);
    // A real deployment reads its key from its secrets: a key generated
    // here logs everyone out at each restart.
    let key = Key::generate();
    let server =
        actix_web::HttpServer::new(move || app::app(store.clone(), key.clone())).bind(&addr)?;
    // The bound address, so that `ADDR=127.0.0.1:0` names a free port.
    for bound in server.addrs() {
        println!("listening on http://{bound}");
    }
    server.run().await?;
    Ok(())
}
