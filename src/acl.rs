//! Least-privilege ACL rules for what reaches a store's Redis: the app's
//! store, the sweeper, and the `sessionpack users` command.
//!
//! Each rule names its commands one by one (no category, so a command a
//! later server adds to a category is not let in by it) and only the
//! namespace's keys, `~<namespace>:*`, with no pub/sub channels. Commands
//! that scripts run count too: the server checks each `redis.call`
//! against the caller's rule.
//!
//! ```
//! use sessionpack::acl::{Role, Topology, rule};
//!
//! let text = rule(&[Role::Sweeper], "sp", Topology::Server);
//! assert!(text.starts_with("resetchannels ~sp:* -@all +ping"));
//! // ACL SETUSER sweeper on >secret resetchannels ~sp:* -@all +ping ...
//! ```
//!
//! `CONFIG GET` is in every rule: the store reads the server's listpack
//! limits with it, and the eviction policy, which it must check before it
//! promises that revoking a user reaches every session (an `allkeys-*`
//! policy may evict the user index). It lets the user read every setting,
//! which is why it is granted as `config|get` only. A server that refuses
//! it (some managed services do) leaves the store on Redis 7's default
//! limits, with a warning, and the eviction check to the operator.

/// Who connects, and so which commands it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Role {
    /// The app: sessions, the user index ("log out everywhere") and
    /// viewed items through a compact store.
    Store,
    /// The sweeper, in the app or as `sessionpack sweep`: reclaims expired
    /// sessions and enforces the cap, leasing segments of the namespace.
    Sweeper,
    /// `sessionpack users`: lists, revokes and audits users' sessions.
    Users,
    /// What a store whose fields the server expires
    /// ([`crate::session::layout::Expiry::Server`]) adds to each of the
    /// others: `HEXPIREAT`, and `OBJECT ENCODING` for the check opening
    /// the store makes. Apart because servers before Redis 7.4 refuse a
    /// rule that names `HEXPIREAT`.
    ServerExpiry,
    /// What a store adds on a server that has `HSETEX` (Redis 8.0 and
    /// Valkey 9.0 and later), where it saves a session it read with one
    /// `HSETEX FXX`, creates one with `HSETEX FNX` and deletes one with
    /// `HGETDEL`; without it, those go by scripts. Apart because older
    /// servers refuse a rule that names `HSETEX` or `HGETDEL`.
    FieldWrites,
    /// `sessionpack migrate`: it opens the store as the app does and copies
    /// the old store's keys in: `SCAN`, a script reading each key
    /// (`TYPE`, `GET`, `PEXPIRETIME`), the copies, and with
    /// `--delete-copied` a script deleting each key while it holds what
    /// was copied (`DEL`, `INCR`), then the takeover's marks (`UNLINK`);
    /// `INFO` and `DBSIZE` for its report. Its rule also names the old
    /// store's keys ([`rule_for`]).
    Migrate,
    /// What a store taking over another store's sessions during a deploy
    /// ([`crate::map_store::MapStore::with_takeover`]) adds to
    /// [`Role::Store`]: it reads the old keys (`TYPE`, `GET`,
    /// `PEXPIRETIME` in a script) and writes and deletes them (`SET`,
    /// `DEL`). Its rule also names the old store's keys ([`rule_for`]).
    Takeover,
}

impl Role {
    /// Every role.
    pub const ALL: [Self; 7] = [
        Self::Store,
        Self::Sweeper,
        Self::Users,
        Self::ServerExpiry,
        Self::FieldWrites,
        Self::Migrate,
        Self::Takeover,
    ];

    /// Its name in the docs and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Store => "store",
            Self::Sweeper => "sweeper",
            Self::Users => "users",
            Self::ServerExpiry => "server-expiry",
            Self::FieldWrites => "field-writes",
            Self::Migrate => "migrate",
            Self::Takeover => "takeover",
        }
    }

    /// Other roles this one plays too: `sessionpack migrate` opens the
    /// store as the app does.
    pub fn implies(self) -> &'static [Role] {
        match self {
            Self::Migrate => &[Self::Store],
            _ => &[],
        }
    }

    /// The commands it sends, lower case (`config|get` is a subcommand),
    /// on one server, beside those of the roles it [`Role::implies`].
    pub fn commands(self) -> &'static [&'static str] {
        match self {
            Self::Store => STORE,
            Self::Sweeper => SWEEPER,
            Self::Users => USERS,
            Self::ServerExpiry => SERVER_EXPIRY,
            Self::FieldWrites => FIELD_WRITES,
            Self::Migrate => MIGRATE,
            Self::Takeover => TAKEOVER,
        }
    }

    /// Whether the role touches another store's keys, which its rule must
    /// name ([`rule_for`]).
    pub fn needs_old_keys(self) -> bool {
        matches!(self, Self::Migrate | Self::Takeover)
    }
}

/// Where the store's Redis is: a cluster client also asks the nodes for
/// the slot map and follows `ASK` redirections.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Topology {
    /// One server (with or without replicas).
    Server,
    /// A Redis Cluster.
    Cluster,
}

/// Connecting and running scripts: every role. (`CLIENT SETINFO`, which
/// the redis client sends on connecting, is left out: Redis 7.0 does not
/// know it, and the client ignores its refusal.)
const BASE: [&str; 5] = ["ping", "config|get", "time", "evalsha", "script|load"];

/// The cluster client's own: the slot map (`CLUSTER SLOTS`), the
/// primaries (`CLUSTER NODES`, for per-node figures) and `ASK`
/// redirections during a reshard.
const CLUSTER: [&str; 3] = ["cluster|slots", "cluster|nodes", "asking"];

/// The app: every compact-store script an app path runs, the reads
/// (`HGET`, `HMGET` of a value and its pieces, `HGETALL`), the user
/// index's direct writes, and a growing store's splits (`HLEN`, `HKEYS`,
/// `HSCAN`, `RENAME`, `OBJECT ENCODING`, `ZSCORE`, `ZREM`; `EXPIRE` and
/// `TYPE` for the marks they leave and find), and `COMMAND INFO`, which
/// tells whether the server has `HSETEX`. No transaction
/// commands: what must happen in one step is a script or one command.
const STORE: &[&str] = &[
    "command|info",
    "get",
    "set",
    "del",
    "exists",
    "type",
    "expire",
    "expireat",
    "hget",
    "hmget",
    "hgetall",
    "hkeys",
    "hscan",
    "hset",
    "hsetnx",
    "hdel",
    "hexists",
    "hlen",
    "rename",
    "object|encoding",
    "zadd",
    "zscore",
    "zrem",
];

/// The sweeper: its scripts (sweep, cap, evict), the cap's reads of the
/// expiry order, its segment leases (`SET NX PX`, `PEXPIRE`, `PTTL`), the
/// metadata claim a store makes when opened on an empty namespace, and a
/// growing store's merges and the splits writes left to it (`HEXISTS`,
/// `HKEYS`, `HSCAN`, `RENAME`, `OBJECT ENCODING`, `ZSCORE`; `EXPIRE` and
/// `TYPE` for marks).
const SWEEPER: &[&str] = &[
    "get",
    "set",
    "del",
    "exists",
    "type",
    "expire",
    "pexpire",
    "pttl",
    "hget",
    "hmget",
    "hgetall",
    "hkeys",
    "hscan",
    "hexists",
    "hlen",
    "hset",
    "hdel",
    "rename",
    "object|encoding",
    "zadd",
    "zcard",
    "zcount",
    "zrange",
    "zrem",
    "zscore",
];

/// The users command: it opens the store as the app does, reads a
/// user's index and sessions, and revokes with the store's scripts.
const USERS: &[&str] = &[
    "get", "set", "del", "exists", "expireat", "hget", "hmget", "hgetall", "hset", "hsetnx",
    "hdel", "hexists", "hlen", "zadd",
];

/// Saves of sessions the store read and deletes, on a server that has
/// `HSETEX` and `HGETDEL`.
const FIELD_WRITES: &[&str] = &["hsetex", "hgetdel"];

/// Field TTLs, and the check of how the server keeps them.
const SERVER_EXPIRY: &[&str] = &["hexpireat", "object|encoding"];

/// `sessionpack migrate`, beside the app's store ([`Role::Migrate`] takes
/// [`STORE`] too): reading, closing and counting the old keys.
const MIGRATE: &[&str] = &[
    "type",
    "pexpiretime",
    "incr",
    "scan",
    "unlink",
    "dbsize",
    "info",
];

/// A store's takeover: the old keys read, written and deleted, and the
/// marks beside each bucket.
const TAKEOVER: &[&str] = &[
    "get",
    "set",
    "del",
    "type",
    "pexpiretime",
    "hget",
    "hset",
    "hdel",
    "expireat",
];

/// The rule for `roles` (one, or several a process plays: an app that
/// runs its sweeper in-process is [`Role::Store`] and [`Role::Sweeper`])
/// on `namespace`'s keys, as `ACL SETUSER` takes it after the user's
/// name, `on` and its password: channels and keys first, then `-@all` and
/// each command once.
pub fn rule(roles: &[Role], namespace: &str, topology: Topology) -> String {
    rule_for(roles, namespace, &[], topology)
}

/// [`rule`] that also grants the keys `other_keys` match (glob patterns,
/// as ACL key patterns take them): the old store's keys for
/// [`Role::Migrate`] and [`Role::Takeover`], which
/// [`crate::takeover::Source::key_glob`] gives, as narrow as the keys'
/// form allows (tower-sessions-redis-store's keys, which have no prefix,
/// are matched by their length: 22 `?`).
pub fn rule_for(
    roles: &[Role],
    namespace: &str,
    other_keys: &[String],
    topology: Topology,
) -> String {
    let mut parts = vec![
        "resetchannels".to_owned(),
        format!("~{}:*", escape_glob(namespace)),
    ];
    parts.extend(other_keys.iter().map(|k| format!("~{k}")));
    parts.push("-@all".to_owned());
    let cluster: &[&str] = match topology {
        Topology::Server => &[],
        Topology::Cluster => &CLUSTER,
    };
    let mut commands: Vec<&str> = Vec::new();
    let played = roles.iter().flat_map(|r| r.implies().iter().chain([r]));
    for command in BASE
        .iter()
        .chain(cluster)
        .chain(played.flat_map(|r| r.commands()))
    {
        if !commands.contains(command) {
            commands.push(command);
        }
    }
    parts.extend(commands.iter().map(|c| format!("+{c}")));
    parts.join(" ")
}

/// `text` matched literally by a glob pattern (an ACL key pattern, `SCAN
/// MATCH`): `*`, `?`, `[`, `]` and `\\` escaped, so a namespace `a*` grants
/// `a*:...` and not every key.
pub fn escape_glob(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The commands each script runs, from its source.
    fn commands_in(source: &str) -> Vec<String> {
        source
            .split("redis.call(")
            .skip(1)
            .chain(source.split("redis.pcall(").skip(1))
            .filter_map(|rest| {
                let quote = rest.chars().next().filter(|c| *c == '\'' || *c == '"')?;
                let name = rest[1..].split(quote).next()?;
                Some(name.to_ascii_lowercase())
            })
            .collect()
    }

    macro_rules! lua {
        ($($file:literal),+) => {
            [$((($file), include_str!(concat!("lua/", $file)))),+]
        };
    }

    /// Every command a role's scripts can run is in its rule: a path the
    /// live tests do not reach still has what it needs.
    #[test]
    fn each_rule_covers_its_scripts() {
        let store = lua!(
            "server_clock.lua",
            "compact_pieces.lua",
            "compact_common.lua",
            "compact_add.lua",
            "compact_rewrite.lua",
            "compact_resave.lua",
            "compact_unset.lua",
            "compact_fnx.lua",
            "compact_drop.lua",
            "compact_delete.lua",
            "shape_common.lua",
            "compact_split.lua",
            "compact_merge.lua",
            "compact_claim.lua",
            "compact_expiry.lua",
            "compact_insert.lua",
            "compact_touch.lua",
            "compact_replace.lua",
            "compact_save.lua",
            "compact_remove.lua",
            "compact_take.lua",
            "compact_forward.lua",
            "compact_revoke.lua",
            "viewed_add.lua",
            "user_label.lua",
            "meta_claim.lua"
        );
        let sweeper = lua!(
            "server_clock.lua",
            "compact_pieces.lua",
            "compact_common.lua",
            "shape_common.lua",
            "compact_split.lua",
            "compact_merge.lua",
            "compact_sweep.lua",
            "compact_cap.lua",
            "compact_evict.lua",
            "compact_settle.lua",
            "bucket_order.lua",
            "lock_claim.lua",
            "lock_extend.lua",
            "lock_release.lua",
            "meta_claim.lua"
        );
        let users = lua!(
            "server_clock.lua",
            "compact_common.lua",
            "compact_expiry.lua",
            "compact_revoke.lua",
            "user_label.lua",
            "meta_claim.lua"
        );
        // A store taking over reads old keys; only `migrate` closes them.
        let takeover = [("READ_SCRIPT", crate::takeover::READ_SCRIPT)];
        let close = [
            ("CLOSE_SCRIPT", crate::takeover::CLOSE_SCRIPT),
            ("CLOSE_MARK_SCRIPT", crate::takeover::CLOSE_MARK_SCRIPT),
            ("CLOSE_KEY_SCRIPT", crate::takeover::CLOSE_KEY_SCRIPT),
            ("CLOSE_UNMARK_SCRIPT", crate::takeover::CLOSE_UNMARK_SCRIPT),
        ];
        let migrate: Vec<_> = store
            .iter()
            .chain(&takeover)
            .chain(&close)
            .copied()
            .collect();
        for (role, scripts) in [
            (Role::Store, &store[..]),
            (Role::Sweeper, &sweeper[..]),
            (Role::Users, &users[..]),
            (Role::Migrate, &migrate[..]),
            (Role::Takeover, &takeover[..]),
        ] {
            // A store whose fields the server expires adds its commands.
            let granted: Vec<&str> = BASE
                .iter()
                .chain(role.implies().iter().flat_map(|r| r.commands()))
                .chain(role.commands())
                .chain(Role::ServerExpiry.commands())
                .copied()
                .collect();
            let mut seen = 0;
            for (file, source) in scripts {
                let used = commands_in(source);
                seen += used.len();
                for command in used {
                    // A command granted for one subcommand (`OBJECT
                    // ENCODING`) counts: the parser reads the first word.
                    let sub = format!("{command}|");
                    assert!(
                        granted.contains(&command.as_str())
                            || granted.iter().any(|g| g.starts_with(&sub)),
                        "{}: {file} runs {command}",
                        role.name()
                    );
                }
            }
            // The parser found the calls it checks.
            assert!(seen >= 3, "{}: {seen} calls found", role.name());
        }
    }

    #[test]
    fn a_rule_names_only_the_namespace_and_its_commands() {
        let text = rule(&[Role::Store, Role::Sweeper], "app1", Topology::Cluster);
        let parts: Vec<&str> = text.split(' ').collect();
        assert_eq!(parts[..3], ["resetchannels", "~app1:*", "-@all"]);
        assert!(parts[3..].iter().all(|p| p.starts_with('+')), "{text}");
        assert!(parts.contains(&"+cluster|slots"));
        assert!(!rule(&[Role::Store], "app1", Topology::Server).contains("cluster"));
        assert_eq!(text.matches('@').count(), 1, "{text}");
        // Each command once, though both roles send it.
        assert_eq!(text.matches("+hget ").count(), 1, "{text}");
        assert!(text.contains("+zcount"), "{text}");
    }

    #[test]
    fn old_keys_follow_the_namespace() {
        let old = ["?".repeat(22)];
        let text = rule_for(&[Role::Takeover], "sp", &old, Topology::Server);
        assert!(text.starts_with(&format!("resetchannels ~sp:* ~{} -@all ", old[0])));
        assert!(text.contains("+pexpiretime"), "{text}");
    }

    #[test]
    fn a_namespace_is_matched_literally() {
        let text = rule(&[Role::Store], "a*[b]?", Topology::Server);
        assert!(text.contains(r"~a\*\[b\]\?:* "), "{text}");
    }
}
