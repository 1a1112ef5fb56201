//! The servers a benchmark reads figures from: one server, or a cluster's
//! primaries, each through its own connection (a cluster connection sends
//! `INFO` to one node only).

use std::time::Duration;

use redis::aio::ConnectionManager;

use super::info::{MemorySample, info, server_cpu_secs, wait_for_rehash};
use sessionpack::conn::ConnectOptions;
use sessionpack::error::Result;

/// One connection per server, in the order of the URLs given.
pub struct Nodes {
    urls: Vec<String>,
    conns: Vec<ConnectionManager>,
}

impl Nodes {
    /// Connects to each of `urls`.
    pub async fn connect(urls: &[String], options: &ConnectOptions) -> Result<Self> {
        let mut conns = Vec::with_capacity(urls.len());
        for url in urls {
            conns.push(sessionpack::conn::connect_with(url, options).await?);
        }
        Ok(Self {
            urls: urls.to_vec(),
            conns,
        })
    }

    /// The servers' URLs.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// Empties every node and lets its allocator hand freed pages back, so
    /// RSS starts low.
    pub async fn flush(&mut self) -> Result<()> {
        for conn in &mut self.conns {
            let _: () = redis::cmd("FLUSHALL").arg("SYNC").query_async(conn).await?;
            let _: redis::RedisResult<()> =
                redis::cmd("MEMORY").arg("PURGE").query_async(conn).await;
        }
        Ok(())
    }

    /// Each node's memory figures.
    pub async fn samples(&mut self) -> Result<Vec<MemorySample>> {
        let mut samples = Vec::with_capacity(self.conns.len());
        for conn in &mut self.conns {
            samples.push(MemorySample::read(conn).await?);
        }
        Ok(samples)
    }

    /// The nodes' memory figures, summed.
    pub async fn sample(&mut self) -> Result<MemorySample> {
        Ok(MemorySample::sum(&self.samples().await?))
    }

    /// Each node's CPU seconds so far (user + sys) and commands processed.
    pub async fn work(&mut self) -> Result<Vec<Work>> {
        let mut out = Vec::with_capacity(self.conns.len());
        for conn in &mut self.conns {
            let cpu_secs = server_cpu_secs(conn).await?;
            let commands = info(conn, "stats")
                .await?
                .get("total_commands_processed")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            out.push(Work { cpu_secs, commands });
        }
        Ok(out)
    }

    /// Each node's CPU seconds per second while nothing is asked of it
    /// (its cron, and on a cluster the cluster bus and replication pings),
    /// over `window`: what a measurement subtracts for its own duration.
    pub async fn idle_rates(&mut self, window: Duration) -> Result<Vec<f64>> {
        let before = self.work().await?;
        tokio::time::sleep(window).await;
        let after = self.work().await?;
        Ok(work_since(&after, &before)
            .iter()
            .map(|w| (w.cpu_secs / window.as_secs_f64()).max(0.0))
            .collect())
    }

    /// Waits for every node's rehashing (see [`wait_for_rehash`]).
    pub async fn settle(&mut self, max: Duration) -> Result<bool> {
        let mut settled = true;
        for conn in &mut self.conns {
            settled &= wait_for_rehash(conn, max).await?;
        }
        Ok(settled)
    }
}

/// What one node has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Work {
    /// CPU seconds, user + sys (`INFO cpu`).
    pub cpu_secs: f64,
    /// Commands processed (`INFO stats`).
    pub commands: u64,
}

impl Work {
    /// The work done between `before` and `self`.
    pub fn since(self, before: Self) -> Self {
        Self {
            cpu_secs: self.cpu_secs - before.cpu_secs,
            commands: self.commands.saturating_sub(before.commands),
        }
    }
}

/// Each node's work between two readings of [`Nodes::work`].
pub fn work_since(after: &[Work], before: &[Work]) -> Vec<Work> {
    after.iter().zip(before).map(|(a, b)| a.since(*b)).collect()
}
