//! What a growing store's creates cost the server in instructions, beside
//! a fixed store's: a count that does not move with the machine's load.
//!
//! Run by `scripts/growth-instructions.sh`, which starts a `redis-server`
//! under valgrind's callgrind and passes its URL and process id. Through
//! the tower-sessions store, 16 creates in flight, each store in a
//! namespace of its own:
//!
//! - **fill**: creates from empty to `N` sessions. The fixed store's
//!   buckets are nearly empty early on, so it is at its cheapest; the
//!   growing one splits all the while.
//! - **grow**: `N / 2` more into the filled store. Both stores' buckets
//!   are about as full here, so what the growing one costs more is its
//!   splits.
//! - **regrow**: half the sessions deleted, the groups reshaped as the
//!   sweeper does (merges), then `N / 2` creates again: a store whose
//!   traffic comes and goes (the fixed store is not shrunk).
//!
//! Splits are counted exactly, by the buckets the shapes hold before and
//! after a phase (no sweeper runs in one, so nothing merges there); merges
//! are what the reshape reports.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sessionpack::{CompactConfig, Connection, IdWidth, TowerStore};
use sessionpack_cli::profile::Profile;
use tower_sessions_core_014::SessionStore;
use tower_sessions_core_014::session::{Id, Record};

type Res<T> = Result<T, Box<dyn Error>>;
type Store = Arc<TowerStore<Connection>>;

/// Creates in flight, as in `sessionpack bench tower`.
const IN_FLIGHT: u64 = 16;

/// Zeroes (`-z`) or dumps (`-d`) the server's counts.
fn callgrind(pid: &str, action: &str) -> Res<()> {
    let out = std::process::Command::new("callgrind_control")
        .args([action, pid])
        .output()?;
    if !out.status.success() {
        return Err(format!("callgrind_control {action} {pid} failed").into());
    }
    Ok(())
}

/// The callgrind dumps in `dir`, oldest first.
fn dumps(dir: &Path) -> Res<Vec<PathBuf>> {
    let mut dumps: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("callgrind.out."))
        })
        .collect();
    dumps.sort_by_key(|p| p.metadata().and_then(|m| m.modified()).ok());
    Ok(dumps)
}

/// The instructions of a dump.
fn instructions(dump: &Path) -> Res<u64> {
    let text = std::fs::read_to_string(dump)?;
    let total = text
        .lines()
        .find_map(|l| l.strip_prefix("summary: ").or(l.strip_prefix("totals: ")))
        .ok_or("a dump without totals")?;
    Ok(total.trim().parse()?)
}

/// Creates a session of `profile` for each number in `range`.
async fn create(store: &Store, range: std::ops::Range<u64>, profile: Profile) -> Res<Vec<Id>> {
    let expiry = time::OffsetDateTime::now_utc() + time::Duration::hours(2);
    let mut tasks = Vec::new();
    for t in 0..IN_FLIGHT {
        let (store, range) = (store.clone(), range.clone());
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for n in (range.start + t..range.end).step_by(IN_FLIGHT as usize) {
                let mut record = Record {
                    id: Id::default(),
                    data: profile.data(n),
                    expiry_date: expiry,
                };
                store.create(&mut record).await.map_err(|e| e.to_string())?;
                ids.push(record.id);
            }
            Ok::<_, String>(ids)
        }));
    }
    let mut ids = Vec::new();
    for task in tasks {
        ids.extend(task.await??);
    }
    Ok(ids)
}

/// The buckets a store holds now.
async fn buckets(store: &Store) -> Res<u64> {
    let layout = store.layout();
    if layout.reshape_thresholds().is_none() {
        return Ok(u64::from(layout.buckets().count()));
    }
    let mut n = 0;
    for group in 0..layout.buckets().count() {
        n += layout.group_buckets(group).await?.len() as u64;
    }
    Ok(n)
}

/// One measured phase.
struct Phase {
    name: &'static str,
    creates: u64,
    instructions: u64,
    buckets_before: u64,
    buckets_after: u64,
}

struct Run<'a> {
    pid: &'a str,
    dir: &'a Path,
    profile: Profile,
}

impl Run<'_> {
    /// Counts the server's instructions over the creates of `range`.
    async fn phase(
        &self,
        name: &'static str,
        store: &Store,
        range: std::ops::Range<u64>,
    ) -> Res<(Phase, Vec<Id>)> {
        let buckets_before = buckets(store).await?;
        callgrind(self.pid, "-z")?;
        let ids = create(store, range.clone(), self.profile).await?;
        let before = dumps(self.dir)?.len();
        callgrind(self.pid, "-d")?;
        // The new dump's total, once the server has written it whole.
        let mut total = None;
        for _ in 0..600 {
            let now = dumps(self.dir)?;
            if now.len() > before
                && let Some(n) = now.last().and_then(|d| instructions(d).ok())
            {
                total = Some(n);
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        let instructions = total.ok_or("callgrind wrote no dump")?;
        let phase = Phase {
            name,
            creates: range.end - range.start,
            instructions,
            buckets_before,
            buckets_after: buckets(store).await?,
        };
        Ok((phase, ids))
    }
}

async fn open(url: &str, config: CompactConfig, namespace: &str) -> Res<Store> {
    let conn = sessionpack::connect(url).await?;
    let config = config
        .with_id_width(IdWidth::Bits128)
        .with_namespace(namespace);
    Ok(Arc::new(
        TowerStore::new(conn, config).await?.without_sweeper(),
    ))
}

#[tokio::main]
async fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, pid, dir, sessions, fixed_bits, profile, out] = &args[..] else {
        return Err(
            "usage: growth_instructions URL PID DUMP_DIR SESSIONS FIXED_BITS PROFILE OUT".into(),
        );
    };
    let n: u64 = sessions.parse()?;
    let run = Run {
        pid,
        dir: Path::new(dir),
        profile: profile.parse::<Profile>()?,
    };
    let bits: u8 = fixed_bits.parse()?;
    let mut rows = Vec::new();
    for (label, config, namespace) in [
        (
            format!("fixed 2^{bits}"),
            CompactConfig::new(bits),
            format!("gif{profile}"),
        ),
        (
            "growing".to_owned(),
            CompactConfig::default(),
            format!("gig{profile}"),
        ),
    ] {
        let store = open(url, config, &namespace).await?;
        let (fill, ids) = run.phase("fill", &store, 0..n).await?;
        let (grow, more) = run.phase("grow", &store, n..n + n / 2).await?;
        // Every other session goes, then the groups are reshaped.
        for id in ids.iter().chain(&more).step_by(2) {
            store.delete(id).await.map_err(|e| e.to_string())?;
        }
        let groups: Vec<u32> = (0..store.layout().buckets().count()).collect();
        let merged = match store.layout().reshape_thresholds() {
            Some(_) => store.layout().reshape_groups(&groups).await?.merges,
            None => 0,
        };
        let (regrow, _) = run.phase("regrow", &store, 2 * n..2 * n + n / 2).await?;
        rows.push((label, [fill, grow, regrow], merged));
    }
    let mut md = format!(
        "| {profile} | phase | creates | instructions per create | vs fixed | splits per 1,000 creates | merges before the phase |\n|---|---|---:|---:|---:|---:|---:|\n"
    );
    let fixed: Vec<f64> = rows[0]
        .1
        .iter()
        .map(|p| p.instructions as f64 / p.creates as f64)
        .collect();
    for (label, phases, merged) in &rows {
        for (i, p) in phases.iter().enumerate() {
            let per = p.instructions as f64 / p.creates as f64;
            let splits = p.buckets_after.saturating_sub(p.buckets_before);
            md.push_str(&format!(
                "| {label} | {} | {} | {:.0} | {:.2}x | {:.1} | {} |\n",
                p.name,
                p.creates,
                per,
                per / fixed[i],
                splits as f64 * 1000.0 / p.creates as f64,
                if p.name == "regrow" {
                    merged.to_string()
                } else {
                    "-".into()
                },
            ));
        }
    }
    std::fs::write(out, md)?;
    Ok(())
}
