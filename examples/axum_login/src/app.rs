//! The example app's routes, users and session set-up: axum-login on
//! sessionpack's tower-sessions store. `main.rs` serves it; the end-to-end
//! tests (`tests/axum_login.rs`) drive the same app over HTTP.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Extension, Form, Path};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum_login::tower_sessions::{Expiry, SessionManagerLayer};
use axum_login::{AuthManagerLayerBuilder, AuthUser, AuthnBackend, UserId, login_required};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use serde::Deserialize;
use sessionpack::identity::Identity;
use sessionpack::tower::{TowerStore, tower_id};

/// A user of the example. A real app keeps a password hash; the session
/// keeps `auth_hash`, and changing it logs the user out everywhere.
#[derive(Clone)]
pub struct User {
    id: i64,
    name: String,
    password: String,
    auth_hash: [u8; 32],
}

impl std::fmt::Debug for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("User")
            .field("id", &self.id)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl AuthUser for User {
    type Id = i64;

    fn id(&self) -> i64 {
        self.id
    }

    fn session_auth_hash(&self) -> &[u8] {
        &self.auth_hash
    }
}

/// What the login form sends.
#[derive(Clone, Deserialize)]
pub struct Credentials {
    /// The user's name.
    pub name: String,
    /// The user's password.
    pub password: String,
}

/// The users, in memory.
#[derive(Clone)]
pub struct Backend {
    users: Arc<HashMap<i64, User>>,
}

impl Backend {
    /// Two users: `ferris` / `crab` and `corro` / `unsafe`.
    pub fn demo() -> Self {
        let users = [(1_000_042, "ferris", "crab"), (7, "corro", "unsafe")]
            .into_iter()
            .map(|(id, name, password)| {
                let mut auth_hash = [0u8; 32];
                for (i, b) in auth_hash.iter_mut().enumerate() {
                    *b = (id as u8).wrapping_mul(31).wrapping_add(i as u8 * 7);
                }
                let user = User {
                    id,
                    name: name.into(),
                    password: password.into(),
                    auth_hash,
                };
                (id, user)
            })
            .collect();
        Self {
            users: Arc::new(users),
        }
    }
}

/// The backend's errors (it has none; the trait asks for a type).
#[derive(Debug, thiserror::Error)]
#[error("no such user")]
pub struct NoSuchUser;

impl AuthnBackend for Backend {
    type User = User;
    type Credentials = Credentials;
    type Error = NoSuchUser;

    async fn authenticate(&self, creds: Credentials) -> Result<Option<User>, NoSuchUser> {
        Ok(self
            .users
            .values()
            .find(|u| u.name == creds.name && u.password == creds.password)
            .cloned())
    }

    async fn get_user(&self, id: &UserId<Self>) -> Result<Option<User>, NoSuchUser> {
        Ok(self.users.get(id).cloned())
    }
}

type AuthSession = axum_login::AuthSession<Backend>;

type Store = TowerStore<sessionpack::Connection>;

/// The app: `/` public, `POST /login`, `GET /me`, `GET /visits`, `GET
/// /devices` (the user's sessions), `POST /devices/logout-others` and
/// `POST /logout-everywhere` for logged-in users only, `POST /logout`;
/// `GET /items/{n}` (a product page, recorded in the session's recently
/// viewed items) and `GET /recent` (them, newest first) for any session.
/// Sessions end after `idle` without a request. The store needs a user
/// index for the devices routes and viewed items for the item routes.
/// `GET /metrics` serves what `metrics` has recorded as Prometheus text,
/// outside the session layers (a scrape neither reads nor makes a
/// session); a real app serves it on an internal address only.
pub fn app(store: Store, idle: time::Duration, metrics: PrometheusHandle) -> Router {
    let idle_std = std::time::Duration::from_secs(idle.whole_seconds().max(0) as u64);
    let store = store.with_idle_timeout(idle_std);
    let sessions = SessionManagerLayer::new(store.clone())
        .with_secure(false)
        .with_expiry(Expiry::OnInactivity(idle));
    let auth = AuthManagerLayerBuilder::new(Backend::demo(), sessions).build();
    Router::new()
        .route("/me", get(me))
        .route("/visits", get(visits))
        .route("/devices", get(devices))
        .route("/devices/logout-others", post(logout_others))
        .route("/logout-everywhere", post(logout_everywhere))
        .route_layer(login_required!(Backend))
        .route("/", get(|| async { "welcome" }))
        .route("/items/{n}", get(item))
        .route("/recent", get(recent))
        .route("/login", post(login))
        .route("/logout", post(logout))
        .layer(auth)
        .layer(Extension(store))
        .route("/metrics", get(move || scrape(metrics.clone())))
}

/// The routes that need nothing of sessionpack (`/`, `POST /login`, `GET
/// /me`, `GET /visits`, `POST /logout`) over any tower-sessions store: the
/// app as it ran on another store before it switched, which the takeover
/// tests serve beside [`app`] during a rolling deploy.
#[allow(dead_code)] // Served by the takeover tests; `main` serves `app`.
pub fn basic_app<S>(store: S, idle: time::Duration) -> Router
where
    S: axum_login::tower_sessions::SessionStore + Clone,
{
    let sessions = SessionManagerLayer::new(store)
        .with_secure(false)
        .with_expiry(Expiry::OnInactivity(idle));
    let auth = AuthManagerLayerBuilder::new(Backend::demo(), sessions).build();
    Router::new()
        .route("/me", get(me))
        .route("/visits", get(visits))
        .route_layer(login_required!(Backend))
        .route("/", get(|| async { "welcome" }))
        .route("/login", post(login))
        .route("/logout", post(logout))
        .layer(auth)
}

/// Installs the process's Prometheus recorder, with histogram buckets for
/// the store's latencies, and describes sessionpack's metrics to it.
/// Connects to `url`, with the certificates the variables `REDIS_TLS_CA`,
/// `REDIS_TLS_CERT` and `REDIS_TLS_KEY` name (read through `var`): a
/// private CA to trust, and a client certificate with its key. None set
/// trusts the platform's roots, as a managed service needs.
#[allow(dead_code)] // main connects; the tests that include this file run main
pub async fn connect(
    url: &str,
    var: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> sessionpack::Result<sessionpack::Connection> {
    let path = |name: &str| var(name).map(std::path::PathBuf::from);
    let (ca, cert, key) = (
        path("REDIS_TLS_CA"),
        path("REDIS_TLS_CERT"),
        path("REDIS_TLS_KEY"),
    );
    let mut options = sessionpack::conn::ConnectOptions::default();
    if ca.is_some() || cert.is_some() || key.is_some() {
        options = options.with_tls(sessionpack::conn::TlsConfig::from_files(
            ca.as_deref(),
            cert.as_deref(),
            key.as_deref(),
        )?);
    }
    sessionpack::connect_with(url, &options).await
}

pub fn install_metrics() -> Result<PrometheusHandle, BuildError> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Prefix("sessionpack_".into()),
            sessionpack::metrics::CALL_SECONDS_BUCKETS,
        )?
        .install_recorder()?;
    sessionpack::metrics::describe();
    Ok(handle)
}

async fn scrape(metrics: PrometheusHandle) -> impl IntoResponse {
    metrics.run_upkeep();
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        metrics.render(),
    )
}

async fn login(
    mut auth: AuthSession,
    headers: HeaderMap,
    Form(creds): Form<Credentials>,
) -> impl IntoResponse {
    match auth.authenticate(creds).await {
        Ok(Some(user)) => match auth.login(&user).await {
            Ok(()) => {
                // The device, for the user's list of sessions.
                let device = headers
                    .get(header::USER_AGENT)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("unknown device");
                if let Err(e) = auth.session.insert("device", device).await {
                    return failed("recording the device", e);
                }
                (StatusCode::OK, format!("logged in as {}", user.name))
            }
            Err(e) => failed("logging in", e),
        },
        Ok(None) => (StatusCode::UNAUTHORIZED, "wrong name or password".into()),
        Err(e) => failed("authenticating", e),
    }
}

async fn logout(mut auth: AuthSession) -> impl IntoResponse {
    match auth.logout().await {
        Ok(_) => (StatusCode::OK, "logged out".into()),
        Err(e) => failed("logging out", e),
    }
}

async fn me(auth: AuthSession) -> impl IntoResponse {
    match auth.user {
        Some(user) => (StatusCode::OK, format!("hello {}", user.name)),
        None => (StatusCode::UNAUTHORIZED, String::new()),
    }
}

/// Counts the signed-in user's requests in the session: a write on every
/// request besides axum-login's own data.
async fn visits(auth: AuthSession) -> impl IntoResponse {
    let session = auth.session;
    let n = match session.get::<u64>("visits").await {
        Ok(n) => n.unwrap_or(0) + 1,
        Err(e) => return failed("reading the session", e),
    };
    match session.insert("visits", n).await {
        Ok(()) => (StatusCode::OK, n.to_string()),
        Err(e) => failed("counting the visit", e),
    }
}

/// A 500 for a step that failed, its cause logged for the operator (the
/// client learns only which step).
fn failed(step: &str, error: impl std::fmt::Display) -> (StatusCode, String) {
    tracing::error!(%error, "{step} failed");
    (StatusCode::INTERNAL_SERVER_ERROR, format!("{step} failed"))
}

fn owner(user: &User) -> Identity {
    Identity::Int(user.id as u64)
}

/// The signed-in user's sessions, one a line: `current` or `other`, the
/// id's first hex digits, the sign-in time and the device.
async fn devices(auth: AuthSession, Extension(store): Extension<Store>) -> impl IntoResponse {
    let Some(user) = auth.user else {
        return (StatusCode::UNAUTHORIZED, String::new());
    };
    let current = auth.session.id().map(|id| id.0);
    match store.sessions_of(&owner(&user)).await {
        Ok(sessions) => {
            let lines: Vec<String> = sessions
                .iter()
                .map(|s| {
                    let which = if Some(tower_id(&s.id)) == current {
                        "current"
                    } else {
                        "other"
                    };
                    format!(
                        "{which} {} signed in at {} on {}",
                        s.id.redacted(),
                        s.signed_in_at,
                        s.label.as_deref().unwrap_or("an unknown device")
                    )
                })
                .collect();
            (StatusCode::OK, lines.join("\n"))
        }
        Err(e) => failed("listing the sessions", e),
    }
}

/// Logs the user out of every other session (after a password change).
async fn logout_others(auth: AuthSession, Extension(store): Extension<Store>) -> impl IntoResponse {
    let (Some(user), Some(current)) = (auth.user, auth.session.id()) else {
        return (StatusCode::UNAUTHORIZED, String::new());
    };
    match store.revoke_others(&owner(&user), current.0).await {
        Ok(r) => (
            StatusCode::OK,
            format!("logged out {} other sessions", r.removed),
        ),
        Err(e) => failed("logging out the other sessions", e),
    }
}

/// Logs the user out everywhere, this session included.
async fn logout_everywhere(
    mut auth: AuthSession,
    Extension(store): Extension<Store>,
) -> impl IntoResponse {
    let Some(user) = auth.user.clone() else {
        return (StatusCode::UNAUTHORIZED, String::new());
    };
    match store.revoke_all(&owner(&user)).await {
        Ok(r) => {
            // The cookie goes too; the session is already gone.
            let _ = auth.logout().await;
            (StatusCode::OK, format!("logged out {} sessions", r.removed))
        }
        Err(e) => failed("logging out everywhere", e),
    }
}

/// A product page: recorded in the session's recently viewed items. A
/// visitor without a session gets one (tower-sessions saves it after this
/// response), so the first page is recorded from the second request on.
async fn item(
    auth: AuthSession,
    Extension(store): Extension<Store>,
    Path(n): Path<u64>,
) -> impl IntoResponse {
    let session = auth.session;
    let Some(id) = session.id() else {
        return match session.insert("browsing", true).await {
            Ok(()) => (StatusCode::OK, format!("item {n}")),
            Err(e) => failed("starting a session", e),
        };
    };
    match store.view(id.0, &n).await {
        Ok(_) => (StatusCode::OK, format!("item {n}")),
        Err(e) => failed("recording the item", e),
    }
}

/// The session's recently viewed items, newest first, comma-separated.
async fn recent(auth: AuthSession, Extension(store): Extension<Store>) -> impl IntoResponse {
    let Some(id) = auth.session.id() else {
        return (StatusCode::OK, String::new());
    };
    match store.viewed::<u64>(id.0).await {
        Ok(items) => {
            let items: Vec<String> = items
                .unwrap_or_default()
                .iter()
                .map(u64::to_string)
                .collect();
            (StatusCode::OK, items.join(","))
        }
        Err(e) => failed("reading the viewed items", e),
    }
}
