//! The switch from actix-session's own Redis store to sessionpack, over
//! HTTP with real clients: users log in on the app as it ran on
//! `RedisSessionStore`; their sessions are copied while they keep making
//! requests; new instances on sessionpack then serve beside the old ones
//! (a rolling deploy), each user's requests going to either, under the same
//! cookies; "log out everywhere" on a new instance logs the user out on the
//! old ones too; the old instances stop and the takeover closes. Every
//! other user stays logged in, and every request's write is counted and
//! found.

#[path = "../src/app.rs"]
mod app;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use actix_session::storage::RedisSessionStore;
use actix_web::cookie::Key;
use reqwest::StatusCode;
use sessionpack::CompactConfig;
use sessionpack::actix::{ActixStore, actix_identity_owner};
use sessionpack::takeover::Source;
use sessionpack::tower::TowerStore;
use sessionpack::users::UserIndexConfig;
use sessionpack_cli::migrate::{self, Plan, Report};
use sessionpack_testkit::LocalServer;

const USERS: usize = 12;

/// An app serving on a free loopback port until stopped.
struct Serving {
    base: String,
    handle: actix_web::dev::ServerHandle,
}

impl Serving {
    async fn stop(self) {
        self.handle.stop(true).await;
    }
}

fn listener() -> (std::net::TcpListener, String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    (listener, base)
}

/// An old instance: the basic app on actix-session's `RedisSessionStore`,
/// as actix-session's docs set it up.
async fn old_instance(server: &LocalServer, key: &Key) -> Serving {
    let store = RedisSessionStore::new(server.url()).await.unwrap();
    let (listener, base) = listener();
    let key = key.clone();
    let http = actix_web::HttpServer::new(move || app::basic_app(store.clone(), key.clone()))
        .workers(1)
        .listen(listener)
        .unwrap()
        .run();
    let handle = http.handle();
    actix_web::rt::spawn(http);
    Serving { base, handle }
}

fn config() -> CompactConfig {
    CompactConfig::new(6).with_user_index(UserIndexConfig::new(3))
}

/// A new instance: the example app on sessionpack, taking over
/// actix-session's sessions. Same cookie key as the old instances: the
/// cookies stay valid.
async fn new_instance(server: &LocalServer, key: &Key) -> Serving {
    let conn = sessionpack::connect(&server.url()).await.unwrap();
    let store = app::store(
        ActixStore::new(conn, config())
            .await
            .unwrap()
            .with_takeover(Source::actix_session())
            .await
            .unwrap(),
    );
    let (listener, base) = listener();
    let key = key.clone();
    let http = actix_web::HttpServer::new(move || app::app(store.clone(), key.clone()))
        .workers(1)
        .listen(listener)
        .unwrap()
        .run();
    let handle = http.handle();
    actix_web::rt::spawn(http);
    Serving { base, handle }
}

/// `sessionpack migrate --from actix-session --user-index-bits 3`
/// (`--delete-copied` with `close`).
async fn migrate(server: &LocalServer, close: bool) -> Report {
    let conn = sessionpack::connect(&server.url()).await.unwrap();
    let store = TowerStore::new(conn.clone(), config())
        .await
        .unwrap()
        .with_owner(actix_identity_owner, None);
    let plan = Plan {
        source: Source::actix_session(),
        dry_run: false,
        delete_copied: close,
        batch: 4,
        restart: false,
        stop_after_batches: None,
    };
    migrate::run(conn, store, &plan, |_| {}).await.unwrap()
}

/// A user: a client with its own cookie jar, and the visits it counted.
struct User {
    client: reqwest::Client,
    visits: u64,
}

impl User {
    fn new() -> Self {
        let client = reqwest::Client::builder()
            .cookie_provider(Arc::new(reqwest::cookie::Jar::default()))
            .build()
            .unwrap();
        Self { client, visits: 0 }
    }

    async fn login(&self, base: &str, name: &str, password: &str) {
        let r = self
            .client
            .post(format!("{base}/login"))
            .form(&[("name", name), ("password", password)])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }

    async fn get(&self, url: String) -> (StatusCode, String) {
        let r = self.client.get(url).send().await.unwrap();
        (r.status(), r.text().await.unwrap())
    }

    /// One visit on `base`: the user must be logged in, and the count the
    /// session holds must be one more than the last this user saw.
    async fn visit(&mut self, base: &str) {
        let (status, body) = self.get(format!("{base}/visits")).await;
        assert_eq!(status, StatusCode::OK, "logged out on {base}");
        let n: u64 = body.parse().unwrap();
        assert_eq!(
            n,
            self.visits + 1,
            "a visit's write was lost on the way to {base}"
        );
        self.visits = n;
    }
}

#[actix_web::test]
async fn users_stay_logged_in_through_the_switch() {
    let server = LocalServer::start().expect("start redis-server");
    let key = Key::generate();
    let old = old_instance(&server, &key).await;
    let mut users: Vec<User> = (0..USERS).map(|_| User::new()).collect();
    for user in &mut users {
        user.login(&old.base, "ferris", "crab").await;
        user.visit(&old.base).await;
    }
    // Ada signs in on an old instance, and later logs out everywhere from
    // a new one.
    let ada_old = User::new();
    ada_old.login(&old.base, "ada", "lovelace").await;

    // 1. The copy, while users keep making requests to the old app.
    let stop = Arc::new(AtomicBool::new(false));
    let requests = Arc::new(AtomicU64::new(0));
    let racing = {
        let (stop, requests, base) = (stop.clone(), requests.clone(), old.base.clone());
        actix_web::rt::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                for user in &mut users {
                    user.visit(&base).await;
                    requests.fetch_add(1, Ordering::Relaxed);
                }
            }
            users
        })
    };
    while requests.load(Ordering::Relaxed) == 0 {
        actix_web::rt::task::yield_now().await;
    }
    let copy = migrate(&server, false).await;
    stop.store(true, Ordering::Relaxed);
    let mut users = racing.await.unwrap();
    assert_eq!(copy.get("copied"), USERS as u64 + 1, "{copy:?}");
    let during_copy = requests.load(Ordering::Relaxed);
    assert!(during_copy > 0);

    // 2. The rolling deploy: two new instances beside the old one, each
    // user's requests spread over all three.
    let new_a = new_instance(&server, &key).await;
    let new_b = new_instance(&server, &key).await;
    let bases = [&old.base, &new_a.base, &new_b.base];
    let mut deploy_requests = 0;
    for round in 0..6 {
        for (i, user) in users.iter_mut().enumerate() {
            user.visit(bases[(i + round) % 3]).await;
            deploy_requests += 1;
        }
    }
    // A user who logs in on a new instance is served by the old one too.
    let mut late = User::new();
    late.login(&new_a.base, "ferris", "crab").await;
    late.visit(&old.base).await;
    late.visit(&new_b.base).await;

    // "Log out everywhere" on a new instance reaches the session an old
    // instance signed in, on the old instances too.
    let ada_new = User::new();
    ada_new.login(&new_b.base, "ada", "lovelace").await;
    assert_eq!(
        ada_old.get(format!("{}/me", old.base)).await,
        (StatusCode::OK, "hello ada".into())
    );
    let r = ada_new
        .client
        .post(format!("{}/logout-everywhere", new_a.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.text().await.unwrap(), "logged out of 2 sessions");
    for base in bases {
        assert_eq!(
            ada_old.get(format!("{base}/me")).await.0,
            StatusCode::UNAUTHORIZED,
            "ada is still signed in on {base}"
        );
    }

    // 3. The old instances stop; the takeover closes.
    old.stop().await;
    let close = migrate(&server, true).await;
    assert!(close.closed, "{close:?}");
    assert_eq!(close.deleted, USERS as u64 + 1, "{close:?}");
    for user in users.iter_mut().chain([&mut late]) {
        user.visit(&new_a.base).await;
        user.visit(&new_b.base).await;
        assert_eq!(
            user.get(format!("{}/me", new_a.base)).await,
            (StatusCode::OK, "hello ferris".into())
        );
    }
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("?".repeat(64))
        .query_async(&mut sessionpack::connect(&server.url()).await.unwrap())
        .await
        .unwrap();
    assert!(keys.is_empty(), "old keys left: {keys:?}");
    eprintln!(
        "{during_copy} requests raced the copy, {deploy_requests} spread over old and new \
         instances; every visit counted once"
    );
    new_a.stop().await;
    new_b.stop().await;
}
