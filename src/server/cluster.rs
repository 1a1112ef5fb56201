//! A throwaway Redis Cluster of local `redis-server` processes, for tests
//! and benchmarks: each node a [`LocalServer`] started with
//! `cluster-enabled yes` on a free loopback port, joined by
//! `redis-cli --cluster create`, and stopped by its own process id.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::LocalServer;
use crate::error::{Error, Result};

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
        let timeout = NODE_TIMEOUT.as_millis().to_string();
        let nodes = (0..primaries * (1 + replicas))
            .map(|_| {
                LocalServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-node-timeout",
                    &timeout,
                ])
            })
            .collect::<Result<Vec<_>>>()?;
        let cluster = Self { nodes };
        let binary = std::env::var_os(REDIS_CLI_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("redis-cli"));
        let output = Command::new(&binary)
            .arg("--cluster")
            .arg("create")
            .args(cluster.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())))
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                Error::Config(format!(
                    "cannot run {}: {e} (it comes with redis-server, or name one in {REDIS_CLI_ENV})",
                    binary.display()
                ))
            })?;
        if !output.status.success() {
            return Err(Error::Config(format!(
                "redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&output.stdout)
                    .lines()
                    .chain(String::from_utf8_lossy(&output.stderr).lines())
                    .filter(|l| l.contains("ERR") || l.contains("rror"))
                    .collect::<Vec<_>>()
                    .join("; ")
            )));
        }
        cluster.wait_until_ready(READY_TIMEOUT)?;
        Ok(cluster)
    }

    /// Every node, primaries and replicas, in the order they were started.
    pub fn nodes(&self) -> &[LocalServer] {
        &self.nodes
    }

    /// `redis://` URLs of every node, to seed a cluster client.
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

    /// Waits until every running node reports the cluster up with every
    /// slot assigned, and every running replica's link to its primary up.
    pub fn wait_until_ready(&self, max: Duration) -> Result<()> {
        let deadline = Instant::now() + max;
        loop {
            if self.nodes.iter().filter(|n| n.pid().is_some()).all(ready) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Config(format!(
                    "the local cluster was not ready within {max:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
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
