//! Seeing a failover that the cluster client does not: a call that waits
//! on a paused (or unreachable) primary hears nothing from it, so the
//! client neither follows a redirection nor refreshes its slot map, and
//! the call waits out its whole response timeout, long after a replica
//! has taken the primary's slots over.
//!
//! The watch keeps which primary served each slot when last looked
//! (looked at again every [`REFRESH_EVERY`] while calls are made), and
//! every replica each primary has been seen with. When a call has waited
//! [`PROBE_AFTER`], it asks the nodes that answer (`CLUSTER SLOTS` and
//! `CLUSTER NODES`, over a connection of its own, with short timeouts)
//! who serves what the call waits on now (`Waits`: one slot, or every
//! primary), every [`PROBE_EVERY`], one probe at a time for all the calls
//! that wait. It is *taken over* when a primary that served it (as the
//! call's connection saw it when it was opened, or as the watch saw it
//! when the call was made or first looked) serves no slot any more, and
//! the cluster has marked that primary failed or a replica it was seen
//! with serves it now: the cluster failed it over. It runs nothing more
//! for the slot (a paused primary that wakes up is demoted and
//! resynchronised from the new one, which discards what it ran
//! meanwhile), so the call can be sent again, to the new primary. A slot
//! that moved to another primary (a reshard) is not a takeover, and a call
//! that waits there is left alone: it may be running.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::conn::ConnectOptions;

use super::slots::{self, SLOTS};

/// How long a call waits before the watch looks for a takeover.
pub const PROBE_AFTER: Duration = Duration::from_millis(500);

/// How often the watch looks again while calls wait.
pub const PROBE_EVERY: Duration = Duration::from_millis(250);

/// How old the slot owners may be when a call is made before the watch
/// looks again (in the background).
pub const REFRESH_EVERY: Duration = Duration::from_secs(5);

/// The longest a probe of one node may take.
pub(super) const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// What a call waits on, for the watch to tell whether it was failed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Waits {
    /// The primary serving this slot: a command on a key of it, or one
    /// with no key that any primary answers, routed to this slot's.
    Slot(u16),
    /// Every primary: a command the cluster client sends to all of them
    /// (`SCRIPT LOAD`), harmless to send again.
    Primaries,
    /// Nothing the watch follows, so the call is never sent again: `WAIT`
    /// (a new primary would confirm a write it never saw), and commands
    /// without a key that sessionpack does not send.
    Unwatched,
}

/// Which primary serves each slot, as one node answered `CLUSTER SLOTS`.
#[derive(Debug, Default)]
pub(super) struct SlotOwners {
    /// The primaries' URLs (reached as the seeds are), sorted.
    primaries: Vec<String>,
    /// The URLs of each primary's replicas.
    replicas: Vec<Vec<String>>,
    /// For each slot, its primary's index in `primaries`; `u16::MAX` for
    /// a slot no primary serves.
    owner: Vec<u16>,
    /// The nodes the cluster has marked failed (`fail` in `CLUSTER NODES`),
    /// by every URL they may be listed under.
    failed: Vec<String>,
}

impl SlotOwners {
    fn new(shards: Vec<slots::Shard>) -> Self {
        Self::with_failed(shards, Vec::new())
    }

    fn with_failed(shards: Vec<slots::Shard>, failed: Vec<String>) -> Self {
        let mut owner = vec![u16::MAX; usize::from(SLOTS)];
        let mut primaries = Vec::with_capacity(shards.len());
        let mut replicas = Vec::with_capacity(shards.len());
        for (i, shard) in shards.into_iter().enumerate() {
            for range in shard.ranges {
                let (first, last) = (usize::from(*range.start()), usize::from(*range.end()));
                for slot in owner.iter_mut().take(last + 1).skip(first) {
                    *slot = i as u16;
                }
            }
            primaries.push(shard.primary);
            replicas.push(shard.replicas);
        }
        Self {
            primaries,
            replicas,
            owner,
            failed,
        }
    }

    /// The primary serving `slot`.
    fn primary_of(&self, slot: u16) -> Option<&str> {
        let i = usize::from(*self.owner.get(usize::from(slot))?);
        self.primaries.get(i).map(String::as_str)
    }

    /// The primaries a call waiting on `waits` may wait on.
    fn waited_on(&self, waits: Waits) -> Vec<&str> {
        match waits {
            Waits::Slot(slot) => self.primary_of(slot).into_iter().collect(),
            Waits::Primaries => self.primaries.iter().map(String::as_str).collect(),
            Waits::Unwatched => Vec::new(),
        }
    }

    /// Whether `primary` serves any slot.
    fn serves(&self, primary: &str) -> bool {
        self.primaries.iter().any(|p| p == primary)
    }

    /// The primaries' URLs.
    pub(super) fn primaries(&self) -> &[String] {
        &self.primaries
    }

    /// Whether `other` gives every slot the same primary.
    fn same_as(&self, other: &SlotOwners) -> bool {
        self.primaries == other.primaries && self.owner == other.owner
    }

    /// One slot of each primary that serves any.
    pub(super) fn a_slot_of_each(&self) -> Vec<u16> {
        let mut found = vec![None; self.primaries.len()];
        for (slot, &owner) in (0..SLOTS).zip(&self.owner) {
            if let Some(first @ None) = found.get_mut(usize::from(owner)) {
                *first = Some(slot);
            }
        }
        found.into_iter().flatten().collect()
    }
}

/// The slot owners seen last, and the probe that updates them (see the
/// module docs).
pub(super) struct Watch {
    seeds: Vec<String>,
    options: ConnectOptions,
    /// The slot owners seen last, and when.
    known: Mutex<(Arc<SlotOwners>, Option<Instant>)>,
    /// Every replica each primary has been seen with: a replica that has
    /// taken over no longer shows as its old primary's, and a look made
    /// as the cluster formed may show none yet.
    heirs: Mutex<std::collections::HashMap<String, Vec<String>>>,
    /// Set while a look in the background is under way.
    refreshing: std::sync::atomic::AtomicBool,
    /// The node that answered the last probe, asked first next time.
    answered: Mutex<Option<(String, crate::conn::Connection)>>,
    /// Held by the one probe under way; the time the last one answered.
    probing: tokio::sync::Mutex<Option<Instant>>,
}

impl Watch {
    pub(super) fn new(seeds: Vec<String>, options: &ConnectOptions) -> Self {
        let options = options
            .clone()
            .with_connect_timeout(options.connect_timeout().min(PROBE_TIMEOUT))
            .with_response_timeout(PROBE_TIMEOUT)
            .with_retries(0);
        Self {
            seeds,
            options,
            known: Mutex::new((Arc::new(SlotOwners::default()), None)),
            heirs: Mutex::default(),
            refreshing: std::sync::atomic::AtomicBool::new(false),
            answered: Mutex::new(None),
            probing: tokio::sync::Mutex::new(None),
        }
    }

    /// The slot owners seen last; and whether they are older than
    /// [`REFRESH_EVERY`] with no look under way, in which case a look is
    /// marked under way (the caller makes it, then calls
    /// [`Watch::refreshed`]).
    pub(super) fn known(&self) -> (Arc<SlotOwners>, bool) {
        use std::sync::atomic::Ordering;
        let (owners, at) = self
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let stale = at.is_none_or(|at| at.elapsed() >= REFRESH_EVERY)
            && !self.refreshing.swap(true, Ordering::AcqRel);
        (owners, stale)
    }

    /// The slot owners seen last.
    pub(super) fn latest(&self) -> Arc<SlotOwners> {
        self.known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0
            .clone()
    }

    /// Ends the look [`Watch::known`] asked for.
    pub(super) fn refreshed(&self) {
        self.refreshing
            .store(false, std::sync::atomic::Ordering::Release);
    }

    /// Looks at the cluster now (or takes a look another caller made in
    /// the last [`PROBE_EVERY`]). `None` if no node answered.
    pub(super) async fn look(&self) -> Option<Arc<SlotOwners>> {
        let mut last = self.probing.lock().await;
        if last.is_some_and(|at| at.elapsed() < PROBE_EVERY) {
            return Some(self.latest());
        }
        let fresh = Arc::new(self.probe().await?);
        {
            let mut heirs = self
                .heirs
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for (primary, replicas) in fresh.primaries.iter().zip(&fresh.replicas) {
                let seen = heirs.entry(primary.clone()).or_default();
                for replica in replicas {
                    if !seen.contains(replica) {
                        seen.push(replica.clone());
                    }
                }
            }
        }
        let now = Instant::now();
        *self
            .known
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = (fresh.clone(), Some(now));
        *last = Some(now);
        Some(fresh)
    }

    /// Resolves once a primary that may hold a call waiting on `waits`
    /// has been failed over: it serves no slot, and the cluster flags it
    /// failed or a replica it has been seen with serves (for
    /// [`Waits::Slot`]) the slot or (for [`Waits::Primaries`]) any slot now. The suspects are the primaries that served what
    /// the call waits on in `views` (the connection's own, taken when it
    /// was opened, and the latest when the call was made) and in the first
    /// look after [`PROBE_AFTER`]. With the slot owners seen then. Never,
    /// for [`Waits::Unwatched`].
    pub(super) async fn taken_over(&self, waits: Waits, views: &[&SlotOwners]) -> Arc<SlotOwners> {
        fn suspect(suspects: &mut Vec<String>, owners: &SlotOwners, waits: Waits) {
            for primary in owners.waited_on(waits) {
                if !suspects.iter().any(|s| s == primary) {
                    suspects.push(primary.to_owned());
                }
            }
        }
        if waits == Waits::Unwatched {
            return std::future::pending().await;
        }
        let mut suspects: Vec<String> = Vec::new();
        for view in views {
            suspect(&mut suspects, view, waits);
        }
        tokio::time::sleep(PROBE_AFTER).await;
        let mut first = true;
        loop {
            if let Some(now) = self.look().await {
                if std::mem::take(&mut first) {
                    suspect(&mut suspects, &now, waits);
                }
                let serving = now.waited_on(waits);
                // The cluster marked it failed, or a replica it was seen with
                // took over (a look made as the cluster formed may show no
                // replica, and the node asked may have cleared the mark).
                let failed_over = suspects.iter().find_map(|was| {
                    let heir = serving.iter().find(|is| {
                        now.failed.iter().any(|f| f == was) || self.was_replica_of(is, was)
                    })?;
                    (!now.serves(was)).then_some((was, heir))
                });
                if let Some((was, is)) = failed_over {
                    tracing::warn!(
                        primary = %was,
                        now = is,
                        "a cluster primary was failed over under a waiting call; the call is sent again"
                    );
                    return now.clone();
                }
            }
            tokio::time::sleep(PROBE_EVERY).await;
        }
    }

    /// Whether every primary of `now` answers and gives every slot the
    /// primary `now` gives it. A node that has not heard of a failover yet
    /// still names the old primary, and a cluster client that learns its
    /// slots from that node would send the calls it resends back to it.
    pub(super) async fn agreed(&self, now: &SlotOwners) -> bool {
        let asks = now.primaries().iter().map(|url| async move {
            let asked = async {
                let mut conn = crate::conn::connect_with(url, &self.options).await?;
                slots::shards_over(url, &mut conn).await
            };
            match tokio::time::timeout(PROBE_TIMEOUT * 2, asked).await {
                Ok(Ok(shards)) => SlotOwners::new(shards).same_as(now),
                _ => false,
            }
        });
        futures_util::future::join_all(asks)
            .await
            .into_iter()
            .all(|agrees| agrees)
    }

    /// Whether `node` has been seen as a replica of `primary`.
    fn was_replica_of(&self, node: &str, primary: &str) -> bool {
        self.heirs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(primary)
            .is_some_and(|seen| seen.iter().any(|r| r == node))
    }

    /// Asks the node that answered last for `CLUSTER SLOTS`; if it does
    /// not answer, every known primary and seed at once, and the first
    /// answer counts (and its node is asked first next time).
    async fn probe(&self) -> Option<SlotOwners> {
        let known = self.latest();
        let answered = self
            .answered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some((url, mut conn)) = answered {
            let asked = tokio::time::timeout(PROBE_TIMEOUT, ask(&url, &mut conn));
            if let Ok(Ok(owners)) = asked.await {
                self.remember(url, conn);
                return Some(owners);
            }
        }
        let mut nodes: Vec<&str> = known.primaries().iter().map(String::as_str).collect();
        nodes.extend(self.seeds.iter().map(String::as_str));
        nodes.sort_unstable();
        nodes.dedup();
        let asks = nodes.into_iter().map(|url| {
            Box::pin(async move {
                let asked = async {
                    let mut conn = crate::conn::connect_with(url, &self.options).await?;
                    let owners = ask(url, &mut conn).await?;
                    Ok::<_, crate::Error>((conn, owners))
                };
                match tokio::time::timeout(PROBE_TIMEOUT * 2, asked).await {
                    Ok(Ok((conn, owners))) => Ok((url, conn, owners)),
                    _ => Err(()),
                }
            })
        });
        let ((url, conn, owners), _) = futures_util::future::select_ok(asks).await.ok()?;
        self.remember(url.to_owned(), conn);
        Some(owners)
    }

    fn remember(&self, url: String, conn: crate::conn::Connection) {
        *self
            .answered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((url, conn));
    }
}

/// The slot owners and the failed nodes as the node at `url` sees them
/// (`CLUSTER SLOTS` and `CLUSTER NODES` in one round trip); an error when
/// it reports no slot served.
async fn ask(url: &str, conn: &mut crate::conn::Connection) -> crate::Result<SlotOwners> {
    let (slots, nodes): (redis::Value, String) = redis::pipe()
        .cmd("CLUSTER")
        .arg("SLOTS")
        .cmd("CLUSTER")
        .arg("NODES")
        .query_async(conn)
        .await?;
    let shards = slots::shards_in(url, &slots)?;
    if shards.is_empty() {
        return Err(crate::Error::Config(format!(
            "{url} reports no slot served"
        )));
    }
    Ok(SlotOwners::with_failed(shards, failed_nodes(url, &nodes)))
}

/// The URLs (by address and by hostname, reached as `seed` is) of the
/// nodes a `CLUSTER NODES` reply flags `fail`.
fn failed_nodes(seed: &str, nodes: &str) -> Vec<String> {
    let mut out = Vec::new();
    for node in super::node_lines(nodes).filter(|n| n.flags.contains(&"fail")) {
        let Some((ip, port)) = node.addr.rsplit_once(':') else {
            continue;
        };
        let Ok(port) = port.parse::<u16>() else {
            continue;
        };
        for host in [ip, node.hostname] {
            if !host.is_empty() {
                out.push(super::node_url(seed, host, port));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_s_owner_is_the_primary_whose_range_holds_it() {
        let shard = |primary: &str, ranges, replicas: &[&str]| slots::Shard {
            primary: primary.into(),
            ranges,
            replicas: replicas.iter().map(|r| r.to_string()).collect(),
        };
        let owners = SlotOwners::new(vec![
            shard("redis://a/", vec![0..=99, 200..=299], &["redis://c/"]),
            shard("redis://b/", vec![100..=199], &[]),
        ]);
        assert_eq!(owners.replicas[0], ["redis://c/"]);
        assert_eq!(owners.primary_of(0), Some("redis://a/"));
        assert_eq!(owners.primary_of(250), Some("redis://a/"));
        assert_eq!(owners.primary_of(150), Some("redis://b/"));
        assert_eq!(owners.primary_of(300), None);
        assert_eq!(owners.primary_of(SLOTS), None);
        assert!(owners.serves("redis://b/") && !owners.serves("redis://c/"));
        assert_eq!(SlotOwners::default().primary_of(0), None);
    }

    #[test]
    fn lists_the_nodes_flagged_failed_by_address_and_hostname() {
        let nodes = "\
a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7002@17002,node-b.example master,fail - 0 1 2 disconnected
c3 127.0.0.1:7004@17004 master - 0 1 4 connected 5461-16383
d4 127.0.0.1:7003@17003 slave,fail? c3 0 1 3 connected
e5 :0@0 master,fail,noaddr - 0 1 5 disconnected
";
        assert_eq!(
            failed_nodes("redis://127.0.0.1:7001/", nodes),
            ["redis://127.0.0.1:7002/", "redis://node-b.example:7002/"]
        );
    }
}
