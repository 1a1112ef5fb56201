//! The example binary as a deployment runs it, against a redis-server that
//! speaks TLS only, signed by a private CA and asking for a client
//! certificate: the certificates are named by `REDIS_TLS_*`, and the app
//! is driven over HTTP.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use redis::AsyncCommands;
use sessionpack_testkit::{ClientCerts, LocalServer, TestCerts};

/// The example binary, stopped (by its own id) when dropped.
struct App(Child);

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

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

/// Starts the app and waits for the line naming the address it bound.
fn serve(mut command: Command) -> (App, String) {
    let mut app = App(command.spawn().expect("start the example"));
    let stdout = app.0.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("the example printed {line:?}, not its address"))
        .to_owned();
    (app, base)
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
    let (app, base) = serve(full);
    let client = reqwest::Client::builder()
        .cookie_store(true)
        .build()
        .unwrap();
    let login = client
        .post(format!("{base}/login"))
        .form(&[("name", "ferris"), ("password", "crab")])
        .send()
        .await
        .unwrap();
    assert!(login.status().is_success(), "{}", login.status());
    let me = client.get(format!("{base}/me")).send().await.unwrap();
    assert_eq!(me.status(), 200);
    assert_eq!(me.text().await.unwrap(), "hello ferris");

    // The session lives in the TLS server, not in the process: a new
    // process (the old one stopped) serves the same cookie.
    drop(app);
    let mut again = command(&server, &certs);
    again
        .env("REDIS_TLS_CERT", certs.client_cert())
        .env("REDIS_TLS_KEY", certs.client_key());
    let (_app, base) = serve(again);
    let cookie = client.get(format!("{base}/me")).send().await.unwrap();
    assert_eq!(cookie.text().await.unwrap(), "hello ferris");
    let mut raw = server
        .client()
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys: Vec<String> = raw.keys("sp:*").await.unwrap();
    assert!(keys.contains(&"sp:meta".to_owned()), "{keys:?}");
}
