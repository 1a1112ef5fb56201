//! `sessionpack migrate`: copy a key-per-session store's live sessions into
//! a sessionpack tower store, online ([`crate::migrate`]).

use std::time::Duration;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use sessionpack::conn::AnyConnection;
use sessionpack::error::{Error, Result};
use sessionpack::session::dictionary::Dictionary;
use sessionpack::session::layout::Expiry;
use sessionpack::session::meta::StoreMeta;
use sessionpack::tower::TowerStore;
use sessionpack::users::UserIndexConfig;
use sessionpack::viewed::ViewedConfig;
use sessionpack::{CompactConfig, IdWidth};

use crate::migrate::{self, Plan};

/// Arguments of `sessionpack migrate`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// The server holding both stores (one server; a cluster is refused
    /// before anything is written: not supported yet).
    #[arg(long, value_name = "URL")]
    redis_url: String,
    /// Certificates for a `rediss://` URL.
    #[command(flatten)]
    tls: super::tls_args::TlsArgs,
    /// The sessionpack store's namespace.
    #[arg(long, default_value = sessionpack::session::buckets::DEFAULT_NAMESPACE)]
    namespace: String,
    /// Fixed buckets (2^bits) for a namespace no app has opened yet;
    /// without it such a namespace grows. A store already recorded keeps
    /// its own.
    #[arg(long)]
    bucket_bits: Option<u8>,
    /// The store the sessions come from, and its keys' form.
    #[command(flatten)]
    source: super::source_args::SourceArgs,
    /// Read and count, write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Delete each source key once its session is in the store (only while
    /// it still holds what was copied). Run it once no instance of the old
    /// app writes the old keys.
    #[arg(long)]
    delete_copied: bool,
    /// Keys asked of each SCAN.
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// Begin a new pass even where one stopped part way.
    #[arg(long)]
    restart: bool,
    /// Stop after this many batches (the next run resumes).
    #[arg(long, hide = true)]
    stop_after_batches: Option<u64>,
    /// Pack the copies with this dictionary of the namespace (stored by
    /// the app's store, or by `sessionpack dictionary publish`), as the
    /// app's store packs what it writes.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=255))]
    dictionary_id: Option<u8>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Opens the tower store the namespace records, or a new one: growing, or
/// with `--bucket-bits` fixed buckets.
async fn open_store(
    manager: &redis::aio::ConnectionManager,
    args: &MigrateArgs,
) -> Result<TowerStore<redis::aio::ConnectionManager>> {
    let meta = StoreMeta::read(manager, &args.namespace).await?;
    let config = match (&meta, args.bucket_bits) {
        (Some(meta), _) => {
            if meta.layout != "compact"
                || IdWidth::from_bits(meta.id_bits) != Some(IdWidth::Bits128)
            {
                return Err(Error::Config(format!(
                    "namespace {:?} holds a store with {meta}: a migration fills a compact \
                     store with 128-bit ids (a tower store)",
                    args.namespace
                )));
            }
            let mut config =
                CompactConfig::new(meta.bucket_bits).with_namespace(args.namespace.clone());
            config.user_index = UserIndexConfig::from_meta(meta);
            config.viewed = ViewedConfig::from_meta(meta);
            config.expiry = Expiry::from_meta(meta);
            config
        }
        (None, Some(bits)) => CompactConfig::new(bits).with_namespace(args.namespace.clone()),
        // No count: a store that grows as the sessions come in.
        (None, None) => CompactConfig::default().with_namespace(args.namespace.clone()),
    };
    if args.dry_run && meta.is_none() {
        return Err(Error::Config(
            "a dry run writes nothing, not even a new store: open the store first".into(),
        ));
    }
    // A command, not the app: the app's stores sweep.
    let store = TowerStore::new(manager.clone(), config)
        .await?
        .without_sweeper();
    let Some(id) = args.dictionary_id else {
        return Ok(store);
    };
    let dictionary = Dictionary::fetch(manager, &args.namespace, id)
        .await?
        .ok_or_else(|| {
            Error::Config(format!(
                "no dictionary {id} in namespace {:?}: store it with `sessionpack dictionary \
                 publish` first",
                args.namespace
            ))
        })?;
    store.with_dictionary(&dictionary).await
}

/// Refuses a Redis Cluster node before anything is written: a migration
/// reads and writes one server's keyspace, and on a cluster its keys and
/// the store's live on several nodes.
async fn refuse_cluster(manager: &redis::aio::ConnectionManager) -> Result<()> {
    let info: String = redis::cmd("INFO")
        .arg("cluster")
        .query_async(&mut manager.clone())
        .await?;
    if info.lines().any(|l| l.trim() == "cluster_enabled:1") {
        return Err(Error::Config(
            "the server is a Redis Cluster node: migrate does not support clusters yet \
             (nothing was written)"
                .into(),
        ));
    }
    Ok(())
}

pub(super) async fn run(args: MigrateArgs) -> Result<()> {
    let options = args.tls.apply(
        sessionpack::ConnectOptions::default().with_response_timeout(Duration::from_secs(30)),
    )?;
    let conn = sessionpack::conn::Endpoint::Server(args.redis_url.clone())
        .connect_with(&options)
        .await?;
    let AnyConnection::Server(manager) = conn else {
        return Err(Error::Config(
            "migrate takes one server, not a cluster".into(),
        ));
    };
    refuse_cluster(&manager).await?;
    let store = open_store(&manager, &args).await?;
    let plan = Plan {
        source: args.source.source(),
        dry_run: args.dry_run,
        delete_copied: args.delete_copied,
        batch: args.batch.max(1),
        restart: args.restart,
        stop_after_batches: args.stop_after_batches,
    };
    let mut probe = manager.clone();
    let keys: u64 = redis::cmd("DBSIZE").query_async(&mut probe).await?;
    let bar = ProgressBar::new(keys);
    bar.set_style(
        ProgressStyle::with_template("migrate {bar:40} {pos}/{len} keys ({per_sec}, eta {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let report = migrate::run(manager, store, &plan, |scanned| bar.set_position(scanned)).await;
    bar.finish_and_clear();
    let report = report?;
    if args.json {
        let json =
            serde_json::to_string_pretty(&report).map_err(|e| Error::Config(e.to_string()))?;
        println!("{json}");
    } else {
        print!("{}", report.text());
    }
    Ok(())
}
