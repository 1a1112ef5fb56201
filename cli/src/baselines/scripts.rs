//! The key-per-session baselines' scripts: the library's server clock
//! first, then the family's common files, then the script's own.

use std::sync::LazyLock;

use redis::Script;

/// A script of the files named, the library's `server_clock.lua` first
/// where it is named.
macro_rules! script {
    (clock $(, $file:literal)+) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../../../src/lua/server_clock.lua"),
                $(include_str!(concat!("lua/", $file))),+
            ))
        })
    };
    ($($file:literal),+) => {
        LazyLock::new(|| Script::new(concat!($(include_str!(concat!("lua/", $file))),+)))
    };
}

pub(super) static STRING_INSERT: LazyLock<Script> =
    script!(clock, "key_common.lua", "key_json.lua", "string_insert.lua");
pub(super) static STRING_TOUCH: LazyLock<Script> =
    script!(clock, "key_common.lua", "key_json.lua", "string_touch.lua");
pub(super) static STRING_REPLACE: LazyLock<Script> = script!("key_json.lua", "string_replace.lua");
pub(super) static STRING_REMOVE: LazyLock<Script> = script!("key_json.lua", "string_remove.lua");
pub(super) static HASH_INSERT: LazyLock<Script> =
    script!(clock, "key_common.lua", "hash_insert.lua");
pub(super) static HASH_TOUCH: LazyLock<Script> = script!(clock, "key_common.lua", "hash_touch.lua");
pub(super) static HASH_REPLACE: LazyLock<Script> = script!("hash_replace.lua");
pub(super) static HASH_REMOVE: LazyLock<Script> = script!("hash_remove.lua");

/// Items a bulk call sends in one pipeline, as the library's layouts do.
pub(super) const PIPELINE_CHUNK: usize = 1024;

/// A script's boolean argument.
pub(super) fn flag(on: bool) -> &'static str {
    if on { "1" } else { "0" }
}
