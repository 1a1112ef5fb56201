//! The example binary as a deployment runs it, against a redis-server that
//! speaks TLS only, signed by a private CA and asking for a client
//! certificate: the certificates are named by `REDIS_TLS_*`, and the app
//! is driven over HTTP.

mod binary;

use std::process::{Command, Stdio};

use binary::serve;

use redis::AsyncCommands;
use sessionpack_testkit::{ClientCerts, LocalServer, TestCerts};

fn command(server: &LocalServer, certs: &TestCerts) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_axum-login-example"));
    command
        .env("REDIS_URL", server.url())
        .env("ADDR", "127.0.0.1:0")
        .env("REDIS_TLS_CA", certs.ca())
        .env_remove("REDIS_TLS_CERT")
        .env_remove("REDIS_TLS_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_app_reaches_a_tls_only_server_with_a_private_ca_and_a_client_certificate() {
    let certs = TestCerts::generate().unwrap();
    let server = match LocalServer::start_tls(&certs, ClientCerts::Required, &[]) {
        Ok(server) => server,
        Err(sessionpack_testkit::Error::Unsupported(why)) => {
            eprintln!("skipped: {why}");
            return;
        }
        Err(e) => panic!("start a TLS server: {e}"),
    };
    assert!(server.url().starts_with("rediss://"));

    // Without its client certificate the server refuses the app, which
    // stops with an error rather than serving without its store.
    let refused = command(&server, &certs).output().unwrap();
    assert!(
        !refused.status.success(),
        "served without a client certificate"
    );
    // A certificate without its key is a configuration error, named.
    let half = command(&server, &certs)
        .env("REDIS_TLS_CERT", certs.client_cert())
        .output()
        .unwrap();
    assert!(!half.status.success());
    assert!(
        String::from_utf8_lossy(&half.stderr).contains("needs its key"),
        "{}",
        String::from_utf8_lossy(&half.stderr)
    );

    let mut full = command(&server, &certs);
    full.env("REDIS_TLS_CERT", certs.client_cert())
        .env("REDIS_TLS_KEY", certs.client_key());
    let (app, base) = serve(&mut full);
    let client = binary::login(&base).await;

    // The session lives in the TLS server, not in the process: a new
    // process (the old one stopped) serves the same cookie.
    drop(app);
    let mut again = command(&server, &certs);
    again
        .env("REDIS_TLS_CERT", certs.client_cert())
        .env("REDIS_TLS_KEY", certs.client_key());
    let (_app, base) = serve(&mut again);
    assert_eq!(binary::me(&client, &base).await, "hello ferris");
    let mut raw = binary::raw(&server).await;
    let keys: Vec<String> = raw.keys("sp:*").await.unwrap();
    assert!(keys.contains(&"sp:meta".to_owned()), "{keys:?}");
}
