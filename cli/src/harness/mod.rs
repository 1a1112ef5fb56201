//! The benchmark harness behind `sessionpack bench`: loads sessions into a
//! dedicated server layout by layout and records what they cost.

pub mod actix;
pub mod actix_as_tower;
pub mod anatomy;
pub mod churn;
pub mod day;
pub mod growth;
pub mod info;
pub mod locks;
pub mod memory;
pub mod nodes;
pub mod plot;
pub mod ratelimit;
pub mod report;
pub mod throughput;
pub mod tokens;
pub mod tower;
pub mod user_load;
pub mod viewed;
