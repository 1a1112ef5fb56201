//! Script calls sent as one pipeline for a layout's bulk operations, their
//! errors named by the session whose call failed.

use redis::Script;

use crate::error::{Error, Result};
use crate::scripts::{first_failed, pipelined_each};
use crate::session::id::SessionId;
use crate::session::layout::Layout;

/// Sends a pipeline of script calls; the calls the server answered with
/// `NOSCRIPT` (it had lost the script) are sent again, alone, once the
/// script is loaded. Only those: on a cluster some primaries may have run
/// their calls already, and a second insert would find its own session
/// and report the id taken. An error names the location of the first item
/// that failed.
pub async fn pipelined<C, L, T>(
    conn: &C,
    layout: &L,
    ids: &[SessionId],
    invocations: &[redis::ScriptInvocation<'_>],
    script: &Script,
) -> Result<Vec<T>>
where
    C: redis::aio::ConnectionLike + Clone + Send,
    L: Layout,
    T: redis::FromRedisValue,
{
    let replies = pipelined_each(conn, invocations, script).await?;
    let failed = replies.iter().filter(|r| r.is_err()).count();
    let total = replies.len();
    replies
        .into_iter()
        .enumerate()
        .map(|(i, reply)| {
            let located = |e: redis::RedisError| {
                let error = Error::from_redis(e.clone(), || match ids.get(i) {
                    Some(id) => layout.location(id),
                    None => format!("{}: a pipeline", layout.name()),
                });
                match error {
                    // One line for the whole pipeline, not one per call.
                    Error::Redis(_) if failed > 1 => Error::Redis(redis::RedisError::from((
                        e.kind(),
                        "pipeline",
                        format!("{failed} commands failed of {total}; the first: {e}"),
                    ))),
                    other => other,
                }
            };
            reply
                .and_then(|v| redis::from_redis_value(v).map_err(Into::into))
                .map_err(located)
        })
        .collect()
}

/// Maps a pipeline's error to this crate's, naming where the id whose
/// command failed first lives (`per` commands were sent per id).
pub fn pipeline_error<'a, L: Layout>(
    layout: &'a L,
    ids: &'a [SessionId],
    per: usize,
) -> impl FnOnce(redis::RedisError) -> Error + 'a {
    move |e| {
        let first = first_failed(&e).and_then(|i| ids.get(i / per));
        Error::from_redis(e, || match first {
            Some(id) => layout.location(id),
            None => format!("{}: a pipeline", layout.name()),
        })
    }
}
