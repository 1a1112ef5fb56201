//! The example binary run as a deployment runs it, and driven over HTTP.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command};

/// The example binary, stopped (by its own id) when dropped.
pub struct App(Child);

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the app (its stdout piped) and waits for the line naming the
/// address it bound.
pub fn serve(command: &mut Command) -> (App, String) {
    let mut app = App(command.spawn().expect("start the example"));
    let stdout = app.0.stdout.take().expect("the example's stdout is piped");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("the example printed {line:?}, not its address"))
        .to_owned();
    (app, base)
}

/// Logs in with a fresh cookie jar, checks the protected page greets the
/// user, and returns the client.
pub async fn login(base: &str) -> reqwest::Client {
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
    assert_eq!(me(&client, base).await, "hello ferris");
    client
}

/// The protected page as `client` sees it.
pub async fn me(client: &reqwest::Client, base: &str) -> String {
    let me = client.get(format!("{base}/me")).send().await.unwrap();
    me.text().await.unwrap()
}

/// A connection of the test's own to `server`, to look at what the app
/// stored.
pub async fn raw(server: &sessionpack_testkit::LocalServer) -> redis::aio::MultiplexedConnection {
    server
        .client()
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}
