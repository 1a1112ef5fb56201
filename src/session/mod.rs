//! Sessions: their ids and records, the layouts that keep them in Redis,
//! the typed [`store::Store`] over a layout, and the sweeper that removes
//! what expired.
//!
//! Within this floor: [`id`], [`record`] and [`dictionary`] at the bottom, then
//! [`buckets`] (id to bucket and key names) and [`shape`] (the same
//! for a store that grows) and [`meta`] (what a namespace
//! was opened with), then [`layout`], then [`store`] and [`sweep`].

pub mod buckets;
pub mod dictionary;
pub mod id;
mod key_text;
pub mod layout;
pub mod meta;
pub mod record;
pub mod shape;
pub mod store;
pub mod sweep;
