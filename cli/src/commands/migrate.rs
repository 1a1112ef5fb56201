//! `sessionpack migrate`: copy a key-per-session store's live sessions into
//! a sessionpack tower store, online ([`crate::migrate`]).

use std::time::Duration;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use sessionpack::conn::AnyConnection;
use sessionpack::error::{Error, Result};
use sessionpack::session::dictionary::{Dictionary, PACKED_FORMAT};
use sessionpack::session::layout::Expiry;
use sessionpack::session::meta::StoreMeta;
use sessionpack::takeover::ValueForm;
use sessionpack::tower::{TowerStore, recommended_config_for};
use sessionpack::users::UserIndexConfig;
use sessionpack::viewed::ViewedConfig;
use sessionpack::{CompactConfig, IdWidth};

use crate::migrate::{self, Keyspace, Plan};

/// Arguments of `sessionpack migrate`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("server").required(true).args(["redis_url", "cluster_url"])))]
pub struct MigrateArgs {
    /// The server holding both stores.
    #[arg(long, value_name = "URL")]
    redis_url: Option<String>,
    /// A node of the Redis Cluster holding both stores (repeat to name
    /// more seeds): every primary is scanned.
    #[arg(long, value_name = "URL")]
    cluster_url: Vec<String>,
    /// Certificates for a `rediss://` URL.
    #[command(flatten)]
    tls: super::tls_args::TlsArgs,
    /// How long one reply from Redis may take, in seconds (a batch's
    /// pipeline is one reply).
    #[arg(long, default_value_t = 30.0)]
    response_timeout_secs: f64,
    /// The sessionpack store's namespace.
    #[arg(long, default_value = sessionpack::session::buckets::DEFAULT_NAMESPACE)]
    namespace: String,
    /// Fixed buckets (2^bits), as the app opens the store with
    /// `CompactConfig::new(bits)`; without it a new namespace grows. A
    /// namespace already recorded keeps its own, and a count that differs
    /// is refused.
    #[arg(long)]
    bucket_bits: Option<u8>,
    /// A user index ("log out everywhere"), as the app opens the store with
    /// `UserIndexConfig::default()`: each session copied goes into its
    /// owner's entry (axum-login's user id, or actix-identity's). Needed when the copy creates
    /// the namespace: an app that opens it with an index refuses a
    /// namespace recorded without one.
    #[arg(long)]
    user_index: bool,
    /// The user index's size, as `UserIndexConfig::new(bits)` (implies
    /// `--user-index`).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=24))]
    user_index_bits: Option<u8>,
    /// Fields the server expires, as `CompactConfig::with_server_expiry()`
    /// (Redis 7.4 or later; fixed buckets, so with `--bucket-bits`).
    #[arg(long, requires = "bucket_bits")]
    server_expiry: bool,
    /// Store the copies unpacked. Without it they are packed as
    /// `TowerStore::connect` packs what it writes: with the dictionary the
    /// namespace has learned, or with one learned from the first 1000
    /// sessions copied, which the app then finds and packs with.
    #[arg(long, conflicts_with = "dictionary_id")]
    unpacked: bool,
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

/// Opens the tower store as the app opens it: what the namespace records,
/// and for a new namespace what the flags say (growing buckets unless
/// `--bucket-bits`, a user index with `--user-index`), packed unless
/// `--unpacked`. A flag that differs from the record is refused.
async fn open_store(
    manager: &AnyConnection,
    args: &MigrateArgs,
) -> Result<TowerStore<AnyConnection>> {
    let meta = StoreMeta::read(manager, &args.namespace).await?;
    if let Some(meta) = &meta
        && (meta.layout != "compact" || IdWidth::from_bits(meta.id_bits) != Some(IdWidth::Bits128))
    {
        return Err(Error::Config(format!(
            "namespace {:?} holds a store with {meta}: a migration fills a compact store \
             with 128-bit ids (a tower store)",
            args.namespace
        )));
    }
    // What the flags leave follows the record (CompactConfig::resolve).
    let mut config = match args.bucket_bits {
        Some(bits) => CompactConfig::new(bits),
        None => CompactConfig::default(),
    }
    .with_namespace(args.namespace.clone());
    if let Some(meta) = &meta {
        config.user_index = UserIndexConfig::from_meta(meta);
        config.viewed = ViewedConfig::from_meta(meta);
        config.expiry = Expiry::from_meta(meta);
    }
    if args.user_index || args.user_index_bits.is_some() {
        let index = args
            .user_index_bits
            .map_or_else(UserIndexConfig::default, UserIndexConfig::new);
        config = config.with_user_index(index);
    }
    if args.server_expiry {
        config = config.with_server_expiry();
    }
    let packs = !args.unpacked
        && args.dictionary_id.is_none()
        && meta.as_ref().is_none_or(|m| m.format >= PACKED_FORMAT);
    if packs {
        // The app's own choice: none where the eviction policy may evict
        // the dictionary's key.
        config.learn_dictionary = recommended_config_for(manager).await?.learn_dictionary;
    }
    if args.dry_run && meta.is_none() {
        return Err(Error::Config(
            "a dry run writes nothing, not even a new store: open the store first".into(),
        ));
    }
    // A command, not the app: the app's stores sweep.
    let mut store = TowerStore::new(manager.clone(), config)
        .await?
        .without_sweeper();
    if args.source.source().value == ValueForm::ActixState {
        // Owners as the actix store reads them: actix-identity's user id.
        store = store.with_owner(sessionpack::actix::actix_identity_owner, None);
    }
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

/// Refuses a Redis Cluster node named as a server before anything is
/// written: its keys and the store's live on several nodes.
async fn refuse_cluster(manager: &redis::aio::ConnectionManager) -> Result<()> {
    let info: String = redis::cmd("INFO")
        .arg("cluster")
        .query_async(&mut manager.clone())
        .await?;
    if info.lines().any(|l| l.trim() == "cluster_enabled:1") {
        return Err(Error::Config(
            "the server is a Redis Cluster node: name it with --cluster-url (nothing was written)"
                .into(),
        ));
    }
    Ok(())
}

pub(super) async fn run(args: MigrateArgs) -> Result<()> {
    let options = args.tls.apply(
        sessionpack::ConnectOptions::default().with_response_timeout(Duration::from_secs_f64(
            args.response_timeout_secs.clamp(0.001, 1e6),
        )),
    )?;
    let (conn, mut keyspace) = match &args.redis_url {
        Some(url) => {
            let conn = sessionpack::conn::Endpoint::Server(url.clone())
                .connect_with(&options)
                .await?;
            let AnyConnection::Server(manager) = &conn else {
                return Err(Error::Config("a server URL opened a cluster".into()));
            };
            refuse_cluster(manager).await?;
            let keyspace = Keyspace::Server(manager.clone());
            (conn, keyspace)
        }
        None => {
            let conn = sessionpack::conn::Endpoint::Cluster(args.cluster_url.clone())
                .connect_with(&options)
                .await?;
            let keyspace = Keyspace::cluster(args.cluster_url.clone(), options.clone()).await?;
            (conn, keyspace)
        }
    };
    let store = open_store(&conn, &args).await?;
    let plan = Plan {
        source: args.source.source(),
        dry_run: args.dry_run,
        delete_copied: args.delete_copied,
        batch: args.batch.max(1),
        restart: args.restart,
        stop_after_batches: args.stop_after_batches,
    };
    let keys = keyspace.dbsize().await?;
    let bar = ProgressBar::new(keys);
    bar.set_style(
        ProgressStyle::with_template("migrate {bar:40} {pos}/{len} keys ({per_sec}, eta {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let report = migrate::run_on(keyspace, conn, store, &plan, |scanned| {
        bar.set_position(scanned)
    })
    .await;
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
