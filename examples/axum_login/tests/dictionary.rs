//! The example binary packing sessions with a dictionary named by
//! `SESSION_DICTIONARY`: it stores the dictionary in the namespace and
//! serves logins; a dictionary it cannot use stops it with an error. And
//! the binary without one, learning its dictionary from its first logins.

mod binary;

use std::process::{Command, Stdio};

use binary::{login, me, serve};

use redis::AsyncCommands;
use sessionpack::session::dictionary::Dictionary;
use sessionpack_testkit::LocalServer;

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

    let (app, base) = serve(&mut command(&server, &file));
    login(&base).await;
    // Stored for the processes that do not hold it.
    let mut raw = binary::raw(&server).await;
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
    let (app, base) = serve(&mut command);
    let mut raw = binary::raw(&server).await;
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
