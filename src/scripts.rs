//! The Lua scripts, compiled in and hashed once, and their names by hash
//! ([`catalog`]) for reading a server's `SLOWLOG` or `MONITOR`.
//!
//! `Script::invoke_async` reloads a script the server has forgotten (after
//! a restart or `SCRIPT FLUSH`); pipelines do not, so bulk calls use
//! `load_all` and retry once on `NOSCRIPT`.

use std::sync::LazyLock;

use redis::Script;

/// A script: shared helpers first (`server_clock.lua`, then its family's
/// common file), then its own file. Each script includes
/// only the helpers it calls, because every call re-creates them.
macro_rules! script {
    ($($file:literal),+) => {
        LazyLock::new(|| Script::new(concat!($(include_str!(concat!("lua/", $file))),+)))
    };
}

pub(crate) static BUCKET_INSERT: LazyLock<Script> =
    script!("server_clock.lua", "bucket_common.lua", "bucket_insert.lua");
pub(crate) static BUCKET_TOUCH: LazyLock<Script> = script!(
    "server_clock.lua",
    "bucket_common.lua",
    "bucket_live.lua",
    "bucket_touch.lua"
);
pub(crate) static BUCKET_REPLACE: LazyLock<Script> = script!(
    "server_clock.lua",
    "bucket_common.lua",
    "bucket_live.lua",
    "bucket_record.lua",
    "bucket_replace.lua"
);
pub(crate) static BUCKET_REMOVE: LazyLock<Script> = script!(
    "server_clock.lua",
    "bucket_common.lua",
    "bucket_live.lua",
    "bucket_record.lua",
    "bucket_remove.lua"
);

/// A compact-layout script that writes fields, in its two forms: for a
/// store the sweeper reclaims, and for one whose fields the server expires
/// (`compact_expiry.lua`).
pub(crate) struct ByExpiry {
    swept: LazyLock<Script>,
    server: LazyLock<Script>,
    /// For a growing store (swept): first checks the caller's route
    /// (`compact_route.lua`), and replies with the bucket's field count
    /// too (`compact_grown.lua`).
    growing: LazyLock<Script>,
}

impl ByExpiry {
    /// The form for a store whose fields the server expires, or not.
    pub(crate) fn get(&'static self, server_expiry: bool) -> &'static Script {
        if server_expiry {
            &self.server
        } else {
            &self.swept
        }
    }

    /// The form for a growing store.
    pub(crate) fn growing(&'static self) -> &'static Script {
        &self.growing
    }
}

/// [`ByExpiry`] of a script: the line setting `SERVER_EXPIRY`, then the
/// files as [`script!`] takes them, `compact_expiry.lua` among them.
macro_rules! by_expiry {
    ($($file:literal),+) => {
        ByExpiry {
            swept: script!("expiry_swept.lua", $($file),+),
            server: script!("expiry_server.lua", $($file),+),
            growing: script!(
                "expiry_swept.lua",
                "compact_route.lua",
                $($file),+,
                "compact_grown.lua"
            ),
        }
    };
}

pub(crate) static COMPACT_INSERT: ByExpiry = by_expiry!(
    "server_clock.lua",
    "compact_pieces.lua",
    "compact_common.lua",
    "compact_expiry.lua",
    "compact_insert.lua"
);
pub(crate) static COMPACT_TOUCH: ByExpiry = by_expiry!(
    "server_clock.lua",
    "compact_pieces.lua",
    "compact_common.lua",
    "compact_expiry.lua",
    "compact_touch.lua"
);
pub(crate) static COMPACT_REPLACE: ByExpiry = by_expiry!(
    "server_clock.lua",
    "compact_pieces.lua",
    "compact_common.lua",
    "compact_expiry.lua",
    "compact_replace.lua"
);
pub(crate) static COMPACT_SAVE: ByExpiry = by_expiry!(
    "compact_pieces.lua",
    "compact_expiry.lua",
    "compact_save.lua"
);
/// [`COMPACT_REWRITE`]'s answer where the full script must decide.
pub(crate) const SLOW: i64 = -9;
/// The common case of [`COMPACT_SAVE`] and [`COMPACT_TOUCH`], with no
/// helpers, for fixed and growing buckets alike; only for stores the
/// sweeper reclaims.
pub(crate) static COMPACT_REWRITE: LazyLock<Script> = script!("compact_rewrite.lua");
/// A save of a session this process read, named as it read it, where its
/// field is still there: two commands, for a server without `HSETEX`
/// (`plain.rs`).
pub(crate) static COMPACT_RESAVE: LazyLock<Script> = script!("compact_resave.lua");
/// The common case of [`COMPACT_DELETE`]: a session whose field is there,
/// removed with what its value names, in two commands; for stores that
/// keep no viewed items.
pub(crate) static COMPACT_UNSET: LazyLock<Script> = script!("compact_unset.lua");
/// Takes back what a plain create wrote where no bucket of the current
/// shape is (`plain_create.rs`).
pub(crate) static COMPACT_WITHDRAW: LazyLock<Script> = script!("compact_withdraw.lua");
/// A plain create's write of a record in pieces on a server without
/// `HSETEX`: `FNX`'s all or none, in two commands (`plain_create.rs`).
pub(crate) static COMPACT_FNX: LazyLock<Script> = script!("compact_fnx.lua");
/// The common case of [`COMPACT_INSERT`]: a record kept in its bucket,
/// its expiry decided by the caller, with no helpers. A growing store's
/// form is the swept one: it checks the route and replies with the
/// bucket's field count itself (its 5th argument), unwrapped.
pub(crate) static COMPACT_ADD: ByExpiry = ByExpiry {
    swept: script!("expiry_swept.lua", "compact_add.lua"),
    server: script!("expiry_server.lua", "compact_add.lua"),
    growing: script!("expiry_swept.lua", "compact_add.lua"),
};
pub(crate) static COMPACT_REMOVE: ByExpiry = by_expiry!(
    "server_clock.lua",
    "compact_pieces.lua",
    "compact_common.lua",
    "compact_remove.lua"
);
pub(crate) static COMPACT_TAKE: ByExpiry = by_expiry!("compact_pieces.lua", "compact_take.lua");
pub(crate) static COMPACT_FORWARD: ByExpiry = by_expiry!(
    "server_clock.lua",
    "compact_pieces.lua",
    "compact_common.lua",
    "compact_expiry.lua",
    "compact_forward.lua"
);
pub(crate) static COMPACT_REVOKE: ByExpiry = by_expiry!(
    "server_clock.lua",
    "compact_pieces.lua",
    "compact_common.lua",
    "compact_expiry.lua",
    "compact_revoke.lua"
);

pub(crate) static COMPACT_SPLIT: LazyLock<Script> = script!(
    "compact_pieces.lua",
    "shape_common.lua",
    "compact_split.lua"
);
pub(crate) static COMPACT_MERGE: LazyLock<Script> = script!(
    "compact_pieces.lua",
    "shape_common.lua",
    "compact_merge.lua"
);
pub(crate) static COMPACT_CLAIM: LazyLock<Script> = script!("compact_claim.lua");
/// The removal of a session this process has not read, with its bucket's
/// marker read in the same step.
pub(crate) static COMPACT_DROP: LazyLock<Script> = script!("compact_drop.lua");
/// The removal of a session whatever its value holds, in a namespace
/// whose pieces may have short names, with its bucket's marker read in the
/// same step.
pub(crate) static COMPACT_DELETE: LazyLock<Script> =
    script!("compact_pieces.lua", "compact_delete.lua");
/// Reads of one session's keys in one step ([`Reads`]).
static READ_TOGETHER: LazyLock<Script> = script!("read_together.lua");

/// Whether the script of hash `sha` only reads (a store waiting for
/// replicas need not wait after it).
pub(crate) fn only_reads(sha: &[u8]) -> bool {
    sha == Reads::sha().as_bytes()
}

/// Reads of several keys of one session sent as one script
/// (`read_together.lua`), so a write moving a record between them is
/// never seen half done: what a `MULTI`/`EXEC` of the reads gave, without
/// asking the store's user for transaction commands. The reply is each
/// read's, in order.
#[derive(Default)]
pub(crate) struct Reads {
    keys: Vec<String>,
    args: Vec<(&'static str, Vec<u8>)>,
}

impl Reads {
    /// `GET key`.
    pub(crate) fn get(mut self, key: impl Into<String>) -> Self {
        self.keys.push(key.into());
        self.args.push(("GET", Vec::new()));
        self
    }

    /// `HGET key field`.
    pub(crate) fn hget(self, key: impl Into<String>, field: &[u8]) -> Self {
        self.read("HGET", key, field)
    }

    /// `HEXISTS key field`.
    pub(crate) fn hexists(self, key: impl Into<String>, field: &[u8]) -> Self {
        self.read("HEXISTS", key, field)
    }

    /// `ZSCORE key member`.
    pub(crate) fn zscore(self, key: impl Into<String>, member: &[u8]) -> Self {
        self.read("ZSCORE", key, member)
    }

    fn read(mut self, command: &'static str, key: impl Into<String>, arg: &[u8]) -> Self {
        self.keys.push(key.into());
        self.args.push((command, arg.to_vec()));
        self
    }

    /// The hash the read script is called by.
    pub(crate) fn sha() -> &'static str {
        READ_TOGETHER.get_hash()
    }

    /// The script call making these reads.
    pub(crate) fn invocation(&self) -> redis::ScriptInvocation<'static> {
        let mut inv = READ_TOGETHER.prepare_invoke();
        for key in &self.keys {
            inv.key(key);
        }
        for (command, arg) in &self.args {
            inv.arg(*command).arg(arg);
        }
        inv
    }
}

pub(crate) static COMPACT_SWEEP: LazyLock<Script> = script!(
    "server_clock.lua",
    "compact_pieces.lua",
    "compact_common.lua",
    "compact_settle.lua",
    "compact_sweep.lua"
);

pub(crate) static COMPACT_CAP: LazyLock<Script> = script!(
    "server_clock.lua",
    "compact_pieces.lua",
    "compact_common.lua",
    "bucket_order.lua",
    "compact_settle.lua",
    "compact_cap.lua"
);
pub(crate) static COMPACT_EVICT: LazyLock<Script> = script!(
    "server_clock.lua",
    "compact_pieces.lua",
    "compact_common.lua",
    "bucket_order.lua",
    "compact_evict.lua"
);

pub(crate) static VIEWED_ADD: ByExpiry = by_expiry!(
    "server_clock.lua",
    "compact_pieces.lua",
    "compact_common.lua",
    "compact_expiry.lua",
    "viewed_add.lua"
);

pub(crate) static USER_LABEL: LazyLock<Script> = script!("user_label.lua");
pub(crate) static RATELIMIT_LOG: LazyLock<Script> = script!("ratelimit_log.lua");
pub(crate) static RATELIMIT_GCRA: LazyLock<Script> = script!("ratelimit_gcra.lua");
pub(crate) static RATELIMIT_SWEEP: LazyLock<Script> = script!("ratelimit_sweep.lua");
pub(crate) static META_CLAIM: LazyLock<Script> = script!("meta_claim.lua");
pub(crate) static BUCKET_SWEEP: LazyLock<Script> = script!("bucket_order.lua", "bucket_sweep.lua");
pub(crate) static BUCKET_EVICT: LazyLock<Script> = script!("bucket_order.lua", "bucket_evict.lua");
pub(crate) static LOCK_CLAIM: LazyLock<Script> = script!("lock_claim.lua");
pub(crate) static LOCK_RELEASE: LazyLock<Script> = script!("lock_release.lua");
pub(crate) static LOCK_FENCED: LazyLock<Script> = script!("lock_fenced.lua");
pub(crate) static LOCK_EXTEND: LazyLock<Script> = script!("lock_extend.lua");

/// Every script this crate sends, as `(name, SHA1)`: the name is its own
/// file's (`compact_add` for `lua/compact_add.lua`), with ` (growing)` or
/// ` (server expiry)` for a compact-layout script's forms for a growing
/// store and for one whose fields the server expires. A `SLOWLOG` or
/// `MONITOR` entry names a script by its SHA1 alone; this says which it
/// is. A form whose text is another's (`compact_add`'s growing form is
/// its swept one) is listed once, under the first name.
pub fn catalog() -> Vec<(String, &'static str)> {
    let plain: [(&str, &'static Script); 29] = [
        ("bucket_insert", &*BUCKET_INSERT),
        ("bucket_touch", &*BUCKET_TOUCH),
        ("bucket_replace", &*BUCKET_REPLACE),
        ("bucket_remove", &*BUCKET_REMOVE),
        ("compact_rewrite", &*COMPACT_REWRITE),
        ("compact_resave", &*COMPACT_RESAVE),
        ("compact_unset", &*COMPACT_UNSET),
        ("compact_withdraw", &*COMPACT_WITHDRAW),
        ("compact_fnx", &*COMPACT_FNX),
        ("compact_split", &*COMPACT_SPLIT),
        ("compact_merge", &*COMPACT_MERGE),
        ("compact_claim", &*COMPACT_CLAIM),
        ("compact_drop", &*COMPACT_DROP),
        ("compact_delete", &*COMPACT_DELETE),
        ("read_together", &*READ_TOGETHER),
        ("compact_sweep", &*COMPACT_SWEEP),
        ("compact_cap", &*COMPACT_CAP),
        ("compact_evict", &*COMPACT_EVICT),
        ("user_label", &*USER_LABEL),
        ("ratelimit_log", &*RATELIMIT_LOG),
        ("ratelimit_gcra", &*RATELIMIT_GCRA),
        ("ratelimit_sweep", &*RATELIMIT_SWEEP),
        ("meta_claim", &*META_CLAIM),
        ("bucket_sweep", &*BUCKET_SWEEP),
        ("bucket_evict", &*BUCKET_EVICT),
        ("lock_claim", &*LOCK_CLAIM),
        ("lock_release", &*LOCK_RELEASE),
        ("lock_fenced", &*LOCK_FENCED),
        ("lock_extend", &*LOCK_EXTEND),
    ];
    let by_expiry: [(&str, &'static ByExpiry); 10] = [
        ("compact_add", &COMPACT_ADD),
        ("compact_insert", &COMPACT_INSERT),
        ("compact_touch", &COMPACT_TOUCH),
        ("compact_replace", &COMPACT_REPLACE),
        ("compact_save", &COMPACT_SAVE),
        ("compact_remove", &COMPACT_REMOVE),
        ("compact_take", &COMPACT_TAKE),
        ("compact_forward", &COMPACT_FORWARD),
        ("compact_revoke", &COMPACT_REVOKE),
        ("viewed_add", &VIEWED_ADD),
    ];
    let mut out: Vec<(String, &'static str)> = Vec::new();
    let mut add = |name: String, script: &'static Script| {
        let sha = script.get_hash();
        if !out.iter().any(|(_, s)| *s == sha) {
            out.push((name, sha));
        }
    };
    for (name, script) in plain {
        add(name.to_owned(), script);
    }
    for (name, scripts) in by_expiry {
        add(name.to_owned(), scripts.get(false));
        add(format!("{name} (growing)"), scripts.growing());
        add(format!("{name} (server expiry)"), scripts.get(true));
    }
    out
}

/// Most script calls sent in one pipeline by the layouts' bulk operations.
pub(crate) const PIPELINE_CHUNK: usize = 1024;

/// Whether an error means the server has lost a script.
pub(crate) fn is_noscript(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// Loads scripts ahead of a pipeline that uses them.
pub(crate) async fn load_all<C>(conn: &mut C, scripts: &[&Script]) -> redis::RedisResult<()>
where
    C: redis::aio::ConnectionLike + Send,
{
    for script in scripts {
        script.load_async(conn).await?;
    }
    Ok(())
}

/// Sends a pipeline of script calls and returns each call's own result, so
/// one failing call (a key of the wrong type, say) does not hide the
/// others'. The calls answered `NOSCRIPT` are sent again, alone, once the
/// script is loaded. An error reaching the server at all is the outer
/// error.
pub(crate) async fn pipelined_each<C>(
    conn: &C,
    invocations: &[redis::ScriptInvocation<'_>],
    script: &Script,
) -> crate::Result<Vec<redis::RedisResult<redis::Value>>>
where
    C: redis::aio::ConnectionLike + Clone + Send,
{
    pipelined_calls(conn, invocations, &[script]).await
}

/// [`pipelined_each`] for calls of any of `scripts`, all of which are
/// loaded where one call is answered `NOSCRIPT`.
pub(crate) async fn pipelined_calls<C>(
    conn: &C,
    invocations: &[redis::ScriptInvocation<'_>],
    scripts: &[&Script],
) -> crate::Result<Vec<redis::RedisResult<redis::Value>>>
where
    C: redis::aio::ConnectionLike + Clone + Send,
{
    if invocations.is_empty() {
        return Ok(Vec::new());
    }
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for inv in invocations {
        pipe.invoke_script(inv);
    }
    let mut conn = conn.clone();
    let mut replies: Vec<redis::RedisResult<redis::Value>> = pipe.query_async(&mut conn).await?;
    let lost: Vec<usize> = (0..replies.len())
        .filter(|&i| replies[i].as_ref().is_err_and(is_noscript))
        .collect();
    if !lost.is_empty() {
        load_all(&mut conn, scripts).await?;
        let mut again = redis::pipe();
        again.ignore_errors();
        for &i in &lost {
            again.invoke_script(&invocations[i]);
        }
        let answers: Vec<redis::RedisResult<redis::Value>> = again.query_async(&mut conn).await?;
        for (i, answer) in lost.into_iter().zip(answers) {
            replies[i] = answer;
        }
    }
    // A slot moving under the pipeline: the node answered some calls with
    // a redirection, running none of them. Each goes again on its own, as
    // a single call, which the cluster client follows (`ASKING` included).
    for (reply, inv) in replies.iter_mut().zip(invocations) {
        if reply.as_ref().is_err_and(is_redirection) {
            *reply = inv.invoke_async(&mut conn).await;
        }
    }
    Ok(replies)
}

/// Whether a call was redirected, not run: a cluster's `ASK` or `MOVED`.
fn is_redirection(e: &redis::RedisError) -> bool {
    matches!(e.code(), Some("ASK" | "MOVED"))
}

/// A script flag argument.
pub(crate) fn flag(on: bool) -> &'static str {
    if on { "1" } else { "0" }
}

/// The position of the first command of a pipeline that failed.
pub(crate) fn first_failed(err: &redis::RedisError) -> Option<usize> {
    err.clone()
        .into_server_errors()
        .and_then(|errors| errors.first().map(|(i, _)| *i))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_catalog_names_each_script_once_by_its_hash() {
        let catalog = super::catalog();
        let mut shas: Vec<&str> = catalog.iter().map(|(_, sha)| *sha).collect();
        shas.sort_unstable();
        shas.dedup();
        assert_eq!(shas.len(), catalog.len(), "one name a hash");
        let name_of = |sha: &str| {
            catalog
                .iter()
                .find(|(_, s)| *s == sha)
                .map(|(n, _)| n.as_str())
        };
        assert_eq!(
            name_of(super::COMPACT_ADD.get(false).get_hash()),
            Some("compact_add")
        );
        assert_eq!(
            name_of(super::COMPACT_SAVE.growing().get_hash()),
            Some("compact_save (growing)")
        );
        assert_eq!(
            name_of(super::COMPACT_TOUCH.get(true).get_hash()),
            Some("compact_touch (server expiry)")
        );
        assert_eq!(name_of(super::LOCK_EXTEND.get_hash()), Some("lock_extend"));
    }
}
