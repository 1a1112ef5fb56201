use super::*;

#[test]
fn lists_the_primaries_that_serve_slots() {
    let nodes = "\
a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7002@17002,host.example master - 0 1 2 connected 5461-10922
c3 127.0.0.1:7004@17004 slave a1 0 1 1 connected
d4 127.0.0.1:7003@17003 master,fail - 0 1 3 disconnected 10923-16383
e5 127.0.0.1:7005@17005 master - 0 1 4 connected
";
    assert_eq!(parse_primaries(nodes), ["127.0.0.1:7001", "127.0.0.1:7002"]);
}

#[test]
fn keyless_commands_are_watched_by_where_they_go() {
    assert!(answers_anywhere(&redis::cmd("time")));
    assert!(!answers_anywhere(&redis::cmd("PING")));
    assert!(to_every_primary(
        redis::cmd("SCRIPT").arg("LOAD").arg("return 1")
    ));
    assert!(!to_every_primary(&redis::cmd("WAIT")));
    // A step of 5471 slots visits each third of the slots in turn.
    let thirds: Vec<u32> = (0..6)
        .map(|n| u32::from(nth_any_slot(n)) * 3 / u32::from(SLOTS))
        .collect();
    assert_eq!(thirds, [0, 1, 2, 0, 1, 2]);
}

#[test]
fn a_node_is_reached_as_its_seed_is() {
    assert_eq!(
        node_url("redis://10.0.0.1:7000/", "10.0.0.2", 7001),
        "redis://10.0.0.2:7001/"
    );
    assert_eq!(
        node_url("rediss://app:s3cr%40t@10.0.0.1:7000/", "10.0.0.2", 7001),
        "rediss://app:s3cr%40t@10.0.0.2:7001/"
    );
    assert_eq!(
        node_url("rediss://:pw@h:1", "::1", 7001),
        "rediss://:pw@[::1]:7001/"
    );
}

#[test]
fn finds_the_key_of_each_kind_of_command() {
    let slot = |c: &Cmd| slot_of(c);
    let key = slots::key_slot(b"sp:{12}:3");
    assert_eq!(
        slot(redis::cmd("HGET").arg("sp:{12}:3").arg("f")),
        Some(key)
    );
    assert_eq!(
        slot(
            redis::cmd("EVALSHA")
                .arg("abc")
                .arg(2)
                .arg("sp:{12}:3")
                .arg("x")
        ),
        Some(key)
    );
    assert_eq!(slot(redis::cmd("EVALSHA").arg("abc").arg(0).arg("x")), None);
    assert_eq!(
        slot(redis::cmd("OBJECT").arg("ENCODING").arg("sp:{12}:3")),
        Some(key)
    );
    assert_eq!(slot(&redis::cmd("TIME")), None);
    // The hash tag decides: keys of one bucket share a slot.
    assert_eq!(slots::key_slot(b"sp:{12}:i"), key);
}
