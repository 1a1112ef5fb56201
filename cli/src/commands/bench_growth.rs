//! `sessionpack bench growth`: a store that splits and merges its buckets,
//! grown from thousands of sessions to a hundred million and shrunk back,
//! beside fixed bucket counts: bytes per session at each size against the
//! best fixed count for that size, and the server CPU splitting cost.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;

use super::Target;
use crate::harness::growth::{self, GrowthRun, Sessions, Size, Store};
use crate::harness::info::ServerInfo;
use crate::harness::memory::human_count;
use sessionpack::error::{Error, Result};

/// Arguments of `sessionpack bench growth`.
#[derive(Debug, Args)]
pub struct GrowthArgs {
    #[command(flatten)]
    target: Target,
    /// Sizes to measure at, ascending.
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = super::count::positive,
        default_value = "10k,30k,100k,300k,1M,3M,10M,30M,100M"
    )]
    sizes: Vec<u64>,
    /// After the largest size, shrink to this many sessions and measure
    /// again.
    #[arg(long, value_parser = super::count::positive, default_value = "1M")]
    shrink_to: u64,
    /// Sizes above this are emulated.
    #[arg(long, value_parser = super::count::positive, default_value = "1M")]
    emulate_above: u64,
    /// Emulated sizes load one session in this many (a power of two).
    #[arg(long, default_value_t = 128)]
    factor: u64,
    /// Bytes of data each session carries beside its identity (0: the
    /// identity-only session).
    #[arg(long, default_value_t = 0)]
    data_bytes: usize,
    /// Fixed bucket counts (log2) measured at every size and plotted.
    #[arg(long, value_delimiter = ',', default_value = "13,20",
          value_parser = clap::value_parser!(u8).range(1..=24))]
    fixed: Vec<u8>,
    /// Directory for growth.json, growth.md and the plot.
    #[arg(long, default_value = "results/growth")]
    out: PathBuf,
}

pub(super) async fn run(args: GrowthArgs) -> Result<()> {
    if !args.factor.is_power_of_two() || args.factor > 1 << 16 {
        return Err(Error::Config(format!(
            "--factor must be a power of two up to 65536, not {}",
            args.factor
        )));
    }
    let mut sizes = args.sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    let (target, url) = args.target.connect_server("bench growth").await?;
    let info = ServerInfo::read(&mut target.open(&url).await?).await?;
    let sessions = Sessions {
        data_bytes: args.data_bytes,
    };
    let entries = sessions.entries()?;
    let limit = info.limits.hash_entries;
    let real: Vec<Size> = sizes
        .iter()
        .filter(|&&s| s <= args.emulate_above)
        .map(|&s| Size {
            sessions: s,
            real: s,
        })
        .collect();
    let emulated: Vec<Size> = sizes
        .iter()
        .filter(|&&s| s > args.emulate_above)
        .map(|&s| Size {
            sessions: s,
            real: (s / args.factor).max(1),
        })
        .collect();
    let shrink = (!emulated.is_empty()).then_some(Size {
        sessions: args.shrink_to,
        real: (args.shrink_to / args.factor).max(1),
    });
    let least_bits = args.factor.trailing_zeros() as u8;

    // Each store's sizes: the plotted ones load all; a candidate for the
    // best fixed count only up to the largest size it is a candidate at.
    let plotted: BTreeSet<Store> = std::iter::once(Store::Growing)
        .chain(args.fixed.iter().map(|&b| Store::Fixed(b)))
        .collect();
    let mut upto: BTreeMap<(Store, bool), u64> = BTreeMap::new();
    for (phase, list) in [(false, &real), (true, &emulated)] {
        for size in list.iter() {
            for bits in growth::fixed_candidates(size.sessions, entries, limit) {
                let top = upto.entry((Store::Fixed(bits), phase)).or_default();
                *top = (*top).max(size.sessions);
            }
        }
        for &store in &plotted {
            upto.insert((store, phase), u64::MAX);
        }
    }
    let mut runs: Vec<GrowthRun> = Vec::new();
    for ((store, emulating), top) in upto {
        let (list, factor) = if emulating {
            (&emulated, args.factor)
        } else {
            (&real, 1)
        };
        if let (true, Store::Fixed(bits)) = (emulating, store)
            && bits < least_bits
        {
            continue;
        }
        let list: Vec<Size> = list.iter().copied().filter(|s| s.sessions <= top).collect();
        if list.is_empty() {
            continue;
        }
        let shrink = shrink.filter(|_| emulating && plotted.contains(&store));
        target.fresh(false).await?;
        let conn = target.open(&url).await?;
        println!(
            "{}: {}{}",
            store.label(),
            list.iter()
                .map(|s| human_count(s.sessions))
                .collect::<Vec<_>>()
                .join(", "),
            if emulating {
                format!(" (emulated, 1 in {factor})")
            } else {
                String::new()
            }
        );
        let run = growth::run(conn, store, sessions, &list, factor, shrink).await?;
        for p in &run.points {
            println!(
                "  {:>6}{} {:7.1} B/session, {} buckets, {} converted, {:.1} µs CPU/insert",
                human_count(p.size.sessions),
                if p.shrunk { " (shrunk)" } else { "" },
                p.bytes_per_session,
                p.buckets,
                p.converted,
                p.cpu_us_per_insert
            );
        }
        runs.push(run);
    }
    let md = report(&args, &info, &runs, entries);
    super::write_report(&args.out, "growth", &info.name(), &runs, &md)?;
    crate::harness::plot::write_growth(&runs, &info.name(), &args.fixed, &args.out)?;
    println!("{md}");
    Ok(())
}

fn report(args: &GrowthArgs, info: &ServerInfo, runs: &[GrowthRun], entries: u64) -> String {
    let best = growth::best_fixed(runs);
    let point = |store: Store, sessions: u64, shrunk: bool| {
        runs.iter()
            .filter(|r| r.store == store)
            .flat_map(|r| r.points.iter())
            .find(|p| p.size.sessions == sessions && p.shrunk == shrunk)
    };
    let command = super::bench_memory::command_line();
    let mut md = format!(
        "# Growing buckets\n\nProduced by `{command}` ({}, {}). Sessions of {} listpack \
         entr{} each ({} bytes of data). Sizes above {} are emulated: one session in {} \
         is loaded, its id confined to that share of the id space. Bytes per session are \
         `used_memory` less client buffers (`mem_clients_normal`) above the empty store's, \
         per loaded session; each sample follows `CONFIG RESETSTAT` (Redis 7 keeps a latency \
         histogram per command called, whatever the keys) and a warm-up of 20,000 sessions \
         in another namespace, flushed (buffers kept at the largest size a command needed). \"Best fixed\" is the \
         fixed bucket count (log2 in brackets) of least bytes per session with no bucket \
         converted, of those measured at that size.\n\n",
        info.name(),
        info.mem_allocator,
        entries,
        if entries == 1 { "y" } else { "ies" },
        args.data_bytes,
        human_count(args.emulate_above),
        args.factor
    );
    let fixed: Vec<u8> = args.fixed.clone();
    md += "| sessions | growing B/session | best fixed | growing / best |";
    for b in &fixed {
        let _ = write!(md, " fixed 2^{b} |");
    }
    md += " growing buckets | converted (growing";
    for b in &fixed {
        let _ = write!(md, ", 2^{b}");
    }
    md += ") |\n|---|---:|---:|---:|";
    for _ in &fixed {
        md += "---:|";
    }
    md += "---:|---:|\n";
    let mut rows: Vec<(u64, bool)> = runs
        .iter()
        .filter(|r| r.store == Store::Growing)
        .flat_map(|r| r.points.iter().map(|p| (p.size.sessions, p.shrunk)))
        .collect();
    rows.sort_by_key(|&(s, shrunk)| (shrunk, s));
    for (sessions, shrunk) in rows {
        let Some(g) = point(Store::Growing, sessions, shrunk) else {
            continue;
        };
        let label = if shrunk {
            format!("{} (shrunk)", human_count(sessions))
        } else {
            human_count(sessions)
        };
        let (best_cell, ratio) = match best.get(&sessions) {
            Some(&(bits, b)) => (
                format!("{b:.1} (2^{bits})"),
                format!("{:.3}", g.bytes_per_session / b),
            ),
            None => ("-".into(), "-".into()),
        };
        let _ = write!(
            md,
            "| {label} | {:.1} | {best_cell} | {ratio} |",
            g.bytes_per_session
        );
        let mut converted = format!("{}", g.converted);
        for &b in &fixed {
            match point(Store::Fixed(b), sessions, shrunk) {
                Some(p) => {
                    let _ = write!(md, " {:.1} |", p.bytes_per_session);
                    let _ = write!(converted, ", {}", p.converted);
                }
                None => {
                    md += " - |";
                    converted += ", -";
                }
            }
        }
        let _ = writeln!(md, " {} | {converted} |", g.buckets);
    }
    md += "\n## Server CPU per insert\n\nRedis CPU (`INFO cpu`, user + system) spent loading \
           the sessions since the previous size, per session inserted, µs; and the splits \
           and merges the growing store had made. The difference from a fixed store is \
           what routing checks and splitting cost.\n\n| sessions | growing | reshapes so far |";
    for b in &fixed {
        let _ = write!(md, " fixed 2^{b} |");
    }
    md += "\n|---|---:|---:|";
    for _ in &fixed {
        md += "---:|";
    }
    md += "\n";
    for run in runs.iter().filter(|r| r.store == Store::Growing) {
        for g in run.points.iter().filter(|p| !p.shrunk) {
            let _ = write!(
                md,
                "| {} | {:.2} | {} |",
                human_count(g.size.sessions),
                g.cpu_us_per_insert,
                g.reshapes
            );
            for &b in &fixed {
                match point(Store::Fixed(b), g.size.sessions, false) {
                    Some(p) => {
                        let _ = write!(md, " {:.2} |", p.cpu_us_per_insert);
                    }
                    None => md += " - |",
                }
            }
            md += "\n";
        }
    }
    md
}
