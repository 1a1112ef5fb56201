//! The Lua scripts, compiled in and hashed once.
//!
//! `Script::invoke_async` reloads a script the server has forgotten (after
//! a restart or `SCRIPT FLUSH`); pipelines do not, so bulk calls use
//! [`load_all`] and retry once on `NOSCRIPT`.

use std::sync::LazyLock;

use redis::Script;

macro_rules! bucket_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("lua/bucket_common.lua"),
                include_str!(concat!("lua/", $file))
            ))
        })
    };
}

macro_rules! key_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("lua/key_common.lua"),
                include_str!(concat!("lua/", $file))
            ))
        })
    };
}

pub(crate) static STRING_INSERT: LazyLock<Script> = key_script!("string_insert.lua");
pub(crate) static STRING_LOAD: LazyLock<Script> = key_script!("string_load.lua");
pub(crate) static STRING_TOUCH: LazyLock<Script> = key_script!("string_touch.lua");
pub(crate) static STRING_REPLACE: LazyLock<Script> = key_script!("string_replace.lua");
pub(crate) static STRING_REMOVE: LazyLock<Script> = key_script!("string_remove.lua");
pub(crate) static HASH_INSERT: LazyLock<Script> = key_script!("hash_insert.lua");
pub(crate) static HASH_LOAD: LazyLock<Script> = key_script!("hash_load.lua");
pub(crate) static HASH_TOUCH: LazyLock<Script> = key_script!("hash_touch.lua");
pub(crate) static HASH_REPLACE: LazyLock<Script> = key_script!("hash_replace.lua");
pub(crate) static HASH_REMOVE: LazyLock<Script> = key_script!("hash_remove.lua");

pub(crate) static BUCKET_INSERT: LazyLock<Script> = bucket_script!("bucket_insert.lua");
pub(crate) static BUCKET_LOAD: LazyLock<Script> = bucket_script!("bucket_load.lua");
pub(crate) static BUCKET_TOUCH: LazyLock<Script> = bucket_script!("bucket_touch.lua");
pub(crate) static BUCKET_REPLACE: LazyLock<Script> = bucket_script!("bucket_replace.lua");
pub(crate) static BUCKET_REMOVE: LazyLock<Script> = bucket_script!("bucket_remove.lua");

/// Whether an error means the server has lost a script.
pub(crate) fn is_noscript(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// Loads scripts ahead of a pipeline that uses them.
pub(crate) async fn load_all<C>(conn: &mut C, scripts: &[&Script]) -> redis::RedisResult<()>
where
    C: redis::aio::ConnectionLike + Send,
{
    for script in scripts {
        script.load_async(conn).await?;
    }
    Ok(())
}
