//! `sessionpack dictionary`: trains the dictionary a tower store packs its
//! sessions' data with ([`sessionpack::session::dictionary`]), and stores
//! one in a namespace.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::profile::Profile;
use crate::sample::{self, Sample};
use sessionpack::conn::{ConnectOptions, Endpoint};
use sessionpack::error::{Error, Result};
use sessionpack::session::dictionary::{Dictionary, MAX_DICTIONARY_BYTES};

/// Arguments of `sessionpack dictionary`.
#[derive(Debug, Args)]
pub struct DictionaryArgs {
    #[command(subcommand)]
    command: DictionaryCommand,
}

#[derive(Debug, Subcommand)]
enum DictionaryCommand {
    /// Train a dictionary on sessions' data (a file, another store's keys
    /// or a built-in profile), write it to a file, and report what it
    /// saves on the sessions held out of its training.
    Train(TrainArgs),
    /// Store a trained dictionary in a namespace (`SET NX`), where every
    /// process that meets records packed with it reads it.
    Publish(PublishArgs),
}

/// The largest dictionary trained unless told: records are small, and
/// larger ones gained under 1% on the built-in profiles.
pub(crate) const DEFAULT_BYTES: usize = 16 * 1024;

/// Arguments of `sessionpack dictionary train`.
#[derive(Debug, Args)]
struct TrainArgs {
    /// The dictionary's id in its namespace (1-255); a new dictionary
    /// takes a new id.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=255))]
    id: u8,
    /// Where to write it.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Its largest size in bytes.
    #[arg(long, default_value_t = DEFAULT_BYTES as u32, value_parser = clap::value_parser!(u32).range(256..=MAX_DICTIONARY_BYTES as i64))]
    max_bytes: u32,
    /// Train on the sessions in this JSON file: each session's data map,
    /// one object per line or one array of objects.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["sample_url", "profile"])]
    sessions_file: Option<PathBuf>,
    /// Train on sessions read on this server, from the keys `--from` names.
    #[arg(long, value_name = "URL", conflicts_with = "profile")]
    sample_url: Option<String>,
    /// With `--sample-url`: the store whose keys to read.
    #[command(flatten)]
    source: super::source_args::SourceArgs,
    /// Train on sessions of this built-in shape (for the benchmarks).
    #[arg(long)]
    profile: Option<Profile>,
    /// Sessions to read or make; a fifth is held out to measure on.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
    sample: u32,
    /// Certificates for `rediss://` URLs.
    #[command(flatten)]
    tls: super::tls_args::TlsArgs,
}

/// Arguments of `sessionpack dictionary publish`.
#[derive(Debug, Args)]
struct PublishArgs {
    /// The server (or a cluster node) of the store.
    #[arg(long, value_name = "URL")]
    redis_url: String,
    /// Certificates for `rediss://` URLs.
    #[command(flatten)]
    tls: super::tls_args::TlsArgs,
    /// Treat `--redis-url` as a node of a Redis Cluster.
    #[arg(long)]
    cluster: bool,
    /// The store's namespace.
    #[arg(long, default_value = "sp")]
    namespace: String,
    /// The dictionary's id, as it was trained.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=255))]
    id: u8,
    /// The file `train` wrote.
    file: PathBuf,
}

/// Sessions of `profile` a dictionary trains on: numbered apart from those
/// the benchmarks store, so it is measured on sessions it never saw.
pub(crate) fn profile_sample(profile: Profile, count: u32) -> Result<Sample> {
    const TRAINING: u64 = 1 << 40;
    let mut sample = Sample {
        from: format!("{count} {profile} sessions"),
        ..Sample::default()
    };
    for n in 0..u64::from(count) {
        sample.push_map(&profile.data(TRAINING + n))?;
    }
    Ok(sample)
}

/// A dictionary trained on all but the last fifth of some sessions' data,
/// and what it does to that fifth.
pub(crate) struct HeldOut {
    pub dictionary: Dictionary,
    /// The held-out data's sizes, unpacked.
    pub before: Vec<u64>,
    /// The same data's sizes as a store packing with the dictionary keeps it.
    pub after: Vec<u64>,
}

impl HeldOut {
    /// Trains on all but the last fifth of `data` and packs that fifth.
    pub fn train(id: u8, data: &[Vec<u8>], max_bytes: usize) -> Result<Self> {
        let split = data.len() - data.len() / 5;
        let (train, held) = data.split_at(split);
        let dictionary = Dictionary::train(id, train, max_bytes)?;
        let after = dictionary.stored_sizes(held)?;
        Ok(Self {
            dictionary,
            before: held.iter().map(|d| d.len() as u64).collect(),
            after: after.into_iter().map(|n| n as u64).collect(),
        })
    }
}

/// The mean of some sizes.
pub(crate) fn mean(sizes: &[u64]) -> f64 {
    sizes.iter().sum::<u64>() as f64 / sizes.len().max(1) as f64
}

pub(super) async fn run(args: DictionaryArgs) -> Result<()> {
    match args.command {
        DictionaryCommand::Train(args) => train(args).await,
        DictionaryCommand::Publish(args) => publish(args).await,
    }
}

async fn train(args: TrainArgs) -> Result<()> {
    let sample = if let Some(path) = &args.sessions_file {
        sample::from_file(path)?
    } else if let Some(url) = &args.sample_url {
        let options = args.tls.apply(ConnectOptions::default())?;
        let mut conn = sessionpack::connect_with(url, &options).await?;
        sample::from_source(&mut conn, &args.source.source(), args.sample as usize).await?
    } else if let Some(profile) = args.profile {
        profile_sample(profile, args.sample)?
    } else {
        return Err(Error::Config(
            "train on --sessions-file, --sample-url or --profile".into(),
        ));
    };
    if sample.data.len() < 10 {
        return Err(Error::Config(format!(
            "{}: too few sessions to train on (10 at least, thousands for a good dictionary)",
            sample.from
        )));
    }
    let held = HeldOut::train(args.id, &sample.data, args.max_bytes as usize)?;
    let (dictionary, before, after) = (held.dictionary, mean(&held.before), mean(&held.after));
    std::fs::write(&args.out, dictionary.bytes())
        .map_err(|e| Error::Config(format!("cannot write {}: {e}", args.out.display())))?;
    println!(
        "dictionary {} ({} bytes) trained on {}, written to {}",
        dictionary.id(),
        dictionary.bytes().len(),
        sample.from,
        args.out.display()
    );
    println!(
        "sessions held out of the training: {before:.1} bytes of data on average, \
         {after:.1} packed ({:.0}%)",
        100.0 * after / before
    );
    Ok(())
}

async fn publish(args: PublishArgs) -> Result<()> {
    let bytes = std::fs::read(&args.file)
        .map_err(|e| Error::Config(format!("cannot read {}: {e}", args.file.display())))?;
    let dictionary = Dictionary::new(args.id, bytes)?;
    let options = args.tls.apply(ConnectOptions::default())?;
    let endpoint = if args.cluster {
        Endpoint::Cluster(vec![args.redis_url.clone()])
    } else {
        Endpoint::Server(args.redis_url.clone())
    };
    let conn = endpoint.connect_with(&options).await?;
    dictionary.publish(&conn, &args.namespace).await?;
    println!(
        "dictionary {} ({} bytes) is stored in namespace {}",
        dictionary.id(),
        dictionary.bytes().len(),
        args.namespace
    );
    Ok(())
}
