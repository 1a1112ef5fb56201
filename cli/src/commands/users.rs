//! `sessionpack users`: a user's sessions in a compact store that keeps a
//! user index: list them, revoke them, or audit the whole index.

use sessionpack::users::UserIndexConfig;
use sessionpack::viewed::ViewedConfig;
use std::time::Duration;

use clap::{Args, Subcommand};

use super::store_args::StoreArgs;
use sessionpack::clock::unix_now;
use sessionpack::conn::AnyConnection;
use sessionpack::error::{Error, Result};
use sessionpack::identity::{Identity, Name, Uuid};
use sessionpack::session::layout::Expiry;
use sessionpack::session::layout::Layout;
use sessionpack::session::store::DEFAULT_TTL;
use sessionpack::users::UserSession;
use sessionpack::{Compact, CompactConfig, IdWidth, SessionId, Store};

/// Arguments of `sessionpack users`.
#[derive(Debug, Args)]
pub struct UsersArgs {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Subcommand)]
enum Action {
    /// A user's live sessions: id (redacted), sign-in, last use, expiry,
    /// label.
    List(UserArgs),
    /// Revoke every session of a user ("log out everywhere"), or all but
    /// one with --keep.
    Revoke(RevokeArgs),
    /// Check the whole index against every session (reads every bucket).
    Audit(StoreArgs),
}

/// Which user.
#[derive(Debug, Args)]
struct UserArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The user: an integer id, a UUID (8-4-4-4-12 hex digits) or a name.
    user: String,
    /// How to read USER: `auto` (an integer if it is one, else a UUID if
    /// it is one, else a name), `int`, `uuid` or `name`.
    #[arg(long, default_value = "auto")]
    form: String,
    /// The store's session lifetime in seconds, from which "last seen" is
    /// told (an expiry less the lifetime).
    #[arg(long, default_value_t = DEFAULT_TTL.as_secs())]
    ttl_secs: u64,
    /// Print JSON rather than a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct RevokeArgs {
    #[command(flatten)]
    user: UserArgs,
    /// The session to keep (its cookie value).
    #[arg(long, value_name = "ID")]
    keep: Option<String>,
}

/// Reads a user as `form` says.
fn identity(text: &str, form: &str) -> Result<Identity> {
    let bad = |what: &str| Error::Config(format!("{text:?} is not {what}"));
    let int = || text.parse::<u64>().map(Identity::Int);
    let uuid = || text.parse::<Uuid>().ok().map(|u| Identity::Uuid(u.0));
    let name = || {
        Name::new(text)
            .map(|n| Identity::Name(n.as_str().to_owned()))
            .map_err(|e| Error::Config(e.to_string()))
    };
    match form {
        "int" => int().map_err(|_| bad("an integer")),
        "uuid" => uuid().ok_or_else(|| bad("a UUID")),
        "name" => name(),
        "auto" => match (int(), uuid()) {
            (Ok(i), _) => Ok(i),
            (_, Some(u)) => Ok(u),
            _ => name(),
        },
        other => Err(Error::Config(format!(
            "--form {other:?}: auto, int, uuid or name"
        ))),
    }
}

/// Opens the store the metadata records, refusing one without an index.
async fn open(args: &StoreArgs) -> Result<Compact<AnyConnection>> {
    let (conn, meta) = args.open().await?;
    let users = UserIndexConfig::from_meta(&meta).filter(|_| meta.layout == "compact");
    let Some(users) = users else {
        return Err(Error::Config(format!(
            "namespace {:?} holds a store with {meta}: only a compact store with a user \
             index can list or revoke a user's sessions",
            args.namespace
        )));
    };
    let width = IdWidth::from_bits(meta.id_bits).unwrap_or_default();
    let mut config = CompactConfig::new(meta.bucket_bits)
        .with_namespace(args.namespace.clone())
        .with_id_width(width)
        .with_user_index(users);
    config.viewed = ViewedConfig::from_meta(&meta);
    config.expiry = Expiry::from_meta(&meta);
    Compact::new(conn, config).await
}

/// Refuses a revocation while a takeover of another store is open
/// (`TowerStore::with_takeover`): it must also delete the old keys and
/// record the owner revoked, which the app's store does (it knows the old
/// store's keys and how to read an owner from them); this command does not.
async fn refuse_in_takeover(layout: &Compact<AnyConnection>, namespace: &str) -> Result<()> {
    let state: Option<String> = redis::cmd("GET")
        .arg(sessionpack::map_store::state_key(namespace))
        .query_async(&mut layout.connection().clone())
        .await?;
    if state.as_deref() == Some(sessionpack::map_store::OPEN) {
        return Err(Error::Config(format!(
            "a takeover of another store is open in namespace {namespace:?}: revoke from the \
             app (`TowerStore::revoke_all`, which also reaches the old store's keys), or close \
             the takeover first (`sessionpack migrate --delete-copied`)"
        )));
    }
    Ok(())
}

async fn store(args: &UserArgs) -> Result<Store<Compact<AnyConnection>, (), Identity>> {
    let store: Store<_, (), Identity> =
        Store::for_identities(open(&args.store).await?).without_sweeper();
    Ok(store.with_ttl(Duration::from_secs(args.ttl_secs)))
}

pub(super) async fn run(args: UsersArgs) -> Result<()> {
    match args.action {
        Action::List(args) => {
            let user = identity(&args.user, &args.form)?;
            let store = store(&args).await?;
            let sessions = store.sessions_of(&user).await?;
            if args.json {
                println!("{}", json(&sessions));
            } else {
                print!("{}", table(&user, &sessions, unix_now()));
            }
        }
        Action::Revoke(RevokeArgs { user: args, keep }) => {
            let user = identity(&args.user, &args.form)?;
            let store = store(&args).await?;
            refuse_in_takeover(store.layout(), &args.store.namespace).await?;
            let width = store.layout().id_width();
            let revoked = match keep {
                Some(cookie) => {
                    let keep = SessionId::parse_with(&cookie, width)?;
                    store.revoke_others(&user, &keep).await?
                }
                None => store.revoke_all(&user).await?,
            };
            if args.json {
                println!("{}", serde_json::to_string(&revoked).unwrap_or_default());
            } else {
                println!(
                    "user {user}: {} sessions revoked, {} entries without a session \
                     (tombstoned, in case a create was in flight), {} kept",
                    revoked.removed, revoked.absent, revoked.kept
                );
            }
        }
        Action::Audit(args) => {
            let audit = open(&args).await?.audit_users().await?;
            println!(
                "{}",
                serde_json::to_string_pretty(&audit).unwrap_or_default()
            );
            if audit.unindexed + audit.orphans + audit.misplaced > 0 {
                return Err(Error::Config(
                    "the user index disagrees with the sessions (see above)".into(),
                ));
            }
        }
    }
    Ok(())
}

fn json(sessions: &[UserSession]) -> String {
    let rows: Vec<serde_json::Value> = sessions
        .iter()
        .map(|s| {
            serde_json::json!({
                "id": s.id.redacted(),
                "signed_in_at": s.signed_in_at,
                "last_seen": s.last_seen,
                "expires_at": s.expires_at,
                "label": s.label,
            })
        })
        .collect();
    serde_json::to_string_pretty(&rows).unwrap_or_default()
}

/// `3d 4h`, `5m 2s`: how long ago (or, negative, ahead).
fn ago(then: u64, now: u64) -> String {
    let secs = now.saturating_sub(then);
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m {s}s"),
        (0, _, _) => format!("{h}h {m}m"),
        _ => format!("{d}d {h}h"),
    }
}

fn table(user: &Identity, sessions: &[UserSession], now: u64) -> String {
    let mut out = format!("user {user}: {} live sessions\n", sessions.len());
    if sessions.is_empty() {
        return out;
    }
    out += &format!(
        "{:10} {:>14} {:>14} {:>14}  label\n",
        "session", "signed in", "last seen", "expires in"
    );
    for s in sessions {
        out += &format!(
            "{:10} {:>14} {:>14} {:>14}  {}\n",
            s.id.redacted(),
            format!("{} ago", ago(s.signed_in_at, now)),
            s.last_seen
                .map_or("-".to_owned(), |t| format!("{} ago", ago(t, now))),
            ago(now, s.expires_at),
            s.label.as_deref().unwrap_or("")
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_read_as_asked() {
        assert_eq!(identity("42", "auto").unwrap(), Identity::Int(42));
        assert_eq!(
            identity("67e55044-10b1-426f-9247-bb680e5fe0c8", "auto").unwrap(),
            Identity::Uuid(
                "67e55044-10b1-426f-9247-bb680e5fe0c8"
                    .parse::<Uuid>()
                    .unwrap()
                    .0
            )
        );
        assert_eq!(identity("42", "name").unwrap(), Identity::Name("42".into()));
        assert_eq!(
            identity("ada@example.com", "auto").unwrap(),
            Identity::Name("ada@example.com".into())
        );
        assert!(identity("ada", "int").is_err());
        assert!(identity(&"x".repeat(65), "name").is_err());
        assert!(identity("1", "float").is_err());
    }

    #[test]
    fn ages_read_naturally() {
        assert_eq!(ago(100, 105), "5s");
        assert_eq!(ago(0, 3_725), "1h 2m");
        assert_eq!(ago(0, 2 * 86_400 + 7_200), "2d 2h");
    }
}
