//! A server that runs no Lua script (Valkey 9.1 built with
//! `BUILD_LUA=no`, or started without its Lua module): every store refuses
//! to open, with a configuration error that says so and what to do, and
//! writes nothing. The server is the one `SESSIONPACK_NO_LUA_SERVER` names
//! (`scripts/test.sh` builds it); without one the test says it is skipped.

mod common;

use sessionpack::actix::ActixStore;
use sessionpack::session::layout::{Bucketed, BucketedConfig};
use sessionpack::tower::TowerStore;
use sessionpack::{Compact, CompactConfig, Error};
use sessionpack_testkit::{LocalServer, NO_LUA_SERVER_ENV};

/// The server without Lua, or `None` with a `skipped:` line.
fn server_without_lua() -> Option<LocalServer> {
    let Some(binary) = std::env::var_os(NO_LUA_SERVER_ENV) else {
        eprintln!(
            "skipped: no server without Lua ({NO_LUA_SERVER_ENV} unset; scripts/test.sh \
             builds Valkey 9.1.2 with BUILD_LUA=no where valkey-9.1.2 is tested)"
        );
        return None;
    };
    Some(LocalServer::start_binary(binary.into()).expect("start the server without Lua"))
}

/// What every store's open answers there.
fn assert_refused<T: std::fmt::Debug>(opened: sessionpack::Result<T>, store: &str) {
    match opened {
        Err(Error::Config(why)) => {
            assert!(why.contains("runs no Lua scripts"), "{store}: {why}");
            assert!(
                why.contains("libvalkeylua"),
                "{store}: says what to load: {why}"
            );
        }
        other => panic!("{store}: {other:?}"),
    }
}

#[tokio::test]
async fn every_store_refuses_to_open_typed_and_writes_nothing() {
    let Some(server) = server_without_lua() else {
        return;
    };
    let mut raw = common::raw(&server).await;
    // The server answers plain commands: it is scripts it lacks.
    let pong: String = redis::cmd("PING").query_async(&mut raw).await.unwrap();
    assert_eq!(pong, "PONG");

    assert_refused(
        TowerStore::connect(&server.url()).await,
        "TowerStore::connect",
    );
    assert_refused(
        ActixStore::connect(&server.url()).await,
        "ActixStore::connect",
    );
    let conn = common::manager(&server).await;
    assert_refused(
        Compact::new(conn.clone(), CompactConfig::new(4).with_namespace("fixed")).await,
        "a fixed compact store",
    );
    assert_refused(
        Bucketed::new(conn, BucketedConfig::new(4).with_namespace("bucketed")).await,
        "a bucketed store",
    );
    let keys: u64 = redis::cmd("DBSIZE").query_async(&mut raw).await.unwrap();
    assert_eq!(keys, 0, "a refused open writes nothing");
}
