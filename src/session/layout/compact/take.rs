//! Taking an entry out of the compact layout in one step: the consume of a
//! one-time token ([`crate::tokens`]).

use super::{Compact, Value, parse_value};
use crate::error::Result;
use crate::scripts::COMPACT_TAKE;
use crate::session::id::{InvalidIdExt, SessionId};
use crate::session::layout::{Layout, Stored};

impl<C> Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// Removes a live entry and returns it, in one script: of any number
    /// of callers taking the same id at once, exactly one gets it. `None`
    /// when there is no live entry (never stored, taken, or expired: an
    /// expired one is left for the sweeper).
    pub async fn take(&self, id: &SessionId) -> Result<Option<Stored>> {
        id.check_width(self.id_width())?;
        let reply: Option<(Vec<u8>, Vec<u8>)> = self
            .call_on_session(id, |k| self.invocation(self.script(&COMPACT_TAKE), k))
            .await?;
        let Some((bytes, side)) = reply else {
            return Ok(None);
        };
        Ok(match parse_value(&bytes).ok_or_else(|| self.corrupt(id))? {
            Value::Here { expires_at, record } => Some(Stored { record, expires_at }),
            // A record key evicted on its own leaves nothing to return.
            Value::OutOfLine { expires_at } => (!side.is_empty()).then_some(Stored {
                record: side,
                expires_at,
            }),
            Value::Pieced {
                expires_at,
                mut head,
                check,
                ..
            } => {
                // A piece missing reads as empty here: the check tells.
                head.extend_from_slice(&side);
                Some(Stored {
                    record: self.checked_record(id, check, head)?,
                    expires_at,
                })
            }
        })
    }
}
