//! `rediss://` connections to servers and a cluster that speak TLS only,
//! with certificates made for the run: what each side trusts and presents,
//! and what is refused.

mod common;

use std::time::Duration;

use sessionpack::conn::{ConnectOptions, TlsConfig};
use sessionpack::session::sweep::{SweepConfig, Sweeper};
use sessionpack::{Compact, CompactConfig, Error, Store};
use sessionpack_testkit::{ClientCerts, LocalCluster, TestCerts};

fn read(path: std::path::PathBuf) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

fn trusting(ca: std::path::PathBuf) -> ConnectOptions {
    ConnectOptions::default()
        .with_response_timeout(Duration::from_secs(5))
        .with_tls(TlsConfig::default().with_root_ca(read(ca)))
}

fn with_client_cert(certs: &TestCerts) -> ConnectOptions {
    trusting(certs.ca()).with_tls(
        TlsConfig::from_files(
            Some(&certs.ca()),
            Some(&certs.client_cert()),
            Some(&certs.client_key()),
        )
        .unwrap(),
    )
}

/// Sessions are created, read, expired and swept over TLS, and nothing
/// crosses the wire in the clear: the server has no plain port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_and_its_sweeper_work_over_tls() {
    let certs = TestCerts::generate().unwrap();
    let Some(server) = common::tls_server(&certs, ClientCerts::NotAsked) else {
        return;
    };
    assert!(server.url().starts_with("rediss://"));
    let conn = sessionpack::connect_with(&server.url(), &trusting(certs.ca()))
        .await
        .unwrap();
    let layout = Compact::new(conn, CompactConfig::new(4)).await.unwrap();
    let store: Store<_, String> = Store::new(layout.clone())
        .without_sweeper()
        .with_ttl(Duration::from_secs(600));
    let kept = store.create(1, "kept".to_owned()).await.unwrap();
    let brief = store
        .create_with_ttl(2, "brief".to_owned(), Duration::from_secs(1))
        .await
        .unwrap();
    let loaded = store.load(&kept.id).await.unwrap().unwrap();
    assert_eq!(loaded.attrs, "kept");

    // The sweeper reclaims the expired one once it has expired: wait
    // for the store to stop returning it (an event, not a window).
    while store.load(&brief.id).await.unwrap().is_some() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sweeper = Sweeper::new(layout, SweepConfig::default());
    let report = sweeper.pass().await.unwrap();
    assert_eq!(report.reclaimed, 1, "{report:?}");
    assert!(store.load(&kept.id).await.unwrap().is_some());

    // The plain protocol is not spoken on the TLS port.
    let plain = server.url().replacen("rediss://", "redis://", 1);
    assert!(sessionpack::connect(&plain).await.is_err());
}

/// A server that asks for a client certificate gets one signed by its CA,
/// and refuses a client that has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_presented_where_the_server_asks() {
    let certs = TestCerts::generate().unwrap();
    let Some(server) = common::tls_server(&certs, ClientCerts::Required) else {
        return;
    };
    let without = sessionpack::connect_with(&server.url(), &trusting(certs.ca())).await;
    let refused = match without {
        // The handshake may complete before the server checks, so the
        // refusal can come at the first command.
        Ok(mut conn) => redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .map_err(Error::from)
            .err(),
        Err(e) => Some(e),
    };
    let refused = refused.expect("a client without a certificate was served");
    // No retry can succeed: the operator has a certificate to give.
    assert!(!refused.is_transient(), "{refused:?}");

    let mut conn = sessionpack::connect_with(&server.url(), &with_client_cert(&certs))
        .await
        .unwrap();
    let pong: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
    assert_eq!(pong, "PONG");
}

/// The client verifies the server: a server its CA did not sign is
/// refused, the platform's roots do not vouch for a private CA, and
/// certificates named for a plain URL are a configuration error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_the_client_cannot_verify_is_refused() {
    let certs = TestCerts::generate().unwrap();
    let Some(server) = common::tls_server(&certs, ClientCerts::NotAsked) else {
        return;
    };
    let other = sessionpack::connect_with(&server.url(), &trusting(certs.other_ca())).await;
    let other = other.expect_err("a server signed by an untrusted CA was accepted");
    assert!(
        matches!(&other, Error::Config(m) if m.contains("certificate")),
        "{other:?}"
    );
    assert!(!other.is_transient(), "{other:?}");
    let platform = sessionpack::connect_with(
        &server.url(),
        &ConnectOptions::default().with_response_timeout(Duration::from_secs(5)),
    )
    .await;
    assert!(
        platform.is_err(),
        "the platform's roots vouched for a test CA"
    );

    let plain = sessionpack::connect_with("redis://127.0.0.1:1/", &trusting(certs.ca())).await;
    assert!(
        matches!(&plain, Err(Error::Config(m)) if m.contains("rediss://")),
        "{plain:?}"
    );
    let half = TlsConfig::from_files(None, Some(&certs.client_cert()), None);
    assert!(matches!(half, Err(Error::Config(_))), "{half:?}");
    let missing = TlsConfig::from_files(
        Some(std::path::Path::new("/nonexistent/ca.pem")),
        None,
        None,
    );
    assert!(
        matches!(&missing, Err(Error::Config(m)) if m.contains("/nonexistent/ca.pem")),
        "{missing:?}"
    );
    // A password in the URL stays out of the message.
    let secret =
        sessionpack::connect_with("redis://app:hunter2@127.0.0.1:1/", &trusting(certs.ca()))
            .await
            .unwrap_err()
            .to_string();
    assert!(!secret.contains("hunter2"), "{secret}");
}

/// A cluster whose nodes speak TLS only, to clients, to each other and to
/// their replicas: the store writes across every primary, and the
/// primaries it lists are reached over TLS with the same certificates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_works_over_tls() {
    let certs = TestCerts::generate().unwrap();
    let cluster = match LocalCluster::start_tls(3, 1, &certs, ClientCerts::Required) {
        Ok(c) => c,
        Err(sessionpack_testkit::Error::Unsupported(why)) => {
            eprintln!("skipped: {why}");
            return;
        }
        Err(e) => panic!("start a TLS cluster: {e}"),
    };
    let seeds = cluster.urls();
    assert!(seeds.iter().all(|s| s.starts_with("rediss://")));
    let options = with_client_cert(&certs);
    let conn = sessionpack::conn::cluster::connect_with(&seeds, &options)
        .await
        .unwrap();
    let layout = Compact::new(conn, CompactConfig::new(6)).await.unwrap();
    let store: Store<_, String> = Store::new(layout)
        .without_sweeper()
        .with_ttl(Duration::from_secs(600));
    let mut ids = Vec::new();
    for user in 0..200u64 {
        ids.push(store.create(user, format!("u{user}")).await.unwrap().id);
    }
    let loaded = store.load_many(&ids).await.unwrap();
    assert!(loaded.iter().all(Option::is_some));

    let endpoint = sessionpack::conn::Endpoint::Cluster(seeds);
    let primaries = endpoint.primaries(&options).await.unwrap();
    assert_eq!(primaries.len(), 3, "{primaries:?}");
    let mut keys = 0;
    for url in &primaries {
        assert!(url.starts_with("rediss://"), "{url}");
        let mut node = sessionpack::connect_with(url, &options).await.unwrap();
        let n: u64 = redis::cmd("DBSIZE").query_async(&mut node).await.unwrap();
        keys += n;
    }
    // Each bucket is a HASH and a ZSET, plus the store's metadata.
    assert!(keys >= 3, "{keys}");
}
