//! Metrics through the [`metrics`](https://docs.rs/metrics) facade
//! (feature `metrics`): calls and their latency, records stored out of
//! line, what the sweeper did, revocations.
//!
//! Install any recorder (`metrics-exporter-prometheus`, say) and the store,
//! the tower-sessions store and the sweeper report to it; call
//! [`describe`] once after installing it for units and help texts. Without
//! a recorder the facade's no-op recorder takes each value: the cost is a
//! few nanoseconds a call (measured by `cargo bench --bench metrics_cost
//! --features metrics`; the guide's metrics chapter). Without the feature nothing is
//! compiled in.
//!
//! Labels are few and bounded: the operation, its outcome (an error's
//! [`crate::Error::kind`]), the layout and a record's placement. A call
//! dropped before it finishes (the request went away) is not counted.
//! Several stores in one process share the metrics; the namespace is no
//! label.

use std::future::Future;

use crate::error::Result;

/// Calls by operation and outcome (counter; labels `op`, `outcome`).
pub const CALLS: &str = "sessionpack_calls_total";
/// How long each call took, outcome regardless (histogram, seconds;
/// label `op`).
pub const CALL_DURATION: &str = "sessionpack_call_duration_seconds";
/// Records written, by layout and placement: `inline` in one bucket value,
/// in `pieces` in the bucket (the compact layout), or `out_of_line` under a
/// key of their own (counter; labels `layout`, `placement`).
pub const RECORDS_WRITTEN: &str = "sessionpack_records_written_total";
/// Live sessions removed by a revocation, "log out everywhere" (counter).
pub const SESSIONS_REVOKED: &str = "sessionpack_sessions_revoked_total";
/// Sweeper passes by outcome, `ok` or an error's kind (counter; label
/// `outcome`).
pub const SWEEP_PASSES: &str = "sessionpack_sweep_passes_total";
/// How long each successful sweeper pass took (histogram, seconds).
pub const SWEEP_DURATION: &str = "sessionpack_sweep_pass_duration_seconds";
/// Buckets swept (counter).
pub const SWEEP_BUCKETS: &str = "sessionpack_sweep_buckets_total";
/// Expired sessions the sweeper removed (counter).
pub const SWEEP_RECLAIMED: &str = "sessionpack_sweep_reclaimed_total";
/// Live sessions the cap removed (counter).
pub const SWEEP_EVICTED: &str = "sessionpack_sweep_evicted_total";
/// Entries removed because a bucket's HASH and ZSET disagreed (counter).
pub const SWEEP_REPAIRED: &str = "sessionpack_sweep_repaired_total";
/// Bucket sweeps skipped for a key of another type (counter).
pub const SWEEP_BAD_BUCKETS: &str = "sessionpack_sweep_bad_buckets_total";
/// How long the oldest expired session the last pass found had been
/// expired: how far behind sweeping is (gauge, seconds).
pub const SWEEP_LAG: &str = "sessionpack_sweep_lag_seconds";
/// User index entries removed because their sessions were gone (counter).
pub const USER_INDEX_REPAIRED: &str = "sessionpack_user_index_repaired_total";

/// What a metric measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// A distribution of observations.
    Histogram,
}

/// One metric: its name, kind, unit, labels and help text.
#[derive(Clone, Copy, Debug)]
pub struct Metric {
    /// Its name.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: Kind,
    /// Its unit, as words.
    pub unit: &'static str,
    /// The labels it carries.
    pub labels: &'static [&'static str],
    /// What it counts.
    pub help: &'static str,
}

const fn metric(
    name: &'static str,
    kind: Kind,
    unit: &'static str,
    labels: &'static [&'static str],
    help: &'static str,
) -> Metric {
    Metric {
        name,
        kind,
        unit,
        labels,
        help,
    }
}

/// Every metric the library reports.
pub const METRICS: &[Metric] = &[
    metric(
        CALLS,
        Kind::Counter,
        "calls",
        &["op", "outcome"],
        "Store calls by operation and outcome",
    ),
    metric(
        CALL_DURATION,
        Kind::Histogram,
        "seconds",
        &["op"],
        "Store call latency",
    ),
    metric(
        RECORDS_WRITTEN,
        Kind::Counter,
        "records",
        &["layout", "placement"],
        "Records written, inline, in pieces or out of line",
    ),
    metric(
        SESSIONS_REVOKED,
        Kind::Counter,
        "sessions",
        &[],
        "Live sessions removed by revocations",
    ),
    metric(
        SWEEP_PASSES,
        Kind::Counter,
        "passes",
        &["outcome"],
        "Sweeper passes by outcome",
    ),
    metric(
        SWEEP_DURATION,
        Kind::Histogram,
        "seconds",
        &[],
        "Sweeper pass duration",
    ),
    metric(
        SWEEP_BUCKETS,
        Kind::Counter,
        "buckets",
        &[],
        "Buckets swept",
    ),
    metric(
        SWEEP_RECLAIMED,
        Kind::Counter,
        "sessions",
        &[],
        "Expired sessions removed by the sweeper",
    ),
    metric(
        SWEEP_EVICTED,
        Kind::Counter,
        "sessions",
        &[],
        "Live sessions removed by the cap",
    ),
    metric(
        SWEEP_REPAIRED,
        Kind::Counter,
        "entries",
        &[],
        "Entries removed where a bucket's HASH and ZSET disagreed",
    ),
    metric(
        SWEEP_BAD_BUCKETS,
        Kind::Counter,
        "buckets",
        &[],
        "Bucket sweeps skipped for a key of another type",
    ),
    metric(
        SWEEP_LAG,
        Kind::Gauge,
        "seconds",
        &[],
        "Age of the oldest expired session the last pass found",
    ),
    metric(
        USER_INDEX_REPAIRED,
        Kind::Counter,
        "entries",
        &[],
        "User index entries removed because their sessions were gone",
    ),
];

/// Histogram bounds, in seconds, that suit a store call (a round trip or
/// two, 100 µs to a second); for an exporter that needs them
/// (`PrometheusBuilder::set_buckets_for_metric`).
pub const CALL_SECONDS_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// Registers the unit and help text of every metric with the installed
/// recorder; call once after installing it.
#[cfg(feature = "metrics")]
pub fn describe() {
    for m in METRICS {
        let unit = match m.unit {
            "seconds" => Some(::metrics::Unit::Seconds),
            _ => Some(::metrics::Unit::Count),
        };
        ::metrics::with_recorder(|r| {
            let name = ::metrics::KeyName::from_const_str(m.name);
            let help = ::metrics::SharedString::const_str(m.help);
            match m.kind {
                Kind::Counter => r.describe_counter(name, unit, help),
                Kind::Gauge => r.describe_gauge(name, unit, help),
                Kind::Histogram => r.describe_histogram(name, unit, help),
            }
        });
    }
}

/// How a call that returned went: the `outcome` label, with an error's
/// kind for a failed one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Done, or found.
    Ok,
    /// The session was gone (a load, touch, save... of nothing).
    Missing,
    /// Nothing needed sending (a tower-sessions save within the write
    /// threshold).
    #[cfg_attr(
        not(any(feature = "tower-sessions", feature = "tower-sessions-014")),
        allow(dead_code)
    )]
    Skipped,
}

impl Outcome {
    /// `Missing` for `None`.
    pub(crate) fn of_option<T>(found: &Option<T>) -> Self {
        if found.is_some() {
            Self::Ok
        } else {
            Self::Missing
        }
    }

    /// `Missing` for `false`.
    pub(crate) fn of_bool(found: &bool) -> Self {
        if *found { Self::Ok } else { Self::Missing }
    }

    /// `Ok` whatever came back.
    pub(crate) fn ok<T>(_: &T) -> Self {
        Self::Ok
    }
}

/// Runs one store call, counting it by `op` and outcome and timing it.
pub(crate) async fn call<T>(
    op: Op,
    outcome: impl FnOnce(&T) -> Outcome,
    call: impl Future<Output = Result<T>>,
) -> Result<T> {
    #[cfg(feature = "metrics")]
    {
        let started = std::time::Instant::now();
        let result = call.await;
        recorded::call(op, started.elapsed(), result.as_ref().map(outcome));
        result
    }
    #[cfg(not(feature = "metrics"))]
    {
        let _ = (op, outcome);
        call.await
    }
}

/// Where a written record went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Placement {
    /// In its bucket, in one value.
    Inline,
    /// In its bucket, in pieces (the compact layout).
    Pieces,
    /// Under a key of its own.
    OutOfLine,
}

impl Placement {
    /// The label's value.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    fn label(self) -> &'static str {
        match self {
            Self::Inline => "inline",
            Self::Pieces => "pieces",
            Self::OutOfLine => "out_of_line",
        }
    }

    /// Inline, or out of line where `out_of_line`.
    pub(crate) fn of(out_of_line: bool) -> Self {
        if out_of_line {
            Self::OutOfLine
        } else {
            Self::Inline
        }
    }
}

/// Where a written record of `layout` (its name) went.
pub(crate) fn record_written(layout: &'static str, placement: Placement) {
    #[cfg(feature = "metrics")]
    recorded::record_written(layout, placement);
    #[cfg(not(feature = "metrics"))]
    let _ = (layout, placement);
}

/// Live sessions a revocation removed.
pub(crate) fn revoked(sessions: u64) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(SESSIONS_REVOKED).increment(sessions);
    #[cfg(not(feature = "metrics"))]
    let _ = sessions;
}

/// What one sweeper pass did, for the sweep metrics.
#[derive(Clone, Copy, Debug, Default)]
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) struct Swept {
    pub(crate) buckets: u64,
    pub(crate) reclaimed: u64,
    pub(crate) evicted: u64,
    pub(crate) repaired: u64,
    pub(crate) bad_buckets: u64,
    pub(crate) index_repaired: u64,
    pub(crate) lag_secs: u64,
    pub(crate) took: std::time::Duration,
}

/// A sweeper pass: what it did, or the kind of error that ended it.
pub(crate) fn sweep_pass(pass: std::result::Result<Swept, &'static str>) {
    #[cfg(feature = "metrics")]
    recorded::sweep_pass(pass);
    #[cfg(not(feature = "metrics"))]
    let _ = pass;
}

/// Declares the store operations (the `op` label) and, with the feature,
/// static keys for their outcomes, so that counting a call allocates
/// nothing.
macro_rules! ops {
    ($($variant:ident => $name:literal,)*) => {
        /// A store operation: the `op` label.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(crate) enum Op {
            $(
                #[doc = concat!("`", $name, "`")]
                $variant,
            )*
        }

        impl Op {
            /// The label value.
            #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
            pub(crate) fn name(self) -> &'static str {
                match self {
                    $(Self::$variant => $name,)*
                }
            }

            /// The keys of its calls (ok, missing, skipped) and of its
            /// latency.
            #[cfg(feature = "metrics")]
            fn keys(self) -> &'static recorded::OpKeys {
                use ::metrics::{Key, Label};
                match self {
                    $(Self::$variant => {
                        static LABELS: [[Label; 2]; 3] = [
                            [Label::from_static_parts("op", $name), Label::from_static_parts("outcome", "ok")],
                            [Label::from_static_parts("op", $name), Label::from_static_parts("outcome", "missing")],
                            [Label::from_static_parts("op", $name), Label::from_static_parts("outcome", "skipped")],
                        ];
                        static OP: [Label; 1] = [Label::from_static_parts("op", $name)];
                        static KEYS: recorded::OpKeys = recorded::OpKeys {
                            calls: [
                                Key::from_static_parts(CALLS, &LABELS[0]),
                                Key::from_static_parts(CALLS, &LABELS[1]),
                                Key::from_static_parts(CALLS, &LABELS[2]),
                            ],
                            duration: Key::from_static_parts(CALL_DURATION, &OP),
                        };
                        &KEYS
                    })*
                }
            }
        }
    };
}

ops! {
    Create => "create",
    CreateMany => "create_many",
    Load => "load",
    LoadMany => "load_many",
    Touch => "touch",
    Save => "save",
    Update => "update",
    Destroy => "destroy",
    Rotate => "rotate",
    SessionsOf => "sessions_of",
    RevokeAll => "revoke_all",
    RevokeOthers => "revoke_others",
    SetLabel => "set_label",
    View => "view",
    Viewed => "viewed",
}

/// The calls into the facade, compiled only with the feature.
#[cfg(feature = "metrics")]
mod recorded {
    use std::time::Duration;

    use ::metrics::{Key, Label, Level, Metadata};

    use super::*;

    /// Where the facade's own macros put a metric: this crate, at `INFO`.
    static METADATA: Metadata<'static> =
        Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

    /// The static keys of one operation.
    pub(super) struct OpKeys {
        pub(super) calls: [Key; 3],
        pub(super) duration: Key,
    }

    pub(super) fn call(op: Op, took: Duration, outcome: std::result::Result<Outcome, &Error>) {
        let keys = op.keys();
        ::metrics::with_recorder(|r| {
            r.register_histogram(&keys.duration, &METADATA)
                .record(took.as_secs_f64());
            match outcome {
                Ok(o) => r.register_counter(&keys.calls[o as usize], &METADATA),
                // Failures are rare: their key is built when one happens.
                Err(e) => r.register_counter(
                    &Key::from_parts(
                        CALLS,
                        vec![
                            Label::from_static_parts("op", op.name()),
                            Label::from_static_parts("outcome", e.kind()),
                        ],
                    ),
                    &METADATA,
                ),
            }
            .increment(1);
        });
    }

    pub(super) fn record_written(layout: &'static str, placement: super::Placement) {
        const fn labels(layout: &'static str, placement: &'static str) -> [Label; 2] {
            [
                Label::from_static_parts("layout", layout),
                Label::from_static_parts("placement", placement),
            ]
        }
        static LABELS: [[Label; 2]; 9] = [
            labels("compact", "inline"),
            labels("compact", "pieces"),
            labels("compact", "out_of_line"),
            labels("bucketed", "inline"),
            labels("bucketed", "pieces"),
            labels("bucketed", "out_of_line"),
            labels("book-login-hash", "inline"),
            labels("book-login-hash", "pieces"),
            labels("book-login-hash", "out_of_line"),
        ];
        static KEYS: [Key; 9] = [
            Key::from_static_parts(RECORDS_WRITTEN, &LABELS[0]),
            Key::from_static_parts(RECORDS_WRITTEN, &LABELS[1]),
            Key::from_static_parts(RECORDS_WRITTEN, &LABELS[2]),
            Key::from_static_parts(RECORDS_WRITTEN, &LABELS[3]),
            Key::from_static_parts(RECORDS_WRITTEN, &LABELS[4]),
            Key::from_static_parts(RECORDS_WRITTEN, &LABELS[5]),
            Key::from_static_parts(RECORDS_WRITTEN, &LABELS[6]),
            Key::from_static_parts(RECORDS_WRITTEN, &LABELS[7]),
            Key::from_static_parts(RECORDS_WRITTEN, &LABELS[8]),
        ];
        let row = match layout {
            "compact" => 0,
            "bucketed" => 1,
            "book-login-hash" => 2,
            _ => {
                ::metrics::counter!(RECORDS_WRITTEN, "layout" => layout, "placement" => placement.label())
                    .increment(1);
                return;
            }
        };
        let column = match placement {
            super::Placement::Inline => 0,
            super::Placement::Pieces => 1,
            super::Placement::OutOfLine => 2,
        };
        let key = &KEYS[3 * row + column];
        ::metrics::with_recorder(|r| r.register_counter(key, &METADATA).increment(1));
    }

    pub(super) fn sweep_pass(pass: std::result::Result<Swept, &'static str>) {
        let s = match pass {
            Ok(s) => s,
            Err(kind) => {
                ::metrics::counter!(SWEEP_PASSES, "outcome" => kind).increment(1);
                return;
            }
        };
        ::metrics::counter!(SWEEP_PASSES, "outcome" => "ok").increment(1);
        ::metrics::histogram!(SWEEP_DURATION).record(s.took.as_secs_f64());
        ::metrics::counter!(SWEEP_BUCKETS).increment(s.buckets);
        ::metrics::counter!(SWEEP_RECLAIMED).increment(s.reclaimed);
        ::metrics::counter!(SWEEP_EVICTED).increment(s.evicted);
        ::metrics::counter!(SWEEP_REPAIRED).increment(s.repaired);
        ::metrics::counter!(SWEEP_BAD_BUCKETS).increment(s.bad_buckets);
        ::metrics::counter!(USER_INDEX_REPAIRED).increment(s.index_repaired);
        ::metrics::gauge!(SWEEP_LAG).set(s.lag_secs as f64);
    }

    use crate::error::Error;
}
