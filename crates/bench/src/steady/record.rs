//! The recorded series: the JSON a run writes and the files a replay reads
//! back (that JSON, or CSV).
//!
//! JSON, at least: `{"interval_s": 15, "window": 20, "intervals": [{"t": 0.0, "steady": false,
//! "metrics": {"pool_kops": {"value": 1.2, "steady": false}, ...}}, ...], "steady_at": 27}`.
//! Per interval there is also the steady count, the present count, how many were required,
//! the phase (`settling` or `measuring`), and the gate (`ads_cached_pct`, passed, flag); per
//! metric its window range and line excursion as % of the mean, and a flag when its
//! collection failed. A metric absent by configuration is left out of `metrics`; a metric
//! whose collection failed has `"value": null`. `steady_at` is the first steady interval's
//! index or `null`.
//!
//! CSV: a header line naming a time column (`t` or `time`) and one column per metric (the
//! names of `detector::METRICS`, and optionally `ads_cached_pct`), then one line per interval.
//! A column that is not there is absent by configuration; an empty cell, `-` or `null` is a
//! failed collection. Anything else that is not a number is an error naming its line.

use serde_json::{json, Map, Value};

use super::detector::{IntervalVerdict, Sample, ADS_CACHED, METRICS};

/// One interval's JSON (see the module comment).
pub fn interval_json(verdict: &IntervalVerdict, phase: &str) -> Value {
    let metrics: Map<String, Value> = METRICS
        .iter()
        .zip(&verdict.metrics)
        .filter(|(_, metric)| metric.present)
        .map(|(name, metric)| {
            (
                name.to_string(),
                serde_json::to_value(metric).expect("metric verdicts serialize"),
            )
        })
        .collect();
    json!({
        "t": verdict.t,
        "steady": verdict.steady,
        "steady_count": verdict.steady_count,
        "present": verdict.present_count,
        "required": verdict.required,
        "phase": phase,
        "gate": serde_json::to_value(&verdict.gate).expect("gate verdicts serialize"),
        "metrics": metrics,
    })
}

/// A series read back for replay.
#[derive(Debug, Default, PartialEq)]
pub struct Series {
    /// The recording's interval, when the file says it.
    pub interval_s: Option<f64>,
    /// The recording's window, when the file says it.
    pub window: Option<usize>,
    pub intervals: Vec<RecordedInterval>,
}

#[derive(Debug, PartialEq)]
pub struct RecordedInterval {
    pub t: f64,
    /// In [`METRICS`] order.
    pub samples: Vec<Sample>,
    pub ads_cached_pct: Option<f64>,
}

/// Read a recorded series: JSON when the text starts with `{`, CSV otherwise.
pub fn parse_series(text: &str) -> Result<Series, String> {
    if text.trim_start().starts_with('{') {
        parse_json(text)
    } else {
        parse_csv(text)
    }
}

fn parse_json(text: &str) -> Result<Series, String> {
    let record: Value =
        serde_json::from_str(text).map_err(|error| format!("not valid JSON: {error}"))?;
    let intervals = record["intervals"]
        .as_array()
        .ok_or("the JSON has no \"intervals\" array (is it the record of tarn bench run?)")?;
    let mut series = Series {
        interval_s: record["interval_s"].as_f64(),
        window: record["window"].as_u64().map(|window| window as usize),
        intervals: Vec::with_capacity(intervals.len()),
    };
    for (index, interval) in intervals.iter().enumerate() {
        let metrics = interval["metrics"]
            .as_object()
            .ok_or_else(|| format!("interval {index} has no \"metrics\" object"))?;
        if let Some(unknown) = metrics
            .keys()
            .find(|name| !METRICS.contains(&name.as_str()))
        {
            return Err(format!(
                "interval {index} names an unknown metric {unknown:?} (known: {})",
                METRICS.join(", ")
            ));
        }
        let samples = METRICS
            .iter()
            .map(|name| match metrics.get(*name) {
                None => Ok(Sample::Absent),
                Some(metric) => match &metric["value"] {
                    Value::Null => Ok(Sample::Failed(metric["flag"].as_str().map_or(
                        "no value recorded".into(),
                        |flag| {
                            flag.trim_start_matches("collection failed (")
                                .split(')')
                                .next()
                                .unwrap_or(flag)
                                .to_string()
                        },
                    ))),
                    Value::Number(number) => Ok(Sample::Value(number.as_f64().unwrap_or(0.0))),
                    other => Err(format!(
                        "interval {index}: {name} has a value that is no number: {other}"
                    )),
                },
            })
            .collect::<Result<Vec<Sample>, String>>()?;
        let t = interval["t"]
            .as_f64()
            .ok_or_else(|| format!("interval {index} has no numeric \"t\""))?;
        let gate = &interval["gate"][ADS_CACHED];
        let ads_cached_pct = gate.as_f64().or_else(|| interval[ADS_CACHED].as_f64());
        series.intervals.push(RecordedInterval {
            t,
            samples,
            ads_cached_pct,
        });
    }
    Ok(series)
}

fn parse_csv(text: &str) -> Result<Series, String> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty());
    let (_, header) = lines.next().ok_or("the file is empty")?;
    let columns: Vec<&str> = header
        .split(',')
        .map(|name| name.trim().trim_matches('"'))
        .collect();
    let time_column = columns
        .iter()
        .position(|name| *name == "t" || *name == "time")
        .ok_or("the CSV header has no time column (t or time)")?;
    let mut metric_columns = vec![None; METRICS.len()];
    let mut ads_column = None;
    for (column, name) in columns.iter().enumerate() {
        if column == time_column {
            continue;
        }
        if *name == ADS_CACHED {
            ads_column = Some(column);
        } else if let Some(metric) = METRICS.iter().position(|known| known == name) {
            metric_columns[metric] = Some(column);
        } else {
            return Err(format!(
                "the CSV header names an unknown column {name:?} (known: t, {}, {ADS_CACHED})",
                METRICS.join(", ")
            ));
        }
    }
    let mut series = Series::default();
    for (line_index, line) in lines {
        let line_number = line_index + 1;
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        if cells.len() != columns.len() {
            return Err(format!(
                "line {line_number} has {} cells, the header {}",
                cells.len(),
                columns.len()
            ));
        }
        let number = |column: usize| -> Result<Option<f64>, String> {
            match cells[column] {
                "" | "-" | "null" | "NaN" | "nan" => Ok(None),
                text => text.parse::<f64>().map(Some).map_err(|_| {
                    format!(
                        "line {line_number}, column {}: {text:?} is no number",
                        columns[column]
                    )
                }),
            }
        };
        let t = number(time_column)?.ok_or_else(|| format!("line {line_number} has no time"))?;
        let samples = metric_columns
            .iter()
            .map(|column| match column {
                None => Ok(Sample::Absent),
                Some(column) => Ok(number(*column)?
                    .map_or_else(|| Sample::Failed("no value recorded".into()), Sample::Value)),
            })
            .collect::<Result<Vec<Sample>, String>>()?;
        let ads_cached_pct = match ads_column {
            Some(column) => number(column)?,
            None => None,
        };
        series.intervals.push(RecordedInterval {
            t,
            samples,
            ads_cached_pct,
        });
    }
    if series.intervals.is_empty() {
        return Err("the CSV has a header but no intervals".into());
    }
    Ok(series)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steady::detector::{Detector, Thresholds};

    #[test]
    fn a_record_replays_to_the_same_verdicts() {
        let mut detector = Detector::new(Thresholds {
            window: 3,
            ..Thresholds::default()
        });
        let mut intervals = Vec::new();
        let mut inputs = Vec::new();
        for index in 0..6 {
            let mut samples = vec![Sample::Absent; 10];
            samples[0] = Sample::Value(90.0 + index as f64 * 0.5);
            samples[7] = if index == 4 {
                Sample::Failed("timeout".into())
            } else {
                Sample::Value(2.0)
            };
            samples[9] = Sample::Value(0.25);
            inputs.push(samples.clone());
            let verdict = detector.push(index as f64, samples, Some(90.0));
            intervals.push(interval_json(&verdict, "settling"));
        }
        let record = json!({"interval_s": 1, "window": 3, "intervals": intervals,
                            "steady_at": detector.steady_at()});
        let series = parse_series(&record.to_string()).unwrap();
        assert_eq!(series.interval_s, Some(1.0));
        assert_eq!(series.window, Some(3));
        let replayed: Vec<Vec<Sample>> =
            series.intervals.iter().map(|i| i.samples.clone()).collect();
        assert_eq!(replayed, inputs);
        assert_eq!(series.intervals[2].ads_cached_pct, Some(90.0));
    }

    #[test]
    fn csv_columns_name_metrics_and_empty_cells_are_failed() {
        let text = "t,pool_kops,arc_hit_pct,ads_cached_pct\n0,1.5,99\n";
        assert!(parse_series(text)
            .unwrap_err()
            .contains("line 2 has 3 cells"));
        let text = "t,pool_kops,arc_hit_pct,ads_cached_pct\n0,1.5,99,90\n15,,98,91\n";
        let series = parse_series(text).unwrap();
        assert_eq!(series.intervals.len(), 2);
        let second = &series.intervals[1];
        assert_eq!(second.t, 15.0);
        assert_eq!(
            second.samples[7],
            Sample::Failed("no value recorded".into())
        );
        assert_eq!(second.samples[3], Sample::Value(98.0));
        assert_eq!(second.samples[0], Sample::Absent);
        assert_eq!(second.ads_cached_pct, Some(91.0));
    }

    #[test]
    fn bad_files_are_clear_errors() {
        for (text, expect) in [
            ("", "empty"),
            ("pool_kops\n1\n", "no time column"),
            ("t,pool_kopz\n1,2\n", "unknown column \"pool_kopz\""),
            (
                "t,pool_kops\n1,fast\n",
                "line 2, column pool_kops: \"fast\" is no number",
            ),
            ("t,pool_kops\n", "no intervals"),
            ("{\"intervals\": 3}", "no \"intervals\" array"),
            ("{not json", "not valid JSON"),
            (
                "{\"intervals\": [{\"t\": 0, \"metrics\": {\"kops\": {}}}]}",
                "unknown metric",
            ),
            ("{\"intervals\": [{\"metrics\": {}}]}", "no numeric \"t\""),
            (
                "{\"intervals\": [{\"t\": 0, \"metrics\": {\"pool_kops\": {\"value\": \"x\"}}}]}",
                "no number",
            ),
        ] {
            let error = parse_series(text).unwrap_err();
            assert!(error.contains(expect), "{text:?}: {error}");
        }
    }
}
