//! `sessionpack advise`: bucket count and memory for a planned population.

use std::path::PathBuf;

use clap::Args;

use crate::advisor::{self, DEFAULT_IDENTITY, DEFAULT_MAX_CONVERTED, Prediction, Workload};
use crate::baselines::LayoutKind;
use crate::harness::memory::{FIRST_IDENTITY, MemoryReport, human_count};
use crate::sample::{self, Sample};
use sessionpack::conn::ConnectOptions;
use sessionpack::conn::cluster::slots;
use sessionpack::error::{Error, Result};
use sessionpack::identity::Form;
use sessionpack::limits::ListpackLimits;
use sessionpack::session::buckets::Buckets;
use sessionpack::session::layout::compact::GroupedBuckets;

/// Arguments of `sessionpack advise`.
#[derive(Debug, Args)]
pub struct AdviseArgs {
    /// Sessions expected at peak.
    #[arg(long, default_value_t = 10_000_000, value_parser = super::count::positive)]
    sessions: u64,
    /// Read the listpack limits from this server (default: Redis 7's).
    #[arg(long, value_name = "URL", conflicts_with = "cluster_url")]
    redis_url: Option<String>,
    /// Read the listpack limits from the primaries of the Redis Cluster
    /// this node belongs to (they must agree), and show how the picks'
    /// hash tags spread over its primaries' slots.
    #[arg(long, value_name = "URL")]
    cluster_url: Option<String>,
    /// Certificates for `rediss://` URLs.
    #[command(flatten)]
    tls: super::tls_args::TlsArgs,
    /// Show how the picks' hash tags would spread over a new cluster of
    /// this many primaries (slots split as `redis-cli --cluster create`
    /// does).
    #[arg(long, conflicts_with = "cluster_url", value_parser = clap::value_parser!(u16).range(1..=1000))]
    primaries: Option<u16>,
    /// A typical identity value (its size sets the record's).
    #[arg(long, default_value_t = DEFAULT_IDENTITY)]
    identity: u64,
    /// The identities' form: `int` (as --identity), `uuid`, or `name-N`
    /// (N-byte names).
    #[arg(long, default_value = "int")]
    identity_form: Form,
    /// Bytes of encoded attributes per session.
    #[arg(long, default_value_t = 0)]
    attrs_bytes: u64,
    /// Bits in a session id: 160 (the default) or 128.
    #[arg(long, default_value_t = 160, value_parser = id_bits)]
    id_bits: u16,
    /// Show these bucket counts (log2) instead of those around the
    /// recommendation.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u8).range(1..=24))]
    bucket_bits: Vec<u8>,
    /// Tolerated expected number of buckets that leave listpack.
    #[arg(long, default_value_t = DEFAULT_MAX_CONVERTED)]
    max_converted: f64,
    /// Plan for session data of this shape as the tower-sessions store
    /// keeps it (identity-only, axum-login-digest, axum-login-password-hash,
    /// django, axum-login-app, axum-login-app-text): record sizes, the `hash-max-listpack-value` that keeps them
    /// in their buckets, and bytes per session.
    #[arg(long, conflicts_with = "record_bytes")]
    profile: Option<crate::profile::Profile>,
    /// Plan for records of these encoded sizes in bytes (a sample of the
    /// distribution, e.g. `44,44,48,109`), as `--profile` does.
    #[arg(long, value_delimiter = ',')]
    record_bytes: Vec<u64>,
    /// Plan for the records of sessions read on this server: a sample of
    /// the keys `--from` names (another store's, sized as the
    /// tower-sessions store would keep their data), or with
    /// `--sample-namespace` a sessionpack store's own. The listpack limits
    /// are read there too, unless `--redis-url` or `--cluster-url` names
    /// the server to plan for.
    #[arg(long, value_name = "URL", conflicts_with_all = ["profile", "record_bytes", "sessions_file"])]
    sample_url: Option<String>,
    /// With `--sample-url`: the store whose keys to read.
    #[command(flatten)]
    source: super::source_args::SourceArgs,
    /// With `--sample-url`: read this sessionpack namespace's records
    /// (a compact store) instead of another store's keys.
    #[arg(long, value_name = "NAMESPACE", requires = "sample_url")]
    sample_namespace: Option<String>,
    /// With `--sample-url`: how many sessions to read.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    sample: u32,
    /// Plan for the records of the sessions in this JSON file: each
    /// session's data map (as tower-sessions keeps it), one object per
    /// line or one array of objects.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["profile", "record_bytes"])]
    sessions_file: Option<PathBuf>,
    /// With `--profile`, `--sessions-file` or `--sample-url` (another
    /// store's keys): plan for the records packed with a dictionary
    /// trained on four fifths of the sessions (as `sessionpack dictionary
    /// train` trains it), sized on the fifth held out.
    #[arg(long, conflicts_with_all = ["record_bytes", "sample_namespace"])]
    pack: bool,
    /// Instead of advising, compare the model with the measured run in this
    /// `report.json` (from `sessionpack bench memory`).
    #[arg(long, value_name = "REPORT")]
    check: Option<PathBuf>,
}

/// Record sizes to plan for, and where they came from: `--profile`,
/// `--record-bytes`, `--sessions-file` or `--sample-url`; `None` for a
/// bare session.
async fn record_sizes(args: &AdviseArgs, options: &ConnectOptions) -> Result<Option<Sample>> {
    let mut sample = if let Some(path) = &args.sessions_file {
        sample::from_file(path)?
    } else if let Some(url) = &args.sample_url {
        let mut conn = sessionpack::connect_with(url, options).await?;
        let want = args.sample as usize;
        match &args.sample_namespace {
            Some(namespace) => sample::from_namespace(&mut conn, namespace, want).await?,
            None => sample::from_source(&mut conn, &args.source.source(), want).await?,
        }
    } else if let Some(profile) = args.profile {
        let mut sample = Sample {
            from: format!("the {profile} profile"),
            ..Sample::default()
        };
        let count = if args.pack { 5000 } else { 1000 };
        for n in 0..count {
            sample.push_map(&profile.data(n))?;
        }
        sample
    } else if !args.record_bytes.is_empty() {
        Sample {
            sizes: args.record_bytes.clone(),
            from: "--record-bytes".into(),
            ..Sample::default()
        }
    } else {
        return Ok(None);
    };
    if sample.sizes.is_empty() {
        let skipped = sample.skipped_text();
        return Err(Error::Config(format!(
            "no session to size in {}{}",
            sample.from,
            if skipped.is_empty() {
                String::new()
            } else {
                format!("; skipped: {skipped}")
            }
        )));
    }
    if args.pack {
        sample = packed(sample)?;
    }
    sample.sizes.sort_unstable();
    Ok(Some(sample))
}

/// The held-out fifth of `sample`, sized as a store packing with a
/// dictionary trained on the rest keeps it.
fn packed(sample: Sample) -> Result<Sample> {
    if sample.data.len() < 10 {
        return Err(Error::Config(format!(
            "--pack trains a dictionary on the sessions' data: {} has {} sessions to train \
             on (10 at least, thousands for a good dictionary)",
            sample.from,
            sample.data.len()
        )));
    }
    let held =
        super::dictionary::HeldOut::train(1, &sample.data, super::dictionary::DEFAULT_BYTES)?;
    let before = super::dictionary::mean(&held.before);
    let after = super::dictionary::mean(&held.after);
    println!(
        "packed with a dictionary ({} bytes) trained on {} of {}: the {} held out average \
         {before:.1} bytes of data unpacked, {after:.1} packed",
        held.dictionary.bytes().len(),
        sample.data.len() - held.after.len(),
        sample.from,
        held.after.len(),
    );
    Ok(Sample {
        from: format!("{} held out of {}, packed", held.after.len(), sample.from),
        sizes: held.after,
        data: Vec::new(),
        skipped: sample.skipped,
    })
}

/// What records of the sampled sizes cost in the compact layout at the
/// server's `hash-max-listpack-value` and at the one the advisor
/// recommends.
fn plan_records(args: &AdviseArgs, limits: ListpackLimits, sample: &Sample) -> Result<()> {
    let sizes = &sample.sizes;
    println!("Records sized from {}.", sample.from);
    if !sample.skipped.is_empty() {
        println!("Not sized: {}.", sample.skipped_text());
    }
    let mean = sizes.iter().sum::<u64>() as f64 / sizes.len().max(1) as f64;
    let p99 = sizes[((sizes.len() as f64 * 0.99).ceil() as usize).saturating_sub(1)];
    let recommended = advisor::recommend_hash_value(sizes, limits.hash_value);
    println!(
        "{} sessions; records {:.1} bytes on average, {} at the 99th percentile (+4 bytes of expiry in the bucket)\n",
        human_count(args.sessions),
        mean,
        p99
    );
    let mut values = vec![limits.hash_value];
    if recommended != limits.hash_value {
        values.push(recommended);
    }
    for value in values {
        let limits = ListpackLimits {
            hash_value: value,
            ..limits
        };
        let bits = advisor::recommend_tower_bits(
            args.sessions,
            &limits,
            args.max_converted,
            mean.round() as u64,
            u64::from(args.id_bits / 8),
        );
        let id_bytes = u64::from(args.id_bits / 8);
        let base = Workload {
            limits,
            id_bytes,
            ..Workload::new(args.sessions)
        };
        let per_session = advisor::predict_sizes(bits, sizes, &base);
        let field = id_bytes.saturating_sub(u64::from(bits / 8));
        let share = |keep: &dyn Fn(u64) -> bool| {
            100.0 * sizes.iter().filter(|&&r| keep(r)).count() as f64 / sizes.len() as f64
        };
        let one = share(&|r| r + 4 <= value);
        let pieced = share(&|r| advisor::pieces(r, field, &limits).is_some());
        println!(
            "hash-max-listpack-value {value}: {one:.0}% of records in one value, {pieced:.0}% in pieces, {:.0}% out of line; compact at 2^{bits}: {per_session:.1} bytes/session, {} in all{}",
            100.0 - one - pieced,
            mib(per_session * args.sessions as f64),
            if value == recommended {
                " (recommended)"
            } else {
                ""
            }
        );
    }
    let over_one_value = sizes.iter().any(|&r| r + 4 > limits.hash_value);
    if over_one_value && !args.pack && !sample.data.is_empty() {
        println!(
            "\nRecords over one value shrink, often below it, packed with a dictionary trained on the app's sessions: `--pack` sizes them so (`sessionpack dictionary train` makes the dictionary)."
        );
    }
    println!(
        "\nBuckets are sized for at most {} sessions each on average: a session store that writes on every create, save and delete (tower-sessions) pays for fuller listpacks on each write.",
        advisor::TOWER_MAX_MEAN_FILL
    );
    if recommended != limits.hash_value {
        println!("\n{}.", advisor::hash_value_cost(recommended, &limits));
    }
    Ok(())
}

/// The listpack limits every primary of the cluster `seed` belongs to
/// runs with; an error names the first that differs, since buckets on it
/// would be encoded differently from the advice.
async fn cluster_limits(seed: &str, options: &ConnectOptions) -> Result<ListpackLimits> {
    let primaries = sessionpack::conn::cluster::primaries(seed, options).await?;
    let mut first: Option<(String, ListpackLimits)> = None;
    for url in primaries {
        let limits =
            ListpackLimits::read(&mut sessionpack::connect_with(&url, options).await?).await?;
        match &first {
            None => first = Some((url, limits)),
            Some((at, seen)) if *seen != limits => {
                return Err(Error::Config(format!(
                    "the primaries disagree on listpack limits: {at} has {seen:?}, {url} has {limits:?}"
                )));
            }
            Some(_) => {}
        }
    }
    first
        .map(|(_, l)| l)
        .ok_or_else(|| Error::Config(format!("{seed} reports no primaries")))
}

/// Parses `--id-bits`: 128 or 160.
pub(super) fn id_bits(text: &str) -> std::result::Result<u16, String> {
    match text.parse::<u16>() {
        Ok(bits) if sessionpack::session::id::IdWidth::from_bits(bits).is_some() => Ok(bits),
        _ => Err("ids have 128 or 160 bits".into()),
    }
}

fn mib(bytes: f64) -> String {
    if bytes >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2} GiB", bytes / (1024.0 * 1024.0 * 1024.0))
    } else {
        format!("{:.1} MiB", bytes / (1024.0 * 1024.0))
    }
}

fn row(p: &Prediction) -> String {
    format!(
        "| {} | {} | {} | {} | {:.1} | {} |",
        p.layout,
        p.bucket_bits
            .map(|b| format!("2^{b} = {}", 1u64 << b))
            .unwrap_or_default(),
        p.mean_load.map(|m| format!("{m:.1}")).unwrap_or_default(),
        p.expected_converted
            .map(|c| format!("{c:.3}"))
            .unwrap_or_default(),
        p.bytes_per_session,
        mib(p.total_bytes)
    )
}

const HEADER: &str = "| layout | buckets | mean sessions/bucket | expected buckets left listpack | bytes/session | total used_memory |\n|---|---|---:|---:|---:|---:|";

pub(super) async fn run(args: AdviseArgs) -> Result<()> {
    if let Some(report) = &args.check {
        return check(report);
    }
    let options = args.tls.apply(ConnectOptions::default())?;
    let limits = match (&args.redis_url, &args.cluster_url, &args.sample_url) {
        (Some(url), _, _) | (None, None, Some(url)) => {
            ListpackLimits::read(&mut sessionpack::connect_with(url, &options).await?).await?
        }
        (None, Some(seed), _) => cluster_limits(seed, &options).await?,
        (None, None, None) => ListpackLimits::REDIS7_DEFAULTS,
    };
    if let Some(sample) = record_sizes(&args, &options).await? {
        return plan_records(&args, limits, &sample);
    }
    let w = Workload {
        sessions: args.sessions,
        identity: args.identity,
        identity_form: args.identity_form,
        attrs_bytes: args.attrs_bytes,
        limits,
        id_bytes: u64::from(args.id_bits / 8),
    };
    if w.record_bytes() > limits.hash_value {
        println!(
            "note: records of {} bytes exceed hash-max-listpack-value ({}); they will be stored out of line",
            w.record_bytes(),
            limits.hash_value
        );
    }
    let best = advisor::recommend_bits(args.sessions, &limits, args.max_converted);
    let compact = advisor::recommend_compact_bits(args.sessions, &limits, args.max_converted);
    println!(
        "{} sessions, {}-byte records, {}-bit ids, listpack limits {} entries (zset) / {} (hash) from {:?}\n",
        human_count(args.sessions),
        w.record_bytes(),
        args.id_bits,
        limits.zset_entries,
        limits.hash_entries,
        limits.source
    );
    println!(
        "(A bare session: an integer identity and nothing else. For a tower-sessions or \
         axum-login app pass --profile, e.g. --profile axum-login-digest; your sessions with \
         --sample-url (another store's keys, or --sample-namespace) or --sessions-file; or \
         your records' sizes with --record-bytes.)\n"
    );
    let picks = [(LayoutKind::Compact, compact), (LayoutKind::Bucketed, best)];
    let cheapest = picks
        .iter()
        .map(|&(layout, bits)| advisor::predict(layout, bits, &w))
        .min_by(|a, b| a.bytes_per_session.total_cmp(&b.bytes_per_session))
        .expect("two layouts");
    println!(
        "Recommended: {} at 2^{} = {} buckets, {:.1} bytes/session, {} in all.\n",
        cheapest.layout,
        cheapest.bucket_bits.unwrap_or(0),
        1u64 << cheapest.bucket_bits.unwrap_or(0),
        cheapest.bytes_per_session,
        mib(cheapest.total_bytes)
    );
    println!(
        "compact: the fewest buckets with a mean load of at most {} (a listpack lookup scans: fuller buckets cost server CPU on every load) and at most {} expected buckets over {} entries: 2^{compact}.",
        advisor::COMPACT_MAX_MEAN_FILL,
        args.max_converted,
        limits.hash_entries
    );
    println!(
        "bucketed: the fewest buckets with at most {} expected buckets over {} entries: 2^{best}.\n",
        args.max_converted,
        limits.bucket_entries()
    );
    for (layout, pick) in picks {
        println!("{layout} around its pick:\n\n{HEADER}");
        let shown: Vec<u8> = if args.bucket_bits.is_empty() {
            (pick.saturating_sub(3).max(1)..=(pick + 3).min(24)).collect()
        } else {
            args.bucket_bits.clone()
        };
        for bits in shown {
            println!("{}", row(&advisor::predict(layout, bits, &w)));
        }
        println!();
    }
    println!("Every layout (bucketed ones at their picks):\n\n{HEADER}");
    for layout in LayoutKind::ALL {
        let bits = if layout == LayoutKind::Compact {
            compact
        } else {
            best
        };
        println!("{}", row(&advisor::predict(layout, bits, &w)));
    }
    let ranges = match (&args.cluster_url, args.primaries) {
        (Some(seed), _) => Some((
            format!("as {seed} reports its slots"),
            sessionpack::conn::cluster::slots::primary_ranges(seed, &options)
                .await?
                .into_iter()
                .map(|(_, r)| r)
                .collect::<Vec<_>>(),
        )),
        (None, Some(n)) => Some((
            "slots split evenly, as `redis-cli --cluster create` does".to_owned(),
            slots::even_ranges(usize::from(n))
                .into_iter()
                .map(|r| vec![r])
                .collect(),
        )),
        (None, None) => None,
    };
    if let Some((how, ranges)) = ranges {
        cluster_spread(&how, &ranges, &w, compact, best)?;
    }
    Ok(())
}

/// The most the fullest primary may hold over the mean before the advisor
/// suggests more buckets.
const MAX_SPREAD: f64 = 1.10;

/// How the picks' hash tags spread over a cluster's primaries: a compact
/// store's 2^b buckets are 2^(b-7) hash tags, a bucketed store's one each.
fn cluster_spread(
    how: &str,
    ranges: &[Vec<std::ops::RangeInclusive<u16>>],
    w: &Workload,
    compact: u8,
    best: u8,
) -> Result<()> {
    let tags = |layout: LayoutKind, bits: u8| -> Result<Vec<String>> {
        let buckets = Buckets::new("sp", bits)?;
        Ok(if layout == LayoutKind::Compact {
            let scheme = GroupedBuckets::new(buckets);
            (0..scheme.groups()).map(|g| scheme.tag(g)).collect()
        } else {
            (0..buckets.count()).map(|b| buckets.tag(b)).collect()
        })
    };
    let fullest = |counts: &[u64]| {
        let mean = counts.iter().sum::<u64>() as f64 / counts.len().max(1) as f64;
        counts.iter().copied().max().unwrap_or(0) as f64 / mean.max(1e-9)
    };
    println!(
        "\nOn a cluster of {} primaries ({how}): a store's data and load follow its hash tags.\n\n| layout | buckets | hash tags | tags per primary | fullest primary vs mean |\n|---|---|---:|---|---:|",
        ranges.len()
    );
    for (layout, bits) in [(LayoutKind::Compact, compact), (LayoutKind::Bucketed, best)] {
        let tags = tags(layout, bits)?;
        let counts = slots::tags_per_primary(tags.iter().cloned(), ranges);
        println!(
            "| {layout} | 2^{bits} | {} | {} | {:.2}x |",
            tags.len(),
            counts
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(" / "),
            fullest(&counts)
        );
    }
    let compact_spread = fullest(&slots::tags_per_primary(
        tags(LayoutKind::Compact, compact)?,
        ranges,
    ));
    if compact_spread > MAX_SPREAD {
        let even = (compact + 1..=24).find(|&bits| {
            tags(LayoutKind::Compact, bits)
                .map(|t| fullest(&slots::tags_per_primary(t, ranges)) <= MAX_SPREAD)
                .unwrap_or(false)
        });
        match even {
            Some(bits) => {
                let p = advisor::predict(LayoutKind::Compact, bits, w);
                println!(
                    "\ncompact at 2^{bits} is the fewest buckets whose hash tags put at most {MAX_SPREAD:.2}x the mean on one primary: {:.1} bytes/session, {} in all.",
                    p.bytes_per_session,
                    mib(p.total_bytes)
                );
            }
            None => println!(
                "\nno compact store of up to 2^24 buckets spreads within {MAX_SPREAD:.2}x over these slot ranges."
            ),
        }
    }
    Ok(())
}

/// Compares predictions with a measured report, run by run.
fn check(path: &PathBuf) -> Result<()> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Config(format!("cannot read {}: {e}", path.display())))?;
    let report: MemoryReport = serde_json::from_str(&text)
        .map_err(|e| Error::Config(format!("{} is not a memory report: {e}", path.display())))?;
    println!(
        "Model vs `{}` (Redis {}):\n",
        report.command, report.server.redis_version
    );
    println!(
        "| run | sessions | predicted bytes/session | measured | error | predicted buckets left listpack | measured |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for run in &report.runs {
        let Some(p) = run.last() else { continue };
        let population = run.spec.emulated_sessions.unwrap_or(p.sessions);
        let w = Workload {
            sessions: population,
            identity: FIRST_IDENTITY + p.sessions / 2,
            identity_form: run.spec.identity,
            attrs_bytes: 0,
            limits: report.server.limits,
            id_bytes: u64::from(run.spec.id_bits / 8),
        };
        let bits = run.spec.bucket_bits.unwrap_or(16);
        let predicted = advisor::predict(run.spec.layout, bits, &w);
        // An emulated run fills a share of the buckets; scale the expected
        // conversions to that share.
        let share = p.sessions as f64 / population as f64;
        let converted = predicted
            .expected_converted
            .map(|c| format!("{:.1}", c * share))
            .unwrap_or_default();
        println!(
            "| {} | {} | {:.1} | {:.1} | {:+.1}% | {} | {} |",
            run.label,
            human_count(p.sessions),
            predicted.bytes_per_session,
            p.bytes_per_session,
            (predicted.bytes_per_session / p.bytes_per_session - 1.0) * 100.0,
            converted,
            p.census
                .map(|c| c.converted.to_string())
                .unwrap_or_default()
        );
    }
    Ok(())
}
