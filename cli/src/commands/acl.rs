//! `sessionpack acl`: the least-privilege ACL rule of a role, ready for
//! `ACL SETUSER` or an ACL file.

use clap::Args;

use sessionpack::acl::{Role, Topology, rule};
use sessionpack::error::{Error, Result};
use sessionpack::session::buckets::DEFAULT_NAMESPACE;

/// Arguments of `sessionpack acl`.
#[derive(Debug, Args)]
pub struct AclArgs {
    /// The role the user plays: `store` (the app), `sweeper`, `users`;
    /// repeat for a process that plays several (an app whose store sweeps
    /// in the background, as stores do unless opened `without_sweeper()`:
    /// `--role store --role sweeper`). Add
    /// `server-expiry` for a store whose fields the server expires.
    #[arg(long, required = true, value_parser = ["store", "sweeper", "users", "server-expiry"])]
    role: Vec<String>,
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
    println!(
        "ACL SETUSER {} on >CHANGE-THIS-PASSWORD {}",
        args.user,
        rule(&roles, &args.namespace, topology)
    );
    Ok(())
}
