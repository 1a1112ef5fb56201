//! The switch from the peer crate (tower-sessions-redis-store 0.16) to
//! sessionpack, over HTTP with real clients: users log in on the app as it
//! ran on the peer store; their sessions are copied while they keep
//! making requests; new instances on sessionpack then serve beside the old
//! ones (a rolling deploy), each user's requests going to either; the old
//! instances stop and the takeover closes. Every user stays logged in,
//! and every request's write is counted and found. The same on a Redis
//! Cluster, which reshards under the copy.

#[path = "../src/app.rs"]
mod app;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use reqwest::StatusCode;
use sessionpack::CompactConfig;
use sessionpack::conn::ConnectOptions;
use sessionpack::conn::cluster::{self, Cluster};
use sessionpack::takeover::Source;
use sessionpack::tower::TowerStore;
use sessionpack::users::UserIndexConfig;
use sessionpack::viewed::ViewedConfig;
use sessionpack_cli::migrate::{self, Keyspace, Plan, Report};
use sessionpack_testkit::{LocalCluster, LocalServer};
use tower_sessions_redis_store::RedisStore;
use tower_sessions_redis_store::fred::clients::Client;
use tower_sessions_redis_store::fred::prelude::{
    ClientLike, Config, ConnectionConfig, ReconnectPolicy,
};

const USERS: usize = 12;

/// An app serving on a free loopback port until dropped.
struct Serving {
    base: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(app: axum::Router) -> Serving {
    // The apps' errors (and tower-sessions' own) go to the test's output,
    // so a failed request's cause is printed with the failure.
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    Serving { base, task }
}

/// An old instance: the basic app on the peer store, as the peer's docs
/// set it up.
async fn old_instance(server: &LocalServer) -> Serving {
    let client = Client::new(Config::from_url(&server.url()).unwrap(), None, None, None);
    client.init().await.expect("fred connects");
    serve(app::basic_app(
        RedisStore::new(client),
        time::Duration::hours(1),
    ))
    .await
}

fn config() -> CompactConfig {
    CompactConfig::new(6)
        .with_user_index(UserIndexConfig::new(3))
        .with_viewed(ViewedConfig::default())
}

/// A new instance: the example app on sessionpack, taking over the peer's
/// sessions.
async fn new_instance(
    server: &LocalServer,
) -> (Serving, TowerStore<redis::aio::ConnectionManager>) {
    let store = TowerStore::new(sessionpack::connect(&server.url()).await.unwrap(), config())
        .await
        .unwrap()
        .with_takeover(Source::tower_sessions_redis_store())
        .await
        .unwrap();
    static METRICS: std::sync::OnceLock<metrics_exporter_prometheus::PrometheusHandle> =
        std::sync::OnceLock::new();
    let metrics = METRICS
        .get_or_init(|| app::install_metrics().expect("install the recorder"))
        .clone();
    let serving = serve(app::app(store.clone(), time::Duration::hours(1), metrics)).await;
    (serving, store)
}

/// Users visiting the old app over and over, until stopped.
struct Racing {
    stop: Arc<AtomicBool>,
    requests: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<Vec<User>>,
}

impl Racing {
    fn start(mut users: Vec<User>, base: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicU64::new(0));
        let (stopped, counted, base) = (stop.clone(), requests.clone(), base.to_owned());
        let task = tokio::spawn(async move {
            while !stopped.load(Ordering::Relaxed) {
                for user in &mut users {
                    user.visit(&base).await;
                    counted.fetch_add(1, Ordering::Relaxed);
                }
            }
            users
        });
        Self {
            stop,
            requests,
            task,
        }
    }

    /// The visits made so far.
    fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Stops the visits once the round under way ends; returns the users.
    async fn stop(self) -> Vec<User> {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap()
    }
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

    async fn login(&self, base: &str) {
        let r = self
            .client
            .post(format!("{base}/login"))
            .form(&[("name", "ferris"), ("password", "crab")])
            .send()
            .await
            .unwrap();
        let status = r.status();
        assert_eq!(status, StatusCode::OK, "login: {}", r.text().await.unwrap());
    }

    /// One visit on `base`: the user must be logged in, and the count the
    /// session holds must be one more than the last this user saw.
    async fn visit(&mut self, base: &str) {
        let r = self
            .client
            .get(format!("{base}/visits"))
            .send()
            .await
            .unwrap();
        let status = r.status();
        let body = r.text().await.unwrap();
        assert_eq!(status, StatusCode::OK, "a visit on {base}: {body}");
        let n: u64 = body.parse().unwrap();
        assert_eq!(
            n,
            self.visits + 1,
            "a visit's write was lost on the way to {base}"
        );
        self.visits = n;
    }
}

fn plan(delete_copied: bool) -> Plan {
    Plan {
        source: Source::tower_sessions_redis_store(),
        dry_run: false,
        delete_copied,
        batch: 4,
        restart: false,
        stop_after_batches: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_stay_logged_in_through_the_switch() {
    let server = LocalServer::start().expect("start redis-server");
    let old = old_instance(&server).await;
    let mut users: Vec<User> = (0..USERS).map(|_| User::new()).collect();
    for user in &mut users {
        user.login(&old.base).await;
        user.visit(&old.base).await;
    }

    // 1. The copy, while users keep making requests to the old app.
    let racing = Racing::start(users, &old.base);
    while racing.requests() == 0 {
        tokio::task::yield_now().await;
    }
    let (_, store) = new_instance(&server).await;
    let copy = migrate::run(
        sessionpack::connect(&server.url()).await.unwrap(),
        store,
        &plan(false),
        |_| {},
    )
    .await
    .unwrap();
    let during_copy = racing.requests();
    let mut users = racing.stop().await;
    assert_eq!(copy.get("copied"), USERS as u64, "{copy:?}");
    assert!(during_copy > 0);

    // 2. The rolling deploy: two new instances beside the old one, each
    // user's requests spread over all three.
    let (new_a, _) = new_instance(&server).await;
    let (new_b, _) = new_instance(&server).await;
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
    late.login(&new_a.base).await;
    late.visit(&old.base).await;
    late.visit(&new_b.base).await;

    // 3. The old instances stop; the takeover closes.
    drop(old);
    let (_, store) = new_instance(&server).await;
    let close = migrate::run(
        sessionpack::connect(&server.url()).await.unwrap(),
        store,
        &plan(true),
        |_| {},
    )
    .await
    .unwrap();
    assert!(close.closed, "{close:?}");
    assert_eq!(close.deleted, USERS as u64 + 1, "{close:?}");
    for user in users.iter_mut().chain([&mut late]) {
        user.visit(&new_a.base).await;
        user.visit(&new_b.base).await;
        let me = user
            .client
            .get(format!("{}/me", new_a.base))
            .send()
            .await
            .unwrap();
        assert_eq!(me.text().await.unwrap(), "hello ferris");
    }
    eprintln!(
        "{during_copy} requests raced the copy, {deploy_requests} spread over old and new \
         instances; every visit counted once"
    );
}

/// The old instance on a cluster: the basic app on the peer store over fred's cluster
/// client.
async fn cluster_old_instance(c: &LocalCluster) -> Serving {
    let port = c.primaries()[0].port();
    let config = Config::from_url(&format!("redis-cluster://127.0.0.1:{port}")).unwrap();
    // Reconnecting and retrying, as a deployed app's client does: with
    // fred's defaults (no reconnect policy, three write attempts) a save
    // of this old app once failed under CI's load ("Too many failed write
    // attempts", a 500), a fault of its own client, not of the switch.
    let connection = ConnectionConfig {
        max_command_attempts: 10,
        ..ConnectionConfig::default()
    };
    let retrying = ReconnectPolicy::new_constant(10, 50);
    let client = Client::new(config, None, Some(connection), Some(retrying));
    client.init().await.expect("fred connects to the cluster");
    serve(app::basic_app(
        RedisStore::new(client),
        time::Duration::hours(1),
    ))
    .await
}

async fn cluster_store(c: &LocalCluster) -> TowerStore<Cluster> {
    let conn = cluster::connect(&c.urls()).await.unwrap();
    TowerStore::new(conn, CompactConfig::new(6)).await.unwrap()
}

/// A new instance: the app's routes on sessionpack over the cluster,
/// taking over the peer's sessions.
async fn cluster_new_instance(c: &LocalCluster) -> Serving {
    let store = cluster_store(c)
        .await
        .with_takeover(Source::tower_sessions_redis_store())
        .await
        .unwrap();
    serve(app::basic_app(store, time::Duration::hours(1))).await
}

/// `sessionpack migrate --cluster-url ..` (`--delete-copied` with
/// `close`), `stop_after` batches at most.
async fn cluster_migrate(c: &LocalCluster, close: bool, stop_after: Option<u64>) -> Report {
    let plan = Plan {
        source: Source::tower_sessions_redis_store(),
        dry_run: false,
        delete_copied: close,
        batch: 2,
        restart: false,
        stop_after_batches: stop_after,
    };
    let keyspace = Keyspace::cluster(c.urls(), ConnectOptions::default())
        .await
        .unwrap();
    let conn = cluster::connect(&c.urls()).await.unwrap();
    migrate::run_on(keyspace, conn, cluster_store(c).await, &plan, |_| {})
        .await
        .unwrap()
}

/// The same switch on a 3+3 Redis Cluster, the peer over fred's cluster
/// client, the cluster resharding under the copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_stay_logged_in_through_the_switch_on_a_cluster() {
    let c = LocalCluster::start(3, 1).expect("a local 3+3 cluster");
    let old = cluster_old_instance(&c).await;
    let mut users: Vec<User> = (0..USERS).map(|_| User::new()).collect();
    for user in &mut users {
        user.login(&old.base).await;
        user.visit(&old.base).await;
    }

    // 1. The copy, while users keep making requests to the old app, and
    // the cluster reshards between its batches.
    let racing = Racing::start(users, &old.base);
    let first = cluster_migrate(&c, false, Some(2)).await;
    assert!(!first.complete, "{first:?}");
    tokio::task::block_in_place(|| {
        let primaries = c.primaries();
        c.reshard(primaries[0], primaries[1], 2000).unwrap()
    });
    let copy = cluster_migrate(&c, false, None).await;
    let during_copy = racing.requests();
    let mut users = racing.stop().await;
    assert!(copy.complete && copy.rescans >= 1, "{copy:?}");
    // The report is the whole pass's, the resumed run's included.
    assert_eq!(copy.get("copied"), USERS as u64, "{copy:?}");

    // 2. The rolling deploy: two new instances beside the old one, each
    // user's requests spread over all three.
    let new_a = cluster_new_instance(&c).await;
    let new_b = cluster_new_instance(&c).await;
    let bases = [&old.base, &new_a.base, &new_b.base];
    let mut deploy_requests = 0;
    for round in 0..6 {
        for (i, user) in users.iter_mut().enumerate() {
            user.visit(bases[(i + round) % 3]).await;
            deploy_requests += 1;
        }
    }
    let mut late = User::new();
    late.login(&new_a.base).await;
    late.visit(&old.base).await;
    late.visit(&new_b.base).await;

    // 3. The old instance stops; the takeover closes.
    drop(old);
    let close = cluster_migrate(&c, true, None).await;
    assert!(close.closed, "{close:?}");
    assert_eq!(close.deleted, USERS as u64 + 1, "{close:?}");
    for user in users.iter_mut().chain([&mut late]) {
        user.visit(&new_a.base).await;
        user.visit(&new_b.base).await;
    }
    eprintln!(
        "{during_copy} requests raced the copy and a reshard, {deploy_requests} spread over \
         old and new instances; every visit counted once"
    );
}
