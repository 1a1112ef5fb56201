//! The example app's routes, users and session set-up: axum-login on
//! sessionpack's tower-sessions store. `main.rs` serves it; the end-to-end
//! tests (`tests/axum_login.rs`) drive the same app over HTTP.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::Form;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum_login::tower_sessions::{Expiry, SessionManagerLayer};
use axum_login::{AuthManagerLayerBuilder, AuthUser, AuthnBackend, UserId, login_required};
use serde::Deserialize;
use sessionpack::tower::TowerStore;

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

/// The app: `/` public, `POST /login`, `GET /me` and `GET /visits` for
/// logged-in users only, `POST /logout`. Sessions end after `idle` without
/// a request.
pub fn app(store: TowerStore<redis::aio::ConnectionManager>, idle: time::Duration) -> Router {
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

async fn login(mut auth: AuthSession, Form(creds): Form<Credentials>) -> impl IntoResponse {
    match auth.authenticate(creds).await {
        Ok(Some(user)) => match auth.login(&user).await {
            Ok(()) => (StatusCode::OK, format!("logged in as {}", user.name)),
            Err(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "session store failed".into(),
            ),
        },
        Ok(None) => (StatusCode::UNAUTHORIZED, "wrong name or password".into()),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "backend failed".into()),
    }
}

async fn logout(mut auth: AuthSession) -> impl IntoResponse {
    match auth.logout().await {
        Ok(_) => (StatusCode::OK, "logged out"),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "session store failed"),
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
    let n: u64 = session.get("visits").await.ok().flatten().unwrap_or(0) + 1;
    match session.insert("visits", n).await {
        Ok(()) => (StatusCode::OK, n.to_string()),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, String::new()),
    }
}
