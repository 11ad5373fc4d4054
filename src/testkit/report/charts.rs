//! The charts, drawn by plotters as SVG: acquire and release latency over
//! time (median and 99th percentile per time slice), and grants and
//! failed attempts per second. Majority outages are shaded in both.

use std::fmt::Write as _;
use std::ops::Range;
use std::time::Duration;

use plotters::prelude::*;

use super::{esc, failed_acquisition};
use crate::testkit::history::{History, OpKind, Outcome};

/// How many time slices the run is cut into.
const SLICES: usize = 120;
/// A chart's size in pixels.
const SIZE: (u32, u32) = (1100, 300);
/// The width of the legend, right of the plot area (never on the data).
const LEGEND_WIDTH: u32 = 170;
/// Left of the plot: the axis' name, then the values, which
/// [`value_label`] keeps to six characters at most.
const Y_LABEL_AREA: u32 = 68;

const ACQUIRE: RGBColor = RGBColor(0x2f, 0x5a, 0x88);
const RELEASE: RGBColor = RGBColor(0x2e, 0x7d, 0x32);
const FAILED: RGBColor = RGBColor(0xef, 0x6c, 0x00);
const OUTAGE: RGBAColor = RGBAColor(0xc6, 0x28, 0x28, 0.12);
/// While a quorum was coming back after an outage (nodes restarting).
const OUTAGE_BACK: RGBAColor = RGBAColor(0xc6, 0x28, 0x28, 0.05);

/// Writes both charts (or, if plotters fails, what it said).
pub(super) fn write(page: &mut String, history: &History, span: Duration) {
    let slices = Slices::new(span);
    for (id, drawn) in [
        ("latency", latency(history, &slices)),
        ("rate", rate(history, &slices)),
    ] {
        match drawn {
            Ok(svg) => {
                // plotters' document starts at `<svg`; inline it as is.
                let svg = svg.find("<svg").map_or(svg.as_str(), |at| &svg[at..]);
                let _ = writeln!(page, "<div class=\"chart\" id=\"chart-{id}\">{svg}</div>");
            }
            Err(e) => {
                let _ = writeln!(
                    page,
                    "<p class=\"chart-error bad\" id=\"chart-{id}\">chart not drawn: {}</p>",
                    esc(&e)
                );
            }
        }
    }
}

/// The run cut into equal slices of time.
struct Slices {
    width: Duration,
    count: usize,
}

impl Slices {
    fn new(span: Duration) -> Self {
        let width = (span / u32::try_from(SLICES).unwrap_or(1)).max(Duration::from_micros(10));
        let count = usize::try_from(span.as_nanos() / width.as_nanos().max(1))
            .unwrap_or(SLICES)
            .saturating_add(1);
        Slices { width, count }
    }

    fn of(&self, t: Duration) -> usize {
        usize::try_from(t.as_nanos() / self.width.as_nanos().max(1))
            .unwrap_or(usize::MAX)
            .min(self.count - 1)
    }

    /// The middle of slice `i`, in seconds.
    fn middle(&self, i: usize) -> f64 {
        (i as f64 + 0.5) * self.width.as_secs_f64()
    }

    fn x_range(&self) -> Range<f64> {
        0.0..(self.count as f64 * self.width.as_secs_f64())
    }
}

/// The `q` quantile of sorted `values` (0 for none).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let at = (sorted.len() as f64 * q).ceil() as usize;
    sorted
        .get(at.saturating_sub(1).min(sorted.len().saturating_sub(1)))
        .copied()
        .unwrap_or(0.0)
}

/// A value on a chart's y axis in six characters at most: four
/// significant digits, trailing zeros dropped, thousands as `k` from ten
/// thousand and millions as `M` (`0.0012`, `250`, `9999`, `12.5k`,
/// `1.2M`), so that it fits beside the axis' name whatever the
/// magnitude.
fn value_label(v: f64) -> String {
    let (scaled, suffix) = match v.abs() {
        a if a >= 999_500.0 => (v / 1e6, "M"),
        a if a >= 9_999.5 => (v / 1e3, "k"),
        _ => (v, ""),
    };
    let decimals = match scaled.abs() {
        a if a >= 999.5 => 0,
        a if a >= 99.95 => 1,
        a if a >= 1.0 => 2,
        // Just under a million, in millions: 0.9996M is 1M.
        _ if !suffix.is_empty() => 2,
        _ => 4,
    };
    let text = format!("{scaled:.decimals$}");
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        &text
    };
    format!("{text}{suffix}")
}

/// A series: its name, colour, style and points; each run of slices
/// with data is one line.
struct Series {
    name: &'static str,
    colour: RGBColor,
    dashed: bool,
    points: Vec<Option<(f64, f64)>>,
}

fn draw_error(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Acquire and release latency per slice, p50 and p99, in ms.
fn latency_series(history: &History, slices: &Slices) -> Vec<Series> {
    let mut acquire: Vec<Vec<f64>> = vec![Vec::new(); slices.count];
    let mut release: Vec<Vec<f64>> = vec![Vec::new(); slices.count];
    for op in &history.ops {
        if op.outcome != Outcome::Ok {
            continue;
        }
        let took = op.end.saturating_sub(op.start).as_secs_f64() * 1000.0;
        let slice = slices.of(op.end);
        match op.kind {
            OpKind::Release => release[slice].push(took),
            _ => acquire[slice].push(took),
        }
    }
    let mut series = Vec::new();
    for (values, name50, name99, colour) in [
        (&mut acquire, "acquire p50", "acquire p99", ACQUIRE),
        (&mut release, "release p50", "release p99", RELEASE),
    ] {
        let mut p50 = Vec::with_capacity(slices.count);
        let mut p99 = Vec::with_capacity(slices.count);
        for (i, v) in values.iter_mut().enumerate() {
            if v.is_empty() {
                p50.push(None);
                p99.push(None);
                continue;
            }
            v.sort_by(f64::total_cmp);
            p50.push(Some((slices.middle(i), quantile(v, 0.5))));
            p99.push(Some((slices.middle(i), quantile(v, 0.99))));
        }
        series.push(Series {
            name: name50,
            colour,
            dashed: false,
            points: p50,
        });
        series.push(Series {
            name: name99,
            colour,
            dashed: true,
            points: p99,
        });
    }
    series
}

fn latency(history: &History, slices: &Slices) -> Result<String, String> {
    let series = latency_series(history, slices);
    let values = series
        .iter()
        .flat_map(|s| s.points.iter().flatten().map(|p| p.1));
    let (low, high) = values.fold((f64::MAX, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    // A log scale: latencies under faults span orders of magnitude.
    let low = if low == f64::MAX {
        0.01
    } else {
        (low * 0.8).max(0.001)
    };
    let high = (high * 1.25).max(low * 10.0);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(draw_error)?;
        let (plot, beside) = root.split_horizontally(SIZE.0 - LEGEND_WIDTH);
        let mut chart = ChartBuilder::on(&plot)
            .caption(
                "Acquire and release latency (ms, log scale; per time slice)",
                ("sans-serif", 16),
            )
            .margin(10)
            .x_label_area_size(34)
            .y_label_area_size(Y_LABEL_AREA)
            .build_cartesian_2d(slices.x_range(), (low..high).log_scale())
            .map_err(draw_error)?;
        chart
            .configure_mesh()
            .x_desc("time since the start (s)")
            .y_desc("latency (ms)")
            .y_label_formatter(&|v| value_label(*v))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(draw_error)?;
        shade_outages(&mut chart, history, (low, high))?;
        draw(&mut chart, &series)?;
        legend(&beside, &series, !history.outages.is_empty())?;
        root.present().map_err(draw_error)?;
    }
    Ok(svg)
}

/// Grants and failed attempts per second, per slice.
fn rate_series(history: &History, slices: &Slices) -> [Series; 2] {
    let mut grants = vec![0usize; slices.count];
    let mut failed = vec![0usize; slices.count];
    for g in &history.grants {
        grants[slices.of(g.granted)] += 1;
    }
    for op in &history.ops {
        if failed_acquisition(op.kind, &op.outcome) {
            failed[slices.of(op.end)] += 1;
        }
    }
    let per_second = slices.width.as_secs_f64().max(1e-9);
    let to_points = |counts: &[usize]| -> Vec<Option<(f64, f64)>> {
        counts
            .iter()
            .enumerate()
            .map(|(i, n)| Some((slices.middle(i), *n as f64 / per_second)))
            .collect()
    };
    [
        Series {
            name: "grants per second",
            colour: ACQUIRE,
            dashed: false,
            points: to_points(&grants),
        },
        Series {
            name: "failed attempts per second",
            colour: FAILED,
            dashed: false,
            points: to_points(&failed),
        },
    ]
}

fn rate(history: &History, slices: &Slices) -> Result<String, String> {
    let series = rate_series(history, slices);
    let high = series
        .iter()
        .flat_map(|s| s.points.iter().flatten().map(|p| p.1))
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.1;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(draw_error)?;
        let (plot, beside) = root.split_horizontally(SIZE.0 - LEGEND_WIDTH);
        let mut chart = ChartBuilder::on(&plot)
            .caption(
                "Grants and failed attempts per second (per time slice)",
                ("sans-serif", 16),
            )
            .margin(10)
            .x_label_area_size(34)
            .y_label_area_size(Y_LABEL_AREA)
            .build_cartesian_2d(slices.x_range(), 0.0..high)
            .map_err(draw_error)?;
        chart
            .configure_mesh()
            .x_desc("time since the start (s)")
            .y_desc("per second")
            .y_label_formatter(&|v| value_label(*v))
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(draw_error)?;
        shade_outages(&mut chart, history, (0.0, high))?;
        draw(&mut chart, &series)?;
        legend(&beside, &series, !history.outages.is_empty())?;
        root.present().map_err(draw_error)?;
    }
    Ok(svg)
}

type Chart<'a, 'b, Y> =
    ChartContext<'a, SVGBackend<'b>, Cartesian2d<plotters::coord::types::RangedCoordf64, Y>>;

fn shade_outages<Y>(
    chart: &mut Chart<'_, '_, Y>,
    history: &History,
    (low, high): (f64, f64),
) -> Result<(), String>
where
    Y: Ranged<ValueType = f64>,
{
    chart
        .draw_series(history.outages.iter().map(|o| {
            Rectangle::new(
                [(o.from.as_secs_f64(), low), (o.to.as_secs_f64(), high)],
                OUTAGE.filled(),
            )
        }))
        .map_err(draw_error)?;
    // Until the quorum was certainly back, as the timeline's lanes show.
    chart
        .draw_series(history.outages.iter().filter(|o| o.back > o.to).map(|o| {
            Rectangle::new(
                [(o.to.as_secs_f64(), low), (o.back.as_secs_f64(), high)],
                OUTAGE_BACK.filled(),
            )
        }))
        .map_err(draw_error)?;
    Ok(())
}

fn draw<Y>(chart: &mut Chart<'_, '_, Y>, series: &[Series]) -> Result<(), String>
where
    Y: Ranged<ValueType = f64>,
{
    for s in series {
        let style = s.colour.stroke_width(if s.dashed { 1 } else { 2 });
        // Each run of slices with data is one line.
        let mut runs: Vec<Vec<(f64, f64)>> = Vec::new();
        let mut run = Vec::new();
        for p in &s.points {
            match p {
                Some(p) => run.push(*p),
                None if run.is_empty() => {}
                None => runs.push(std::mem::take(&mut run)),
            }
        }
        if !run.is_empty() {
            runs.push(run);
        }
        for run in runs {
            if s.dashed {
                chart
                    .draw_series(DashedLineSeries::new(run, 4, 3, style))
                    .map_err(draw_error)?;
            } else {
                chart
                    .draw_series(LineSeries::new(run, style))
                    .map_err(draw_error)?;
            }
        }
    }
    Ok(())
}

/// The legend, in its own area right of the plot: each series' line as the
/// chart draws it (dashed where the chart dashes it), and the outage shades
/// when there were outages.
fn legend(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    series: &[Series],
    outages: bool,
) -> Result<(), String> {
    let row = |i: usize| 40 + 22 * i as i32;
    for (i, s) in series.iter().enumerate() {
        let y = row(i);
        let style = s.colour.stroke_width(if s.dashed { 1 } else { 2 });
        let segments: &[(i32, i32)] = if s.dashed {
            &[(4, 8), (11, 15), (18, 22), (25, 28)]
        } else {
            &[(4, 28)]
        };
        for &(from, to) in segments {
            area.draw(&PathElement::new(vec![(from, y), (to, y)], style))
                .map_err(draw_error)?;
        }
        area.draw(&Text::new(s.name, (34, y - 7), ("sans-serif", 13)))
            .map_err(draw_error)?;
    }
    if outages {
        for (k, (name, colour)) in [
            ("majority outage", OUTAGE),
            ("quorum coming back", OUTAGE_BACK),
        ]
        .into_iter()
        .enumerate()
        {
            let y = row(series.len() + k);
            area.draw(&Rectangle::new([(4, y - 6), (28, y + 6)], colour.filled()))
                .map_err(draw_error)?;
            area.draw(&Text::new(name, (34, y - 7), ("sans-serif", 13)))
                .map_err(draw_error)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The x coordinates of the SVG `<text>` elements that say `label`.
    fn text_x(svg: &str, label: &str) -> Vec<f64> {
        svg.split("<text")
            .skip(1)
            .filter(|t| {
                t.split_once('>')
                    .and_then(|(_, rest)| rest.split_once("</text>"))
                    .is_some_and(|(text, _)| text.trim() == label)
            })
            .filter_map(|t| {
                let at = t.find("x=\"")? + 3;
                t[at..].split('"').next()?.parse().ok()
            })
            .collect()
    }

    #[test]
    fn a_value_label_is_short_at_any_magnitude() {
        for (v, said) in [
            (0.0, "0"),
            (0.0012, "0.0012"),
            (0.1, "0.1"),
            (2.5, "2.5"),
            (250.0, "250"),
            (9_999.0, "9999"),
            (12_500.0, "12.5k"),
            (999_400.0, "999.4k"),
            (999_940.0, "1M"),
            (1_200_000.0, "1.2M"),
            (2.5e9, "2500M"),
        ] {
            assert_eq!(value_label(v), said, "{v}");
        }
        let mut v = 1e-4;
        while v < 1e9 {
            let label = value_label(v);
            assert!(label.len() <= 6, "{v}: {label}");
            v *= 1.37;
        }
    }

    /// The legend sits right of the plot area, never on the data, and
    /// draws a dashed series dashed.
    #[test]
    fn the_legend_is_beside_the_plot_and_dashes_what_the_chart_dashes() {
        let series = [
            Series {
                name: "acquire p50",
                colour: ACQUIRE,
                dashed: false,
                points: vec![Some((0.5, 1.0))],
            },
            Series {
                name: "acquire p99",
                colour: ACQUIRE,
                dashed: true,
                points: vec![Some((0.5, 2.0))],
            },
        ];
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
            let (_, beside) = root.split_horizontally(SIZE.0 - LEGEND_WIDTH);
            legend(&beside, &series, true).expect("legend");
            root.present().expect("present");
        }
        let plot_right = f64::from(SIZE.0 - LEGEND_WIDTH);
        for label in ["acquire p50", "acquire p99", "majority outage"] {
            let xs = text_x(&svg, label);
            assert_eq!(xs.len(), 1, "{label}: {svg}");
            assert!(xs[0] > plot_right, "{label} at x {} is on the plot", xs[0]);
        }
        // The solid line is one segment, the dashed one four.
        assert_eq!(
            svg.matches("<polyline").count() + svg.matches("<line").count(),
            5,
            "{svg}"
        );
    }
}
