//! Redis Cluster connections (feature `cluster`).
//!
//! Every key sessionpack writes for one bucket shares the bucket's hash
//! tag, so every script and every transaction runs in one slot. What spans
//! slots are plain pipelines over many buckets (bulk loads and inserts, the
//! sweeper's reads): the cluster client refuses those, so [`Cluster`]
//! splits a pipeline by slot, sends the parts at once (to whichever
//! primaries hold them) and puts the replies back in order. Redirections
//! (`MOVED`, `ASK`), `TRYAGAIN` and reconnection after a failover are the
//! cluster client's, except for the commands queued in a transaction, which
//! [`Cluster`] resends itself; scripts are loaded on every primary
//! (`SCRIPT LOAD` is routed to all of them). A call that waits on a primary
//! which has been failed over while it was paused or cut off is sent again
//! to the new primary as soon as the cluster has promoted it ([`takeover`]),
//! rather than after its whole response timeout.
//!
//! ```no_run
//! # async fn run() -> sessionpack::Result<()> {
//! use sessionpack::{Compact, CompactConfig};
//!
//! let conn = sessionpack::conn::cluster::connect(&["redis://10.0.0.1:7000/", "redis://10.0.0.2:7000/"]).await?;
//! let layout = Compact::new(conn, CompactConfig::new(14)).await?;
//! # Ok(()) }
//! ```

pub mod slots;
pub mod takeover;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::ConnectionLike as _;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use crate::conn::ConnectOptions;
use crate::error::Result;

use slots::SLOTS;
use takeover::{SlotOwners, Waits, Watch};

/// Attempts the cluster client makes for one request (redirections and
/// reconnections included) before it reports an error.
pub const RETRIES: u32 = 6;

/// A connection to a Redis Cluster that sends pipelines spanning slots
/// (see the module docs). Cheap to clone; clones share the connections.
///
/// A call that times out replaces the cluster client's connection for
/// every clone (the timed-out call still fails, as
/// [`crate::Error::Unavailable`]). The client serves every call from one
/// task; during a slot refresh that task waits for a lock which a call it
/// no longer polls may hold, and from then on every call times out. A
/// fresh connection is the way out of that, and costs little after a
/// real timeout: one connection per node and a `CLUSTER SLOTS`.
#[derive(Clone)]
pub struct Cluster {
    shared: Arc<Shared>,
}

struct Shared {
    client: ClusterClient,
    options: ConnectOptions,
    watch: Watch,
    /// The connection calls go through, how many times it was replaced,
    /// and the slot owners as the watch saw them when it was opened (what
    /// its client routes by, until it learns better).
    current: Mutex<Current>,
    /// Held while a replacement is made: concurrent timeouts make one.
    replacing: tokio::sync::Mutex<()>,
    /// Counts the commands with no key routed to a primary of their own
    /// (see [`Cluster::any_slot`]).
    anywhere: std::sync::atomic::AtomicU32,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("replacements", &self.replacements())
            .finish_non_exhaustive()
    }
}

/// Connects to the cluster that `seeds` (`redis://host:port/` URLs of some
/// of its nodes) belong to, with the default [`ConnectOptions`].
pub async fn connect(seeds: &[impl AsRef<str>]) -> Result<Cluster> {
    connect_with(seeds, &ConnectOptions::default()).await
}

/// [`connect`] with other [`ConnectOptions`]: its response timeout bounds
/// a whole call, redirections and reconnections included; a call follows
/// up to [`RETRIES`] redirections or reconnections.
pub async fn connect_with(seeds: &[impl AsRef<str>], options: &ConnectOptions) -> Result<Cluster> {
    let seeds: Vec<String> = seeds.iter().map(|s| s.as_ref().to_owned()).collect();
    let client = client(&seeds, options)?;
    let conn = client.get_async_connection().await?;
    let cluster = Cluster {
        shared: Arc::new(Shared {
            client,
            watch: Watch::new(seeds, options),
            options: options.clone(),
            current: Mutex::new(Current {
                generation: 0,
                conn,
                owners: Arc::default(),
            }),
            replacing: tokio::sync::Mutex::new(()),
            anywhere: std::sync::atomic::AtomicU32::new(0),
        }),
    };
    // Which primary serves each slot, for calls to see a failover by; a
    // cluster whose nodes do not answer yet is looked at when a call waits.
    if let Some(owners) = cluster.shared.watch.look().await {
        cluster.lock_current().owners = owners;
    }
    Ok(cluster)
}

/// A cluster client for `seeds` with `options`.
fn client(seeds: &[String], options: &ConnectOptions) -> Result<ClusterClient> {
    let builder = redis::cluster::ClusterClientBuilder::new(seeds.iter().map(String::as_str))
        .connection_timeout(options.connect_timeout())
        .response_timeout(options.response_timeout())
        .retries(RETRIES);
    Ok(with_tls(builder, seeds, options)?.build()?)
}

/// Gives the cluster client the certificates of `options` (feature
/// `tls`). Every node is reached as the seeds are: all `rediss://` or all
/// `redis://`.
fn with_tls(
    builder: redis::cluster::ClusterClientBuilder,
    seeds: &[impl AsRef<str>],
    options: &ConnectOptions,
) -> Result<redis::cluster::ClusterClientBuilder> {
    let tls: Vec<bool> = seeds
        .iter()
        .map(|s| crate::conn::standalone::is_tls_url(s.as_ref()))
        .collect();
    if tls.iter().any(|&t| t) && !tls.iter().all(|&t| t) {
        return Err(crate::Error::Config(
            "a cluster's seeds are all rediss:// or all redis://".into(),
        ));
    }
    #[cfg(feature = "tls")]
    {
        match (options.tls(), tls.first().copied().unwrap_or(false)) {
            (Some(config), true) => return Ok(builder.certs(config.certificates())),
            (Some(_), false) => {
                return Err(crate::Error::Config(
                    "TLS certificates were given for plain redis:// cluster seeds; use rediss://"
                        .into(),
                ));
            }
            (None, true) => crate::conn::tls::install_provider(),
            (None, false) => {}
        }
    }
    #[cfg(not(feature = "tls"))]
    if tls.first().copied().unwrap_or(false) {
        let _ = options;
        return Err(crate::Error::Config(
            "rediss:// seeds need sessionpack's `tls` feature".into(),
        ));
    }
    Ok(builder)
}

/// The URL of the node at `host:port`, reached as `seed` is: the same
/// scheme (`rediss://` stays TLS) and the same user and password.
pub(crate) fn node_url(seed: &str, host: &str, port: u16) -> String {
    let (scheme, rest) = seed.split_once("://").unwrap_or(("redis", seed));
    let authority = rest.split('/').next().unwrap_or_default();
    let user = authority.rfind('@').map_or("", |at| &authority[..=at]);
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    format!("{scheme}://{user}{host}:{port}/")
}

/// The URLs of the cluster's primaries that serve slots, as the node at
/// `seed` sees them (`CLUSTER NODES`), reached as `seed` is (see
/// [`connect_with`]'s options): where to read per-node figures (`INFO`,
/// `DBSIZE`) that a cluster connection would send to one node only.
pub async fn primaries(seed: &str, options: &ConnectOptions) -> Result<Vec<String>> {
    let mut conn = crate::conn::connect_with(seed, options).await?;
    primaries_over(&mut conn, seed).await
}

/// [`primaries`] over a connection to `seed` already open (one asked again
/// and again, as a migration reads the slot map before each batch).
pub async fn primaries_over<C>(conn: &mut C, seed: &str) -> Result<Vec<String>>
where
    C: redis::aio::ConnectionLike + Send,
{
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(conn).await?;
    let primaries: Vec<String> = parse_primaries(&nodes)
        .into_iter()
        .filter_map(|addr| {
            let (host, port) = addr.rsplit_once(':')?;
            Some(node_url(seed, host, port.parse().ok()?))
        })
        .collect();
    if primaries.is_empty() {
        return Err(crate::Error::Config(format!(
            "{seed} reports no primary serving slots; is it a cluster node?"
        )));
    }
    Ok(primaries)
}

/// A line of a `CLUSTER NODES` reply: `<id> <ip:port@cport[,hostname]>
/// <flags> <primary> <ping> <pong> <epoch> <link> <slot>...`.
pub(super) struct NodeLine<'a> {
    /// `ip:port`.
    pub(super) addr: &'a str,
    /// The hostname it announces, or empty.
    pub(super) hostname: &'a str,
    pub(super) flags: Vec<&'a str>,
    /// Whether the line lists slots.
    pub(super) serving: bool,
}

/// The lines of a `CLUSTER NODES` reply (see [`NodeLine`]).
pub(super) fn node_lines(nodes: &str) -> impl Iterator<Item = NodeLine<'_>> {
    nodes.lines().filter_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let address = *fields.get(1)?;
        let (endpoint, hostname) = address.split_once(',').unwrap_or((address, ""));
        Some(NodeLine {
            addr: endpoint.split('@').next()?,
            hostname,
            flags: fields.get(2)?.split(',').collect(),
            serving: fields.len() > 8,
        })
    })
}

/// The `host:port` of the primaries serving slots in a `CLUSTER NODES`
/// reply: flags `master` and not `fail`, and slots listed.
fn parse_primaries(nodes: &str) -> Vec<String> {
    let mut out: Vec<String> = node_lines(nodes)
        .filter(|n| n.flags.contains(&"master") && !n.flags.contains(&"fail") && n.serving)
        .map(|n| n.addr.to_owned())
        .collect();
    out.sort();
    out
}

/// The connection calls go through now (see [`Shared::current`]).
#[derive(Clone)]
struct Current {
    generation: u64,
    conn: ClusterConnection,
    owners: Arc<SlotOwners>,
}

impl Cluster {
    /// The cluster client's connection calls go through now.
    pub fn inner(&self) -> ClusterConnection {
        self.current().conn
    }

    /// How many times a call has replaced the connection (after a timeout,
    /// or a failover it waited through).
    pub fn replacements(&self) -> u64 {
        self.current().generation
    }

    fn current(&self) -> Current {
        self.lock_current().clone()
    }

    fn lock_current(&self) -> std::sync::MutexGuard<'_, Current> {
        self.shared
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `call` on the current connection; a timeout replaces it. A
    /// call for a key in `slot` that waits on a primary the cluster then
    /// fails over is sent again on a connection that knows the new one
    /// (see [`takeover`]), within the response timeout of the first.
    async fn call<'a, T, F>(
        &'a self,
        waits: Waits,
        call: impl Fn(ClusterConnection) -> F,
    ) -> RedisResult<T>
    where
        F: Future<Output = RedisResult<T>> + 'a,
    {
        let deadline = tokio::time::Instant::now() + self.shared.options.response_timeout();
        let mut resent = false;
        loop {
            let Current {
                generation,
                conn,
                owners,
            } = self.current();
            let (latest, stale) = self.shared.watch.known();
            if stale {
                let shared = self.shared.clone();
                tokio::spawn(async move {
                    let _ = shared.watch.look().await;
                    shared.watch.refreshed();
                });
            }
            let call = call(conn);
            let sent = async {
                if !resent {
                    return call.await;
                }
                // What is left of the first attempt's time.
                tokio::time::timeout_at(deadline, call)
                    .await
                    .unwrap_or_else(|_| Err(timed_out()))
            };
            let views = [owners.as_ref(), latest.as_ref()];
            let watched = self.shared.watch.taken_over(waits, &views);
            let result = tokio::select! {
                result = sent => result,
                now = watched => {
                    self.replace_after_takeover(generation, now, deadline).await;
                    if tokio::time::Instant::now() >= deadline {
                        return Err(timed_out());
                    }
                    resent = true;
                    continue;
                }
            };
            if result.as_ref().is_err_and(|e| e.is_timeout()) {
                self.replace(generation).await;
            }
            return result;
        }
    }

    /// Opens a new connection in place of the one of `generation`, unless
    /// another call has already replaced it. If the cluster cannot be
    /// reached the old one stays, and the next timeout tries again.
    async fn replace(&self, generation: u64) {
        let _one_at_a_time = self.shared.replacing.lock().await;
        if self.current().generation != generation {
            return;
        }
        let options = &self.shared.options;
        let budget = options.connect_timeout() * 2 + options.response_timeout();
        match tokio::time::timeout(budget, self.shared.client.get_async_connection()).await {
            Ok(Ok(conn)) => {
                self.install(generation, conn, self.shared.watch.latest());
                tracing::warn!(
                    replacements = generation + 1,
                    "a cluster call timed out; its connection was replaced"
                );
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "a cluster call timed out; reconnecting failed")
            }
            Err(_) => tracing::warn!("a cluster call timed out; reconnecting timed out"),
        }
    }

    /// Opens a new connection in place of the one of `generation` after a
    /// takeover, from the primaries that serve slots `now` (a seed that is
    /// paused would hold a new connection up for its whole timeout). It is
    /// installed only once every primary agrees on who serves each slot and
    /// each answers through it: one built from a node that has not heard of
    /// the failover yet would route calls back to the paused primary, where
    /// no watch would see them wait. Until `deadline`, looking again every
    /// [`takeover::PROBE_EVERY`]: a second primary paused and not yet
    /// failed over holds the replacement up until the cluster fails it
    /// over too, or the deadline comes.
    async fn replace_after_takeover(
        &self,
        generation: u64,
        mut now: Arc<SlotOwners>,
        deadline: tokio::time::Instant,
    ) {
        let _one_at_a_time = self.shared.replacing.lock().await;
        loop {
            if self.current().generation != generation {
                return;
            }
            if self.shared.watch.agreed(&now).await {
                match self.connect_routed(&now).await {
                    Ok(conn) => {
                        self.install(generation, conn, now);
                        return;
                    }
                    Err(e) => tracing::warn!(error = %e, "reconnecting after a failover failed"),
                }
            }
            if tokio::time::Instant::now() + takeover::PROBE_EVERY >= deadline {
                return;
            }
            tokio::time::sleep(takeover::PROBE_EVERY).await;
            if let Some(fresh) = self.shared.watch.look().await {
                now = fresh;
            }
        }
    }

    /// A connection seeded from the primaries of `now` (reached as the
    /// seeds are), once a `PING` routed to each of them through it has
    /// been answered.
    async fn connect_routed(&self, now: &SlotOwners) -> RedisResult<ClusterConnection> {
        let options = &self.shared.options;
        let quick = options.connect_timeout() * 2 + takeover::PROBE_TIMEOUT * 2;
        let connected = async {
            let client = client(now.primaries(), options).map_err(|e| {
                redis::RedisError::from((redis::ErrorKind::Client, "", e.to_string()))
            })?;
            let mut conn = client.get_async_connection().await?;
            for slot in now.a_slot_of_each() {
                conn.route_command(redis::cmd("PING"), to_primary_of(slot))
                    .await?;
            }
            Ok(conn)
        };
        tokio::time::timeout(quick, connected)
            .await
            .unwrap_or_else(|_| Err(timed_out()))
    }

    fn install(&self, generation: u64, conn: ClusterConnection, owners: Arc<SlotOwners>) {
        *self.lock_current() = Current {
            generation: generation + 1,
            conn,
            owners,
        };
    }

    /// Sends a transaction (one slot by construction). The cluster client
    /// follows redirections for single commands but not for the commands
    /// queued in a `MULTI`: after a failover or a slot move their replies
    /// are `MOVED`/`ASK` and `EXEC` aborts, having run nothing. Then a plain
    /// read of the slot's key lets the client follow the redirection (and
    /// learn the new owner), and the transaction is sent again, backing
    /// off, up to [`RETRIES`] times.
    async fn transaction(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let mut delay = Duration::from_millis(10);
        let mut attempt = 1;
        loop {
            let slot = pipeline.cmd_iter().find_map(slot_of);
            let sent = self
                .call(slot.map_or(Waits::Unwatched, Waits::Slot), |mut conn| async move {
                    conn.req_packed_commands(pipeline, offset, count).await
                })
                .await;
            let key = match &sent {
                Err(e) if attempt < RETRIES && redirected(e) => {
                    pipeline.cmd_iter().find_map(key_of)
                }
                _ => None,
            };
            let Some(key) = key else {
                return sent;
            };
            let exists = redis::cmd("EXISTS").arg(key).clone();
            let exists = &exists;
            let _ = self
                .call(Waits::Slot(slots::key_slot(key)), |mut conn| async move {
                    conn.req_packed_command(exists).await
                })
                .await;
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(500));
            attempt += 1;
        }
    }
}

impl Cluster {
    /// A slot for a command with no key that any primary answers: routed
    /// to its primary, so the watch knows which one the call waits on.
    /// Turns through the slots (a step that crosses a third of them), so
    /// such commands spread over the primaries.
    fn any_slot(&self) -> u16 {
        use std::sync::atomic::Ordering;
        nth_any_slot(self.shared.anywhere.fetch_add(1, Ordering::Relaxed))
    }

    /// A pipeline of commands with no key: to one primary when any would
    /// answer all of them, else as the cluster client routes it (unwatched).
    async fn keyless_pipeline(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
        if !pipeline.cmd_iter().all(answers_anywhere) {
            return self
                .call(Waits::Unwatched, |mut conn| async move {
                    conn.req_packed_commands(pipeline, offset, count).await
                })
                .await;
        }
        let slot = self.any_slot();
        let route = SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master));
        let route = &route;
        self.call(Waits::Slot(slot), |mut conn| async move {
            conn.route_pipeline(pipeline.clone(), offset, count, route.clone())
                .await
        })
        .await
    }
}

/// The slot of the `n`th command with no key routed to a primary of its
/// own (see [`Cluster::any_slot`]).
fn nth_any_slot(n: u32) -> u16 {
    (n.wrapping_mul(5471) % u32::from(SLOTS)) as u16
}

/// Routing to the primary of `slot`.
fn to_primary_of(slot: u16) -> redis::cluster_routing::RoutingInfo {
    use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
        slot,
        SlotAddr::Master,
    )))
}

/// Whether `cmd` has no key and any node answers it alike (`TIME`, which
/// sessionpack reads for the server's clock): the cluster client would
/// send it to a node at random, a paused one included, where no watch
/// would see it wait. (`PING` goes to every node, and says so.)
fn answers_anywhere(cmd: &Cmd) -> bool {
    command_is(cmd, &[b"TIME"])
}

/// Whether `cmd` is a `SCRIPT` command, which the cluster client sends to
/// every primary and which may be sent again.
fn to_every_primary(cmd: &Cmd) -> bool {
    command_is(cmd, &[b"SCRIPT"])
}

fn command_is(cmd: &Cmd, names: &[&[u8]]) -> bool {
    match cmd.args_iter().next() {
        Some(redis::Arg::Simple(name)) => names.iter().any(|n| name.eq_ignore_ascii_case(n)),
        _ => false,
    }
}

/// The error of a call whose response timeout ran out.
fn timed_out() -> redis::RedisError {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "a cluster call sent again after a failover ran out of time",
    )
    .into()
}

/// Whether `e` (or a command inside an aborted transaction) is a
/// redirection or a "try again": the same call succeeds once the cluster
/// has settled a failover or a slot move.
fn redirected(e: &redis::RedisError) -> bool {
    const CODES: [&str; 4] = ["MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN"];
    e.code().is_some_and(|c| CODES.contains(&c))
        || e.clone()
            .into_server_errors()
            .is_some_and(|errors| errors.iter().any(|(_, se)| CODES.contains(&se.code())))
}

/// The first key `cmd` names, for the commands sessionpack sends; `None`
/// for commands with no key (`TIME`, `PING`). Runs on every command a
/// pipeline holds, so it allocates nothing.
fn key_of(cmd: &Cmd) -> Option<&[u8]> {
    const SCRIPTS: [&[u8]; 6] = [
        b"EVAL",
        b"EVALSHA",
        b"EVAL_RO",
        b"EVALSHA_RO",
        b"FCALL",
        b"FCALL_RO",
    ];
    const KEYLESS: [&[u8]; 10] = [
        b"TIME", b"PING", b"INFO", b"SCRIPT", b"CONFIG", b"DBSIZE", b"MULTI", b"EXEC", b"CLUSTER",
        b"WAIT",
    ];
    let arg = |i: usize| match cmd.args_iter().nth(i)? {
        redis::Arg::Simple(b) => Some(b),
        _ => None,
    };
    let name = arg(0)?;
    let is = |names: &[&[u8]]| names.iter().any(|n| name.eq_ignore_ascii_case(n));
    let at = if is(&SCRIPTS) {
        let keys: usize = std::str::from_utf8(arg(2)?).ok()?.parse().ok()?;
        (keys > 0).then_some(3)?
    } else if is(&[b"OBJECT", b"MEMORY"]) {
        2
    } else if is(&KEYLESS) {
        return None;
    } else {
        1
    };
    arg(at)
}

/// The slot of the first key `cmd` names (see [`key_of`]).
fn slot_of(cmd: &Cmd) -> Option<u16> {
    key_of(cmd).map(slots::key_slot)
}

impl redis::aio::ConnectionLike for Cluster {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            if let Some(slot) = slot_of(cmd) {
                return self
                    .call(Waits::Slot(slot), |mut conn| async move {
                        conn.req_packed_command(cmd).await
                    })
                    .await;
            }
            if answers_anywhere(cmd) {
                let slot = self.any_slot();
                let routing = &to_primary_of(slot);
                return self
                    .call(Waits::Slot(slot), |mut conn| async move {
                        conn.route_command(cmd.clone(), routing.clone()).await
                    })
                    .await;
            }
            let waits = if to_every_primary(cmd) {
                Waits::Primaries
            } else {
                Waits::Unwatched
            };
            self.call(waits, |mut conn| async move {
                conn.req_packed_command(cmd).await
            })
            .await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            if pipeline.is_transaction() {
                return self.transaction(pipeline, offset, count).await;
            }
            let slots: Vec<Option<u16>> = pipeline.cmd_iter().map(slot_of).collect();
            let first = slots.iter().flatten().next().copied();
            let one_slot = slots.iter().flatten().all(|s| Some(*s) == first);
            if let (true, Some(slot)) = (one_slot, first) {
                return self
                    .call(Waits::Slot(slot), |mut conn| async move {
                        conn.req_packed_commands(pipeline, offset, count).await
                    })
                    .await;
            }
            if first.is_none() {
                return self.keyless_pipeline(pipeline, offset, count).await;
            }
            // Commands with no key go with the first part. Each part is a
            // call of its own: one that waits on a failed-over primary is
            // sent again without the others.
            let mut parts: Vec<(u16, Pipeline, Vec<usize>)> = Vec::new();
            let mut part_of: HashMap<u16, usize> = HashMap::new();
            for (i, (cmd, slot)) in pipeline.cmd_iter().zip(&slots).enumerate() {
                let slot = slot
                    .or(first)
                    .expect("a pipeline of several slots has a key");
                let p = *part_of.entry(slot).or_insert_with(|| {
                    parts.push((slot, Pipeline::new(), Vec::new()));
                    parts.len() - 1
                });
                parts[p].1.add_command(cmd.clone());
                parts[p].2.push(i);
            }
            let replies =
                futures_util::future::try_join_all(parts.iter().map(|(slot, part, _)| {
                    self.call(Waits::Slot(*slot), move |mut conn| async move {
                        conn.req_packed_commands(part, 0, part.len()).await
                    })
                }))
                .await?;
            let mut out = vec![Value::Nil; slots.len()];
            for ((_, _, positions), values) in parts.iter().zip(replies) {
                for (&i, v) in positions.iter().zip(values) {
                    out[i] = v;
                }
            }
            Ok(out)
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

impl crate::conn::wait::WaitAfter for Cluster {
    /// To the primary of the pipeline's slot when its keys share one (as
    /// every transaction's do), so one primary waits for its replicas;
    /// else to every primary (the cluster client's routing for `WAIT`).
    fn wait_after<'a>(
        &'a mut self,
        wait: &'a Cmd,
        pipeline: &'a Pipeline,
    ) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut slots = pipeline.cmd_iter().filter_map(slot_of);
            let first = slots.next();
            match first {
                Some(slot) if slots.all(|s| s == slot) => {
                    let routing = to_primary_of(slot);
                    // Not sent again after a takeover: a WAIT answered by
                    // the new primary would confirm a write it never saw.
                    let routing = &routing;
                    self.call(Waits::Unwatched, |mut conn| async move {
                        conn.route_command(wait.clone(), routing.clone()).await
                    })
                    .await
                }
                _ => self.req_packed_command(wait).await,
            }
        })
    }
}

#[cfg(test)]
mod tests;
