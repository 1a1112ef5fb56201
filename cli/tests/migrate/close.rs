//! The close, the namespace a copy opens, server expiry, and actix-session keys.

use super::*;

/// The source keys left (every key but the store's own and the migration's).
async fn source_keys(server: &LocalServer) -> usize {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut common::raw(server).await)
        .await
        .unwrap();
    keys.iter().filter(|k| !k.starts_with("sp:")).count()
}

/// A close killed part way (`kill -9` of the command in its one batch,
/// before it wrote any report): the run that finishes it reports every key
/// the close removed, across both runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_killed_part_way_counts_every_key_it_deleted() {
    let server = common::server();
    let records = fill(&peer(&server).await, 2000).await;
    let copied = migrate_with(&server, &plan()).await;
    assert_eq!(copied.get("copied"), 2000, "{copied:?}");
    let url = server.url();
    let mut close = Command::new(env!("CARGO_BIN_EXE_sessionpack"))
        .args(["migrate", "--redis-url", &url, "--delete-copied"])
        .args(["--batch", "100000"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Killed once its close has deleted some keys (or, where it finished
    // first, not at all: a machine fast enough, or a poll held up by a
    // loaded one).
    loop {
        if let Some(status) = close.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            assert_eq!(source_keys(&server).await, 0);
            assert_in_store(&tower_store(&server).await, &records).await;
            eprintln!(
                "skipped: a close killed part way (it finished before a poll saw it \
                 delete a key); a_close_stopped_before_it_closed_is_counted_by_the_run_that_closes \
                 counts a pass stopped late"
            );
            return;
        }
        if source_keys(&server).await < 2000 {
            close.kill().unwrap();
            close.wait().unwrap();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let rest = migrate_with(
        &server,
        &Plan {
            delete_copied: true,
            ..plan()
        },
    )
    .await;
    assert!(rest.complete && rest.closed, "{rest:?}");
    assert_eq!(source_keys(&server).await, 0);
    assert_eq!(rest.deleted, 2000, "{rest:?}");
    // The pass's count is in its report: its counter is gone.
    let counter = format!("{}:deleted", migrate::state_key("sp", &plan().source));
    let left: bool = redis::cmd("EXISTS")
        .arg(&counter)
        .query_async(&mut common::raw(&server).await)
        .await
        .unwrap();
    assert!(!left, "{counter} left behind");
    assert_in_store(&tower_store(&server).await, &records).await;
}

/// A closing pass stopped after its last batch, before it closed the
/// takeover (killed there, or its close failed): it left its report
/// complete and its counters. The run that closes the takeover counts on
/// from them, so its report holds every key the close deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_stopped_before_it_closed_is_counted_by_the_run_that_closes() {
    let server = common::server();
    let records = fill(&peer(&server).await, 300).await;
    let copied = migrate_with(&server, &plan()).await;
    assert_eq!(copied.get("copied"), 300, "{copied:?}");
    // What such a pass leaves: 120 keys closed and counted, its report
    // complete and the takeover open.
    let state = migrate::state_key("sp", &plan().source);
    let mut raw = common::raw(&server).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut raw)
        .await
        .unwrap();
    let gone: Vec<&String> = keys
        .iter()
        .filter(|k| !k.starts_with("sp:"))
        .take(120)
        .collect();
    assert_eq!(gone.len(), 120);
    for key in &gone {
        let _: () = redis::cmd("DEL")
            .arg(key)
            .query_async(&mut raw)
            .await
            .unwrap();
    }
    let _: () = redis::cmd("SET")
        .arg(format!("{state}:deleted"))
        .arg(120)
        .query_async(&mut raw)
        .await
        .unwrap();
    let mut stopped = Report::read(&mut raw, &state).await.unwrap().unwrap();
    assert!(stopped.complete && !stopped.closed, "{stopped:?}");
    stopped.deleted = 120;
    stopped.write(&mut raw, &state).await.unwrap();

    let rest = migrate_with(
        &server,
        &Plan {
            delete_copied: true,
            ..plan()
        },
    )
    .await;
    assert!(rest.complete && rest.closed, "{rest:?}");
    assert_eq!(source_keys(&server).await, 0);
    assert_eq!(rest.deleted, 300, "{rest:?}");
    assert_in_store(&tower_store(&server).await, &records).await;
}

/// Runs `sessionpack` with `args`, which must succeed; returns its stdout.
fn sessionpack_ok(args: &[&str]) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_sessionpack"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sessionpack {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The summed `MEMORY USAGE` of the HASH keys of `namespace`.
async fn hash_bytes(server: &LocalServer, namespace: &str) -> u64 {
    let mut conn = common::manager(server).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{namespace}:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut total = 0;
    for key in keys {
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        if kind == "hash" {
            let bytes: u64 = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap();
            total += bytes;
        }
    }
    total
}

/// `migrate` creates the namespace as the app opens it: with
/// `--user-index` an app keeping a user index opens it (without the flag
/// it is refused, typed), each copied session is in its owner's entry,
/// and the copies are packed with a dictionary learned from them, which
/// the app then finds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_opens_the_namespace_as_the_app_will() {
    let server = common::server();
    let records = fill(&peer(&server).await, 1300).await;
    let url = server.url();
    let copy = |namespace: &str, extra: &[&str]| {
        let mut args = vec!["migrate", "--redis-url", &url, "--namespace"];
        args.push(namespace);
        args.extend_from_slice(extra);
        sessionpack_ok(&args);
    };
    copy("app", &["--user-index"]);
    copy("unpacked", &["--user-index", "--unpacked"]);
    copy("plain", &[]);

    let conn = common::manager(&server).await;
    let app_config = |namespace: &str| {
        sessionpack::tower::recommended_config()
            .with_namespace(namespace)
            .with_user_index(UserIndexConfig::default())
    };
    let refused = TowerStore::new(conn.clone(), app_config("plain")).await;
    assert!(
        matches!(refused, Err(sessionpack::Error::Config(_))),
        "a namespace copied without --user-index opened with one: {refused:?}"
    );
    let store = TowerStore::new(conn.clone(), app_config("app"))
        .await
        .expect("the app opens the namespace the copy created");
    assert_in_store(&store, &records).await;
    for record in records.iter().step_by(97) {
        let owner = record.data["axum-login.data"]["user_id"].as_u64().unwrap();
        let listed = store.sessions_of(&Identity::Int(owner)).await.unwrap();
        let ids: Vec<i128> = listed.iter().map(|s| tower_id(&s.id)).collect();
        assert_eq!(ids, vec![record.id.0], "user {owner}'s sessions");
    }
    assert!(
        Dictionary::fetch(&conn, "app", 255)
            .await
            .unwrap()
            .is_some(),
        "no dictionary learned"
    );
    assert!(
        Dictionary::fetch(&conn, "unpacked", 255)
            .await
            .unwrap()
            .is_none()
    );
    // The first 1000 copies are the samples, kept as written; the rest are
    // packed.
    let (packed, unpacked) = (
        hash_bytes(&server, "app").await,
        hash_bytes(&server, "unpacked").await,
    );
    assert!(
        packed < unpacked,
        "packed {packed} B, unpacked {unpacked} B"
    );
}

/// With `--bucket-bits` and `--server-expiry` the copy fills a store whose
/// fields the server expires, which an app opened that way reads; skipped,
/// said, where the server cannot expire fields in a listpack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_into_a_store_whose_fields_the_server_expires() {
    use sessionpack::limits::{FieldTtls, field_ttls};
    let server = common::server();
    let mut raw = common::raw(&server).await;
    let ttls = field_ttls(&mut raw, "probe:field-ttl").await.unwrap();
    if ttls != FieldTtls::Listpack {
        println!("skipped: this server cannot expire fields in a listpack ({ttls:?})");
        return;
    }
    let records = fill(&peer(&server).await, 60).await;
    let url = server.url();
    let args = ["migrate", "--redis-url", &url, "--namespace", "fx"];
    sessionpack_ok(&[&args[..], &["--bucket-bits", "4", "--server-expiry"]].concat());
    let config = CompactConfig::new(4)
        .with_namespace("fx")
        .with_server_expiry();
    let store = TowerStore::new(common::manager(&server).await, config)
        .await
        .expect("the app opens the namespace the copy created");
    assert_in_store(&store, &records).await;
    // Each session's field carries its expiry, as the app's own writes do.
    let mut expiring = 0;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("fx:*")
        .query_async(&mut raw)
        .await
        .unwrap();
    for key in keys
        .iter()
        .filter(|k| !k.ends_with(":m") && !k.ends_with(":meta"))
    {
        let kind: String = redis::cmd("TYPE")
            .arg(key)
            .query_async(&mut raw)
            .await
            .unwrap();
        if kind != "hash" {
            continue;
        }
        let fields: Vec<Vec<u8>> = redis::cmd("HKEYS")
            .arg(key)
            .query_async(&mut raw)
            .await
            .unwrap();
        let ttls: Vec<i64> = redis::cmd("HTTL")
            .arg(key)
            .arg("FIELDS")
            .arg(fields.len())
            .arg(&fields)
            .query_async(&mut raw)
            .await
            .unwrap();
        expiring += ttls.iter().filter(|&&t| t > 0).count();
    }
    assert!(expiring >= records.len(), "{expiring} fields expire");
}

/// actix-session's `RedisSessionStore` (the real crate) wrote the
/// sessions: `migrate --from actix-session` copies them (owners into the
/// user index), the actix store reads each under the cookie's own key,
/// state for state, and writes through it; the close deletes the old keys
/// and the sessions stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actix_session_keys_are_copied_and_served_under_their_own_keys() {
    use actix_session::storage::{RedisSessionStore, SessionKey, SessionStore as _};
    use sessionpack::actix::ActixStore;

    let server = common::server();
    let peer = RedisSessionStore::new(server.url()).await.unwrap();
    let ttl = time::Duration::seconds(3600);
    let mut sessions: Vec<(SessionKey, HashMap<String, String>)> = Vec::new();
    for n in 0..150u64 {
        let mut state = HashMap::from([
            (
                "actix_identity.user_id".to_owned(),
                format!("\"user-{}\"", n % 10),
            ),
            ("cart".to_owned(), format!("[{n},2,3]")),
        ]);
        if n % 3 == 0 {
            // Text that is not JSON, and JSON written unlike serde_json.
            state.insert("raw".into(), "not json {".into());
            state.insert("spaced".into(), "{ \"a\" : 1 }".into());
        }
        let key = peer.save(state.clone(), &ttl).await.unwrap();
        sessions.push((key, state));
    }
    let url = server.url();
    let migrate = |extra: &[&str]| {
        let from = [
            "migrate",
            "--redis-url",
            &url,
            "--from",
            "actix-session",
            "--json",
        ];
        let out = sessionpack_ok(&[&from[..], extra].concat());
        serde_json::from_slice::<Value>(&out).unwrap()
    };
    let copy = migrate(&["--user-index"]);
    assert_eq!(copy["outcomes"]["copied"], 150, "{copy}");

    let config = CompactConfig::default().with_user_index(UserIndexConfig::default());
    let store = ActixStore::new(common::manager(&server).await, config)
        .await
        .expect("the actix store opens the namespace the copy created");
    for (key, state) in &sessions {
        assert_eq!(store.load(key).await.unwrap().as_ref(), Some(state));
    }
    let listed = store
        .sessions_of(&Identity::Name("user-3".into()))
        .await
        .unwrap();
    assert_eq!(listed.len(), 15, "user-3's sessions");

    let close = migrate(&["--delete-copied"]);
    assert_eq!(close["deleted"], 150, "{close}");
    assert_eq!(close["closed"], true, "{close}");
    for (key, _) in &sessions {
        assert!(
            peer.load(key).await.unwrap().is_none(),
            "an old key is left"
        );
    }
    let (key, state) = &sessions[0];
    let mut changed = state.clone();
    changed.insert("cart".into(), "[]".into());
    let same_key = SessionKey::try_from(key.as_ref().to_owned()).unwrap();
    let kept = store.update(same_key, changed.clone(), &ttl).await.unwrap();
    assert_eq!(kept.as_ref(), key.as_ref(), "the cookie's key stays");
    assert_eq!(store.load(key).await.unwrap(), Some(changed));
    // A key of the same form that no session had is none.
    let stranger = SessionKey::try_from("Q".repeat(64)).unwrap();
    assert_eq!(store.load(&stranger).await.unwrap(), None);
}
