//! The layouts the benchmarks measure sessionpack against, and a layout
//! chosen at run time:
//!
//! - the three key-per-session baselines (`json-setex`, `packed-setex`,
//!   `hash-per-session`), as the well-known session stores lay sessions
//!   out ([`KeyPerSession`]);
//! - the Redis book's login-cookie design ([`BookLoginHash`]);
//! - [`AnyLayout`], any of these or the library's two bucket layouts,
//!   named by a [`LayoutKind`].
//!
//! They implement the library's [`sessionpack::session::layout::Layout`]
//! as any other layout would, so a `Store` runs on each and the behaviour
//! suite checks each one (`cli/tests/layouts.rs`).

use sessionpack::session::sweep::{SweepConfig, Sweepable, SweeperHandle};

mod any;
mod book_login_hash;
mod key_per_session;
mod scripts;

pub use any::{AnyLayout, LayoutKind};
pub use book_login_hash::BookLoginHash;
pub use key_per_session::{Encoding, KeyPerSession};

/// The book's layout keeps one global HASH and ZSET, which the sweeper
/// does not walk: its benchmark cleans it up the book's way.
impl<C> Sweepable for BookLoginHash<C> {
    fn spawn_sweeper(&self, _: SweepConfig) -> Option<SweeperHandle> {
        None
    }
}

/// One key per session, with the key's expiry set: Redis removes them.
impl<C> Sweepable for KeyPerSession<C> {
    fn spawn_sweeper(&self, _: SweepConfig) -> Option<SweeperHandle> {
        None
    }
}

impl<C> Sweepable for AnyLayout<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn spawn_sweeper(&self, config: SweepConfig) -> Option<SweeperHandle> {
        match self {
            Self::Bucketed(l) => l.spawn_sweeper(config),
            Self::Compact(l) => l.spawn_sweeper(config),
            Self::Book(l) => l.spawn_sweeper(config),
            Self::KeyPerSession(l) => l.spawn_sweeper(config),
        }
    }
}
