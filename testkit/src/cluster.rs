//! A throwaway Redis Cluster of local `redis-server` processes, for tests
//! and benchmarks: each node a [`LocalServer`] started with
//! `cluster-enabled yes` on a free loopback port, joined by
//! `redis-cli --cluster create`, and stopped by its own process id.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{ClientCerts, LocalServer, TestCerts};
use crate::{Error, Result};

/// Environment variable naming the `redis-cli` binary that creates the
/// cluster (default: `redis-cli` on the `PATH`).
pub const REDIS_CLI_ENV: &str = "SESSIONPACK_REDIS_CLI";

/// How long a node may go unreachable before its replica takes over.
pub const NODE_TIMEOUT: Duration = Duration::from_millis(2000);

const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A local Redis Cluster; every node is stopped when it is dropped.
#[derive(Debug)]
pub struct LocalCluster {
    nodes: Vec<LocalServer>,
}

/// What a node is now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// It holds slots.
    Primary,
    /// It replicates the primary listening on this port.
    Replica(u16),
}

impl LocalCluster {
    /// Starts `primaries` primaries, each with `replicas` replicas, and
    /// returns once every slot is served and every replica is in sync.
    pub fn start(primaries: usize, replicas: usize) -> Result<Self> {
        Self::start_inner(primaries, replicas, None)
    }

    /// [`LocalCluster::start`] with every node speaking TLS only, clients,
    /// the cluster bus and replication alike (`tls-cluster yes`);
    /// [`Error::Unsupported`] if the server or `redis-cli` was built
    /// without TLS.
    pub fn start_tls(
        primaries: usize,
        replicas: usize,
        certs: &TestCerts,
        client_certs: ClientCerts,
    ) -> Result<Self> {
        Self::start_inner(primaries, replicas, Some((certs, client_certs)))
    }

    fn start_inner(
        primaries: usize,
        replicas: usize,
        tls: Option<(&TestCerts, ClientCerts)>,
    ) -> Result<Self> {
        let timeout = NODE_TIMEOUT.as_millis().to_string();
        // `redis-cli --cluster reshard` compares a key found on both nodes
        // (a MIGRATE whose reply was lost left the source its copy) with
        // `DEBUG DIGEST-VALUE`, and moves it again when the copies agree:
        // it may run DEBUG from this machine.
        let args = [
            "--cluster-enabled",
            "yes",
            "--cluster-node-timeout",
            &timeout,
            "--enable-debug-command",
            "local",
        ];
        let nodes = (0..primaries * (1 + replicas))
            .map(|_| match tls {
                None => LocalServer::start_with(&args),
                Some((certs, client_certs)) => LocalServer::start_tls(
                    certs,
                    client_certs,
                    &[&args[..], &["--tls-cluster", "yes"]].concat(),
                ),
            })
            .collect::<Result<Vec<_>>>()?;
        let cluster = Self { nodes };
        let binary = redis_cli();
        let output = Command::new(&binary)
            .args(cluster.nodes[0].cli_tls_args())
            .arg("--cluster")
            .arg("create")
            .args(cluster.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())))
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                Error::Setup(format!(
                    "cannot run {}: {e} (it comes with redis-server, or name one in {REDIS_CLI_ENV})",
                    binary.display()
                ))
            })?;
        if !output.status.success() {
            let why = tail(&output);
            if tls.is_some() && why.to_ascii_lowercase().contains("tls") {
                return Err(Error::Unsupported(format!(
                    "{} cannot reach TLS nodes (built without TLS?): {why}",
                    binary.display()
                )));
            }
            return Err(Error::Setup(format!(
                "redis-cli --cluster create failed: {why}"
            )));
        }
        cluster.wait_until_ready(READY_TIMEOUT)?;
        Ok(cluster)
    }

    /// Every node, primaries and replicas, in the order they were started.
    pub fn nodes(&self) -> &[LocalServer] {
        &self.nodes
    }

    /// URLs of every node (`rediss://` for TLS), to seed a cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(LocalServer::url).collect()
    }

    /// What `node` is now, by its own account (`ROLE`); `None` if it is
    /// not running or does not answer.
    pub fn role(&self, node: &LocalServer) -> Option<Role> {
        node.pid()?;
        let mut conn = node.client().ok()?.get_connection().ok()?;
        let role: redis::Value = redis::cmd("ROLE").query(&mut conn).ok()?;
        let redis::Value::Array(parts) = role else {
            return None;
        };
        match parts.first()? {
            redis::Value::BulkString(b) if b == b"master" => Some(Role::Primary),
            redis::Value::BulkString(b) if b == b"slave" => match parts.get(2)? {
                redis::Value::Int(port) => Some(Role::Replica(u16::try_from(*port).ok()?)),
                _ => None,
            },
            _ => None,
        }
    }

    /// The nodes that are primaries now.
    pub fn primaries(&self) -> Vec<&LocalServer> {
        self.nodes
            .iter()
            .filter(|n| self.role(n) == Some(Role::Primary))
            .collect()
    }

    /// `node`'s id in the cluster (`CLUSTER MYID`).
    pub fn node_id(&self, node: &LocalServer) -> Result<String> {
        let mut conn = node.client()?.get_connection()?;
        Ok(redis::cmd("CLUSTER").arg("MYID").query(&mut conn)?)
    }

    /// The slot ranges `node` serves now (`CLUSTER SLOTS` as it sees
    /// them), inclusive.
    pub fn slot_ranges(&self, node: &LocalServer) -> Result<Vec<(u16, u16)>> {
        let mut conn = node.client()?.get_connection()?;
        let ranges: Vec<redis::Value> = redis::cmd("CLUSTER").arg("SLOTS").query(&mut conn)?;
        let port = redis::Value::Int(i64::from(node.port()));
        Ok(ranges
            .into_iter()
            .filter_map(|range| {
                let redis::Value::Array(parts) = range else {
                    return None;
                };
                match (parts.first(), parts.get(1), parts.get(2)) {
                    (
                        Some(redis::Value::Int(lo)),
                        Some(redis::Value::Int(hi)),
                        Some(redis::Value::Array(owner)),
                    ) if owner.get(1) == Some(&port) => {
                        Some((u16::try_from(*lo).ok()?, u16::try_from(*hi).ok()?))
                    }
                    _ => None,
                }
            })
            .collect())
    }

    /// How many slots `node` serves now.
    pub fn slots_of(&self, node: &LocalServer) -> Result<u64> {
        Ok(self
            .slot_ranges(node)?
            .iter()
            .map(|&(lo, hi)| u64::from(hi - lo) + 1)
            .sum())
    }

    /// The slot `key` hashes to (`CLUSTER KEYSLOT`).
    pub fn key_slot(&self, key: &str) -> Result<u16> {
        let mut conn = self.nodes[0].client()?.get_connection()?;
        Ok(redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut conn)?)
    }

    /// Moves `slots` slots, with their keys, from the primary `from` to
    /// the primary `to` (`redis-cli --cluster reshard`), while the cluster
    /// serves traffic; returns once the cluster is settled.
    pub fn reshard(&self, from: &LocalServer, to: &LocalServer, slots: u64) -> Result<()> {
        let output = Command::new(redis_cli())
            .args(from.cli_tls_args())
            .arg("--cluster")
            .arg("reshard")
            .arg(format!("127.0.0.1:{}", from.port()))
            .args(["--cluster-from", &self.node_id(from)?])
            .args(["--cluster-to", &self.node_id(to)?])
            .args(["--cluster-slots", &slots.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| Error::Setup(format!("cannot run redis-cli: {e}")))?;
        if !output.status.success() {
            return Err(Error::Setup(format!(
                "redis-cli --cluster reshard failed: {}",
                tail(&output)
            )));
        }
        self.wait_until_ready(READY_TIMEOUT)
    }

    /// Waits until every replica has everything its primary wrote.
    pub fn wait_in_sync(&self, max: Duration) -> Result<()> {
        let deadline = Instant::now() + max;
        while !self.nodes.iter().all(replicas_caught_up) {
            if Instant::now() > deadline {
                return Err(Error::Setup(format!(
                    "the local cluster's replicas did not catch up within {max:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Waits until every running node reports the cluster up with every
    /// slot assigned, and every running replica's link to its primary up.
    pub fn wait_until_ready(&self, max: Duration) -> Result<()> {
        let deadline = Instant::now() + max;
        loop {
            if self.nodes.iter().filter(|n| n.pid().is_some()).all(ready) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Setup(format!(
                    "the local cluster was not ready within {max:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The last lines a command printed, for an error message.
fn tail(output: &std::process::Output) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

/// The `redis-cli` to run.
fn redis_cli() -> PathBuf {
    std::env::var_os(REDIS_CLI_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("redis-cli"))
}

/// Whether every replica of the primary `node` has everything it wrote
/// (`INFO replication`: each replica's offset is the primary's); true for
/// a replica or a node that does not answer.
fn replicas_caught_up(node: &LocalServer) -> bool {
    let Ok(mut conn) = node.client().and_then(|c| Ok(c.get_connection()?)) else {
        return true;
    };
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut conn)
        .unwrap_or_default();
    if !info.contains("role:master") {
        return true;
    }
    let field = |line: &str, key: &str| {
        line.split(',')
            .find_map(|f| f.strip_prefix(key))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    let Some(offset) = info
        .lines()
        .find_map(|l| l.strip_prefix("master_repl_offset:"))
        .and_then(|v| v.trim().parse::<u64>().ok())
    else {
        return false;
    };
    info.lines()
        .filter(|l| l.starts_with("slave") && l.contains(":ip="))
        .all(|l| field(l, "offset=") == Some(offset))
}

/// Whether `node` sees the cluster up and, as a replica, is in sync.
fn ready(node: &LocalServer) -> bool {
    let Ok(mut conn) = node.client().and_then(|c| Ok(c.get_connection()?)) else {
        return false;
    };
    let info = |section: &str, conn: &mut redis::Connection| -> String {
        redis::cmd(section)
            .arg(if section == "CLUSTER" {
                "INFO"
            } else {
                "replication"
            })
            .query(conn)
            .unwrap_or_default()
    };
    let cluster = info("CLUSTER", &mut conn);
    let replication = info("INFO", &mut conn);
    cluster.contains("cluster_state:ok")
        && cluster.contains("cluster_slots_assigned:16384")
        && (replication.contains("role:master") || replication.contains("master_link_status:up"))
}
