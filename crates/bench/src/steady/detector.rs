//! The steady-state detector: array-level steady state over the ten metrics of a ZFS server
//! (the SDC 2020 talk), each judged by the SNIA Performance Test Specification's rule.
//!
//! Input, one interval at a time: the time, a [`Sample`] per metric in [`METRICS`] order, and
//! `ads_cached_pct` (the share of the active data set the caches can hold; `None` when the
//! active data set's size is not known). Output, per interval, an [`IntervalVerdict`]: each
//! metric's value and verdict, the count of steady metrics, the gate, and the system's verdict.
//!
//! Rules (every number is a field of [`Thresholds`]; the defaults are the talk's):
//! - A metric is judged once the window of the last `window` intervals is full. It is steady
//!   when the range of its values in the window (max - min) is at most `range_pct`% of their
//!   mean, and the excursion of their least-squares line across the window (|slope| times the
//!   span of the window's times) is at most `slope_pct`% of that mean. Both comparisons are
//!   `<=`; a window of zeros is steady. Intervals whose collection failed are left out of the
//!   fit (the line is fitted over the interval indices that have values).
//! - A metric absent by configuration ([`Sample::Absent`]: no L2ARC, a column missing from a
//!   replay file) is not counted at all.
//! - A metric whose collection failed ([`Sample::Failed`]) counts as steady while it has failed
//!   for at most `failed_steady_intervals` intervals in a row ("do no harm"), and is never
//!   counted steady after that; either way its verdict carries a flag saying so.
//! - The system is steady when the window is full, at least `required` of the present metrics
//!   are steady (`min_steady`, or `min_steady_without_l2arc` when no L2ARC metric is present;
//!   never more than are present), and the gate passes: `ads_cached_pct` >= `ads_cached_min_pct`,
//!   or the caches are full (`arc_size_pct` >= `cache_full_pct` and, with an L2ARC,
//!   `l2_size_pct` too). When `ads_cached_pct` cannot be known the gate passes, flagged.
//!
//! Cost: each interval fits one line per metric over at most `window` points, O(10 window).
//! The detector is pure: no clock, no I/O, so a live run and a replay decide the same way.

use serde::Serialize;

/// The ten metrics, in the order of every output and of the talk.
pub const METRICS: [&str; 10] = [
    "arc_size_pct",
    "arc_mru_pct",
    "arc_data_pct",
    "arc_hit_pct",
    "l2_size_pct",
    "l2_write_pct",
    "l2_hit_pct",
    "pool_kops",
    "pool_mibps",
    "pool_lat_ms",
];

/// The gate's name in outputs and replay files (not one of the ten).
pub const ADS_CACHED: &str = "ads_cached_pct";

const ARC_SIZE: usize = 0;
const L2_SIZE: usize = 4;

/// Whether a metric (by index in [`METRICS`]) describes the L2ARC.
pub fn is_l2arc(metric: usize) -> bool {
    METRICS[metric].starts_with("l2_")
}

/// One metric's measurement in one interval.
#[derive(Clone, Debug, PartialEq)]
pub enum Sample {
    Value(f64),
    /// The collection failed; the reason goes into the flag.
    Failed(String),
    /// Not measured by configuration: it leaves the count.
    Absent,
}

/// Every threshold of the detector (see the module comment).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Thresholds {
    pub window: usize,
    pub range_pct: f64,
    pub slope_pct: f64,
    pub min_steady: usize,
    pub min_steady_without_l2arc: usize,
    pub ads_cached_min_pct: f64,
    pub cache_full_pct: f64,
    pub failed_steady_intervals: usize,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            window: 20,
            range_pct: 20.0,
            slope_pct: 10.0,
            min_steady: 7,
            min_steady_without_l2arc: 4,
            ads_cached_min_pct: 85.0,
            cache_full_pct: 80.0,
            failed_steady_intervals: 2,
        }
    }
}

/// One metric's verdict in one interval.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MetricVerdict {
    /// `None` when absent or failed.
    pub value: Option<f64>,
    pub steady: bool,
    #[serde(skip)]
    pub present: bool,
    /// Window figures once the window is full: range and line excursion as % of the mean.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range_pct: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub excursion_pct: Option<f64>,
    /// Why the verdict is not a plain measurement (a failed collection).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flag: Option<String>,
}

/// The `ads_cached_pct` gate in one interval.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GateVerdict {
    pub ads_cached_pct: Option<f64>,
    pub passed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flag: Option<String>,
}

/// The system's verdict in one interval.
#[derive(Clone, Debug, PartialEq)]
pub struct IntervalVerdict {
    pub t: f64,
    pub steady: bool,
    pub window_full: bool,
    pub steady_count: usize,
    pub present_count: usize,
    pub required: usize,
    /// In [`METRICS`] order.
    pub metrics: Vec<MetricVerdict>,
    pub gate: GateVerdict,
}

/// The detector's state: every interval seen so far.
pub struct Detector {
    thresholds: Thresholds,
    samples: Vec<Vec<Sample>>,
    steady_at: Option<usize>,
}

impl Detector {
    /// A detector with `thresholds`; the window must be at least 2 intervals (a line needs two
    /// points), which the command line checks.
    pub fn new(thresholds: Thresholds) -> Detector {
        assert!(thresholds.window >= 2, "window of {}", thresholds.window);
        Detector {
            thresholds,
            samples: Vec::new(),
            steady_at: None,
        }
    }

    /// Index of the first steady interval, if any.
    pub fn steady_at(&self) -> Option<usize> {
        self.steady_at
    }

    /// Judge the next interval. `samples` holds one [`Sample`] per metric in [`METRICS`]
    /// order (missing trailing ones are absent).
    pub fn push(
        &mut self,
        t: f64,
        mut samples: Vec<Sample>,
        ads_cached_pct: Option<f64>,
    ) -> IntervalVerdict {
        samples.resize(METRICS.len(), Sample::Absent);
        samples.truncate(METRICS.len());
        self.samples.push(samples);
        let index = self.samples.len() - 1;
        let window_full = self.samples.len() >= self.thresholds.window;
        let metrics: Vec<MetricVerdict> = (0..METRICS.len())
            .map(|metric| self.judge(metric, window_full))
            .collect();
        let present_count = metrics.iter().filter(|verdict| verdict.present).count();
        let steady_count = metrics.iter().filter(|verdict| verdict.steady).count();
        let l2arc_present =
            (0..METRICS.len()).any(|metric| is_l2arc(metric) && metrics[metric].present);
        let required = if l2arc_present {
            self.thresholds.min_steady
        } else {
            self.thresholds.min_steady_without_l2arc
        }
        .min(present_count);
        let gate = self.gate(&metrics, l2arc_present, ads_cached_pct);
        let steady = window_full && present_count > 0 && steady_count >= required && gate.passed;
        if steady && self.steady_at.is_none() {
            self.steady_at = Some(index);
        }
        IntervalVerdict {
            t,
            steady,
            window_full,
            steady_count,
            present_count,
            required,
            metrics,
            gate,
        }
    }

    fn judge(&self, metric: usize, window_full: bool) -> MetricVerdict {
        let now = self.samples.len() - 1;
        let verdict = |value, steady, flag| MetricVerdict {
            value,
            steady,
            present: true,
            range_pct: None,
            excursion_pct: None,
            flag,
        };
        match &self.samples[now][metric] {
            Sample::Absent => MetricVerdict {
                present: false,
                ..verdict(None, false, None)
            },
            Sample::Failed(reason) => {
                let failed_run = self.samples[..=now]
                    .iter()
                    .rev()
                    .take_while(|samples| matches!(samples[metric], Sample::Failed(_)))
                    .count();
                let allowed = self.thresholds.failed_steady_intervals;
                let steady = failed_run <= allowed;
                let flag = if steady {
                    format!(
                        "collection failed ({reason}); counted steady ({failed_run} of at most \
                         {allowed} intervals)"
                    )
                } else {
                    format!(
                        "collection failed ({reason}) {failed_run} intervals in a row; not \
                         steady"
                    )
                };
                verdict(None, steady, Some(flag))
            }
            Sample::Value(value) => {
                if !window_full {
                    return verdict(Some(*value), false, None);
                }
                let first = now + 1 - self.thresholds.window;
                let points: Vec<(f64, f64)> = (first..=now)
                    .filter_map(|index| match self.samples[index][metric] {
                        Sample::Value(value) => Some(((index - first) as f64, value)),
                        _ => None,
                    })
                    .collect();
                let Some(fit) = WindowFit::of(&points) else {
                    return verdict(
                        Some(*value),
                        false,
                        Some("fewer than two values in the window".into()),
                    );
                };
                let steady = fit.range <= self.thresholds.range_pct / 100.0 * fit.mean.abs()
                    && fit.excursion <= self.thresholds.slope_pct / 100.0 * fit.mean.abs();
                let share = |amount: f64| {
                    if fit.mean == 0.0 {
                        if amount == 0.0 {
                            0.0
                        } else {
                            f64::INFINITY
                        }
                    } else {
                        amount / fit.mean.abs() * 100.0
                    }
                };
                MetricVerdict {
                    range_pct: Some(share(fit.range)).filter(|share| share.is_finite()),
                    excursion_pct: Some(share(fit.excursion)).filter(|share| share.is_finite()),
                    ..verdict(Some(*value), steady, None)
                }
            }
        }
    }

    fn gate(
        &self,
        metrics: &[MetricVerdict],
        l2arc_present: bool,
        ads_cached_pct: Option<f64>,
    ) -> GateVerdict {
        let Some(cached) = ads_cached_pct else {
            return GateVerdict {
                ads_cached_pct: None,
                passed: true,
                flag: Some("active data set size unknown: the gate passes".into()),
            };
        };
        let full = |metric: usize| {
            metrics[metric]
                .value
                .is_some_and(|value| value >= self.thresholds.cache_full_pct)
        };
        let caches_full = full(ARC_SIZE) && (!l2arc_present || full(L2_SIZE));
        GateVerdict {
            ads_cached_pct: Some(cached),
            passed: cached >= self.thresholds.ads_cached_min_pct || caches_full,
            flag: None,
        }
    }
}

/// Mean, range and least-squares excursion of one window's points (x, y).
struct WindowFit {
    mean: f64,
    range: f64,
    excursion: f64,
}

impl WindowFit {
    fn of(points: &[(f64, f64)]) -> Option<WindowFit> {
        if points.len() < 2 {
            return None;
        }
        let count = points.len() as f64;
        let mean_x = points.iter().map(|(x, _)| x).sum::<f64>() / count;
        let mean = points.iter().map(|(_, y)| y).sum::<f64>() / count;
        let (mut covariance, mut variance_x) = (0.0, 0.0);
        for (x, y) in points {
            covariance += (x - mean_x) * (y - mean);
            variance_x += (x - mean_x) * (x - mean_x);
        }
        let slope = covariance / variance_x;
        let (min, max) = points
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(min, max), (_, y)| {
                (min.min(*y), max.max(*y))
            });
        let span = points[points.len() - 1].0 - points[0].0;
        Some(WindowFit {
            mean,
            range: max - min,
            excursion: slope.abs() * span,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Noise in [-amplitude, amplitude], the same on every run (a 64-bit LCG).
    fn noise(count: usize, amplitude: f64, seed: u64) -> Vec<f64> {
        let mut state = seed;
        (0..count)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((state >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * amplitude
            })
            .collect()
    }

    /// One metric given by `series`, the six other non-L2ARC metrics flat, no L2ARC: with the
    /// default 4 of 7 the system is always steady once the window is full, so the tests look
    /// at the one metric's verdict.
    fn verdicts_of(series: &[Sample], thresholds: Thresholds) -> Vec<IntervalVerdict> {
        let mut detector = Detector::new(thresholds);
        series
            .iter()
            .enumerate()
            .map(|(index, sample)| {
                let mut samples: Vec<Sample> = (0..METRICS.len())
                    .map(|metric| {
                        if is_l2arc(metric) {
                            Sample::Absent
                        } else {
                            Sample::Value(50.0)
                        }
                    })
                    .collect();
                samples[8] = sample.clone();
                detector.push(index as f64, samples, Some(100.0))
            })
            .collect()
    }

    fn steady_indices(verdicts: &[IntervalVerdict]) -> Vec<usize> {
        verdicts
            .iter()
            .enumerate()
            .filter(|(_, verdict)| verdict.metrics[8].steady)
            .map(|(index, _)| index)
            .collect()
    }

    fn values(series: impl IntoIterator<Item = f64>) -> Vec<Sample> {
        series.into_iter().map(Sample::Value).collect()
    }

    #[test]
    fn flat_with_noise_is_steady_as_soon_as_the_window_is_full() {
        let series: Vec<f64> = noise(60, 5.0, 7).iter().map(|n| 100.0 + n).collect();
        let verdicts = verdicts_of(&values(series), Thresholds::default());
        assert_eq!(steady_indices(&verdicts), (19..60).collect::<Vec<_>>());
        assert!(verdicts[..19].iter().all(|verdict| !verdict.steady));
        assert!(verdicts[19..].iter().all(|verdict| verdict.steady));
        assert_eq!(verdicts[19].required, 4);
        assert_eq!(verdicts[19].present_count, 7);
    }

    #[test]
    fn a_ramp_is_never_steady() {
        // 10, 15, 20 ...: the window's line moves by 95 while the mean is at most ~400.
        let series = values((0..80).map(|index| 10.0 + 5.0 * index as f64));
        assert_eq!(
            steady_indices(&verdicts_of(&series, Thresholds::default())),
            Vec::<usize>::new()
        );
    }

    #[test]
    fn a_step_is_not_steady_until_it_leaves_the_window() {
        // 100 for intervals 0..30, then 150: steady 19..=29, not while the window holds the
        // step (30..=48), steady again from 49, the first window wholly at 150.
        let jitter = noise(80, 1.0, 3);
        let series =
            values((0..80).map(|index| (if index < 30 { 100.0 } else { 150.0 }) + jitter[index]));
        let expected: Vec<usize> = (19..30).chain(49..80).collect();
        assert_eq!(
            steady_indices(&verdicts_of(&series, Thresholds::default())),
            expected
        );
    }

    #[test]
    fn a_slow_drift_just_under_the_slope_limit_is_steady() {
        // y = 1000 + 5 i: across a 20-interval window the line moves 95, and the smallest
        // window mean (intervals 0..20) is 1047.5, so the excursion is 9.07% of the mean
        // (limit 10%) and the range 9.07% (limit 20%).
        let drift = values((0..60).map(|index| 1000.0 + 5.0 * index as f64));
        let verdicts = verdicts_of(&drift, Thresholds::default());
        assert_eq!(steady_indices(&verdicts), (19..60).collect::<Vec<_>>());
        let first = verdicts[19].metrics[8].excursion_pct.unwrap();
        assert!((first - 95.0 / 1047.5 * 100.0).abs() < 1e-9, "{first}");
        // The same drift from 900 is just over: 95 / 947.5 = 10.03% for the first window.
        let steeper = values((0..60).map(|index| 900.0 + 5.0 * index as f64));
        let verdicts = verdicts_of(&steeper, Thresholds::default());
        assert!(!verdicts[19].metrics[8].steady);
        // The window ending at interval 20 has mean 952.5: 95 is 9.97% of it, steady.
        assert_eq!(steady_indices(&verdicts)[0], 20);
    }

    #[test]
    fn a_failed_metric_counts_steady_for_two_intervals_then_not() {
        let mut series = values((0..40).map(|_| 42.0));
        for sample in &mut series[25..28] {
            *sample = Sample::Failed("read error".into());
        }
        let verdicts = verdicts_of(&series, Thresholds::default());
        let metric = |index: usize| &verdicts[index].metrics[8];
        assert!(metric(25).steady && metric(26).steady && !metric(27).steady);
        for index in 25..28 {
            assert_eq!(metric(index).value, None);
            let flag = metric(index).flag.as_deref().unwrap();
            assert!(flag.contains("collection failed (read error)"), "{flag}");
        }
        assert!(metric(26)
            .flag
            .as_deref()
            .unwrap()
            .contains("2 of at most 2"));
        // Back with values: the window skips the failed intervals and is steady at once.
        assert!(metric(28).steady && metric(28).flag.is_none());
        // A failure before the window is full still counts steady (flagged), and the
        // system is not steady until the window is full.
        let mut early = values((0..25).map(|_| 42.0));
        early[0] = Sample::Failed("timeout".into());
        let verdicts = verdicts_of(&early, Thresholds::default());
        assert!(verdicts[0].metrics[8].steady && !verdicts[0].steady);
        assert!(verdicts[19].steady);
    }

    #[test]
    fn the_count_needs_k_of_the_present_metrics() {
        // All ten present: 7 of 10 needed. Six steady (flat), four ramps: not steady; seven
        // steady, three ramps: steady at 19.
        for (flat, expect) in [(6, None), (7, Some(19))] {
            let mut detector = Detector::new(Thresholds::default());
            for index in 0..30 {
                let samples = (0..10)
                    .map(|metric| {
                        Sample::Value(if metric < flat {
                            90.0
                        } else {
                            1.0 + 10.0 * index as f64
                        })
                    })
                    .collect();
                let verdict = detector.push(index as f64, samples, Some(90.0));
                assert_eq!(verdict.required, 7);
                assert_eq!(verdict.present_count, 10);
            }
            assert_eq!(detector.steady_at(), expect, "{flat} flat");
        }
    }

    #[test]
    fn the_gate_holds_back_until_the_data_set_is_cached_or_the_caches_are_full() {
        let flat = |arc_size: f64| -> Vec<Sample> {
            let mut samples: Vec<Sample> = (0..10)
                .map(|metric| {
                    if is_l2arc(metric) {
                        Sample::Absent
                    } else {
                        Sample::Value(60.0)
                    }
                })
                .collect();
            samples[ARC_SIZE] = Sample::Value(arc_size);
            samples
        };
        let mut detector = Detector::new(Thresholds::default());
        for index in 0..20 {
            let verdict = detector.push(index as f64, flat(60.0), Some(50.0));
            assert!(!verdict.gate.passed && !verdict.steady);
        }
        // 85% cached passes; so does a full ARC with 50% cached; an unknown size passes, flagged.
        assert!(detector.push(20.0, flat(60.0), Some(85.0)).steady);
        let mut full = Detector::new(Thresholds::default());
        let verdicts: Vec<_> = (0..20)
            .map(|index| full.push(index as f64, flat(80.0), Some(50.0)))
            .collect();
        assert!(verdicts[19].gate.passed && verdicts[19].steady);
        let mut unknown = Detector::new(Thresholds::default());
        let verdict = (0..20)
            .map(|index| unknown.push(index as f64, flat(60.0), None))
            .last()
            .unwrap();
        assert!(verdict.steady && verdict.gate.flag.is_some());
    }

    #[test]
    fn a_window_of_zeros_is_steady_and_absent_metrics_leave_the_count() {
        let mut detector = Detector::new(Thresholds {
            window: 5,
            ..Thresholds::default()
        });
        let mut last = None;
        for index in 0..5 {
            let mut samples = vec![Sample::Absent; 10];
            samples[7] = Sample::Value(0.0);
            samples[9] = Sample::Value(3.0);
            last = Some(detector.push(index as f64, samples, None));
        }
        let last = last.unwrap();
        // Two present: the required 4 is clamped to 2.
        assert_eq!((last.present_count, last.required), (2, 2));
        assert!(last.steady);
        assert_eq!(detector.steady_at(), Some(4));
    }
}
