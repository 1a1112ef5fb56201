//! The actix-session store against a real redis-server: through the
//! `SessionStore` trait, and behind actix-session's middleware in an
//! actix-web app driven request by request with its cookies. The
//! behaviours are those actix-session documents for a store (its own
//! acceptance suite is compiled only into its own tests): state kept
//! between requests, the TTL renewed by changes, a purge (log-out) that
//! no old cookie outlives, a renewal that kills the old key.

mod common;

use std::collections::HashMap;

use actix_session::config::{CookieContentSecurity, PersistentSession, TtlExtensionPolicy};
use actix_session::storage::{LoadError, SessionKey, SessionStore};
use actix_session::{Session, SessionMiddleware};
use actix_web::cookie::time::Duration;
use actix_web::cookie::{Cookie, Key};
use actix_web::{App, HttpResponse, test, web};
use redis::AsyncCommands;
use sessionpack::CompactConfig;
use sessionpack::actix::{ActixStore, IDENTITY_KEY, id_of, session_key};
use sessionpack::identity::Identity;
use sessionpack::session::layout::Layout;
use sessionpack::tower::session_id;
use sessionpack::users::UserIndexConfig;
use sessionpack_testkit::LocalServer;

type Store = ActixStore<redis::aio::ConnectionManager>;

/// A store with no sweeper in the background: some tests count the
/// commands the server ran.
async fn store(server: &LocalServer) -> Store {
    ActixStore::new(common::manager(server).await, CompactConfig::default())
        .await
        .unwrap()
        .without_sweeper()
}

fn state(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn key(text: &str) -> SessionKey {
    SessionKey::try_from(text.to_owned()).unwrap()
}

/// The session's expiry in the store, unix seconds.
async fn stored_expiry(store: &Store, key: &SessionKey) -> Option<u64> {
    let id = session_id(id_of(key.as_ref()).unwrap());
    let found = Layout::load(store.layout(), &id).await.unwrap();
    found.map(|stored| stored.expires_at)
}

#[actix_web::test]
async fn state_round_trips_text_for_text_and_a_login_stays_in_its_bucket() {
    let server = common::server();
    let store = store(&server).await;
    let given = state(&[
        (IDENTITY_KEY, r#""42""#),
        ("actix_identity.logged_in_at", "1763000000"),
        ("actix_identity.last_visited_at", "1763000123"),
        ("csrf_token", r#""Zx3fQ0mB7yV2kT9pL1sR4wE6uI8oA5dG""#),
        ("locale", r#""en-GB""#),
        ("flash", r#"{"level":"success","text":"Saved."}"#),
        // Texts serde_json would write otherwise: kept whole.
        ("spaced", r#"{ "b": 1, "a": [ 2 ] }"#),
        ("plain", "not json at all"),
    ]);
    let k = store
        .save(given.clone(), &Duration::hours(1))
        .await
        .unwrap();
    assert_eq!(k.as_ref().len(), 32);
    assert_eq!(store.load(&k).await.unwrap(), Some(given));

    // A user-id session is one field of one bucket: no key of its own.
    let login = state(&[(IDENTITY_KEY, r#""42""#)]);
    store.save(login, &Duration::hours(1)).await.unwrap();
    let mut raw = common::raw(&server).await;
    let keys: Vec<String> = raw.keys("*").await.unwrap();
    assert!(
        keys.iter().all(|k| k.starts_with("sp:")),
        "no key of a session's own: {keys:?}"
    );
}

#[actix_web::test]
async fn keys_of_no_session_load_nothing_and_are_never_an_error() {
    let server = common::server();
    let store = store(&server).await;
    let made = store
        .save(state(&[("a", "1")]), &Duration::hours(1))
        .await
        .unwrap();
    let mut other = made.as_ref().to_owned();
    // Another id of the right form.
    other.replace_range(0..1, if other.starts_with('0') { "1" } else { "0" });
    for text in [
        "",
        "garbage",
        "../../etc/passwd",
        &made.as_ref().to_uppercase(),
        &format!("{}0", made.as_ref()),
        &"a".repeat(64),
        &other,
    ] {
        assert_eq!(store.load(&key(text)).await.unwrap(), None, "{text:?}");
        store.delete(&key(text)).await.unwrap();
        store
            .update_ttl(&key(text), &Duration::hours(2))
            .await
            .unwrap();
    }
    // None of that touched the session.
    assert!(store.load(&made).await.unwrap().is_some());
}

#[actix_web::test]
async fn an_update_of_a_session_that_is_gone_brings_nothing_back() {
    let server = common::server();
    let store = store(&server).await;
    let login = state(&[(IDENTITY_KEY, r#""7""#)]);
    let k = store
        .save(login.clone(), &Duration::hours(1))
        .await
        .unwrap();
    store.delete(&k).await.unwrap();
    let again = store
        .update(key(k.as_ref()), login.clone(), &Duration::hours(1))
        .await
        .unwrap();
    assert_eq!(again, k, "the same key, whose session stays gone");
    assert_eq!(store.load(&k).await.unwrap(), None);
    let mut raw = common::raw(&server).await;
    let fields: u64 = {
        let keys: Vec<String> = raw.keys("sp:*").await.unwrap();
        let mut n = 0;
        for key in keys {
            if let Ok(len) = raw.hlen::<_, u64>(&key).await {
                n += len;
            }
        }
        n
    };
    assert!(
        fields <= 16,
        "only the growing store's bucket markers: {fields}"
    );

    // A key of no session of this store gets a new one for its state.
    let fresh = store
        .update(key("garbage"), login.clone(), &Duration::hours(1))
        .await
        .unwrap();
    assert_eq!(store.load(&fresh).await.unwrap(), Some(login));
}

#[actix_web::test]
async fn updates_and_ttl_updates_move_the_expiry_and_a_past_ttl_ends_the_session() {
    let server = common::server();
    let store = store(&server).await;
    let k = store
        .save(state(&[("n", "1")]), &Duration::seconds(100))
        .await
        .unwrap();
    let first = stored_expiry(&store, &k).await.unwrap();
    let k = store
        .update(k, state(&[("n", "2")]), &Duration::seconds(5000))
        .await
        .unwrap();
    let second = stored_expiry(&store, &k).await.unwrap();
    assert!(second >= first + 4800, "{first} -> {second}");
    assert_eq!(store.load(&k).await.unwrap(), Some(state(&[("n", "2")])));
    store
        .update_ttl(&k, &Duration::seconds(90_000))
        .await
        .unwrap();
    let third = stored_expiry(&store, &k).await.unwrap();
    assert!(third >= second + 80_000, "{second} -> {third}");
    assert_eq!(store.load(&k).await.unwrap(), Some(state(&[("n", "2")])));
    store.update_ttl(&k, &Duration::seconds(0)).await.unwrap();
    assert_eq!(store.load(&k).await.unwrap(), None);
}

#[actix_web::test]
async fn a_write_threshold_skips_ttl_updates_that_move_little() {
    let server = common::server();
    let store = store(&server).await.with_write_threshold(0.1);
    let k = store
        .save(state(&[("n", "1")]), &Duration::seconds(10_000))
        .await
        .unwrap();
    let mut raw = common::raw(&server).await;
    let before = common::calls(&mut raw, "evalsha").await;
    // Moves by well under a tenth of the lifetime: nothing sent.
    store
        .update_ttl(&k, &Duration::seconds(10_050))
        .await
        .unwrap();
    assert_eq!(common::calls(&mut raw, "evalsha").await, before);
    // Moves by more: a touch.
    store
        .update_ttl(&k, &Duration::seconds(20_000))
        .await
        .unwrap();
    assert!(common::calls(&mut raw, "evalsha").await > before);
}

#[actix_web::test]
async fn a_corrupt_record_is_a_deserialization_error_and_redis_down_another() {
    let server = common::server();
    // Fixed buckets, so the test finds the session's field itself.
    let store = ActixStore::new(common::manager(&server).await, CompactConfig::new(4))
        .await
        .unwrap();
    let k = store
        .save(state(&[("n", "1")]), &Duration::hours(1))
        .await
        .unwrap();
    let id = session_id(id_of(k.as_ref()).unwrap());
    let bucket = store.layout().buckets().bucket_of(&id);
    let bucket_key = store.layout().scheme().bucket_key(bucket);
    let field = store.layout().buckets().field(&id);
    let mut raw = common::raw(&server).await;
    let mut value: Vec<u8> = raw.hget(&bucket_key, &field).await.unwrap();
    // The expiry, then a map that promises an entry it does not hold.
    value.truncate(4);
    value.extend_from_slice(b"\x81\xa1");
    let _: () = raw.hset(&bucket_key, &field, value).await.unwrap();
    let found = store.load(&k).await;
    assert!(
        matches!(found, Err(LoadError::Deserialization(_))),
        "{found:?}"
    );
    server.stop();
    let found = store.load(&k).await;
    assert!(matches!(found, Err(LoadError::Other(_))), "{found:?}");
}

#[actix_web::test]
async fn a_users_sessions_are_listed_and_revoked_everywhere() {
    let server = common::server();
    let config = CompactConfig::default().with_user_index(UserIndexConfig::new(4));
    let store = ActixStore::new(common::manager(&server).await, config)
        .await
        .unwrap();
    let ada = Identity::Name("ada".into());
    let login = state(&[(IDENTITY_KEY, r#""ada""#)]);
    let mut keys = Vec::new();
    for _ in 0..3 {
        keys.push(
            store
                .save(login.clone(), &Duration::hours(1))
                .await
                .unwrap(),
        );
    }
    let other = store
        .save(state(&[(IDENTITY_KEY, r#""bob""#)]), &Duration::hours(1))
        .await
        .unwrap();
    let listed = store.sessions_of(&ada).await.unwrap();
    assert_eq!(listed.len(), 3);
    for s in &listed {
        assert!(
            keys.iter()
                .any(|k| session_key(sessionpack::tower::tower_id(&s.id)) == k.as_ref())
        );
    }
    let revoked = store.revoke_others(&ada, keys[0].as_ref()).await.unwrap();
    assert_eq!(revoked.removed, 2);
    assert!(store.load(&keys[0]).await.unwrap().is_some());
    assert_eq!(store.load(&keys[1]).await.unwrap(), None);
    // An update of a revoked session brings nothing back.
    let k1 = key(keys[1].as_ref());
    store
        .update(k1, login.clone(), &Duration::hours(1))
        .await
        .unwrap();
    assert_eq!(store.load(&keys[1]).await.unwrap(), None);
    assert_eq!(store.sessions_of(&ada).await.unwrap().len(), 1);
    store.revoke_all(&ada).await.unwrap();
    assert_eq!(store.load(&keys[0]).await.unwrap(), None);
    assert!(store.load(&other).await.unwrap().is_some());
}

// Behind actix-session's middleware.

/// The app the middleware tests drive: a counter, a login that renews the
/// session, a log-out that purges it.
fn app(
    store: Store,
    key: Key,
    ttl: Duration,
    security: CookieContentSecurity,
    policy: TtlExtensionPolicy,
) -> App<
    impl actix_web::dev::ServiceFactory<
        actix_web::dev::ServiceRequest,
        Config = (),
        Response = actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    let sessions = SessionMiddleware::builder(store, key)
        .cookie_secure(false)
        .cookie_content_security(security)
        .session_lifecycle(
            PersistentSession::default()
                .session_ttl(ttl)
                .session_ttl_extension_policy(policy),
        )
        .build();
    App::new()
        .wrap(sessions)
        .route(
            "/count",
            web::post().to(|s: Session| async move {
                let n = s.get::<u64>("counter").unwrap().unwrap_or(0) + 1;
                s.insert("counter", n).unwrap();
                HttpResponse::Ok().body(n.to_string())
            }),
        )
        .route(
            "/count",
            web::get().to(|s: Session| async move {
                let n = s.get::<u64>("counter").unwrap().unwrap_or(0);
                HttpResponse::Ok().body(n.to_string())
            }),
        )
        .route(
            "/login",
            web::post().to(|s: Session| async move {
                s.renew();
                s.insert(IDENTITY_KEY, "ada").unwrap();
                HttpResponse::Ok().finish()
            }),
        )
        .route(
            "/logout",
            web::post().to(|s: Session| async move {
                s.purge();
                HttpResponse::Ok().finish()
            }),
        )
}

/// The session cookie a response sets, if any.
fn set_cookie(
    res: &actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>,
) -> Option<Cookie<'static>> {
    res.response()
        .cookies()
        .find(|c| c.name() == "id")
        .map(|c| c.into_owned())
}

async fn body(res: actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>) -> String {
    String::from_utf8(test::read_body(res).await.to_vec()).unwrap()
}

#[actix_web::test]
async fn the_middleware_keeps_state_renews_on_login_and_no_cookie_outlives_a_logout() {
    let server = common::server();
    let store = store(&server).await;
    let app = test::init_service(app(
        store.clone(),
        Key::generate(),
        Duration::hours(1),
        CookieContentSecurity::Private,
        TtlExtensionPolicy::OnStateChanges,
    ))
    .await;
    let post = |path: &str| test::TestRequest::post().uri(path);

    // State kept between requests through the cookie.
    let res = test::call_service(&app, post("/count").to_request()).await;
    let first = set_cookie(&res).expect("a session cookie");
    assert_eq!(body(res).await, "1");
    let res = test::call_service(&app, post("/count").cookie(first.clone()).to_request()).await;
    assert_eq!(body(res).await, "2");
    let res = test::call_service(
        &app,
        test::TestRequest::get()
            .uri("/count")
            .cookie(first.clone())
            .to_request(),
    )
    .await;
    assert_eq!(body(res).await, "2");

    // A login renews the session: a new key, the old one dead.
    let res = test::call_service(&app, post("/login").cookie(first.clone()).to_request()).await;
    let second = set_cookie(&res).expect("a renewed cookie");
    assert_ne!(first.value(), second.value());
    let res = test::call_service(
        &app,
        test::TestRequest::get()
            .uri("/count")
            .cookie(first.clone())
            .to_request(),
    )
    .await;
    assert_eq!(body(res).await, "0", "the old cookie finds no state");
    let res = test::call_service(
        &app,
        test::TestRequest::get()
            .uri("/count")
            .cookie(second.clone())
            .to_request(),
    )
    .await;
    assert_eq!(body(res).await, "2", "the state moved with the renewal");

    // A log-out purges the session: its cookie, sent again, finds nothing.
    let res = test::call_service(&app, post("/logout").cookie(second.clone()).to_request()).await;
    assert!(res.status().is_success());
    let res = test::call_service(
        &app,
        test::TestRequest::get()
            .uri("/count")
            .cookie(second.clone())
            .to_request(),
    )
    .await;
    assert!(res.status().is_success());
    assert_eq!(body(res).await, "0");
    // The store holds no session at all now: only bucket markers.
    let mut raw = common::raw(&server).await;
    let mut fields = 0u64;
    for key in raw.keys::<_, Vec<String>>("sp:*").await.unwrap() {
        if let Ok(n) = raw.hlen::<_, u64>(&key).await {
            fields += n;
        }
    }
    assert!(fields <= 16, "{fields}");

    // A forged cookie gets a fresh session, never an error.
    let res = test::call_service(
        &app,
        test::TestRequest::get()
            .uri("/count")
            .cookie(Cookie::new("id", "forged"))
            .to_request(),
    )
    .await;
    assert!(res.status().is_success());
    assert_eq!(body(res).await, "0");
}

#[actix_web::test]
async fn a_state_change_renews_the_ttl() {
    let server = common::server();
    let store = store(&server).await;
    let app = test::init_service(app(
        store.clone(),
        Key::generate(),
        Duration::seconds(600),
        CookieContentSecurity::Signed,
        TtlExtensionPolicy::OnStateChanges,
    ))
    .await;
    let res = test::call_service(&app, test::TestRequest::post().uri("/count").to_request()).await;
    let cookie = set_cookie(&res).unwrap();
    assert_eq!(cookie.max_age(), Some(Duration::seconds(600)));
    let k = key_in(&cookie);
    let first = stored_expiry(&store, &k).await.unwrap();
    // A change a second or more later moves the expiry with it.
    wait_a_second(&server).await;
    let res = test::call_service(
        &app,
        test::TestRequest::post()
            .uri("/count")
            .cookie(cookie)
            .to_request(),
    )
    .await;
    assert!(
        set_cookie(&res).is_some(),
        "the cookie's max-age renewed too"
    );
    let second = stored_expiry(&store, &k).await.unwrap();
    assert!(second > first, "{first} -> {second}");
}

#[actix_web::test]
async fn configured_to_on_every_request_a_read_renews_the_ttl() {
    let server = common::server();
    let store = store(&server).await;
    let app = test::init_service(app(
        store.clone(),
        Key::generate(),
        Duration::seconds(600),
        CookieContentSecurity::Signed,
        TtlExtensionPolicy::OnEveryRequest,
    ))
    .await;
    let res = test::call_service(&app, test::TestRequest::post().uri("/count").to_request()).await;
    let cookie = set_cookie(&res).unwrap();
    let k = key_in(&cookie);
    let first = stored_expiry(&store, &k).await.unwrap();
    wait_a_second(&server).await;
    // A read changes no state; the store's TTL moves all the same.
    let res = test::call_service(
        &app,
        test::TestRequest::get()
            .uri("/count")
            .cookie(cookie)
            .to_request(),
    )
    .await;
    assert!(
        set_cookie(&res).is_some(),
        "the cookie's max-age renewed too"
    );
    assert_eq!(body(res).await, "1");
    let second = stored_expiry(&store, &k).await.unwrap();
    assert!(second > first, "{first} -> {second}");
}

/// The store's key in a signed session cookie: after the signature's 44
/// characters (base64 of an HMAC-SHA256).
fn key_in(cookie: &Cookie<'_>) -> SessionKey {
    key(&cookie.value()[44..])
}

/// Waits until the server's clock has moved on by a second.
async fn wait_a_second(server: &LocalServer) {
    let mut raw = common::raw(server).await;
    let (start, _): (u64, u64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let (now, _): (u64, u64) = redis::cmd("TIME").query_async(&mut raw).await.unwrap();
        if now > start {
            return;
        }
    }
}

/// The quickstart's store: `connect` opens buckets that grow, a sweeper of
/// its own, and a write threshold that skips an `update_ttl` moving the
/// expiry little.
#[actix_web::test]
async fn connect_opens_the_recommended_store() {
    let server = common::server();
    let store = ActixStore::connect(&server.url()).await.unwrap();
    assert!(store.layout().shape().is_some(), "buckets that grow");
    assert!(store.sweep_stats().is_some(), "a sweeper of its own");
    // The commands are counted below: no sweeps meanwhile.
    let store = store.without_sweeper();
    let k = store
        .save(state(&[("n", "1")]), &Duration::seconds(10_000))
        .await
        .unwrap();
    let mut raw = common::raw(&server).await;
    let before = common::calls(&mut raw, "evalsha").await;
    store
        .update_ttl(&k, &Duration::seconds(10_050))
        .await
        .unwrap();
    assert_eq!(common::calls(&mut raw, "evalsha").await, before);
    let loaded = store.load(&k).await.unwrap().unwrap();
    assert_eq!(loaded, state(&[("n", "1")]));
}
