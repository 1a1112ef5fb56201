//! Test support: a real `redis-server` per test, and the behaviour suite
//! every layout must pass.
#![allow(dead_code)]

pub mod suite;

use redis::aio::ConnectionManager;
use sessionpack::server::LocalServer;
use sessionpack::{Bucketed, BucketedConfig};

/// A fresh server, stopped when dropped.
pub fn server() -> LocalServer {
    LocalServer::start().expect("start redis-server")
}

/// A reconnecting connection to `server`.
pub async fn manager(server: &LocalServer) -> ConnectionManager {
    sessionpack::connect(&server.url()).await.expect("connect")
}

/// A plain connection for inspecting what the store wrote.
pub async fn raw(server: &LocalServer) -> redis::aio::MultiplexedConnection {
    server
        .client()
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// A bucketed layout with `2^bits` buckets on `server`.
pub async fn bucketed(server: &LocalServer, bits: u8) -> Bucketed<ConnectionManager> {
    Bucketed::new(manager(server).await, BucketedConfig::new(bits))
        .await
        .expect("bucketed layout")
}

/// `INFO stats` field `total_commands_processed`.
pub async fn commands_processed(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("total_commands_processed")
}

/// Runs every suite test against one layout. `$make` is an async fn taking
/// `&LocalServer` and returning the layout; `$corrupt` is a
/// [`suite::Corrupter`] for it.
#[macro_export]
macro_rules! layout_suite {
    ($module:ident, $make:path, $corrupt:path) => {
        mod $module {
            use super::*;

            macro_rules! case {
                ($name:ident) => {
                    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                    async fn $name() {
                        let server = $crate::common::server();
                        let layout = $make(&server).await;
                        $crate::common::suite::$name(&server, layout).await;
                    }
                };
            }

            case!(round_trip);
            case!(bulk_round_trip);
            case!(expires_without_a_sweeper);
            case!(touch_rolls_expiry_forward);
            case!(update_and_save);
            case!(destroy_is_final);
            case!(rotate_moves_the_session);
            case!(concurrent_updates_lose_nothing);
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn corrupt_record_is_an_error() {
                let server = $crate::common::server();
                let layout = $make(&server).await;
                $crate::common::suite::corrupt_record_is_an_error(&server, layout, $corrupt).await;
            }
            case!(too_large_is_refused_before_redis);
            case!(hostile_ids_never_reach_redis);
            case!(survives_a_redis_restart);
        }
    };
}

/// Runs one command on `server` from synchronous code.
pub fn raw_command(server: &LocalServer, cmd: &redis::Cmd) {
    let mut conn = server.client().unwrap().get_connection().unwrap();
    let _: redis::Value = cmd.query(&mut conn).unwrap();
}
