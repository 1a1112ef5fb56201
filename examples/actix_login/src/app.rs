//! The app's routes, shared by `main` and the tests.

use actix_identity::{Identity, IdentityMiddleware};
use actix_session::config::PersistentSession;
use actix_session::{Session, SessionMiddleware};
use actix_web::body::MessageBody;
use actix_web::cookie::Key;
use actix_web::dev::{ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::{App, HttpMessage, HttpRequest, HttpResponse, web};
use sessionpack::actix::{ActixStore, actix_identity_owner};
use sessionpack::identity::Identity as Owner;

/// The store the app keeps its sessions in.
pub type Store = ActixStore<sessionpack::Connection>;

/// The session key the app labels each session with in the user's list
/// of devices: the store moves it to the session's index entry.
const DEVICE: &str = "device";
/// The label of this session, kept in its state to mark it in the list.
const THIS_DEVICE: &str = "this_device";

/// The users and their passwords (an example's; a real app checks a hash).
const USERS: &[(&str, &str)] = &[("ferris", "crab"), ("ada", "lovelace")];

/// `store` as the app uses it: owners are actix-identity's user ids, and a
/// session's `device` is its label in the user's list.
pub fn store(store: Store) -> Store {
    store.with_owner(actix_identity_owner, Some(DEVICE))
}

/// The app: sessions in `store`, their cookies signed and encrypted with
/// `key`, a session living two weeks from its last change. `POST /login`,
/// `GET /me`, `GET /visits`, `POST /logout`, `GET /devices`, `POST
/// /logout-everywhere`.
pub fn app(
    store: Store,
    key: Key,
) -> App<
    impl ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    let sessions = SessionMiddleware::builder(store.clone(), key)
        // The tests speak plain HTTP; serve the app behind TLS.
        .cookie_secure(false)
        .session_lifecycle(
            PersistentSession::default().session_ttl(actix_web::cookie::time::Duration::days(14)),
        )
        .build();
    App::new()
        .app_data(web::Data::new(store))
        // actix-web runs the middleware registered last first: sessions,
        // then identities on top of them.
        .wrap(IdentityMiddleware::default())
        .wrap(sessions)
        .route("/login", web::post().to(login))
        .route("/me", web::get().to(me))
        .route("/visits", web::get().to(visits))
        .route("/logout", web::post().to(logout))
        .route("/devices", web::get().to(devices))
        .route("/logout-everywhere", web::post().to(logout_everywhere))
}

/// The routes that need nothing of sessionpack (`POST /login`, `GET /me`,
/// `GET /visits`, `POST /logout`) over any actix-session store: the app as
/// it ran on another store before it switched, which the takeover test
/// serves beside [`app`] during a rolling deploy.
#[allow(dead_code)] // Served by the takeover test; `main` serves `app`.
pub fn basic_app<S>(
    store: S,
    key: Key,
) -> App<
    impl ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
>
where
    S: actix_session::storage::SessionStore + 'static,
{
    let sessions = SessionMiddleware::builder(store, key)
        .cookie_secure(false)
        .session_lifecycle(
            PersistentSession::default().session_ttl(actix_web::cookie::time::Duration::days(14)),
        )
        .build();
    App::new()
        .wrap(IdentityMiddleware::default())
        .wrap(sessions)
        .route("/login", web::post().to(login))
        .route("/me", web::get().to(me))
        .route("/visits", web::get().to(visits))
        .route("/logout", web::post().to(logout))
}

#[derive(serde::Deserialize)]
struct Credentials {
    name: String,
    password: String,
}

async fn login(
    req: HttpRequest,
    session: Session,
    form: web::Form<Credentials>,
) -> actix_web::Result<HttpResponse> {
    if !USERS
        .iter()
        .any(|(n, p)| *n == form.name && *p == form.password)
    {
        return Ok(HttpResponse::Unauthorized().body("wrong name or password"));
    }
    // Logging in renews the session: a new key, the old one dead.
    Identity::login(&req.extensions(), form.name.clone())?;
    let agent = req
        .headers()
        .get("user-agent")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("unknown device");
    let label = format!("{agent} #{}", hex::encode(rand::random::<[u8; 4]>()));
    session.insert(DEVICE, &label)?;
    session.insert(THIS_DEVICE, &label)?;
    Ok(HttpResponse::Ok().body(format!("logged in as {}", form.name)))
}

async fn me(user: Option<Identity>) -> actix_web::Result<HttpResponse> {
    Ok(match user {
        Some(user) => HttpResponse::Ok().body(format!("hello {}", user.id()?)),
        None => HttpResponse::Unauthorized().body("log in first"),
    })
}

/// Counts the signed-in user's visits in the session: each request writes
/// it.
async fn visits(user: Option<Identity>, session: Session) -> actix_web::Result<HttpResponse> {
    if user.is_none() {
        return Ok(HttpResponse::Unauthorized().body("log in first"));
    }
    let n = session.get::<u64>("visits")?.unwrap_or(0) + 1;
    session.insert("visits", n)?;
    Ok(HttpResponse::Ok().body(n.to_string()))
}

async fn logout(user: Option<Identity>) -> HttpResponse {
    if let Some(user) = user {
        // The session is purged: deleted from the store, its cookie
        // removed.
        user.logout();
    }
    HttpResponse::Ok().body("logged out")
}

/// The user's sessions, one a line: its sign-in time, its label, and
/// whether it is this one.
async fn devices(
    user: Option<Identity>,
    session: Session,
    store: web::Data<Store>,
) -> actix_web::Result<HttpResponse> {
    let Some(user) = user else {
        return Ok(HttpResponse::Unauthorized().body("log in first"));
    };
    let this = session.get::<String>(THIS_DEVICE)?;
    let listed = store
        .sessions_of(&Owner::Name(user.id()?))
        .await
        .map_err(actix_web::error::ErrorServiceUnavailable)?;
    let mut body = String::new();
    for s in listed {
        let label = s.label.unwrap_or_default();
        let mark = if Some(&label) == this.as_ref() {
            " (this device)"
        } else {
            ""
        };
        body.push_str(&format!("{} {label}{mark}\n", s.signed_in_at));
    }
    Ok(HttpResponse::Ok().body(body))
}

/// Logs the user out of every session, this one too.
async fn logout_everywhere(
    user: Option<Identity>,
    store: web::Data<Store>,
) -> actix_web::Result<HttpResponse> {
    let Some(user) = user else {
        return Ok(HttpResponse::Unauthorized().body("log in first"));
    };
    let revoked = store
        .revoke_all(&Owner::Name(user.id()?))
        .await
        .map_err(actix_web::error::ErrorServiceUnavailable)?;
    user.logout();
    Ok(HttpResponse::Ok().body(format!("logged out of {} sessions", revoked.removed)))
}
