//! The per-user index on one real `redis-server`: listings, labels,
//! revocations, creates in flight, the sweep of leftovers, and revoke-all
//! racing traffic. The same scenarios run on a cluster in `cluster.rs`.

mod common;

use common::users;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_sessions_are_listed_labelled_and_revoked() {
    let server = common::server();
    users::list_label_and_revoke(common::manager(&server).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_in_flight_are_blocked_and_leftovers_swept() {
    let server = common::server();
    users::creates_in_flight_are_blocked_and_leftovers_swept(common::manager(&server).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_all_races_creates_touches_rotations_and_sweepers() {
    let server = common::server();
    users::revoke_all_races_traffic(common::manager(&server).await, "race").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotations_never_outlive_a_revocation() {
    let server = common::server();
    users::rotations_never_outlive_a_revocation(common::manager(&server).await, "rot").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_overtaking_a_slow_revocation_is_revoked() {
    let server = common::server();
    let far = common::slow_link(&server, std::time::Duration::from_millis(4)).await;
    users::a_rotation_overtaking_a_slow_revocation_is_revoked(
        common::manager(&server).await,
        sessionpack::connect(&far).await.unwrap(),
    )
    .await;
}
