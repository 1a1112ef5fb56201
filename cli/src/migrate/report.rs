//! A migration's counters: kept in its state key after every batch (so a
//! resumed pass reports the whole pass), and printed at the end.

use std::collections::BTreeMap;

use serde::Serialize;

use sessionpack::error::Result;

/// What a pass of a migration did, from its first batch.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Report {
    /// Keys the scan returned (outside the store's own namespace).
    pub scanned: u64,
    /// Sessions by outcome: `copied`, `updated`, `unchanged`, or the reason
    /// a key was skipped (`id`, `wrong-type`, `value`, `no-expiry`,
    /// `gone`, `expired`, `taken`, `deleted-since-copied`, `conflict`).
    pub outcomes: BTreeMap<String, u64>,
    /// Source keys deleted (with `--delete-copied`).
    pub deleted: u64,
    /// Source keys not deleted because they changed after they were read.
    pub kept_changed: u64,
    /// The server's `used_memory` before the pass, at its highest after a
    /// batch, and after it.
    pub memory_before: u64,
    /// See `memory_before`.
    pub memory_peak: u64,
    /// See `memory_before`.
    pub memory_after: u64,
    /// Wall time of the pass, across resumed runs.
    pub seconds: f64,
    /// The server's CPU time (`INFO cpu`) over the pass.
    pub server_cpu_secs: f64,
    /// Batches done.
    pub batches: u64,
    /// The scan cursor after the last batch (0 once complete).
    pub cursor: u64,
    /// On a cluster: the primary the scan is at (by address, in order).
    pub node: u64,
    /// On a cluster: the slot map the scan began under (each primary and
    /// its slots as it reports them).
    pub slot_map: String,
    /// On a cluster: whether a slot migrated during the scan under way.
    pub slots_migrating: bool,
    /// On a cluster: times the scan began again from the first primary
    /// because the slot map changed, a slot migrated, or a node failed.
    pub rescans: u64,
    /// Whether the scan went round.
    pub complete: bool,
    /// Nothing was written.
    pub dry_run: bool,
    /// Every key was copied and deleted, and the takeover recorded closed.
    pub closed: bool,
}

/// The outcomes that put a session in the store.
const IN_STORE: [&str; 3] = ["copied", "updated", "unchanged"];

impl Report {
    /// Counts one key under `outcome`.
    pub fn count(&mut self, outcome: &str) {
        *self.outcomes.entry(outcome.to_owned()).or_default() += 1;
    }

    /// Keys counted under `outcome`.
    pub fn get(&self, outcome: &str) -> u64 {
        self.outcomes.get(outcome).copied().unwrap_or(0)
    }

    /// Keys skipped, by reason.
    pub fn skipped(&self) -> BTreeMap<&str, u64> {
        self.outcomes
            .iter()
            .filter(|(k, _)| !IN_STORE.contains(&k.as_str()))
            .map(|(k, v)| (k.as_str(), *v))
            .collect()
    }

    /// Writes the report into the state key `key`.
    pub async fn write<C>(&self, conn: &mut C, key: &str) -> Result<()>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        let json =
            serde_json::to_string(self).map_err(|e| sessionpack::Error::Config(e.to_string()))?;
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(json)
            .query_async(conn)
            .await?;
        Ok(())
    }

    /// The report a state key holds, if any.
    pub async fn read<C>(conn: &mut C, key: &str) -> Result<Option<Self>>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        let json: Option<String> = redis::cmd("GET").arg(key).query_async(conn).await?;
        let Some(json) = json else {
            return Ok(None);
        };
        let value: serde_json::Value = serde_json::from_str(&json).map_err(|e| {
            sessionpack::Error::Config(format!("the migration state {key} is not a report: {e}"))
        })?;
        Ok(Some(Self::from_json(&value)))
    }

    fn from_json(value: &serde_json::Value) -> Self {
        let u = |k: &str| value.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
        let f = |k: &str| value.get(k).and_then(|v| v.as_f64()).unwrap_or(0.0);
        let b = |k: &str| value.get(k).and_then(|v| v.as_bool()).unwrap_or(false);
        let outcomes = value
            .get("outcomes")
            .and_then(|o| o.as_object())
            .map(|o| {
                o.iter()
                    .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                    .collect()
            })
            .unwrap_or_default();
        Self {
            scanned: u("scanned"),
            outcomes,
            deleted: u("deleted"),
            kept_changed: u("kept_changed"),
            memory_before: u("memory_before"),
            memory_peak: u("memory_peak"),
            memory_after: u("memory_after"),
            seconds: f("seconds"),
            server_cpu_secs: f("server_cpu_secs"),
            batches: u("batches"),
            cursor: u("cursor"),
            node: u("node"),
            slot_map: value
                .get("slot_map")
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned(),
            slots_migrating: b("slots_migrating"),
            rescans: u("rescans"),
            complete: b("complete"),
            dry_run: b("dry_run"),
            closed: b("closed"),
        }
    }

    /// The report in words.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let done = if self.complete {
            "complete"
        } else {
            "stopped part way (run again to resume)"
        };
        let dry = if self.dry_run {
            ", dry run: nothing written"
        } else {
            ""
        };
        out.push_str(&format!("migration {done}{dry}\n"));
        out.push_str(&format!("  keys scanned        {}\n", self.scanned));
        for name in IN_STORE {
            out.push_str(&format!("  {name:<19} {}\n", self.get(name)));
        }
        for (reason, n) in self.skipped() {
            out.push_str(&format!("  skipped {reason:<11} {n}\n"));
        }
        out.push_str(&format!("  deleted             {}\n", self.deleted));
        if self.rescans > 0 {
            out.push_str(&format!(
                "  rescans             {} (the cluster's slots moved during the pass)\n",
                self.rescans
            ));
        }
        if self.closed {
            out.push_str("  takeover closed: stores read only their buckets now\n");
        }
        if self.kept_changed > 0 {
            out.push_str(&format!("  kept (changed)      {}\n", self.kept_changed));
        }
        let mb = |b: u64| b as f64 / 1e6;
        out.push_str(&format!(
            "  used_memory         {:.1} MB before, {:.1} MB at most, {:.1} MB after\n",
            mb(self.memory_before),
            mb(self.memory_peak),
            mb(self.memory_after)
        ));
        let sessions = self.get("copied") + self.get("updated");
        let rate = if self.seconds > 0.0 {
            sessions as f64 / self.seconds
        } else {
            0.0
        };
        out.push_str(&format!(
            "  time                {:.1} s ({rate:.0} sessions/s), server CPU {:.2} s\n",
            self.seconds, self.server_cpu_secs
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_survives_its_state_key_and_splits_skips() {
        let mut r = Report {
            scanned: 9,
            cursor: 17,
            node: 2,
            slot_map: "127.0.0.1:7000 0-5460\n".into(),
            rescans: 1,
            seconds: 1.5,
            ..Report::default()
        };
        r.count("copied");
        r.count("value");
        r.count("value");
        let back = Report::from_json(&serde_json::to_value(&r).unwrap());
        assert_eq!(back, r);
        assert_eq!(back.skipped(), BTreeMap::from([("value", 2)]));
        assert!(r.text().contains("skipped value"));
    }
}
