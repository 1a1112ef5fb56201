//! `sessionpack acl`: the least-privilege ACL rule of a role, ready for
//! `ACL SETUSER` or an ACL file.

use clap::Args;

use sessionpack::IdWidth;
use sessionpack::acl::{Role, Topology, rule_for};
use sessionpack::error::{Error, Result};
use sessionpack::session::buckets::DEFAULT_NAMESPACE;
use sessionpack::takeover::Source;

/// Arguments of `sessionpack acl`.
#[derive(Debug, Args)]
pub struct AclArgs {
    /// The role the user plays: `store` (the app), `sweeper`, `users`;
    /// repeat for a process that plays several (an app whose store sweeps
    /// in the background, as stores do unless opened `without_sweeper()`:
    /// `--role store --role sweeper`). Add
    /// `server-expiry` for a store whose fields the server expires, and
    /// `field-writes` on Redis 8.0 or Valkey 9.0 and later, where a store
    /// saves a session it read with one `HSETEX` and deletes with one
    /// `HGETDEL` (older servers refuse a rule that names them). During
    /// a switch from another store: `migrate` for `sessionpack migrate`,
    /// and `takeover` added to the app's roles while its store takes the
    /// old one over; both also name the old store's keys (`--from`).
    #[arg(
        long,
        required = true,
        value_parser = ["store", "sweeper", "users", "server-expiry", "field-writes", "migrate", "takeover"]
    )]
    role: Vec<String>,
    /// For `migrate` and `takeover`: the store the sessions come from.
    #[command(flatten)]
    source: super::source_args::SourceArgs,
    /// The store's key namespace.
    #[arg(long, default_value = DEFAULT_NAMESPACE)]
    namespace: String,
    /// The rule for a Redis Cluster (adds the cluster client's commands).
    #[arg(long)]
    cluster: bool,
    /// The user's name in the printed command.
    #[arg(long, default_value = "sessionpack")]
    user: String,
}

pub(super) fn run(args: &AclArgs) -> Result<()> {
    let roles = args
        .role
        .iter()
        .map(|name| {
            Role::ALL
                .into_iter()
                .find(|r| r.name() == name)
                .ok_or_else(|| Error::Config(format!("no role named {name}")))
        })
        .collect::<Result<Vec<_>>>()?;
    if args.namespace.is_empty() || args.namespace.contains(char::is_whitespace) {
        return Err(Error::Config(format!(
            "namespace {:?}: the printed rule needs one without spaces",
            args.namespace
        )));
    }
    let topology = if args.cluster {
        Topology::Cluster
    } else {
        Topology::Server
    };
    let source = args.source.source();
    if roles.contains(&Role::Takeover) && source != Source::tower_sessions_redis_store() {
        return Err(Error::Config(
            "a store takes over only tower-sessions-redis-store's keys during a deploy; other \
             stores are copied by `sessionpack migrate` alone (--role migrate)"
                .into(),
        ));
    }
    // A tower store's ids, which a migration and a takeover fill.
    let old_keys: Vec<String> = if roles.iter().any(|r| r.needs_old_keys()) {
        vec![source.key_glob(IdWidth::Bits128)]
    } else {
        Vec::new()
    };
    println!(
        "ACL SETUSER {} on >CHANGE-THIS-PASSWORD {}",
        args.user,
        rule_for(&roles, &args.namespace, &old_keys, topology)
    );
    Ok(())
}
