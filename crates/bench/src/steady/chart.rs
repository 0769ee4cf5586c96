//! Charts of a run in the talk's style: one panel per present metric with its value as a solid
//! line and its steady flag as a dotted line (high: steady, low: not), a panel of the system's
//! steady count against the count required with the system's flag dotted, a vertical mark
//! where the system first became steady, and a summary table below.
//!
//! SVG is drawn with `plotters`' SVG backend (text is left to the viewer's fonts, so nothing
//! needs font files). PNG is that SVG converted by `rsvg-convert` when it is installed
//! (Debian's librsvg2-bin); without it, asking for PNG is an error that says so.

use std::path::Path;

use plotters::prelude::*;
use tarn_protocol::error::Failure;

use super::detector::{IntervalVerdict, METRICS};

/// One row of the summary table: a metric's figures over the intervals summarized.
pub struct SummaryRow {
    pub name: String,
    pub mean: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub steady_last: bool,
    pub steady_share_pct: f64,
    pub failed: usize,
}

/// The summary of `verdicts[from..]` (the measurement phase, or the whole run), per present
/// metric.
pub fn summary(verdicts: &[IntervalVerdict], from: usize) -> Vec<SummaryRow> {
    let span = &verdicts[from.min(verdicts.len())..];
    (0..METRICS.len())
        .filter(|metric| {
            verdicts
                .iter()
                .any(|verdict| verdict.metrics[*metric].present)
        })
        .map(|metric| {
            let values: Vec<f64> = span
                .iter()
                .filter_map(|verdict| verdict.metrics[metric].value)
                .collect();
            let steady = span
                .iter()
                .filter(|verdict| verdict.metrics[metric].steady)
                .count();
            SummaryRow {
                name: METRICS[metric].to_string(),
                mean: (!values.is_empty())
                    .then(|| values.iter().sum::<f64>() / values.len() as f64),
                min: values.iter().copied().reduce(f64::min),
                max: values.iter().copied().reduce(f64::max),
                steady_last: span
                    .last()
                    .is_some_and(|verdict| verdict.metrics[metric].steady),
                steady_share_pct: if span.is_empty() {
                    0.0
                } else {
                    steady as f64 * 100.0 / span.len() as f64
                },
                failed: span
                    .iter()
                    .filter(|verdict| {
                        verdict.metrics[metric].present && verdict.metrics[metric].value.is_none()
                    })
                    .count(),
            }
        })
        .collect()
}

/// A step line for a flag: high (`top`) while set, low (`bottom`) otherwise.
fn flag_steps(times: &[f64], flags: &[bool], bottom: f64, top: f64) -> Vec<(f64, f64)> {
    let level = |flag: bool| if flag { top } else { bottom };
    let mut points = Vec::with_capacity(flags.len() * 2);
    for (index, (&t, &flag)) in times.iter().zip(flags).enumerate() {
        if index > 0 && flags[index - 1] != flag {
            points.push((t, level(flags[index - 1])));
        }
        points.push((t, level(flag)));
    }
    points
}

type DrawResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Draw the chart of `verdicts` as SVG text.
pub fn svg(
    title: &str,
    verdicts: &[IntervalVerdict],
    steady_at: Option<usize>,
    summary_rows: &[SummaryRow],
) -> Result<String, Failure> {
    let mut text = String::new();
    draw(&mut text, title, verdicts, steady_at, summary_rows)
        .map_err(|error| Failure(format!("cannot draw the chart: {error}")))?;
    Ok(text)
}

fn draw(
    out: &mut String,
    title: &str,
    verdicts: &[IntervalVerdict],
    steady_at: Option<usize>,
    summary_rows: &[SummaryRow],
) -> DrawResult<()> {
    let present: Vec<usize> = (0..METRICS.len())
        .filter(|metric| {
            verdicts
                .iter()
                .any(|verdict| verdict.metrics[*metric].present)
        })
        .collect();
    let panels = present.len() + 1;
    let rows = panels.div_ceil(2);
    let (width, panel_height, table_line) = (1200u32, 200u32, 18u32);
    let table_height = 40 + table_line * (summary_rows.len() as u32 + 1);
    let height = 50 + panel_height * rows as u32 + table_height;
    let root = SVGBackend::with_string(out, (width, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (header, rest) = root.split_vertically(50);
    header.draw(&Text::new(
        title.to_string(),
        (16, 16),
        ("sans-serif", 20).into_font(),
    ))?;
    let (grid, table) = rest.split_vertically(panel_height * rows as u32);
    let areas = grid.split_evenly((rows, 2));
    let times: Vec<f64> = verdicts.iter().map(|verdict| verdict.t).collect();
    let t_max = times.last().copied().unwrap_or(1.0).max(1.0);
    let steady_t = steady_at.and_then(|index| times.get(index).copied());
    let colors = [&BLUE, &RED, &GREEN, &MAGENTA, &CYAN, &BLACK];
    for (slot, metric) in present
        .iter()
        .chain(std::iter::once(&usize::MAX))
        .enumerate()
    {
        let area = &areas[slot];
        let color = colors[slot % colors.len()];
        let (name, values, flags): (String, Vec<Option<f64>>, Vec<bool>) = if *metric == usize::MAX
        {
            (
                "system: steady metrics (required dashed)".into(),
                verdicts
                    .iter()
                    .map(|v| Some(v.steady_count as f64))
                    .collect(),
                verdicts.iter().map(|v| v.steady).collect(),
            )
        } else {
            (
                METRICS[*metric].to_string(),
                verdicts.iter().map(|v| v.metrics[*metric].value).collect(),
                verdicts.iter().map(|v| v.metrics[*metric].steady).collect(),
            )
        };
        let known: Vec<f64> = values.iter().flatten().copied().collect();
        let top = known.iter().copied().fold(0.0f64, f64::max).max(1e-9) * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(&name, ("sans-serif", 14))
            .margin(8)
            .x_label_area_size(22)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..t_max, 0.0..top)?;
        chart
            .configure_mesh()
            .light_line_style(WHITE.mix(0.0))
            .x_labels(6)
            .y_labels(4)
            .draw()?;
        // The value line, broken where the collection failed.
        let mut segment: Vec<(f64, f64)> = Vec::new();
        for (t, value) in times.iter().zip(&values) {
            match value {
                Some(value) => segment.push((*t, *value)),
                None => {
                    chart.draw_series(LineSeries::new(segment.drain(..), color.stroke_width(2)))?;
                }
            }
        }
        chart.draw_series(LineSeries::new(segment, color.stroke_width(2)))?;
        chart.draw_series(DashedLineSeries::new(
            flag_steps(&times, &flags, top * 0.02, top * 0.95),
            2,
            4,
            color.mix(0.8).stroke_width(2),
        ))?;
        if *metric == usize::MAX {
            let required: Vec<(f64, f64)> = verdicts
                .iter()
                .map(|verdict| (verdict.t, verdict.required as f64))
                .collect();
            chart.draw_series(DashedLineSeries::new(required, 8, 4, BLACK.stroke_width(1)))?;
        }
        if let Some(t) = steady_t {
            chart.draw_series(LineSeries::new([(t, 0.0), (t, top)], BLACK.mix(0.5)))?;
        }
    }
    draw_table(&table, summary_rows, steady_t, table_line)?;
    root.present()?;
    Ok(())
}

fn draw_table(
    area: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    rows: &[SummaryRow],
    steady_t: Option<f64>,
    line: u32,
) -> DrawResult<()> {
    let font = ("monospace", 13).into_font();
    let heading = match steady_t {
        Some(t) => format!("steady at t = {t:.0} s; figures over the measurement phase"),
        None => "never steady; figures over the whole run".into(),
    };
    area.draw(&Text::new(heading, (16, 8), font.clone()))?;
    let format = |value: Option<f64>| value.map_or("-".into(), |value| format!("{value:.3}"));
    // One text per cell at fixed x positions: SVG collapses runs of spaces.
    let columns: [(i32, &str); 7] = [
        (16, "metric"),
        (180, "mean"),
        (290, "min"),
        (400, "max"),
        (510, "steady"),
        (590, "steady%"),
        (670, "failed"),
    ];
    let mut cells: Vec<Vec<String>> =
        vec![columns.iter().map(|(_, name)| name.to_string()).collect()];
    cells.extend(rows.iter().map(|row| {
        vec![
            row.name.clone(),
            format(row.mean),
            format(row.min),
            format(row.max),
            if row.steady_last { "yes" } else { "no" }.into(),
            format!("{:.0}", row.steady_share_pct),
            row.failed.to_string(),
        ]
    }));
    for (line_index, line_cells) in cells.iter().enumerate() {
        let y = 8 + (line as i32) * (line_index as i32 + 1) + 6;
        for ((x, _), text) in columns.iter().zip(line_cells) {
            area.draw(&Text::new(text.clone(), (*x, y), font.clone()))?;
        }
    }
    Ok(())
}

/// Write the chart to `path`: SVG, or PNG through rsvg-convert.
pub fn write(path: &Path, svg_text: &str) -> Result<(), Failure> {
    let extension = path
        .extension()
        .and_then(|extension| extension.to_str())
        .map(str::to_ascii_lowercase);
    let io = |error: std::io::Error| Failure(format!("{}: {error}", path.display()));
    match extension.as_deref() {
        Some("svg") => std::fs::write(path, svg_text).map_err(io),
        Some("png") => {
            let svg_path = path.with_extension("svg.tmp");
            std::fs::write(&svg_path, svg_text).map_err(io)?;
            let result = std::process::Command::new("rsvg-convert")
                .args(["-b", "white", "-o"])
                .arg(path)
                .arg(&svg_path)
                .output();
            let _ = std::fs::remove_file(&svg_path);
            match result {
                Ok(output) if output.status.success() => Ok(()),
                Ok(output) => Err(Failure(format!(
                    "rsvg-convert could not write {}: {}",
                    path.display(),
                    String::from_utf8_lossy(&output.stderr).trim()
                ))),
                Err(_) => Err(Failure(format!(
                    "{}: PNG needs rsvg-convert (apt-get install librsvg2-bin); or ask for .svg",
                    path.display()
                ))),
            }
        }
        _ => Err(Failure(format!(
            "{}: the chart must end in .svg or .png",
            path.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steady::detector::{Detector, Sample, Thresholds};

    #[test]
    fn a_chart_has_a_panel_per_present_metric_and_the_table() {
        let mut detector = Detector::new(Thresholds {
            window: 3,
            ..Thresholds::default()
        });
        let verdicts: Vec<IntervalVerdict> = (0..8)
            .map(|index| {
                let mut samples = vec![Sample::Absent; 10];
                samples[7] = Sample::Value(3.0);
                samples[8] = if index == 2 {
                    Sample::Failed("x".into())
                } else {
                    Sample::Value(100.0 + index as f64)
                };
                detector.push(index as f64, samples, None)
            })
            .collect();
        let rows = summary(&verdicts, 3);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].name, "pool_mibps");
        assert_eq!(rows[1].mean, Some(105.0));
        let text = svg("test run", &verdicts, detector.steady_at(), &rows)
            .map_err(|e| e.0)
            .unwrap();
        assert!(text.starts_with("<svg"), "{}", &text[..40]);
        for expected in [
            "pool_kops",
            "pool_mibps",
            "system: steady metrics",
            "steady at t = 2 s",
        ] {
            assert!(text.contains(expected), "{expected}");
        }
        assert!(text.contains("stroke-dasharray") || text.matches("<polyline").count() >= 6);
        assert!(write(Path::new("/tmp/x.jpg"), &text)
            .unwrap_err()
            .0
            .contains(".svg or .png"));
    }

    #[test]
    fn flag_steps_rise_and_fall_at_the_interval() {
        let points = flag_steps(&[0.0, 1.0, 2.0], &[false, true, false], 0.0, 1.0);
        assert_eq!(
            points,
            [(0.0, 0.0), (1.0, 0.0), (1.0, 1.0), (2.0, 1.0), (2.0, 0.0)]
        );
    }
}
