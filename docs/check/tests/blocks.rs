//! Every Rust block of the README and the guide, run as a reader would run
//! it: each in a process of its own, against a `redis-server` (or a local
//! Redis Cluster) started for it. The web quickstarts are served on a free
//! port and driven over HTTP with a cookie jar.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sessionpack_testkit::{ClientCerts, LocalCluster, LocalServer, TestCerts};

const BLOCKS: &str = env!("CARGO_BIN_EXE_blocks");

/// A block as `blocks list` prints it.
#[derive(Debug)]
struct Block {
    name: String,
    at: String,
    run: bool,
    needs: String,
}

fn blocks() -> Vec<Block> {
    let out = Command::new(BLOCKS)
        .arg("list")
        .output()
        .expect("blocks list");
    assert!(
        out.status.success(),
        "blocks list: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("UTF-8")
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            Block {
                name: f[0].into(),
                at: f[1].into(),
                run: f[2] == "run",
                needs: f[3].into(),
            }
        })
        .collect()
}

/// How long a block may run before it is taken for hung: far beyond what
/// any of them needs, so that a hang fails with its name instead of
/// stalling the run.
const HUNG_AFTER: Duration = Duration::from_secs(300);

fn run_to_end(block: &Block, env: &[(&str, String)]) {
    let mut child = Command::new(BLOCKS)
        .args(["run", &block.name])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the block's process");
    let started = Instant::now();
    while child.try_wait().expect("the block's status").is_none() {
        if started.elapsed() > HUNG_AFTER {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the block at {} still ran after {HUNG_AFTER:?}", block.at);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("the block's output");
    assert!(
        out.status.success(),
        "the block at {} failed ({}):\n{}{}",
        block.at,
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_documents_have_blocks_of_every_kind() {
    let all = blocks();
    for (doc, kind) in [
        ("README.md", "web"),
        ("README.md", "server"),
        ("docs/guide/", "server"),
    ] {
        assert!(
            all.iter().any(|b| b.at.starts_with(doc) && b.needs == kind),
            "no {kind} block in {doc}: {all:?}"
        );
    }
}

/// A block marked `no_run` is compiled but never run on its own, so only
/// a web app (which the web test serves and drives over HTTP) may be one:
/// any other would be checked by nothing but the compiler.
#[test]
fn only_web_apps_are_marked_no_run() {
    let all = blocks();
    let unrun: Vec<&Block> = all.iter().filter(|b| !b.run && b.needs != "web").collect();
    assert!(unrun.is_empty(), "blocks no test runs: {unrun:?}");
    assert!(all.iter().any(|b| b.needs == "web" && !b.run));
}

#[test]
fn every_block_that_runs_alone_runs_to_its_end_against_a_fresh_server() {
    let mut ran = 0;
    for block in blocks().iter().filter(|b| b.run && b.needs == "server") {
        let server = LocalServer::start().expect("a local redis-server");
        run_to_end(block, &[("REDIS_URL", server.url())]);
        ran += 1;
    }
    assert!(ran >= 3, "only {ran} blocks ran");
}

#[test]
fn every_cluster_block_runs_to_its_end_on_a_local_cluster() {
    let cluster_blocks: Vec<Block> = blocks()
        .into_iter()
        .filter(|b| b.needs == "cluster")
        .collect();
    assert!(
        !cluster_blocks.is_empty(),
        "the guide's cluster chapter has a block that runs"
    );
    for block in &cluster_blocks {
        assert!(block.run, "{} is a cluster block marked no_run", block.at);
        let cluster = LocalCluster::start(3, 0).expect("a local cluster");
        run_to_end(block, &[("REDIS_CLUSTER_URLS", cluster.urls().join(","))]);
    }
}

#[test]
fn every_tls_block_runs_to_its_end_against_a_server_that_asks_for_a_client_certificate() {
    let tls_blocks: Vec<Block> = blocks().into_iter().filter(|b| b.needs == "tls").collect();
    assert!(
        !tls_blocks.is_empty(),
        "the guide's production chapter has a TLS block"
    );
    let certs = TestCerts::generate().expect("certificates");
    for block in &tls_blocks {
        assert!(block.run, "{} is a TLS block marked no_run", block.at);
        let server =
            LocalServer::start_tls(&certs, ClientCerts::Required, &[]).expect("a TLS server");
        let path = |p: std::path::PathBuf| p.display().to_string();
        run_to_end(
            block,
            &[
                ("REDIS_TLS_URL", server.url()),
                ("TLS_CA", path(certs.ca())),
                ("TLS_CERT", path(certs.client_cert())),
                ("TLS_KEY", path(certs.client_key())),
            ],
        );
    }
}

/// Stops the app it holds by its own process id, however the test ends.
struct App(Child);

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("a free port")
        .local_addr()
        .expect("its address")
        .port()
}

/// GET `url` until the app answers (it is still starting) or has exited.
async fn first_answer(app: &mut App, client: &reqwest::Client, url: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match client.get(url).send().await {
            Ok(response) => {
                assert!(
                    response.status().is_success(),
                    "{url}: {}",
                    response.status()
                );
                return response.text().await.expect("a body");
            }
            Err(e) if e.is_connect() && Instant::now() < deadline => {
                if let Some(status) = app.0.try_wait().expect("the app's status") {
                    panic!("the app exited before it served: {status}");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("{url}: {e}"),
        }
    }
}

async fn get(client: &reqwest::Client, url: &str) -> String {
    let response = client.get(url).send().await.expect("an answer");
    assert!(
        response.status().is_success(),
        "{url}: {}",
        response.status()
    );
    response.text().await.expect("a body")
}

#[tokio::test]
async fn every_web_quickstart_keeps_each_visitors_session_in_redis() {
    let web: Vec<Block> = blocks().into_iter().filter(|b| b.needs == "web").collect();
    assert!(web.len() >= 2, "the axum and actix quickstarts: {web:?}");
    for block in &web {
        let server = LocalServer::start().expect("a local redis-server");
        let port = free_port();
        let mut app = App(Command::new(BLOCKS)
            .args(["run", &block.name])
            .env("REDIS_URL", server.url())
            .env("ADDR", format!("127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .spawn()
            .expect("the app's process"));
        let url = format!("http://127.0.0.1:{port}/");
        let ada = reqwest::Client::builder()
            .cookie_store(true)
            .build()
            .unwrap();
        let bob = reqwest::Client::builder()
            .cookie_store(true)
            .build()
            .unwrap();
        assert_eq!(
            first_answer(&mut app, &ada, &url).await,
            "visits: 1",
            "{}",
            block.at
        );
        assert_eq!(get(&ada, &url).await, "visits: 2", "{}", block.at);
        assert_eq!(
            get(&bob, &url).await,
            "visits: 1",
            "{}: a new visitor",
            block.at
        );
        assert_eq!(get(&ada, &url).await, "visits: 3", "{}", block.at);

        // The sessions are in Redis, in the store's namespace, not in the
        // app's memory.
        let mut redis = server.client().unwrap().get_connection().unwrap();
        let keys: Vec<String> = redis::cmd("KEYS").arg("sp:*").query(&mut redis).unwrap();
        assert!(
            !keys.is_empty(),
            "{}: no sessionpack key in Redis",
            block.at
        );
        drop(app);
    }
}
