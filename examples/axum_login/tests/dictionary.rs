//! The example binary packing sessions with a dictionary named by
//! `SESSION_DICTIONARY`: it stores the dictionary in the namespace and
//! serves logins; a dictionary it cannot use stops it with an error. And
//! the binary without one, learning its dictionary from its first logins.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use redis::AsyncCommands;
use sessionpack::session::dictionary::Dictionary;
use sessionpack_testkit::LocalServer;

/// The example binary, stopped (by its own id) when dropped.
struct App(Child);

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn command(server: &LocalServer, dictionary: &std::path::Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_axum-login-example"));
    command
        .env("REDIS_URL", server.url())
        .env("ADDR", "127.0.0.1:0")
        .env("SESSION_DICTIONARY", dictionary)
        .env("SESSION_DICTIONARY_ID", "5")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Starts the example and reads the address it listens on.
fn start(command: &mut Command) -> (App, String) {
    let mut app = App(command.spawn().expect("start the example"));
    let mut line = String::new();
    BufReader::new(app.0.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("the example printed {line:?}, not its address"))
        .to_owned();
    (app, base)
}

/// Logs in with a fresh cookie jar, checks the session carries it, and
/// returns the client.
async fn login(base: &str) -> reqwest::Client {
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

async fn me(client: &reqwest::Client, base: &str) -> String {
    let me = client.get(format!("{base}/me")).send().await.unwrap();
    me.text().await.unwrap()
}

/// A dictionary trained on sessions shaped like the app's.
fn trained() -> Vec<u8> {
    let samples: Vec<Vec<u8>> = (0..1000u64)
        .map(|n| {
            format!(
                "{{\"axum-login.data\":{{\"user_id\":{},\"auth_hash\":\"{:032x}\"}},\"locale\":\"{}\"}}",
                1000 + n,
                n.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                ["en-US", "de-DE"][(n % 2) as usize]
            )
            .into_bytes()
        })
        .collect();
    Dictionary::train(5, &samples, 2048)
        .unwrap()
        .bytes()
        .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_app_packs_with_the_dictionary_it_is_given() {
    let server = LocalServer::start().expect("start redis-server");
    let dir = std::env::temp_dir().join(format!("sessionpack-example-dict-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("app.dict");
    let bytes = trained();
    std::fs::write(&file, &bytes).unwrap();

    // A missing file, or an id of 0, stops the app with an error.
    let missing = command(&server, &dir.join("none.dict")).output().unwrap();
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("SESSION_DICTIONARY"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
    let zero = command(&server, &file)
        .env("SESSION_DICTIONARY_ID", "0")
        .output()
        .unwrap();
    assert!(!zero.status.success());

    let (app, base) = start(&mut command(&server, &file));
    login(&base).await;
    // Stored for the processes that do not hold it.
    let mut raw = server
        .client()
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let stored: Vec<u8> = raw.get("sp:dict:5").await.unwrap();
    assert_eq!(stored, bytes);
    drop(app);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_dictionary_the_app_learns_one_from_its_first_logins() {
    let server = LocalServer::start().expect("start redis-server");
    let mut command = Command::new(env!("CARGO_BIN_EXE_axum-login-example"));
    command
        .env("REDIS_URL", server.url())
        .env("ADDR", "127.0.0.1:0")
        .env("SESSION_LEARN_SAMPLES", "20")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let (app, base) = start(&mut command);
    let mut raw = server
        .client()
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    // Each login writes its session at least once: twenty store it.
    let mut clients = Vec::new();
    while !raw.exists::<_, bool>("sp:dict:255").await.unwrap() {
        assert!(
            clients.len() < 20,
            "no dictionary after {} logins",
            clients.len()
        );
        clients.push(login(&base).await);
    }
    // Sessions written before it and after it both serve their users.
    clients.push(login(&base).await);
    for client in &clients {
        assert_eq!(me(client, &base).await, "hello ferris");
    }
    let stored: Vec<u8> = raw.get("sp:dict:255").await.unwrap();
    assert!(!stored.is_empty());
    drop(app);
}
