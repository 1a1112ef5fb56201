//! The sweeper a store runs itself, so an app spawns nothing to have its
//! expired sessions removed.
//!
//! A store opened inside a Tokio runtime starts one [`Sweeper`] task with
//! [`SweepConfig::default`] (a pass a minute, the first one interval after
//! the start). Every process of an app runs one: they share the work
//! through the segment leases, so each bucket is still swept about once per
//! interval however many processes run. The task stops, and gives back its
//! leases, when the last clone of the store is dropped. An app whose
//! sessions a `sessionpack sweep` daemon removes turns it off with the
//! store's `without_sweeper()`.

use std::sync::Arc;

use super::{SweepConfig, SweepStats, Sweeper, SweeperHandle};
use crate::session::layout::{Bucketed, Compact};

/// A layout whose expired sessions a sweeper removes, or whose sessions
/// Redis expires itself (the key-per-session layouts: nothing to start).
pub trait Sweepable {
    /// Starts a sweeper of this layout as a task on the current Tokio
    /// runtime; `None` where nothing needs sweeping. Called only inside a
    /// runtime.
    fn spawn_sweeper(&self, config: SweepConfig) -> Option<SweeperHandle>;
}

impl<C> Sweepable for Compact<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn spawn_sweeper(&self, config: SweepConfig) -> Option<SweeperHandle> {
        Some(Sweeper::new(self.clone(), config).spawn())
    }
}

impl<C> Sweepable for Bucketed<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn spawn_sweeper(&self, config: SweepConfig) -> Option<SweeperHandle> {
        Some(Sweeper::new(self.clone(), config).spawn())
    }
}

impl<L: Sweepable + ?Sized> Sweepable for &L {
    fn spawn_sweeper(&self, config: SweepConfig) -> Option<SweeperHandle> {
        (**self).spawn_sweeper(config)
    }
}

impl<L: Sweepable + ?Sized> Sweepable for Arc<L> {
    fn spawn_sweeper(&self, config: SweepConfig) -> Option<SweeperHandle> {
        (**self).spawn_sweeper(config)
    }
}

/// A store's own sweeper, shared by the store's clones: dropping the last
/// one stops the task ([`SweeperHandle`]'s `Drop`).
#[derive(Clone, Debug, Default)]
pub(crate) struct InApp(Option<Arc<SweeperHandle>>);

impl InApp {
    /// Starts `layout`'s sweeper with `config`, or nothing for `None`.
    /// Outside a Tokio runtime no task can start: that is logged, and the
    /// store runs without one (as `without_sweeper()` would).
    pub(crate) fn start(layout: &impl Sweepable, config: Option<SweepConfig>) -> Self {
        let Some(config) = config else {
            return Self(None);
        };
        if tokio::runtime::Handle::try_current().is_err() {
            tracing::warn!(
                "session store opened outside a Tokio runtime: it cannot start its sweeper, \
                 so expired sessions stay until a `sessionpack sweep` daemon removes them"
            );
            return Self(None);
        }
        Self(layout.spawn_sweeper(config).map(Arc::new))
    }

    /// The sweeper's totals so far; `None` if it runs none.
    pub(crate) fn stats(&self) -> Option<SweepStats> {
        self.0.as_ref().map(|handle| handle.stats())
    }

    /// A receiver of the sweeper's totals after each pass.
    pub(crate) fn subscribe(&self) -> Option<tokio::sync::watch::Receiver<SweepStats>> {
        self.0.as_ref().map(|handle| handle.subscribe())
    }
}
