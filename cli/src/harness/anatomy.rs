//! Where a store's server time goes, call by call: which scripts it runs,
//! how often, what each costs, and how much of that is the commands the
//! script sends.
//!
//! `INFO commandstats` counts a script as one `EVALSHA` whatever it is,
//! and counts the commands scripts send beside the clients' own. The
//! server's `SLOWLOG` with a threshold of 0 records every command it runs
//! with its duration (µs) and arguments, the commands a script sends
//! included: those are logged as they finish, under no client address,
//! just before the script's own entry, which names the script by its
//! SHA1 (a server runs one command at a time, so nothing comes between).
//! (Valkey 9 logs them under the script caller's address: there they read
//! as commands of their own, and the anatomy says so.)
//! A [`Recorder`] turns that on while a workload runs, drains the log
//! (`SLOWLOG GET -1` and `SLOWLOG RESET` in one `MULTI`, so no entry falls
//! between them), puts the old settings back, and gives each command a
//! client sent, each script by name ([`sessionpack::scripts::catalog`]),
//! with the commands inside it.
//!
//! The log has a cost of its own (an entry allocated per command, those a
//! script sends included, inside the script's time), so the figures a
//! report bills by (`INFO cpu`, `INFO commandstats`) come from a run
//! without it; the anatomy says where that time goes.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use sessionpack::error::{Error, Result};

/// The name the recorder's connection takes, so its own commands are left
/// out.
const RECORDER: &str = "sessionpack-anatomy";
/// How often the log is drained.
const POLL: Duration = Duration::from_millis(50);
/// How long the recorder's commands may take to answer.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// Entries the log keeps between two drains.
const LOG_LEN: u64 = 1_000_000;
/// The script [`Recorder::start`] sends to see how the server logs the
/// commands a script sends.
const PROBE: &str = "return redis.call('ECHO', 'sessionpack-anatomy-probe')";

/// One entry of the log.
#[derive(Clone, Debug, PartialEq)]
struct Entry {
    id: u64,
    micros: u64,
    /// The command, lower case.
    command: String,
    /// A script call's SHA1 (`EVALSHA`, `EVALSHA_RO`), or `eval` for a
    /// script sent whole.
    script: Option<String>,
    /// Sent by a script: logged under no client address.
    nested: bool,
    /// The client's name.
    client: String,
}

/// The log's entries, from a `SLOWLOG GET` reply (newest first), oldest
/// first.
fn entries(reply: &redis::Value) -> Vec<Entry> {
    let redis::Value::Array(items) = reply else {
        return Vec::new();
    };
    let mut out: Vec<Entry> = items.iter().filter_map(entry).collect();
    out.reverse();
    out
}

fn entry(item: &redis::Value) -> Option<Entry> {
    let redis::Value::Array(fields) = item else {
        return None;
    };
    let int = |v: &redis::Value| redis::from_redis_value_ref::<u64>(v).ok();
    let text = |v: &redis::Value| redis::from_redis_value_ref::<String>(v).ok();
    let id = int(fields.first()?)?;
    let micros = int(fields.get(2)?)?;
    let redis::Value::Array(args) = fields.get(3)? else {
        return None;
    };
    let command = text(args.first()?)?.to_ascii_lowercase();
    let script = match command.as_str() {
        "evalsha" | "evalsha_ro" => args.get(1).and_then(text),
        "eval" | "eval_ro" => Some("eval".to_owned()),
        _ => None,
    };
    let addr = fields.get(4).and_then(text).unwrap_or_default();
    Some(Entry {
        id,
        micros,
        command,
        script,
        nested: addr.is_empty() || addr.starts_with('?'),
        client: fields.get(5).and_then(text).unwrap_or_default(),
    })
}

/// Records every command a server runs until [`Recorder::finish`].
pub struct Recorder {
    conn: redis::aio::MultiplexedConnection,
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<Vec<Entry>>>,
    /// `slowlog-log-slower-than` and `slowlog-max-len` before.
    before: (String, String),
}

impl Recorder {
    /// Turns the log on for every command and starts draining it.
    pub async fn start(conn: &redis::aio::MultiplexedConnection) -> Result<Self> {
        let mut conn = conn.clone();
        // A drain's reply holds every command since the last one: on a
        // busy machine, more than the client's default half second.
        conn.set_response_timeout(DRAIN_TIMEOUT);
        let get = |name: &'static str| redis::cmd("CONFIG").arg("GET").arg(name).clone();
        let (threshold, len): (Vec<String>, Vec<String>) = redis::pipe()
            .add_command(get("slowlog-log-slower-than"))
            .add_command(get("slowlog-max-len"))
            .query_async(&mut conn)
            .await?;
        let (Some(threshold), Some(len)) = (threshold.get(1), len.get(1)) else {
            return Err(Error::Config(
                "the server does not say its SLOWLOG settings (CONFIG GET)".into(),
            ));
        };
        let before = (threshold.clone(), len.clone());
        redis::pipe()
            .cmd("CLIENT")
            .arg("SETNAME")
            .arg(RECORDER)
            .ignore()
            .cmd("CONFIG")
            .arg("SET")
            .arg("slowlog-max-len")
            .arg(LOG_LEN)
            .ignore()
            .cmd("SLOWLOG")
            .arg("RESET")
            .ignore()
            .cmd("CONFIG")
            .arg("SET")
            .arg("slowlog-log-slower-than")
            .arg(0)
            .ignore()
            .query_async::<()>(&mut conn)
            .await?;
        // A probe of how the server logs a script's commands: a server
        // without scripting refuses it, and then no script runs.
        let _: redis::RedisResult<String> = redis::cmd("EVAL")
            .arg(PROBE)
            .arg(0)
            .query_async(&mut conn)
            .await;
        let (stop, mut stopped) = watch::channel(false);
        let mut drain_conn = conn.clone();
        let task = tokio::spawn(async move {
            let mut all = Vec::new();
            loop {
                let done = *stopped.borrow();
                let (reply, ()): (redis::Value, ()) = redis::pipe()
                    .atomic()
                    .cmd("SLOWLOG")
                    .arg("GET")
                    .arg(-1)
                    .cmd("SLOWLOG")
                    .arg("RESET")
                    .query_async(&mut drain_conn)
                    .await?;
                all.extend(entries(&reply));
                if done {
                    return Ok(all);
                }
                let _ = tokio::time::timeout(POLL, stopped.changed()).await;
            }
        });
        Ok(Self {
            conn,
            stop,
            task,
            before,
        })
    }

    /// Stops recording, puts the log's settings back, and tells what ran.
    pub async fn finish(mut self) -> Result<Anatomy> {
        let _ = self.stop.send(true);
        let drained = self
            .task
            .await
            .map_err(|e| Error::Config(format!("the anatomy's recorder failed: {e}")));
        redis::pipe()
            .cmd("CONFIG")
            .arg("SET")
            .arg("slowlog-log-slower-than")
            .arg(&self.before.0)
            .ignore()
            .cmd("SLOWLOG")
            .arg("RESET")
            .ignore()
            .cmd("CONFIG")
            .arg("SET")
            .arg("slowlog-max-len")
            .arg(&self.before.1)
            .ignore()
            .query_async::<()>(&mut self.conn)
            .await?;
        Ok(Anatomy::of(&drained??))
    }
}

/// What a client's command cost the server, and what it sent if it is a
/// script.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Caller {
    /// The command, or `script <name>` ([`sessionpack::scripts::catalog`];
    /// `script <first 8 hex digits>` for one not in it).
    pub name: String,
    /// Calls.
    pub calls: u64,
    /// The server's time in them, µs (a script's includes the commands
    /// it sends).
    pub micros: u64,
    /// The commands scripts sent, by name: calls, µs.
    pub inner: BTreeMap<String, (u64, u64)>,
}

impl Caller {
    /// Commands sent per call.
    pub fn inner_per_call(&self) -> f64 {
        self.inner.values().map(|(n, _)| *n).sum::<u64>() as f64 / self.calls.max(1) as f64
    }

    /// µs per call of the commands sent.
    pub fn inner_micros_per_call(&self) -> f64 {
        self.inner.values().map(|(_, us)| *us).sum::<u64>() as f64 / self.calls.max(1) as f64
    }

    /// µs per call.
    pub fn micros_per_call(&self) -> f64 {
        self.micros as f64 / self.calls.max(1) as f64
    }
}

/// Every command clients sent while a [`Recorder`] ran, most time first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Anatomy {
    /// One row a command or script.
    pub callers: Vec<Caller>,
    /// Entries the log dropped before they were read (its length was
    /// reached between two drains): the rows undercount by this many.
    pub lost: u64,
    /// Commands logged as a script's that no script entry followed.
    pub unattributed: u64,
    /// Whether the server logged a script's commands as the script's (no
    /// client address); where it did not, they are counted as commands
    /// of their own (and in the script's time), and scripts' rows show
    /// none sent.
    pub scripts_commands_told_apart: bool,
}

impl Anatomy {
    fn of(entries: &[Entry]) -> Self {
        let names: BTreeMap<&str, String> = sessionpack::scripts::catalog()
            .into_iter()
            .map(|(name, sha)| (sha, name))
            .collect();
        let mut callers: BTreeMap<String, Caller> = BTreeMap::new();
        let mut pending: Vec<&Entry> = Vec::new();
        let (mut lost, mut unattributed, mut last) = (0, 0, None::<u64>);
        let mut told_apart = false;
        for e in entries {
            if let Some(last) = last {
                let gap = e.id.saturating_sub(last + 1);
                // Each drain's own `SLOWLOG GET` is logged as it finishes,
                // and the `RESET` after it in the same transaction wipes
                // it: the one id before that `RESET`'s entry is no loss.
                let drain = e.client == RECORDER && e.command == "slowlog";
                lost += gap - u64::from(drain && gap > 0);
            }
            last = Some(e.id);
            if e.command == "echo" && e.nested && pending.is_empty() {
                // The probe's: the recorder's script is next.
                told_apart = true;
                continue;
            }
            if e.client == RECORDER {
                continue;
            }
            if e.nested {
                pending.push(e);
                continue;
            }
            let name = match &e.script {
                Some(sha) => match names.get(sha.as_str()) {
                    Some(name) => format!("script {name}"),
                    None => format!("script {}", sha.get(..8).unwrap_or(sha)),
                },
                None => e.command.clone(),
            };
            let caller = callers.entry(name.clone()).or_insert_with(|| Caller {
                name,
                ..Caller::default()
            });
            caller.calls += 1;
            caller.micros += e.micros;
            if e.script.is_some() {
                for inner in pending.drain(..) {
                    let slot = caller.inner.entry(inner.command.clone()).or_default();
                    slot.0 += 1;
                    slot.1 += inner.micros;
                }
            } else {
                unattributed += pending.len() as u64;
                pending.clear();
            }
        }
        unattributed += pending.len() as u64;
        let mut callers: Vec<Caller> = callers.into_values().collect();
        callers.sort_by(|a, b| b.micros.cmp(&a.micros).then_with(|| a.name.cmp(&b.name)));
        Self {
            callers,
            lost,
            unattributed,
            scripts_commands_told_apart: told_apart,
        }
    }

    /// What a reader of [`Anatomy::table`] should know: entries the log
    /// dropped, commands no script claimed, a server that logs a script's
    /// commands as its caller's. Empty where there is nothing to say.
    pub fn notes(&self) -> String {
        let mut notes = String::new();
        if self.lost > 0 || self.unattributed > 0 {
            notes.push_str(&format!(
                "\nThe log dropped {} entries before they were read, and {} commands logged as a script's were followed by no script: the rows undercount by as many.\n",
                self.lost, self.unattributed
            ));
        }
        if !self.scripts_commands_told_apart {
            notes.push_str("\nThis server logs the commands a script sends under the script's caller, as if the caller had sent them: they are rows of their own here, counted in the script's time too, and the scripts' rows show none sent.\n");
        }
        notes
    }

    /// [`Anatomy::table`], then [`Anatomy::against`] the callers' time
    /// without the log (`clean`: command, µs per call) and
    /// [`Anatomy::notes`]: a report's section.
    pub fn section(
        &self,
        per: u64,
        unit: &str,
        floor: u64,
        clean: impl IntoIterator<Item = (String, f64)>,
    ) -> String {
        let clean = clean.into_iter().collect();
        format!(
            "{}{}{}",
            self.table(per, unit, floor),
            self.against(&clean),
            self.notes()
        )
    }

    /// A sentence setting the recorded time per call beside what the same
    /// callers took without the log (`clean`: µs per call by command, as
    /// `INFO commandstats` counted them over unrecorded work): the
    /// scripts (`evalsha`, their mean) and each command a client sent
    /// that no script sends (where a script sends it too, `commandstats`
    /// mixes the two). Empty where nothing compares.
    pub fn against(&self, clean: &std::collections::HashMap<String, f64>) -> String {
        let sent_by_scripts: std::collections::BTreeSet<&str> = self
            .callers
            .iter()
            .flat_map(|c| c.inner.keys().map(String::as_str))
            .collect();
        let mut pairs: Vec<(String, f64, f64)> = Vec::new();
        let scripts: Vec<&Caller> = self
            .callers
            .iter()
            .filter(|c| c.name.starts_with("script "))
            .collect();
        let calls: u64 = scripts.iter().map(|c| c.calls).sum();
        if let Some(&us) = clean.get("evalsha").filter(|_| calls > 0) {
            let micros: u64 = scripts.iter().map(|c| c.micros).sum();
            pairs.push((
                "scripts (`evalsha`)".into(),
                us,
                micros as f64 / calls as f64,
            ));
        }
        for c in &self.callers {
            if c.name.starts_with("script ") || sent_by_scripts.contains(c.name.as_str()) {
                continue;
            }
            if let Some(&us) = clean.get(&c.name) {
                pairs.push((format!("`{}`", c.name), us, c.micros_per_call()));
            }
        }
        if pairs.is_empty() {
            return String::new();
        }
        let list = pairs
            .iter()
            .map(|(name, clean, recorded)| {
                format!(
                    "{name} {clean:.2} µs a call without the log, {recorded:.2} with it ({:.2}x)",
                    recorded / clean.max(1e-9)
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        format!("\nThe log's own cost, per call: {list}.\n")
    }

    /// The server's time over every caller, µs.
    pub fn micros(&self) -> u64 {
        self.callers.iter().map(|c| c.micros).sum()
    }

    /// A Markdown table of the callers, per unit of work (`per` of them,
    /// e.g. requests): calls, µs per call, commands sent per call and their
    /// µs, the rest of a script's time (the script machinery), µs per unit.
    /// Callers below one call per `floor` units are folded into one row.
    pub fn table(&self, per: u64, unit: &str, floor: u64) -> String {
        let per = per.max(1) as f64;
        let mut md = format!(
            "| caller | calls per {unit} | µs per call | commands it sends per call | µs of those | µs of the rest (script machinery) | µs per {unit} | share |\n|---|---:|---:|---|---:|---:|---:|---:|\n"
        );
        let total = self.micros().max(1) as f64;
        let (mut folded_calls, mut folded_micros) = (0u64, 0u64);
        for c in &self.callers {
            if (c.calls as f64) * (floor as f64) < per {
                folded_calls += c.calls;
                folded_micros += c.micros;
                continue;
            }
            let script = c.name.starts_with("script ");
            let sends = if script {
                let list = c
                    .inner
                    .iter()
                    .map(|(name, (n, _))| format!("{name} {:.2}", *n as f64 / c.calls as f64))
                    .collect::<Vec<_>>()
                    .join(", ");
                format!("{:.2}: {list}", c.inner_per_call())
            } else {
                "-".into()
            };
            let (inner, rest) = if script {
                (
                    format!("{:.2}", c.inner_micros_per_call()),
                    format!("{:.2}", c.micros_per_call() - c.inner_micros_per_call()),
                )
            } else {
                ("-".into(), "-".into())
            };
            md.push_str(&format!(
                "| {} | {:.3} | {:.2} | {sends} | {inner} | {rest} | {:.2} | {:.0}% |\n",
                c.name,
                c.calls as f64 / per,
                c.micros_per_call(),
                c.micros as f64 / per,
                c.micros as f64 * 100.0 / total,
            ));
        }
        if folded_calls > 0 {
            md.push_str(&format!(
                "| the rest | {:.3} | {:.2} | | | | {:.2} | {:.0}% |\n",
                folded_calls as f64 / per,
                folded_micros as f64 / folded_calls as f64,
                folded_micros as f64 / per,
                folded_micros as f64 * 100.0 / total,
            ));
        }
        md.push_str(&format!(
            "| all | | | | | | {:.2} | 100% |\n",
            self.micros() as f64 / per
        ));
        md
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: u64, micros: u64, args: &[&str], addr: &str, name: &str) -> redis::Value {
        let bulk = |s: &str| redis::Value::BulkString(s.as_bytes().to_vec());
        redis::Value::Array(vec![
            redis::Value::Int(id as i64),
            redis::Value::Int(1_700_000_000),
            redis::Value::Int(micros as i64),
            redis::Value::Array(args.iter().map(|a| bulk(a)).collect()),
            bulk(addr),
            bulk(name),
        ])
    }

    #[test]
    fn a_script_gets_the_commands_logged_just_before_it() {
        let sha = sessionpack::scripts::catalog()
            .into_iter()
            .find(|(name, _)| name == "compact_rewrite")
            .unwrap()
            .1;
        // Newest first, as SLOWLOG GET replies.
        let reply = redis::Value::Array(vec![
            entry(13, 3, &["EVAL", PROBE, "0"], "127.0.0.1:5009", RECORDER),
            entry(12, 1, &["ECHO", "sessionpack-anatomy-probe"], "?:0", ""),
            entry(11, 3, &["HMGET", "k", "f"], "127.0.0.1:5001", ""),
            // A drain's RESET, after the GET (9) it wiped.
            entry(10, 1, &["SLOWLOG", "RESET"], "127.0.0.1:5009", RECORDER),
            entry(8, 9, &["EVALSHA", sha, "2"], "127.0.0.1:5002", ""),
            entry(7, 2, &["HSET", "k", "f", "v"], "?:0", ""),
            entry(6, 1, &["HGET", "k", "f"], "?:0", ""),
            entry(
                4,
                5,
                &["EVALSHA", "0123456789abcdef", "1"],
                "127.0.0.1:5001",
                "",
            ),
            entry(3, 4, &["hmget", "k", "f"], "127.0.0.1:5002", ""),
            entry(2, 7, &["HDEL", "k", "f"], "?:0", ""),
        ]);
        let anatomy = Anatomy::of(&entries(&reply));
        assert_eq!(anatomy.lost, 1, "entry 5 is missing");
        assert!(anatomy.scripts_commands_told_apart);
        assert_eq!(anatomy.unattributed, 1, "the HDEL before a plain command");
        let row = |name: &str| anatomy.callers.iter().find(|c| c.name == name).unwrap();
        let script = row("script compact_rewrite");
        assert_eq!((script.calls, script.micros), (1, 9));
        assert_eq!(script.inner_per_call(), 2.0);
        assert_eq!(script.inner_micros_per_call(), 3.0);
        assert_eq!(script.inner.get("hget"), Some(&(1, 1)));
        assert_eq!(row("script 01234567").inner_per_call(), 0.0);
        assert_eq!((row("hmget").calls, row("hmget").micros), (2, 7));
        assert!(anatomy.callers.iter().all(|c| c.name != "slowlog"));
        assert_eq!(anatomy.micros(), 21);
        assert_eq!(anatomy.callers[0].name, "script compact_rewrite");
        let clean = [("evalsha".to_owned(), 6.0), ("hmget".to_owned(), 2.0)]
            .into_iter()
            .collect();
        let against = anatomy.against(&clean);
        // The scripts' mean: (9 + 5) / 2; HMGET: 7 / 2.
        assert!(
            against.contains(
                "scripts (`evalsha`) 6.00 µs a call without the log, 7.00 with it (1.17x)"
            ),
            "{against}"
        );
        assert!(
            against.contains("`hmget` 2.00 µs a call without the log, 3.50 with it (1.75x)"),
            "{against}"
        );
        let table = anatomy.table(2, "request", 100);
        assert!(table.contains("| script compact_rewrite | 0.500 | 9.00 | 2.00: hget 1.00, hset 1.00 | 3.00 | 6.00 | 4.50 | 43% |"), "{table}");
    }
}
