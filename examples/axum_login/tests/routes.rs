//! The example axum app, driven over HTTP by a real
//! client with a cookie jar, its sessions in a real redis-server through
//! sessionpack's tower-sessions store.

#[path = "../src/app.rs"]
mod app;

use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use reqwest::StatusCode;
use sessionpack::CompactConfig;
use sessionpack::tower::TowerStore;
use sessionpack::users::UserIndexConfig;
use sessionpack::viewed::ViewedConfig;
use sessionpack_testkit::LocalServer;

/// A plain connection for inspecting what the store wrote.
async fn raw(server: &LocalServer) -> redis::aio::MultiplexedConnection {
    server
        .client()
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// The app on a free loopback port, its store, and the server under it.
struct Running {
    base: String,
    store: TowerStore<redis::aio::ConnectionManager>,
    server: LocalServer,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn start(idle: time::Duration) -> Running {
    let server = LocalServer::start().expect("start redis-server");
    let config = CompactConfig::new(6)
        .with_user_index(UserIndexConfig::new(3))
        .with_viewed(ViewedConfig::default());
    let store = TowerStore::new(
        sessionpack::connect(&server.url()).await.expect("connect"),
        config,
    )
    .await
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = app::app(store.clone(), idle, metrics());
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    Running {
        base,
        store,
        server,
        task,
    }
}

/// The recorder the tests' apps share: one per process, as in `main`.
fn metrics() -> metrics_exporter_prometheus::PrometheusHandle {
    static HANDLE: std::sync::OnceLock<metrics_exporter_prometheus::PrometheusHandle> =
        std::sync::OnceLock::new();
    HANDLE
        .get_or_init(|| app::install_metrics().expect("install the recorder"))
        .clone()
}

fn client() -> (reqwest::Client, Arc<reqwest::cookie::Jar>) {
    let jar = Arc::new(reqwest::cookie::Jar::default());
    let client = reqwest::Client::builder()
        .cookie_provider(jar.clone())
        .build()
        .unwrap();
    (client, jar)
}

fn session_cookie(jar: &reqwest::cookie::Jar, base: &str) -> Option<String> {
    use reqwest::cookie::CookieStore;
    let header = jar.cookies(&base.parse().unwrap())?;
    header
        .to_str()
        .unwrap()
        .split("; ")
        .find_map(|c| c.strip_prefix("id=").map(str::to_owned))
}

async fn login(client: &reqwest::Client, base: &str, name: &str, password: &str) -> StatusCode {
    client
        .post(format!("{base}/login"))
        .form(&[("name", name), ("password", password)])
        .send()
        .await
        .unwrap()
        .status()
}

async fn get(client: &reqwest::Client, url: String) -> (StatusCode, String) {
    let r = client.get(url).send().await.unwrap();
    (r.status(), r.text().await.unwrap())
}

/// Sessions held in the store's buckets, read from Redis directly: fields
/// of a session's length (a tombstone left for the user index is a byte
/// longer).
async fn sessions_in_redis(server: &LocalServer) -> u64 {
    let mut raw = raw(server).await;
    let keys: Vec<String> = raw.keys("sp:{*}:*").await.unwrap();
    let field_len = sessionpack::session::buckets::Buckets::new("sp", 6)
        .unwrap()
        .with_id_width(sessionpack::IdWidth::Bits128)
        .field_len();
    let mut n = 0;
    for key in keys.iter().filter(|k| {
        !k.ends_with(":i") && !k.ends_with(":u") && !k.contains(":o:") && !k.contains(":v")
    }) {
        let fields: Vec<Vec<u8>> = raw.hkeys(key).await.unwrap();
        n += fields.iter().filter(|f| f.len() == field_len).count() as u64;
    }
    n
}

#[tokio::test]
async fn login_access_and_logout_over_http() {
    let app = start(time::Duration::minutes(30)).await;
    let (client, jar) = client();
    let base = &app.base;

    assert_eq!(get(&client, format!("{base}/")).await.0, StatusCode::OK);
    assert_eq!(
        get(&client, format!("{base}/me")).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        login(&client, base, "ferris", "wrong").await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        sessions_in_redis(&app.server).await,
        0,
        "no session for a failed login"
    );

    assert_eq!(login(&client, base, "ferris", "crab").await, StatusCode::OK);
    let cookie = session_cookie(&jar, base).expect("a session cookie");
    assert_eq!(sessions_in_redis(&app.server).await, 1);
    assert_eq!(
        get(&client, format!("{base}/me")).await,
        (StatusCode::OK, "hello ferris".into())
    );
    for n in 1..=3 {
        assert_eq!(
            get(&client, format!("{base}/visits")).await,
            (StatusCode::OK, n.to_string())
        );
    }
    // The record is in its bucket (the compact encoding keeps it inline),
    // under the cookie's id.
    let id: axum_login::tower_sessions::session::Id = cookie.parse().unwrap();
    let (data, _) = app.store.load_data(id.0).await.unwrap().unwrap();
    assert_eq!(data["axum-login.data"]["user_id"], 1_000_042);
    assert_eq!(data["visits"], 3);
    let mut raw = raw(&app.server).await;
    let out_of_line: Vec<String> = raw.keys("sp:*:o:*").await.unwrap();
    assert!(out_of_line.is_empty(), "{out_of_line:?}");

    assert_eq!(
        client
            .post(format!("{base}/logout"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        get(&client, format!("{base}/me")).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        sessions_in_redis(&app.server).await,
        0,
        "logout deletes the session"
    );
    assert!(app.store.load_data(id.0).await.unwrap().is_none());
}

#[tokio::test]
async fn login_gives_a_new_session_id_and_the_old_one_is_dead() {
    let app = start(time::Duration::minutes(30)).await;
    let base = &app.base;
    // A visitor with a session before logging in (a fixation attempt would
    // plant this id).
    let (client, jar) = client();
    assert_eq!(
        login(&client, base, "corro", "unsafe").await,
        StatusCode::OK
    );
    let first = session_cookie(&jar, base).unwrap();
    assert_eq!(
        client
            .post(format!("{base}/logout"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    assert_eq!(login(&client, base, "ferris", "crab").await, StatusCode::OK);
    let second = session_cookie(&jar, base).unwrap();
    assert_ne!(first, second);

    // Replaying the logged-out cookie gets nothing.
    let replay = reqwest::Client::new();
    let r = replay
        .get(format!("{base}/me"))
        .header("cookie", format!("id={first}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // The live cookie works from another client too.
    let r = replay
        .get(format!("{base}/me"))
        .header("cookie", format!("id={second}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(sessions_in_redis(&app.server).await, 1);
}

#[tokio::test]
async fn forged_and_malformed_cookies_get_no_session_and_no_error() {
    let app = start(time::Duration::minutes(30)).await;
    let base = &app.base;
    let (client, _) = client();
    assert_eq!(login(&client, base, "ferris", "crab").await, StatusCode::OK);
    let before = sessions_in_redis(&app.server).await;
    let forged = axum_login::tower_sessions::session::Id::default().to_string();
    let long = "A".repeat(10_000);
    let hostile = [
        forged.as_str(),
        "",
        "not-base64!!",
        "AAAA",
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "%00%ff",
        long.as_str(),
        "sp:{0}:0",
    ];
    let bare = reqwest::Client::new();
    for cookie in hostile {
        let r = bare
            .get(format!("{base}/me"))
            .header("cookie", format!("id={cookie}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "cookie {cookie:?}");
        let r = bare
            .post(format!("{base}/login"))
            .header("cookie", format!("id={cookie}"))
            .form(&[("name", "nobody"), ("password", "x")])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "cookie {cookie:?}");
    }
    assert_eq!(
        sessions_in_redis(&app.server).await,
        before,
        "nothing created"
    );
    assert_eq!(get(&client, format!("{base}/me")).await.0, StatusCode::OK);
}

#[tokio::test]
async fn an_idle_session_expires_and_a_sweep_removes_it() {
    let app = start(time::Duration::seconds(2)).await;
    let base = &app.base;
    let (client, _) = client();
    assert_eq!(login(&client, base, "ferris", "crab").await, StatusCode::OK);
    assert_eq!(get(&client, format!("{base}/me")).await.0, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(
        get(&client, format!("{base}/me")).await.0,
        StatusCode::UNAUTHORIZED
    );
    // Expired but not yet swept: still in its bucket until the sweeper runs.
    use axum_login::tower_sessions::ExpiredDeletion;
    app.store.delete_expired().await.unwrap();
    assert_eq!(sessions_in_redis(&app.server).await, 0);
}

/// Viewed-item lists held in Redis: fields of the viewed chunk keys.
async fn lists_in_redis(server: &LocalServer) -> u64 {
    let mut raw = raw(server).await;
    let keys: Vec<String> = raw.keys("sp:{*}:*:v*").await.unwrap();
    let mut n = 0;
    for key in keys {
        let len: u64 = raw.hlen(&key).await.unwrap();
        n += len;
    }
    n
}

/// Recently viewed items over HTTP: product pages listed newest first (a
/// repeat moves to the front); logging in starts a new list (axum-login
/// cycles the session id) and removes the old one with its session;
/// logging out removes the list with the session.
#[tokio::test]
async fn product_pages_are_recently_viewed_and_go_with_the_session() {
    let run = start(time::Duration::minutes(30)).await;
    let base = &run.base;
    let (client, _) = client();
    // The first page makes the session; the rest are recorded.
    for n in [1, 2, 3, 2] {
        assert_eq!(
            get(&client, format!("{base}/items/{n}")).await.0,
            StatusCode::OK
        );
    }
    assert_eq!(get(&client, format!("{base}/recent")).await.1, "2,3");
    assert_eq!(lists_in_redis(&run.server).await, 1);
    assert_eq!(login(&client, base, "ferris", "crab").await, StatusCode::OK);
    assert_eq!(get(&client, format!("{base}/recent")).await.1, "");
    assert_eq!(lists_in_redis(&run.server).await, 0, "the old id's list");
    for n in [5, 6] {
        get(&client, format!("{base}/items/{n}")).await;
    }
    assert_eq!(get(&client, format!("{base}/recent")).await.1, "6,5");
    let r = client.post(format!("{base}/logout")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        lists_in_redis(&run.server).await,
        0,
        "gone with the session"
    );
    assert_eq!(sessions_in_redis(&run.server).await, 0);
}

/// "Your devices" and "log out everywhere": two browsers log in as one
/// user, each listed with its device and the one asking marked current;
/// logging out the others ends the other browser's session only; logging
/// out everywhere ends both; another user's session is never touched.
#[tokio::test]
async fn devices_are_listed_and_logged_out_elsewhere_or_everywhere() {
    let run = start(time::Duration::minutes(30)).await;
    let base = &run.base;
    let browser = |agent: &str| {
        let jar = Arc::new(reqwest::cookie::Jar::default());
        reqwest::Client::builder()
            .cookie_provider(jar)
            .user_agent(agent)
            .build()
            .unwrap()
    };
    let (laptop, phone, other) = (browser("laptop"), browser("phone"), browser("tablet"));
    for c in [&laptop, &phone] {
        assert_eq!(login(c, base, "ferris", "crab").await, StatusCode::OK);
    }
    assert_eq!(login(&other, base, "corro", "unsafe").await, StatusCode::OK);
    let (status, text) = get(&laptop, format!("{base}/devices")).await;
    assert_eq!(status, StatusCode::OK);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("current") && l.ends_with("on laptop")),
        "{text}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("other") && l.ends_with("on phone")),
        "{text}"
    );

    let r = laptop
        .post(format!("{base}/devices/logout-others"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "logged out 1 other sessions");
    assert_eq!(
        get(&phone, format!("{base}/me")).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(get(&laptop, format!("{base}/me")).await.0, StatusCode::OK);
    let (_, text) = get(&laptop, format!("{base}/devices")).await;
    assert_eq!(text.lines().count(), 1, "{text}");

    assert_eq!(login(&phone, base, "ferris", "crab").await, StatusCode::OK);
    let r = phone
        .post(format!("{base}/logout-everywhere"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "logged out 2 sessions");
    for c in [&laptop, &phone] {
        assert_eq!(
            get(c, format!("{base}/me")).await.0,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(get(&other, format!("{base}/me")).await.0, StatusCode::OK);
    let audit = run.store.layout().audit_users().await.unwrap();
    assert_eq!(
        (audit.sessions, audit.unindexed, audit.misplaced),
        (1, 0, 0),
        "{audit:?}"
    );
}

/// The value of the sample `name{labels}` in Prometheus text (0 if absent).
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .find(|(series, _)| {
            let (n, rest) = series.split_once('{').unwrap_or((series, "}"));
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
                && rest.matches('=').count() == labels.len()
        })
        .map_or(0.0, |(_, value)| value.parse().unwrap())
}

async fn scrape(client: &reqwest::Client, base: &str) -> String {
    let r = client.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(
        r.headers().get("set-cookie").is_none(),
        "a scrape makes no session"
    );
    r.text().await.unwrap()
}

/// Driving the app moves the store's metrics, served as Prometheus text.
/// Tests in this binary share the recorder, so counts are compared as
/// at-least deltas.
#[tokio::test]
async fn metrics_are_served_as_prometheus_text() {
    let app = start(time::Duration::minutes(30)).await;
    let (client, _jar) = client();
    let base = &app.base;
    let calls = |text: &str, op, outcome| {
        sample(
            text,
            "sessionpack_calls_total",
            &[("op", op), ("outcome", outcome)],
        )
    };
    let before = scrape(&client, base).await;

    assert_eq!(login(&client, base, "ferris", "crab").await, StatusCode::OK);
    assert_eq!(get(&client, format!("{base}/me")).await.0, StatusCode::OK);
    let (status, _) = get(&client, format!("{base}/devices")).await;
    assert_eq!(status, StatusCode::OK);
    let logout = client.post(format!("{base}/logout")).send().await.unwrap();
    assert!(logout.status().is_success() || logout.status().is_redirection());
    app.store.sweep().await.unwrap();

    let after = scrape(&client, base).await;
    for (op, outcome, at_least) in [
        ("create", "ok", 1.0),
        ("load", "ok", 1.0),
        ("sessions_of", "ok", 1.0),
        ("destroy", "ok", 1.0),
    ] {
        let moved = calls(&after, op, outcome) - calls(&before, op, outcome);
        assert!(moved >= at_least, "{op} {outcome}: {moved}\n{after}");
    }
    let loads = |text: &str| {
        sample(
            text,
            "sessionpack_call_duration_seconds_count",
            &[("op", "load")],
        )
    };
    assert!(loads(&after) > loads(&before), "{after}");
    let top = sample(
        &after,
        "sessionpack_call_duration_seconds_bucket",
        &[("op", "load"), ("le", "+Inf")],
    );
    assert_eq!(top, loads(&after), "every load falls in a bucket");
    let passes = |text: &str| sample(text, "sessionpack_sweep_passes_total", &[("outcome", "ok")]);
    assert!(passes(&after) > passes(&before), "{after}");
    let inline = sample(
        &after,
        "sessionpack_records_written_total",
        &[("layout", "compact"), ("placement", "inline")],
    );
    assert!(inline >= 1.0, "{after}");
    // Units and help from `describe`.
    assert!(
        after.contains("# TYPE sessionpack_calls_total counter"),
        "{after}"
    );
    assert!(
        after.contains("# HELP sessionpack_calls_total Store calls by operation and outcome"),
        "{after}"
    );
}
