//! Writes that survive a failover: [`WaitForReplicas`] follows every write
//! with `WAIT`.
//!
//! Redis replicates asynchronously: a primary acknowledges a write before
//! its replicas have it, so a primary that dies in that moment takes the
//! write with it, and the replica that takes over never saw it (a session
//! created then is gone; one destroyed then comes back). `WAIT n timeout`
//! blocks the caller until `n` replicas have everything the connection
//! wrote, or the timeout passes. It does not make Redis strongly
//! consistent (a write that times out may still be lost, and one that
//! reached a replica may be lost if another replica wins the election),
//! but a write it confirms survives the failover of its primary to a
//! replica that confirmed it.
//!
//! The cost is a round trip per write, and the replicas' lag added to
//! every write's latency. A single command carries its `WAIT` in the same
//! pipeline; after a transaction or a pipeline, the connection decides
//! where the `WAIT` goes ([`WaitAfter`]): on a cluster, to the primary that
//! ran it when its keys share a slot (every sessionpack transaction), to
//! every primary otherwise. Reads are sent as they are.
//!
//! ```no_run
//! # async fn run() -> sessionpack::Result<()> {
//! use std::time::Duration;
//! use sessionpack::conn::wait::WaitForReplicas;
//!
//! let conn = sessionpack::connect("redis://127.0.0.1/").await?;
//! let conn = WaitForReplicas::new(conn, 1, Duration::from_millis(100));
//! let layout = sessionpack::Compact::new(conn, sessionpack::CompactConfig::new(14)).await?;
//! # Ok(()) }
//! ```

use std::time::Duration;

use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Value};

/// A connection whose writes each wait for `replicas` replicas (see the
/// module docs). A write that fewer replicas confirm within the timeout
/// is reported as [`crate::Error::NotReplicated`]: it was made on the
/// primary, and may or may not survive a failover.
#[derive(Clone, Debug)]
pub struct WaitForReplicas<C> {
    inner: C,
    replicas: u32,
    timeout: Duration,
}

impl<C> WaitForReplicas<C> {
    /// Wraps `conn`: each write waits for `replicas` replicas, up to
    /// `timeout` (at least a millisecond: `WAIT` with 0 would block for
    /// ever).
    pub fn new(conn: C, replicas: u32, timeout: Duration) -> Self {
        Self {
            inner: conn,
            replicas,
            timeout: timeout.max(Duration::from_millis(1)),
        }
    }

    /// The connection underneath.
    pub fn inner(&self) -> &C {
        &self.inner
    }
}

/// Whether `cmd` may write. Commands not known to only read count as
/// writes.
fn writes(cmd: &Cmd) -> bool {
    const READS: &[&[u8]] = &[
        b"GET",
        b"MGET",
        b"HGET",
        b"HMGET",
        b"HGETALL",
        b"HLEN",
        b"HKEYS",
        b"HVALS",
        b"HEXISTS",
        b"HSTRLEN",
        b"HSCAN",
        b"ZSCORE",
        b"ZRANGE",
        b"ZRANGEBYSCORE",
        b"ZCARD",
        b"ZCOUNT",
        b"ZSCAN",
        b"EXISTS",
        b"TYPE",
        b"TTL",
        b"PTTL",
        b"EXPIRETIME",
        b"PEXPIRETIME",
        b"STRLEN",
        b"TIME",
        b"PING",
        b"INFO",
        b"CONFIG",
        b"DBSIZE",
        b"SCAN",
        b"KEYS",
        b"OBJECT",
        b"MEMORY",
        b"SCRIPT",
        b"CLUSTER",
        b"HELLO",
        b"WAIT",
    ];
    let mut args = cmd.args_iter();
    match args.next() {
        // The script that only reads (`Reads`) waits for nothing.
        Some(redis::Arg::Simple(name)) if name.eq_ignore_ascii_case(b"EVALSHA") => {
            !matches!(args.next(), Some(redis::Arg::Simple(sha)) if crate::scripts::only_reads(sha))
        }
        Some(redis::Arg::Simple(name)) => !READS.iter().any(|r| r.eq_ignore_ascii_case(name)),
        _ => true,
    }
}

/// A connection [`WaitForReplicas`] can wrap: where the `WAIT` that
/// follows a pipeline or a transaction goes.
pub trait WaitAfter: redis::aio::ConnectionLike + Send {
    /// Sends `wait` after `pipeline` has run. One server's connections send
    /// it as they send any command; a cluster's route it to the primary
    /// that ran the pipeline.
    fn wait_after<'a>(
        &'a mut self,
        wait: &'a Cmd,
        pipeline: &'a Pipeline,
    ) -> RedisFuture<'a, Value> {
        let _ = pipeline;
        self.req_packed_command(wait)
    }
}

impl WaitAfter for redis::aio::ConnectionManager {}
impl WaitAfter for redis::aio::MultiplexedConnection {}

impl<C> WaitForReplicas<C>
where
    C: WaitAfter,
{
    fn wait_cmd(&self) -> Cmd {
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(self.replicas).arg(self.timeout.as_millis() as u64);
        cmd
    }

    /// Sends `WAIT` where `pipeline` ran and checks its reply.
    async fn wait_after(&mut self, pipeline: &Pipeline) -> redis::RedisResult<()> {
        let wait = self.wait_cmd();
        let reply = self.inner.wait_after(&wait, pipeline).await?;
        self.check(&reply)
    }

    /// Checks a reply to `WAIT`.
    fn check(&self, reply: &Value) -> redis::RedisResult<()> {
        check_wait(reply, self.replicas)
    }
}

/// Checks a reply to `WAIT` for `replicas` confirmations. An error in its
/// place (a node that has just become a replica refuses `WAIT`) leaves the
/// write unconfirmed, as too few replicas do.
fn check_wait(reply: &Value, replicas: u32) -> redis::RedisResult<()> {
    if let Value::ServerError(e) = reply {
        return Err(RedisError::from((
            ErrorKind::Client,
            crate::error::NOT_REPLICATED,
            format!("WAIT answered {e}"),
        )));
    }
    let confirmed: i64 = redis::from_redis_value_ref(reply)?;
    if confirmed < i64::from(replicas) {
        return Err(RedisError::from((
            ErrorKind::Client,
            crate::error::NOT_REPLICATED,
            format!("{confirmed} of {replicas} replicas"),
        )));
    }
    Ok(())
}

impl<C> redis::aio::ConnectionLike for WaitForReplicas<C>
where
    C: WaitAfter,
{
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            if !writes(cmd) {
                return self.inner.req_packed_command(cmd).await;
            }
            // One pipeline: the WAIT reaches the node and the connection
            // the write did.
            let mut pipe = redis::pipe();
            pipe.add_command(cmd.clone()).add_command(self.wait_cmd());
            let mut replies = self.inner.req_packed_commands(&pipe, 0, 2).await?;
            let wait = replies.pop().unwrap_or(Value::Nil);
            let reply = replies.pop().unwrap_or(Value::Nil);
            if let Value::ServerError(e) = &reply {
                return Err(e.clone().into());
            }
            self.check(&wait)?;
            Ok(reply)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            // A pipeline (a transaction, or writes to many slots) is
            // followed by its own WAIT, where the pipeline ran. Were the
            // connection re-established in between, the WAIT would see
            // none of the pipeline's writes.
            let replies = self
                .inner
                .req_packed_commands(pipeline, offset, count)
                .await?;
            if pipeline.cmd_iter().any(writes) {
                self.wait_after(pipeline).await?;
            }
            Ok(replies)
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

#[cfg(test)]
mod tests {
    use super::writes;

    #[test]
    fn an_error_in_place_of_wait_s_count_is_not_replicated_and_transient() {
        let refused =
            redis::parse_redis_value(b"-ERR WAIT cannot be used with replica instances.\r\n")
                .unwrap();
        assert!(matches!(refused, redis::Value::ServerError(_)));
        for reply in [refused, redis::Value::Int(0)] {
            let err = crate::Error::from(super::check_wait(&reply, 1).unwrap_err());
            assert!(matches!(err, crate::Error::NotReplicated(_)), "{err:?}");
            assert!(err.is_transient());
        }
        assert!(super::check_wait(&redis::Value::Int(1), 1).is_ok());
    }

    #[test]
    fn only_known_reads_skip_the_wait() {
        assert!(!writes(redis::cmd("HGET").arg("k").arg("f")));
        assert!(!writes(redis::cmd("get").arg("k")));
        assert!(writes(redis::cmd("HSET").arg("k").arg("f").arg("v")));
        assert!(writes(redis::cmd("EVALSHA").arg("abc").arg(1).arg("k")));
        assert!(writes(redis::cmd("MULTI").arg("x")));
        let sha = crate::scripts::Reads::sha();
        assert!(!writes(redis::cmd("EVALSHA").arg(sha).arg(1).arg("k")));
        assert!(writes(&redis::cmd("SOMETHINGNEW")));
    }
}
