//! Plots of a comparison, each written as SVG and PNG with `plotters`: utilisation spread
//! over time per profile, a per-node CPU heatmap per profile, GPU fragmentation over time,
//! and the balance efficiency H(i) per node for small clusters.
//!
//! PNG text is rendered with plotters' `ab_glyph` backend from DejaVu Sans embedded by the
//! `dejavu` crate, so no system fonts are needed; SVG text is plain `<text>` elements.
use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::FontStyle;
use thiserror::Error;

use super::measure::{Heatmap, RESOURCES, RunSeries};
use super::report::Comparison;

/// Errors writing plots.
#[derive(Debug, Error)]
pub enum PlotError {
    /// Drawing or writing a file failed.
    #[error("plot {path}: {message}")]
    Draw {
        /// The file.
        path: String,
        /// What failed.
        message: String,
    },
}

/// Most heatmap cells drawn in an SVG (keeps files well under 1 MiB).
pub const SVG_MAX_CELLS: usize = 3000;

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

static FONT: Once = Once::new();

fn register_font() {
    FONT.call_once(|| {
        // DejaVu Sans is a valid TrueType font; were registration to fail, PNG text would be
        // missing but the plot still drawn.
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            dejavu::sans::regular(),
        );
    });
}

type DrawResult = Result<(), String>;

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// A figure drawable on any backend.
trait Figure {
    fn size(&self) -> (u32, u32);
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, svg: bool) -> DrawResult;
}

/// Writes `name.svg` and `name.png` in `dir`.
fn write_figure<F: Figure>(dir: &Path, name: &str, fig: &F) -> Result<Vec<PathBuf>, PlotError> {
    register_font();
    let svg = dir.join(format!("{name}.svg"));
    let png = dir.join(format!("{name}.png"));
    let fail = |p: &Path, message: String| PlotError::Draw {
        path: p.display().to_string(),
        message,
    };
    {
        let root = SVGBackend::new(&svg, fig.size()).into_drawing_area();
        root.fill(&WHITE).map_err(|e| fail(&svg, err(e)))?;
        fig.draw(&root, true).map_err(|m| fail(&svg, m))?;
        root.present().map_err(|e| fail(&svg, err(e)))?;
    }
    {
        let root = BitMapBackend::new(&png, fig.size()).into_drawing_area();
        root.fill(&WHITE).map_err(|e| fail(&png, err(e)))?;
        fig.draw(&root, false).map_err(|m| fail(&png, m))?;
        root.present().map_err(|e| fail(&png, err(e)))?;
    }
    Ok(vec![svg, png])
}

/// A panel's chart over minutes `0..t_end` and values up to the highest `y_peak` (10 %
/// headroom; 1 when there is nothing above 0), its mesh drawn: what every line panel shares.
fn minutes_chart<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, Shift>,
    caption: &str,
    t_end: f64,
    y_peak: f64,
) -> Result<ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>, String> {
    let y_max = if y_peak > 0.0 { y_peak * 1.1 } else { 1.0 };
    let mut chart = ChartBuilder::on(area)
        .margin(10)
        .caption(caption, ("sans-serif", 16))
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..t_end, 0.0..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("minutes")
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(err)?;
    Ok(chart)
}

/// One panel: its caption, the series it plots and a scale factor.
type Panel = (String, fn(&RunSeries) -> &[f64], f64);

/// Several line panels over time, one line per profile.
struct Lines<'a> {
    title: String,
    profiles: Vec<&'a str>,
    series: &'a [RunSeries],
    panels: Vec<Panel>,
    cols: usize,
}

impl Figure for Lines<'_> {
    fn size(&self) -> (u32, u32) {
        let rows = self.panels.len().div_ceil(self.cols) as u32;
        (560 * self.cols as u32, 80 + 340 * rows)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, _svg: bool) -> DrawResult {
        let root = root.titled(&self.title, ("sans-serif", 22)).map_err(err)?;
        let rows = self.panels.len().div_ceil(self.cols);
        let areas = root.split_evenly((rows, self.cols));
        let t_end = self
            .series
            .iter()
            .filter_map(|s| s.t.last())
            .fold(1.0f64, |a, b| a.max(*b))
            / 60.0;
        for (p, (label, get, scale)) in self.panels.iter().enumerate() {
            let y_peak = self
                .series
                .iter()
                .flat_map(|s| get(s).iter())
                .fold(0.0f64, |a, b| a.max(*b))
                * scale;
            let mut chart = minutes_chart(&areas[p], label, t_end, y_peak)?;
            for (i, s) in self.series.iter().enumerate() {
                let c = color(i);
                let ys = get(s);
                let pts = s.t.iter().zip(ys).map(|(t, y)| (t / 60.0, y * scale));
                let drawn = chart
                    .draw_series(LineSeries::new(pts, c.stroke_width(1)))
                    .map_err(err)?;
                if p == 0 {
                    drawn.label(self.profiles[i]).legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                    });
                }
            }
            if p == 0 {
                chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .position(SeriesLabelPosition::UpperLeft)
                    .draw()
                    .map_err(err)?;
            }
        }
        Ok(())
    }
}

/// Per-node CPU utilisation over time.
struct Heat<'a> {
    title: String,
    map: &'a Heatmap,
    columns: usize,
}

/// Blue (idle) → yellow → red (saturated).
fn heat_color(v: f64) -> RGBColor {
    let v = v.clamp(0.0, 1.0);
    let lerp = |a: u8, b: u8, t: f64| (f64::from(a) + (f64::from(b) - f64::from(a)) * t) as u8;
    if v < 0.5 {
        let t = v / 0.5;
        RGBColor(lerp(49, 255, t), lerp(54, 237, t), lerp(149, 160, t))
    } else {
        let t = (v - 0.5) / 0.5;
        RGBColor(lerp(255, 165, t), lerp(237, 0, t), lerp(160, 38, t))
    }
}

impl Figure for Heat<'_> {
    fn size(&self) -> (u32, u32) {
        (
            1000,
            (160 + 6 * self.map.nodes.len() as u32).clamp(300, 900),
        )
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, svg: bool) -> DrawResult {
        let (main, legend) = root.split_horizontally(870);
        let n = self.map.nodes.len();
        let t_end = (self.map.duration_s / 60.0).max(1.0);
        let mut chart = ChartBuilder::on(&main)
            .margin(10)
            .caption(&self.title, ("sans-serif", 18))
            .x_label_area_size(35)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..t_end, -0.5..n as f64 - 0.5)
            .map_err(err)?;
        let names = self.map.nodes.clone();
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("minutes")
            .y_desc("node")
            .y_labels(n.min(20))
            .y_label_formatter(&|y| {
                let i = y.round();
                if (y - i).abs() < 1e-6 && i >= 0.0 {
                    names.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .draw()
            .map_err(err)?;
        let src = self.map.columns.max(1);
        // SVGs get at most `columns` cells per row; PNGs every bucket.
        let cols = if svg { self.columns.clamp(1, src) } else { src };
        let width = t_end / cols as f64;
        let cells = (0..n).flat_map(|row| {
            (0..cols).map(move |c| {
                let lo = c * src / cols;
                let hi = ((c + 1) * src / cols).max(lo + 1);
                let vals = &self.map.values[row * src + lo..row * src + hi.min(src)];
                let v = vals.iter().map(|x| f64::from(*x)).sum::<f64>() / vals.len().max(1) as f64;
                Rectangle::new(
                    [
                        (c as f64 * width, row as f64 - 0.5),
                        ((c + 1) as f64 * width, row as f64 + 0.5),
                    ],
                    heat_color(v).filled(),
                )
            })
        });
        chart.draw_series(cells).map_err(err)?;
        // Colour bar.
        let mut bar = ChartBuilder::on(&legend)
            .margin_top(40)
            .margin_bottom(45)
            .margin_right(40)
            .y_label_area_size(45)
            .build_cartesian_2d(0.0..1.0, 0.0..100.0)
            .map_err(err)?;
        bar.configure_mesh()
            .disable_mesh()
            .disable_x_axis()
            .y_labels(6)
            .y_label_style(("sans-serif", 12))
            .draw()
            .map_err(err)?;
        bar.draw_series((0..50).map(|k| {
            let v = k as f64 / 50.0;
            Rectangle::new(
                [(0.0, v * 100.0), (1.0, (v + 0.02) * 100.0)],
                heat_color(v).filled(),
            )
        }))
        .map_err(err)?;
        Ok(())
    }
}

/// Grouped bars of H(i) per node, one bar per profile.
struct Balance<'a> {
    title: String,
    cmp: &'a Comparison,
}

impl Figure for Balance<'_> {
    fn size(&self) -> (u32, u32) {
        (900, 500)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, _svg: bool) -> DrawResult {
        let results = &self.cmp.results;
        let Some(first) = results.first() else {
            return Ok(());
        };
        let n = first.per_node.len();
        let k = results.len();
        let y_max = results
            .iter()
            .flat_map(|r| r.per_node.iter().filter_map(|x| x.h))
            .fold(1.5f64, f64::max)
            * 1.1;
        let names: Vec<String> = first.per_node.iter().map(|x| x.name.clone()).collect();
        let mut chart = ChartBuilder::on(root)
            .margin(15)
            .caption(&self.title, ("sans-serif", 18))
            .x_label_area_size(35)
            .y_label_area_size(50)
            .build_cartesian_2d(-0.5..n as f64 - 0.5, 0.0..y_max)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    names.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc("H(i)")
            .draw()
            .map_err(err)?;
        let bw = 0.8 / k as f64;
        for (j, r) in results.iter().enumerate() {
            let c = color(j);
            chart
                .draw_series(r.per_node.iter().enumerate().map(|(i, x)| {
                    let x0 = i as f64 - 0.4 + j as f64 * bw;
                    Rectangle::new([(x0, 0.0), (x0 + bw * 0.9, x.h.unwrap_or(0.0))], c.filled())
                }))
                .map_err(err)?
                .label(r.profile.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
        chart
            .draw_series(LineSeries::new(
                [(-0.5, 1.0), (n as f64 - 0.5, 1.0)],
                BLACK.stroke_width(1),
            ))
            .map_err(err)?;
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(err)?;
        Ok(())
    }
}

/// A named line: its legend and its values at the figure's times.
pub type NamedLine = (String, Vec<f64>);

/// Line panels over time with their own named lines (the autoscaling comparison's
/// timelines): `t` in seconds, each panel a caption and its lines.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    /// Figure title.
    pub title: String,
    /// Sample times, seconds.
    pub t: Vec<f64>,
    /// Panels: caption, and (line name, values at `t`).
    pub panels: Vec<(String, Vec<NamedLine>)>,
}

impl Figure for Timeline {
    fn size(&self) -> (u32, u32) {
        (1100, 80 + 300 * self.panels.len() as u32)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>, _svg: bool) -> DrawResult {
        let root = root.titled(&self.title, ("sans-serif", 22)).map_err(err)?;
        let areas = root.split_evenly((self.panels.len().max(1), 1));
        let t_end = self.t.last().copied().unwrap_or(1.0).max(1.0) / 60.0;
        for (area, (caption, lines)) in areas.iter().zip(&self.panels) {
            let y_peak = lines
                .iter()
                .flat_map(|(_, ys)| ys.iter())
                .fold(0.0f64, |a, b| a.max(*b));
            let mut chart = minutes_chart(area, caption, t_end, y_peak)?;
            for (i, (name, ys)) in lines.iter().enumerate() {
                let c = color(i);
                let pts = self.t.iter().zip(ys).map(|(t, y)| (t / 60.0, *y));
                chart
                    .draw_series(LineSeries::new(pts, c.stroke_width(1)))
                    .map_err(err)?
                    .label(name.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                    });
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(err)?;
        }
        Ok(())
    }
}

/// Writes `name.svg` and `name.png` of `timeline` into `dir`.
pub fn write_timeline(
    dir: &Path,
    name: &str,
    timeline: &Timeline,
) -> Result<Vec<PathBuf>, PlotError> {
    write_figure(dir, name, timeline)
}

/// A file-name-safe version of a profile name.
pub fn slug(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Writes every plot of `cmp` (with the per-profile `heatmaps`) into `dir`; returns the
/// files written.
pub fn write_all(
    cmp: &Comparison,
    heatmaps: &[Heatmap],
    dir: &Path,
) -> Result<Vec<PathBuf>, PlotError> {
    let mut files = Vec::new();
    let profiles: Vec<&str> = cmp.results.iter().map(|r| r.profile.as_str()).collect();
    let pct = 100.0;
    let mut panels: Vec<Panel> = vec![
        (
            format!("{} utilisation stddev across nodes (%)", RESOURCES[0]),
            |s| &s.std[0],
            pct,
        ),
        (
            format!("{} utilisation stddev across nodes (%)", RESOURCES[1]),
            |s| &s.std[1],
            pct,
        ),
        (
            format!("{} utilisation stddev across nodes (%)", RESOURCES[2]),
            |s| &s.std[2],
            pct,
        ),
        (
            format!("{} utilisation stddev across nodes (%)", RESOURCES[3]),
            |s| &s.std[3],
            pct,
        ),
        (
            "hottest node's CPU utilisation (%)".into(),
            |s| &s.cpu_max,
            pct,
        ),
        ("mean CPU utilisation (%)".into(), |s| &s.mean[0], pct),
    ];
    if cmp.results.iter().any(|r| r.gpu.is_some()) {
        panels.truncate(2);
    }
    files.extend(write_figure(
        dir,
        "spread",
        &Lines {
            title: format!("{}: utilisation spread over time", cmp.scenario),
            profiles: profiles.clone(),
            series: &cmp.series,
            panels,
            cols: 2,
        },
    )?);
    for (r, map) in cmp.results.iter().zip(heatmaps) {
        let cols = (SVG_MAX_CELLS / map.nodes.len().max(1)).max(1);
        files.extend(write_figure(
            dir,
            &format!("heatmap-{}", slug(&r.profile)),
            &Heat {
                title: format!("{}: CPU utilisation per node, {}", cmp.scenario, r.profile),
                map,
                columns: cols,
            },
        )?);
    }
    if cmp.results.iter().any(|r| r.gpu.is_some()) {
        files.extend(write_figure(
            dir,
            "gpu-fragmentation",
            &Lines {
                title: format!("{}: GPU fragmentation over time", cmp.scenario),
                profiles: profiles.clone(),
                series: &cmp.series,
                panels: vec![
                    (
                        "GPU pods pending although enough GPUs are free cluster-wide".into(),
                        |s| &s.fragmented,
                        1.0,
                    ),
                    ("stranded GPUs".into(), |s| &s.stranded, 1.0),
                    ("GPU pods pending".into(), |s| &s.gpu_pending, 1.0),
                    (
                        "GPU utilisation stddev across nodes (%)".into(),
                        |s| &s.std[4],
                        pct,
                    ),
                ],
                cols: 2,
            },
        )?);
    }
    if cmp.results.first().is_some_and(|r| r.nodes <= 12) {
        files.extend(write_figure(
            dir,
            "balance-h",
            &Balance {
                title: format!(
                    "{}: balance efficiency H(i) per node (1 = load proportional to capacity)",
                    cmp.scenario
                ),
                cmp,
            },
        )?);
    }
    Ok(files)
}
