//! Writers and the server stopped mid-growth.

use super::*;

/// Inserts `n` sessions through `layout`, each acknowledged one added to
/// `acked`; a call that fails on a connection lost is sent again (a
/// create sent twice finds its own session and is done).
async fn keep_inserting(
    layout: Compact<Conn>,
    n: usize,
    acked: Arc<std::sync::Mutex<Vec<SessionId>>>,
) {
    for i in 0..n {
        let id = layout.new_id().await.unwrap();
        loop {
            match layout
                .insert_new(&id, &record_for(i), Deadline::In(3600))
                .await
            {
                Ok(Inserted::Created { .. }) => break,
                Ok(other) => panic!("{other:?}"),
                Err(e) if e.is_transient() => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Err(e) => panic!("{e}"),
            }
        }
        acked.lock().unwrap().push(id);
    }
}

async fn wait_for_acks(acked: &std::sync::Mutex<Vec<SessionId>>, at_least: usize) {
    while acked.lock().unwrap().len() < at_least {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

async fn check_whole(server: &LocalServer, acked: &[SessionId]) {
    let reader = open(server).await;
    for id in acked {
        assert!(
            reader.load(id).await.unwrap().is_some(),
            "an acknowledged session is gone"
        );
    }
    let mut raw = common::raw(server).await;
    let survey = survey(&mut raw, &reader).await;
    assert!(survey.strays.is_empty(), "{:?}", survey.strays);
    assert_eq!(survey.unindexed, 0);
    // A create stopped between its index entry and its fields' take-back
    // leaves an entry naming a mark, which the sweeper drops; no other.
    assert_eq!(
        survey.stale_entries, survey.droppable_entries,
        "entries no sweep removes"
    );
    assert_eq!(survey.converted, 0);
    assert!(survey.fullest <= ENTRIES);
    // Writers stopped mid-call may have stored a session they never
    // acknowledged; none is stored twice, none lost.
    assert!(survey.sessions >= acked.len() as u64);
}

#[tokio::test]
async fn writers_stopped_at_any_point_leave_a_store_the_next_one_grows_on() {
    let server = server();
    let acked = Arc::new(std::sync::Mutex::new(Vec::new()));
    for round in 0..12usize {
        let layout = open(&server).await;
        let before = acked.lock().unwrap().len();
        let task = tokio::spawn(keep_inserting(layout, 10_000, acked.clone()));
        // Stopped after a different number of sessions each round: mid
        // insert, mid split, between the two.
        wait_for_acks(&acked, before + 60 + 37 * round).await;
        task.abort();
        let _ = task.await;
    }
    let acked = acked.lock().unwrap().clone();
    check_whole(&server, &acked).await;
}

#[tokio::test]
async fn a_redis_killed_and_restarted_from_its_aof_mid_growth_keeps_every_session() {
    let server = LocalServer::start_with(&[
        "--hash-max-listpack-entries",
        "32",
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ])
    .expect("redis-server");
    let acked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let writer = tokio::spawn(keep_inserting(open(&server).await, 3000, acked.clone()));
    for at in [800, 1600] {
        wait_for_acks(&acked, at).await;
        // kill -9 of redis-server, then the same server on its AOF.
        server.restart().expect("restart redis-server");
    }
    writer.await.unwrap();
    let acked = acked.lock().unwrap().clone();
    assert_eq!(acked.len(), 3000);
    check_whole(&server, &acked).await;
}
