//! The plots of `docs/benchmarks.md`, drawn from the CSV files the sections wrote.

use plotters::prelude::*;

use crate::out_dir;

/// One colour per contender, the same in every plot.
fn colour(contender: &str) -> RGBColor {
    match contender {
        "redisson-lock" => RGBColor(214, 39, 40),
        "raw" => RGBColor(31, 119, 180),
        "redisson-scripts" => RGBColor(23, 190, 207),
        "rslock" => RGBColor(44, 160, 44),
        "rlock" => RGBColor(148, 103, 189),
        "naive" => RGBColor(255, 127, 14),
        _ => RGBColor(127, 127, 127),
    }
}

/// The rows of `docs/benchmarks/<name>.csv` without its header; `None` when it is missing.
fn rows(name: &str) -> Option<Vec<Vec<String>>> {
    let text = std::fs::read_to_string(out_dir().join(format!("{name}.csv"))).ok()?;
    Some(
        (text.lines().skip(1))
            .filter(|l| !l.is_empty())
            .map(|l| l.split(',').map(str::to_owned).collect())
            .collect(),
    )
}

/// The contenders of `rows` (first column), in order of appearance.
fn contenders(rows: &[Vec<String>]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for row in rows {
        if !names.contains(&row[0]) {
            names.push(row[0].clone());
        }
    }
    names
}

pub fn all() {
    for (name, draw) in [
        ("handoff", handoff as fn(&[Vec<String>], &std::path::Path)),
        ("throughput", throughput),
        ("contention", commands),
    ] {
        match rows(name) {
            Some(rows) if !rows.is_empty() => {
                let file = out_dir().join(format!("{name}.svg"));
                draw(&rows, &file);
                println!("plot: {}", file.display());
            }
            _ => println!("plot: no {name}.csv yet"),
        }
    }
}

/// Handoff latency: the share of handoffs done within each time (a CDF), log time axis.
fn handoff(rows: &[Vec<String>], file: &std::path::Path) {
    let root = SVGBackend::new(file, (900, 520)).into_drawing_area();
    root.fill(&WHITE).unwrap();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Handoff to a waiter in another client (share of handoffs within a time)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((10f64..1_000_000f64).log_scale(), 0f64..1f64)
        .unwrap();
    chart
        .configure_mesh()
        .x_desc("time from release to the waiter holding the lock (µs, log scale)")
        .y_desc("share of handoffs")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()
        .unwrap();
    for name in contenders(rows) {
        let mut values: Vec<f64> = (rows.iter())
            .filter(|r| r[0] == name)
            .filter_map(|r| r[1].parse().ok())
            .collect();
        values.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let n = values.len() as f64;
        let points: Vec<(f64, f64)> = (values.iter().enumerate())
            .map(|(i, v)| (v.max(10.0), (i + 1) as f64 / n))
            .collect();
        let style = colour(&name).stroke_width(2);
        chart
            .draw_series(LineSeries::new(points, style))
            .unwrap()
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    }
    legend(&mut chart);
    root.present().unwrap();
}

/// Throughput against the number of tasks, log-log.
fn throughput(rows: &[Vec<String>], file: &std::path::Path) {
    let root = SVGBackend::new(file, (900, 520)).into_drawing_area();
    root.fill(&WHITE).unwrap();
    let max = (rows.iter())
        .filter_map(|r| r[2].parse::<f64>().ok())
        .fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Uncontended lock + unlock, each task its own lock, one client",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((1f64..1024f64).log_scale(), (100f64..max * 2.0).log_scale())
        .unwrap();
    chart
        .configure_mesh()
        .x_desc("tasks (log scale)")
        .y_desc("lock + unlock per second (log scale)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()
        .unwrap();
    for name in contenders(rows) {
        let points: Vec<(f64, f64)> = (rows.iter())
            .filter(|r| r[0] == name)
            .filter_map(|r| Some((r[1].parse().ok()?, r[2].parse().ok()?)))
            .collect();
        let style = colour(&name).stroke_width(2);
        chart
            .draw_series(LineSeries::new(points.clone(), style))
            .unwrap()
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        chart
            .draw_series(
                points
                    .iter()
                    .map(|p| Circle::new(*p, 3, colour(&name).filled())),
            )
            .unwrap();
    }
    legend(&mut chart);
    root.present().unwrap();
}

/// Commands the clients sent per acquisition under 16-way contention, one bar each.
fn commands(rows: &[Vec<String>], file: &std::path::Path) {
    let root = SVGBackend::new(file, (900, 520)).into_drawing_area();
    root.fill(&WHITE).unwrap();
    let bars: Vec<(String, f64)> = (rows.iter())
        .filter_map(|r| Some((r[0].clone(), r[6].parse().ok()?)))
        .collect();
    let max = bars.iter().map(|b| b.1).fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Commands sent per acquisition, 16 tasks contending on one lock",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..bars.len() as f64, 0f64..max * 1.15)
        .unwrap();
    let names: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(bars.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 0.01 && i < names.len() {
                names[i].clone()
            } else {
                String::new()
            }
        })
        .y_desc("commands sent per acquisition (MONITOR, script-run commands left out)")
        .draw()
        .unwrap();
    for (i, (name, value)) in bars.iter().enumerate() {
        let x = i as f64;
        chart
            .draw_series([Rectangle::new(
                [(x + 0.15, 0.0), (x + 0.85, *value)],
                colour(name).filled(),
            )])
            .unwrap();
        chart
            .draw_series([Text::new(
                format!("{value:.1}"),
                (x + 0.38, value + max * 0.03),
                ("sans-serif", 14),
            )])
            .unwrap();
    }
    root.present().unwrap();
}

fn legend<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
) {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .unwrap();
}
