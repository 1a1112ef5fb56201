//! Writing back a session this process read, with plain commands: a save
//! is one `HSETEX FXX` of its value and pieces, named as the read found
//! them (on a server without `HSETEX`, a script of two commands,
//! `compact_resave.lua`), where the full script reads the stored value
//! first and checks the route.
//!
//! What makes that safe: a field names one session for as long as its key
//! exists (a key names one bucket of one shape, and a split or merge
//! replaces keys whole), so a write that needs only the field to be there
//! writes that session or nothing. Its pieces' long names are its own; its
//! short names are its own while it lives from record format
//! [`HELD_NAMES_FORMAT`]: no session gives them up while it lives (the
//! first stays as a hold) and no merge gives two sessions the same ones.
//! So names a read found are the session's still, or no one's.
//!
//! What a plain save promises, where the full save checks the stored
//! expiry by the server's clock: it writes only where the session's field
//! is, so a session deleted, revoked, rotated away or swept since the read
//! is never brought back; and only where the expiry the read found, and
//! the new one, are beyond the clock estimate's reach of now. A session
//! another process has since given an earlier expiry, now past but not
//! yet swept, is written anyway: the later write wins, as between any two
//! saves. Anything else (a record that changes its number of pieces or
//! goes out of line, an expiry near now, a bucket split since the read)
//! goes to the full script.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{Compact, HELD_NAMES_FORMAT};
use crate::error::{Error, Result};
use crate::session::id::SessionId;
use crate::session::layout::Stored;

/// How a read found a session's record kept in its bucket: what a plain
/// write of the same session names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kept {
    /// Whole in its value (either form).
    Whole,
    /// Its value and `count` pieces, named short or long.
    Pieces {
        /// The pieces.
        count: usize,
        /// Whether their names are short.
        short: bool,
    },
    /// Out of line: no plain write names it.
    Elsewhere,
}

/// Which plain writes this store's server takes.
#[derive(Debug)]
pub(super) struct PlainWrites {
    /// Whether saves are `HSETEX FXX` (the server has it, and the store's
    /// user may run it) rather than `compact_resave.lua`.
    pub(super) hsetex: AtomicBool,
    /// Whether deletes in a namespace whose pieces may have short names
    /// are one `HGETDEL` (`plain_delete.rs`) rather than `compact_unset.lua`.
    pub(super) hgetdel: AtomicBool,
    /// Whether creates are plain commands too (`plain_create.rs`): a store
    /// on one server with no user index, fixed or growing with marks.
    pub(super) creates: bool,
}

impl<C> Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
    /// Which plain writes a store opened on this namespace and server
    /// makes: none where the namespace's format is older than
    /// [`HELD_NAMES_FORMAT`], the server expires its fields or it keeps
    /// viewed items (their writes touch more than the bucket); `HSETEX` and
    /// `HGETDEL` where `COMMAND INFO` says the server has them; creates too
    /// on one server, with no user index, in a fixed store or a growing one
    /// with marks.
    pub(super) async fn plain_writes(&self) -> Result<Option<Arc<PlainWrites>>> {
        if self.format < HELD_NAMES_FORMAT || self.server_expiry || self.viewed_chunks() > 0 {
            return Ok(None);
        }
        let info: redis::RedisResult<Vec<redis::Value>> = redis::cmd("COMMAND")
            .arg("INFO")
            .arg("HSETEX")
            .arg("HGETDEL")
            .query_async(&mut self.conn.clone())
            .await;
        let has =
            |info: &[redis::Value], i: usize| info.get(i).is_some_and(|v| *v != redis::Value::Nil);
        let (hsetex, hgetdel) = match info {
            Ok(info) => (has(&info, 0), has(&info, 1)),
            Err(e) if e.code() == Some("NOPERM") => {
                tracing::warn!(
                    "COMMAND INFO is refused: saves and deletes of sessions go by scripts; \
                     grant command|info and, on Redis 8.0 or Valkey 9.0 and later, hsetex \
                     and hgetdel (sessionpack::acl, role field-writes)"
                );
                (false, false)
            }
            Err(e) => {
                return Err(Error::from_redis(e, || {
                    "COMMAND INFO HSETEX HGETDEL".into()
                }));
            }
        };
        let creates = self.users.is_none()
            && (self.growth.is_none() || self.marks())
            && super::plain_create::on_one_server(&self.conn).await?;
        Ok(Some(Arc::new(PlainWrites {
            hsetex: AtomicBool::new(hsetex),
            hgetdel: AtomicBool::new(hgetdel),
            creates,
        })))
    }

    /// Whether deletes are one `HGETDEL` (else a script that reads the
    /// value, or plain `HDEL`s in a namespace whose pieces all have long
    /// names).
    pub fn plain_deletes(&self) -> Option<&'static str> {
        let plain = self.plain.as_ref()?;
        (self.short_pieces() && plain.hgetdel.load(Ordering::Relaxed)).then_some("HGETDEL")
    }

    /// Whether saves of sessions this process read are one `HSETEX` (else
    /// a script of two commands, or no plain write at all).
    pub fn plain_saves(&self) -> Option<&'static str> {
        let plain = self.plain.as_ref()?;
        Some(if plain.hsetex.load(Ordering::Relaxed) {
            "HSETEX FXX"
        } else {
            "compact_resave.lua"
        })
    }

    /// [`Compact::load`] with how the record was kept, for a plain write
    /// of the session later.
    pub(crate) async fn load_read(&self, id: &SessionId) -> Result<Option<(Stored, Kept)>> {
        for _ in 0..super::REROUTES {
            let k = self.keys(id);
            match self.load_at(id, &k).await {
                Err(Error::Reshaped { .. }) if self.reroute(id, &k, false).await? => {}
                Err(Error::Reshaped { .. }) => return Ok(None),
                done => return done,
            }
        }
        Err(self.reshaped(id))
    }
}
