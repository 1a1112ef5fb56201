//! Plots of a memory benchmark: bytes per session and total memory against
//! session count, one line per run, with the points where buckets had left
//! listpack marked.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::memory::{MemoryReport, Point};
use sessionpack::error::{Error, Result};

/// Where Debian's `fonts-dejavu-core` puts the font the plots use.
const FONT_PATHS: [&str; 2] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
];

fn register_font() -> Result<()> {
    static DONE: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let bytes = FONT_PATHS
            .iter()
            .find_map(|p| std::fs::read(p).ok())
            .ok_or_else(|| {
                "no DejaVuSans.ttf found (apt-get install fonts-dejavu-core)".to_owned()
            })?;
        // Registered once per process for the plotting library's lifetime.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
            .map_err(|_| "DejaVuSans.ttf is not a usable font".to_owned())
    })
    .clone()
    .map_err(Error::Config)
}

fn plot_err<E: std::fmt::Debug>(e: E) -> Error {
    Error::Config(format!("plotting failed: {e:?}"))
}

/// What a chart shows of each point.
#[derive(Clone, Copy)]
enum Measure {
    BytesPerSession,
    TotalMiB,
}

impl Measure {
    fn of(self, p: &Point) -> f64 {
        match self {
            Self::BytesPerSession => p.bytes_per_session,
            Self::TotalMiB => p.used_memory_delta as f64 / (1024.0 * 1024.0),
        }
    }

    fn caption(self) -> &'static str {
        match self {
            Self::BytesPerSession => "used_memory per session (bytes)",
            Self::TotalMiB => "used_memory above the empty server (MiB)",
        }
    }

    fn file(self) -> &'static str {
        match self {
            Self::BytesPerSession => "bytes_per_session",
            Self::TotalMiB => "total_memory",
        }
    }
}

/// Writes `bytes_per_session.{png,svg}` and `total_memory.{png,svg}`.
pub fn write_all(report: &MemoryReport, dir: &Path) -> Result<()> {
    register_font()?;
    for measure in [Measure::BytesPerSession, Measure::TotalMiB] {
        let png = dir.join(format!("{}.png", measure.file()));
        let svg = dir.join(format!("{}.svg", measure.file()));
        draw(
            report,
            measure,
            BitMapBackend::new(&png, (1100, 700)).into_drawing_area(),
        )?;
        draw(
            report,
            measure,
            SVGBackend::new(&svg, (1100, 700)).into_drawing_area(),
        )?;
    }
    Ok(())
}

fn draw<DB: DrawingBackend>(
    report: &MemoryReport,
    measure: Measure,
    area: DrawingArea<DB, Shift>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    area.fill(&WHITE).map_err(plot_err)?;
    let max_x = report
        .runs
        .iter()
        .flat_map(|r| r.points.iter().map(|p| p.sessions))
        .max()
        .unwrap_or(1) as f64
        / 1e6;
    let max_y = report
        .runs
        .iter()
        .flat_map(|r| r.points.iter().map(|p| measure.of(p)))
        .fold(0.0f64, f64::max)
        * 1.3;
    let mut chart = ChartBuilder::on(&area)
        .caption(
            format!(
                "{} - {}, {}",
                measure.caption(),
                report.server.name(),
                report.server.mem_allocator
            ),
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..max_x.max(1e-6), 0.0..max_y.max(1.0))
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("sessions (millions)")
        .y_desc(measure.caption())
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(plot_err)?;
    for (i, run) in report.runs.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let series: Vec<(f64, f64)> = std::iter::once((0.0, f64::NAN))
            .chain(
                run.points
                    .iter()
                    .map(|p| (p.sessions as f64 / 1e6, measure.of(p))),
            )
            .filter(|(_, y)| y.is_finite())
            .collect();
        chart
            .draw_series(LineSeries::new(series.clone(), color.stroke_width(2)))
            .map_err(plot_err)?
            .label(run.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3))
            });
        chart
            .draw_series(
                series
                    .iter()
                    .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
            )
            .map_err(plot_err)?;
        // Points where some bucket had left listpack: a hollow red ring.
        let converted = run
            .points
            .iter()
            .filter(|_| run.spec.layout.is_bucketed())
            .filter(|p| p.census.is_some_and(|c| c.converted > 0))
            .map(|p| {
                Circle::new(
                    (p.sessions as f64 / 1e6, measure.of(p)),
                    8,
                    RED.stroke_width(2),
                )
            });
        chart.draw_series(converted).map_err(plot_err)?;
    }
    chart
        .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
        .map_err(plot_err)?
        .label("some buckets left listpack")
        .legend(|(x, y)| Circle::new((x + 10, y), 6, RED.stroke_width(2)));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(plot_err)?;
    area.present().map_err(plot_err)?;
    Ok(())
}

/// Writes `growth.{png,svg}`: bytes per session against sessions (log
/// scale) for the growing store, the fixed counts `fixed`, and the best
/// fixed count at each size; the growing store's shrink point as a ring.
pub fn write_growth(
    runs: &[super::growth::GrowthRun],
    server: &str,
    fixed: &[u8],
    dir: &Path,
) -> Result<()> {
    register_font()?;
    let png = dir.join("growth.png");
    let svg = dir.join("growth.svg");
    draw_growth(
        runs,
        server,
        fixed,
        BitMapBackend::new(&png, (1100, 700)).into_drawing_area(),
    )?;
    draw_growth(
        runs,
        server,
        fixed,
        SVGBackend::new(&svg, (1100, 700)).into_drawing_area(),
    )
}

fn draw_growth<DB: DrawingBackend>(
    runs: &[super::growth::GrowthRun],
    server: &str,
    fixed: &[u8],
    area: DrawingArea<DB, Shift>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    use super::growth::{Store, best_fixed};
    area.fill(&WHITE).map_err(plot_err)?;
    let mut lines: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    let mut shrunk: Vec<(f64, f64)> = Vec::new();
    let stores = std::iter::once(Store::Growing).chain(fixed.iter().map(|&b| Store::Fixed(b)));
    for store in stores {
        let mut points: Vec<(f64, f64)> = Vec::new();
        for run in runs.iter().filter(|r| r.store == store) {
            for p in &run.points {
                let xy = (p.size.sessions as f64, p.bytes_per_session);
                if p.shrunk {
                    if store == Store::Growing {
                        shrunk.push(xy);
                    }
                } else {
                    points.push(xy);
                }
            }
        }
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        lines.push((store.label(), points));
    }
    let best: Vec<(f64, f64)> = best_fixed(runs)
        .into_iter()
        .map(|(s, (_, b))| (s as f64, b))
        .collect();
    lines.push(("best fixed count at each size".into(), best));
    let all = lines.iter().flat_map(|(_, p)| p.iter()).chain(&shrunk);
    let (min_x, max_x, max_y) = all.fold((f64::MAX, 1.0f64, 1.0f64), |(a, b, c), &(x, y)| {
        (a.min(x), b.max(x), c.max(y))
    });
    // Fixed counts far from their size go off the chart's top; the
    // growing store and the best fixed count set its height.
    let top = lines
        .iter()
        .filter(|(label, _)| label == "growing" || label.starts_with("best"))
        .flat_map(|(_, p)| p.iter().map(|&(_, y)| y))
        .fold(max_y.min(1.0), f64::max)
        * 2.0;
    let mut chart = ChartBuilder::on(&area)
        .caption(
            format!("used_memory per session as the store grows - {server}"),
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(
            ((min_x.min(max_x) / 1.5)..(max_x * 1.5)).log_scale(),
            0.0..top.min(max_y * 1.1),
        )
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("sessions (log scale)")
        .y_desc("used_memory per session (bytes)")
        .label_style(("sans-serif", 15))
        .draw()
        .map_err(plot_err)?;
    for (i, (label, points)) in lines.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
            .map_err(plot_err)?
            .label(label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3))
            });
        chart
            .draw_series(points.iter().map(|&xy| Circle::new(xy, 3, color.filled())))
            .map_err(plot_err)?;
    }
    chart
        .draw_series(
            shrunk
                .iter()
                .map(|&xy| Circle::new(xy, 8, RED.stroke_width(2))),
        )
        .map_err(plot_err)?
        .label("growing, shrunk back from the largest size")
        .legend(|(x, y)| Circle::new((x + 10, y), 6, RED.stroke_width(2)));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 15))
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(plot_err)?;
    area.present().map_err(plot_err)?;
    Ok(())
}
