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
