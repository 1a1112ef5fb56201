//! Where a migration's keys are: one server, or the primaries of a Redis
//! Cluster, scanned one after another.
//!
//! On a cluster a key moves while a pass scans when its slot is resharded
//! or its primary fails over, and a `SCAN` of its old node or its new one
//! may then miss it. So the pass reads the slot map (each primary's own
//! view of its slots, migrations in progress included) before every
//! batch, and a pass is whole only if it went round under one map with no
//! slot migrating: a map that changed, a migration seen, or a node that
//! failed begins the scan again from the first primary (`rescans` in the
//! report). Copies and closes are safe to repeat, so a rescan only reads
//! again what it read before.

use std::collections::HashMap;
use std::time::Instant;

use redis::aio::ConnectionManager;
use sessionpack::conn::ConnectOptions;
use sessionpack::error::{Error, Result};

use super::report::Report;
use super::{FAILING_FOR, PAUSE};

/// The keys of a migration's server or cluster.
pub enum Keyspace {
    /// One server.
    Server(ConnectionManager),
    /// A cluster's primaries.
    Cluster(Box<Primaries>),
}

/// A cluster's primaries as a pass scans them.
pub struct Primaries {
    /// Where to ask for the slot map first, then the nodes known.
    seeds: Vec<String>,
    options: ConnectOptions,
    /// A connection to each node met, by URL.
    conns: HashMap<String, ConnectionManager>,
    /// The primaries serving slots now, by address.
    nodes: Vec<String>,
    /// The node that told the primaries last.
    answered: Option<String>,
    /// When the nodes began failing to answer, if they do.
    failing_since: Option<Instant>,
}

/// One batch of keys, and whether the scan went round with it.
pub struct Scanned {
    /// The keys.
    pub keys: Vec<Vec<u8>>,
    /// Whether the scan went round (under one slot map, on a cluster).
    pub round: bool,
}

impl Keyspace {
    /// The primaries of the cluster that `seeds` belong to, reached with
    /// `options`.
    pub async fn cluster(seeds: Vec<String>, options: ConnectOptions) -> Result<Self> {
        let mut primaries = Primaries {
            seeds,
            options,
            conns: HashMap::new(),
            nodes: Vec::new(),
            answered: None,
            failing_since: None,
        };
        primaries.read_map().await?;
        Ok(Self::Cluster(Box::new(primaries)))
    }

    /// The next batch of keys matching `pattern` at the report's place
    /// (`cursor`, and on a cluster `node` and `slot_map`), which it moves on.
    pub async fn scan(
        &mut self,
        report: &mut Report,
        pattern: &str,
        count: usize,
    ) -> Result<Scanned> {
        match self {
            Self::Server(conn) => {
                let (cursor, keys) = scan(conn, report.cursor, pattern, count).await?;
                report.cursor = cursor;
                Ok(Scanned {
                    keys,
                    round: cursor == 0,
                })
            }
            Self::Cluster(primaries) => primaries.scan(report, pattern, count).await,
        }
    }

    /// `used_memory`, summed over the primaries.
    pub async fn used_memory(&mut self) -> Result<u64> {
        let mut total = 0;
        for conn in self.conns().await? {
            let info = crate::harness::info::info(&mut conn.clone(), "memory").await?;
            total += info
                .get("used_memory")
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
        Ok(total)
    }

    /// The server's CPU seconds (`INFO cpu`), by primary.
    pub async fn cpu_secs(&mut self) -> Result<HashMap<String, f64>> {
        let mut out = HashMap::new();
        let nodes: Vec<(String, ConnectionManager)> = match self {
            Self::Server(conn) => vec![(String::new(), conn.clone())],
            Self::Cluster(p) => p.primary_conns().await?,
        };
        for (node, mut conn) in nodes {
            out.insert(
                node,
                crate::harness::info::server_cpu_secs(&mut conn).await?,
            );
        }
        Ok(out)
    }

    /// Unlinks every key matching `pattern` of type `kind`, node by node.
    pub async fn unlink_matching(&mut self, pattern: &str, kind: &str) -> Result<()> {
        for mut conn in self.conns().await? {
            let keys = matching(&mut conn, pattern, Some(kind)).await?;
            // One key a command: on a cluster node they may lie in many
            // slots.
            let mut pipe = redis::pipe();
            for key in &keys {
                pipe.cmd("UNLINK").arg(key).ignore();
            }
            if !keys.is_empty() {
                let () = pipe.query_async(&mut conn).await?;
            }
        }
        Ok(())
    }

    /// Keys on the server, or on every primary.
    pub async fn dbsize(&mut self) -> Result<u64> {
        let mut total = 0;
        for mut conn in self.conns().await? {
            total += redis::cmd("DBSIZE").query_async::<u64>(&mut conn).await?;
        }
        Ok(total)
    }

    /// The sum of the integers in the keys matching `pattern`, node by
    /// node.
    pub async fn sum_matching(&mut self, pattern: &str) -> Result<u64> {
        let mut total = 0;
        for mut conn in self.conns().await? {
            let keys = matching(&mut conn, pattern, None).await?;
            let mut pipe = redis::pipe();
            for key in &keys {
                pipe.cmd("GET").arg(key);
            }
            if !keys.is_empty() {
                let counts: Vec<Option<u64>> = pipe.query_async(&mut conn).await?;
                total += counts.into_iter().flatten().sum::<u64>();
            }
        }
        Ok(total)
    }

    async fn conns(&mut self) -> Result<Vec<ConnectionManager>> {
        Ok(match self {
            Self::Server(conn) => vec![conn.clone()],
            Self::Cluster(p) => p
                .primary_conns()
                .await?
                .into_iter()
                .map(|(_, c)| c)
                .collect(),
        })
    }
}

/// Every key of one node matching `pattern` (and of type `kind`): the
/// few keys a migration keeps (counters, marks).
async fn matching(
    conn: &mut ConnectionManager,
    pattern: &str,
    kind: Option<&str>,
) -> Result<Vec<Vec<u8>>> {
    let mut all = Vec::new();
    let mut cursor = 0u64;
    loop {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000);
        if let Some(kind) = kind {
            cmd.arg("TYPE").arg(kind);
        }
        let (next, keys): (u64, Vec<Vec<u8>>) = cmd.query_async(conn).await?;
        all.extend(keys);
        if next == 0 {
            return Ok(all);
        }
        cursor = next;
    }
}

async fn scan(
    conn: &mut ConnectionManager,
    cursor: u64,
    pattern: &str,
    count: usize,
) -> Result<(u64, Vec<Vec<u8>>)> {
    Ok(redis::cmd("SCAN")
        .arg(cursor)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(count)
        .query_async(conn)
        .await?)
}

impl Primaries {
    async fn conn(&mut self, url: &str) -> Result<ConnectionManager> {
        if let Some(conn) = self.conns.get(url) {
            return Ok(conn.clone());
        }
        let conn = sessionpack::conn::connect_with(url, &self.options).await?;
        self.conns.insert(url.to_owned(), conn.clone());
        Ok(conn)
    }

    async fn primary_conns(&mut self) -> Result<Vec<(String, ConnectionManager)>> {
        let mut out = Vec::new();
        for node in self.nodes.clone() {
            out.push((node.clone(), self.conn(&node).await?));
        }
        Ok(out)
    }

    /// Reads the primaries serving slots (from the first node that
    /// answers: the seeds, then the nodes met), and each one's slots as it
    /// reports them itself, where a slot migrating in or out shows.
    /// Returns the map, and whether a slot is migrating.
    async fn read_map(&mut self) -> Result<(String, bool)> {
        // Over connections kept from batch to batch: the node that answered
        // last first, then the primaries, the seeds and every node met (a
        // failover may have taken any of them).
        let mut asked: Vec<String> = Vec::new();
        for url in self
            .answered
            .iter()
            .chain(&self.nodes)
            .chain(&self.seeds)
            .chain(self.conns.keys())
        {
            if !asked.contains(url) {
                asked.push(url.clone());
            }
        }
        let mut last = None;
        let mut nodes = None;
        for url in asked {
            let found = match self.conn(&url).await {
                Ok(mut conn) => sessionpack::conn::cluster::primaries_over(&mut conn, &url).await,
                Err(e) => Err(e),
            };
            match found {
                Ok(found) => {
                    nodes = Some(found);
                    self.answered = Some(url);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let Some(nodes) = nodes else {
            return Err(last.unwrap_or_else(|| Error::Config("no cluster node named".into())));
        };
        let mut map = String::new();
        let mut moving = false;
        for node in &nodes {
            let mut conn = self.conn(node).await?;
            let text: String = redis::cmd("CLUSTER")
                .arg("NODES")
                .query_async(&mut conn)
                .await?;
            let own = text
                .lines()
                .find(|l| {
                    l.split_whitespace()
                        .nth(2)
                        .is_some_and(|f| f.contains("myself"))
                })
                .unwrap_or_default();
            let slots: Vec<&str> = own.split_whitespace().skip(8).collect();
            moving |= slots.iter().any(|s| s.starts_with('['));
            map.push_str(&format!("{node} {}\n", slots.join(" ")));
        }
        self.nodes = nodes;
        Ok((map, moving))
    }

    /// A batch of the cluster's scan (see the module docs).
    async fn scan(&mut self, report: &mut Report, pattern: &str, count: usize) -> Result<Scanned> {
        loop {
            match self.try_scan(report, pattern, count).await {
                Ok(scanned) => {
                    self.failing_since = None;
                    return Ok(scanned);
                }
                Err(e) if e.is_transient() || matches!(e, Error::Redis(_)) => {
                    let since = *self.failing_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > FAILING_FOR {
                        return Err(e);
                    }
                    tracing::warn!("the cluster did not answer a scan ({e}); looking again");
                    tokio::time::sleep(PAUSE).await;
                    // Whatever the map says now, the scan begins again.
                    report.slot_map.clear();
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn try_scan(
        &mut self,
        report: &mut Report,
        pattern: &str,
        count: usize,
    ) -> Result<Scanned> {
        let (map, moving) = self.read_map().await?;
        if map != report.slot_map {
            if !report.slot_map.is_empty() || report.node != 0 || report.cursor != 0 {
                report.rescans += 1;
            }
            report.slot_map = map;
            report.node = 0;
            report.cursor = 0;
            report.slots_migrating = false;
        }
        report.slots_migrating |= moving;
        let node = usize::try_from(report.node).unwrap_or(usize::MAX);
        let Some(url) = self.nodes.get(node).cloned() else {
            // A map of fewer primaries than the place names: begin again.
            report.slot_map.clear();
            return Ok(Scanned {
                keys: Vec::new(),
                round: false,
            });
        };
        let mut conn = self.conn(&url).await?;
        let (cursor, keys) = scan(&mut conn, report.cursor, pattern, count).await?;
        report.cursor = cursor;
        let mut round = false;
        if cursor == 0 {
            report.node += 1;
            if report.node as usize == self.nodes.len() {
                if report.slots_migrating {
                    // A slot migrated during the scan: a key may have
                    // moved from a node not yet scanned to one scanned.
                    report.rescans += 1;
                    report.node = 0;
                    report.slots_migrating = false;
                } else {
                    round = true;
                }
            }
        }
        Ok(Scanned { keys, round })
    }
}
