//! The example actix-web app, driven over HTTP by a real client with a
//! cookie jar, its sessions in a real redis-server through sessionpack's
//! actix-session store.

#[path = "../src/app.rs"]
mod app;

use std::sync::Arc;

use actix_web::cookie::Key;
use reqwest::StatusCode;
use sessionpack::CompactConfig;
use sessionpack::actix::ActixStore;
use sessionpack::identity::Identity;
use sessionpack::users::UserIndexConfig;
use sessionpack_testkit::LocalServer;

/// The app on a free loopback port, its store, and the server under it.
struct Running {
    base: String,
    store: app::Store,
    _server: LocalServer,
    handle: actix_web::dev::ServerHandle,
}

impl Running {
    async fn stop(self) {
        self.handle.stop(true).await;
    }
}

async fn start() -> Running {
    let server = LocalServer::start().expect("start redis-server");
    let config = CompactConfig::default().with_user_index(UserIndexConfig::new(3));
    let conn = sessionpack::connect(&server.url()).await.expect("connect");
    let store = app::store(ActixStore::new(conn, config).await.unwrap());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let key = Key::generate();
    let app_store = store.clone();
    let http = actix_web::HttpServer::new(move || app::app(app_store.clone(), key.clone()))
        .workers(1)
        .listen(listener)
        .unwrap()
        .run();
    let handle = http.handle();
    actix_web::rt::spawn(http);
    Running {
        base,
        store,
        _server: server,
        handle,
    }
}

fn client(agent: &str) -> (reqwest::Client, Arc<reqwest::cookie::Jar>) {
    let jar = Arc::new(reqwest::cookie::Jar::default());
    let client = reqwest::Client::builder()
        .cookie_provider(jar.clone())
        .user_agent(agent)
        .build()
        .unwrap();
    (client, jar)
}

async fn post(
    client: &reqwest::Client,
    url: String,
    form: &[(&str, &str)],
) -> (StatusCode, String) {
    let r = client.post(url).form(form).send().await.unwrap();
    (r.status(), r.text().await.unwrap())
}

async fn get(client: &reqwest::Client, url: String) -> (StatusCode, String) {
    let r = client.get(url).send().await.unwrap();
    (r.status(), r.text().await.unwrap())
}

/// The session cookie the jar holds for `base`.
fn session_cookie(jar: &reqwest::cookie::Jar, base: &str) -> Option<String> {
    use reqwest::cookie::CookieStore;
    let header = jar.cookies(&base.parse().unwrap())?;
    header
        .to_str()
        .unwrap()
        .split("; ")
        .find_map(|c| c.strip_prefix("id=").map(str::to_owned))
}

#[actix_web::test]
async fn login_access_and_logout_over_http() {
    let app = start().await;
    let base = &app.base;
    let (c, jar) = client("laptop");
    assert_eq!(
        get(&c, format!("{base}/me")).await.0,
        StatusCode::UNAUTHORIZED
    );
    let wrong = post(
        &c,
        format!("{base}/login"),
        &[("name", "ferris"), ("password", "x")],
    )
    .await;
    assert_eq!(wrong.0, StatusCode::UNAUTHORIZED);
    let ok = post(
        &c,
        format!("{base}/login"),
        &[("name", "ferris"), ("password", "crab")],
    )
    .await;
    assert_eq!(ok, (StatusCode::OK, "logged in as ferris".into()));
    assert_eq!(
        get(&c, format!("{base}/me")).await,
        (StatusCode::OK, "hello ferris".into())
    );
    let ferris = Identity::Name("ferris".into());
    assert_eq!(app.store.sessions_of(&ferris).await.unwrap().len(), 1);
    let cookie = session_cookie(&jar, base).expect("a session cookie");

    assert_eq!(
        post(&c, format!("{base}/logout"), &[]).await.0,
        StatusCode::OK
    );
    assert_eq!(
        get(&c, format!("{base}/me")).await.0,
        StatusCode::UNAUTHORIZED
    );
    // The session is gone from the store, not only from the jar: its
    // cookie, sent again, logs no one in.
    assert!(app.store.sessions_of(&ferris).await.unwrap().is_empty());
    let (stale, _) = client("attacker");
    let r = stale
        .get(format!("{base}/me"))
        .header("cookie", format!("id={cookie}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    app.stop().await;
}

#[actix_web::test]
async fn login_gives_a_new_session_key_and_the_old_one_is_dead() {
    let app = start().await;
    let base = &app.base;
    let (c, jar) = client("laptop");
    // A session before logging in (a failed attempt leaves none; a page
    // that writes state makes one): here, the first login's.
    post(
        &c,
        format!("{base}/login"),
        &[("name", "ada"), ("password", "lovelace")],
    )
    .await;
    let first = session_cookie(&jar, base).unwrap();
    post(
        &c,
        format!("{base}/login"),
        &[("name", "ada"), ("password", "lovelace")],
    )
    .await;
    let second = session_cookie(&jar, base).unwrap();
    assert_ne!(first, second);
    let (other, _) = client("other");
    let r = other
        .get(format!("{base}/me"))
        .header("cookie", format!("id={first}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "the old key is dead");
    assert_eq!(get(&c, format!("{base}/me")).await.0, StatusCode::OK);
    let ada = Identity::Name("ada".into());
    assert_eq!(app.store.sessions_of(&ada).await.unwrap().len(), 1);
    app.stop().await;
}

#[actix_web::test]
async fn devices_are_listed_and_logged_out_everywhere() {
    let app = start().await;
    let base = &app.base;
    let (laptop, _) = client("laptop");
    let (phone, _) = client("phone");
    for c in [&laptop, &phone] {
        let r = post(
            c,
            format!("{base}/login"),
            &[("name", "ferris"), ("password", "crab")],
        )
        .await;
        assert_eq!(r.0, StatusCode::OK);
    }
    let (other, _) = client("desk");
    let r = post(
        &other,
        format!("{base}/login"),
        &[("name", "ada"), ("password", "lovelace")],
    )
    .await;
    assert_eq!(r.0, StatusCode::OK);

    let (status, listed) = get(&laptop, format!("{base}/devices")).await;
    assert_eq!(status, StatusCode::OK);
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 2, "{listed}");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.ends_with("(this device)"))
            .count(),
        1,
        "{listed}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("laptop #") && l.ends_with("(this device)"))
    );
    assert!(lines.iter().any(|l| l.contains("phone #")));

    let (status, said) = post(&phone, format!("{base}/logout-everywhere"), &[]).await;
    assert_eq!(
        (status, said.as_str()),
        (StatusCode::OK, "logged out of 2 sessions")
    );
    for c in [&laptop, &phone] {
        assert_eq!(
            get(c, format!("{base}/me")).await.0,
            StatusCode::UNAUTHORIZED
        );
    }
    // Another user's session is left alone.
    assert_eq!(get(&other, format!("{base}/me")).await.0, StatusCode::OK);
    let ferris = Identity::Name("ferris".into());
    assert!(app.store.sessions_of(&ferris).await.unwrap().is_empty());
    app.stop().await;
}

#[actix_web::test]
async fn forged_and_garbage_cookies_get_a_fresh_session_never_an_error() {
    let app = start().await;
    let base = &app.base;
    let (c, _) = client("anyone");
    for cookie in ["garbage", "", "%%%", &"A".repeat(4000), "id=id=id"] {
        let r = c
            .get(format!("{base}/me"))
            .header("cookie", format!("id={cookie}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{cookie:?}");
        let r = c
            .post(format!("{base}/login"))
            .header("cookie", format!("id={cookie}"))
            .form(&[("name", "ferris"), ("password", "crab")])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{cookie:?}");
    }
    app.stop().await;
}
