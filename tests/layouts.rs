//! The shared behaviour suite, run against every layout on a real server.

mod common;

async fn bucketed_256(
    server: &sessionpack::server::LocalServer,
) -> impl sessionpack::Layout + 'static {
    common::bucketed(server, 8).await
}

async fn bucketed_2(
    server: &sessionpack::server::LocalServer,
) -> impl sessionpack::Layout + 'static {
    common::bucketed(server, 1).await
}

layout_suite!(bucketed_8_bits, bucketed_256);
layout_suite!(bucketed_1_bit, bucketed_2);
