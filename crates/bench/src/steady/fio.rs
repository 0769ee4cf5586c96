//! fio as the load of `tarn bench run --fio-steadystate CRITERION`, so that fio's own
//! steady-state detection (`--steadystate`, one metric of one job group) can be set beside the
//! harness's array-level decision for the same run.
//!
//! fio runs the same job (`--rw`, `--rwmixread`, `--bs`, `--size`, `--numjobs`; `--iodepth`
//! through the posixaio engine, which works on any file system, FUSE included) on files
//! `tarn-bench-job.N` in the directory, time-based for `--max-time`, with
//! `--steadystate=CRITERION --ss_dur=WINDOW --ss_ramp=0 --group_reporting`, WINDOW being the
//! harness's window (intervals times interval). fio stops its job when its criterion holds
//! over that duration; the harness then stops too (the load is gone) and says which came
//! first. When the harness finishes first, fio is interrupted (SIGINT: it still writes its
//! report) and its verdict is "not attained". fio's JSON report gives the verdict (`attained`)
//! and the job's runtime.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde::Serialize;
use tarn_protocol::error::Failure;

use super::workload::Job;

/// A running fio.
pub struct FioLoad {
    child: Child,
    report: PathBuf,
    criterion: String,
}

/// What fio decided.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FioVerdict {
    pub criterion: String,
    pub attained: bool,
    /// Seconds fio's job ran (when attained: until its steady state was reached and held).
    pub runtime_s: f64,
    pub iops: f64,
}

fn pattern_name(job: &Job) -> String {
    serde_json::json!(job.rw)
        .as_str()
        .unwrap_or("randwrite")
        .to_string()
}

/// Start fio on `dir`; its JSON report goes to `report`.
pub fn start(
    job: &Job,
    dir: &Path,
    criterion: &str,
    window: Duration,
    max_time: Duration,
    report: &Path,
) -> Result<FioLoad, Failure> {
    let child = Command::new("fio")
        .args([
            "--name=tarn-bench-run",
            "--ioengine=posixaio",
            "--fallocate=none",
            "--time_based",
            "--group_reporting",
            "--ss_ramp=0",
            "--output-format=json",
            "--filename_format=tarn-bench-job.$jobnum",
        ])
        .arg(format!("--directory={}", dir.display()))
        .arg(format!("--rw={}", pattern_name(job)))
        .arg(format!("--rwmixread={}", job.rwmixread))
        .arg(format!("--bs={}", job.bs))
        .arg(format!("--iodepth={}", job.iodepth))
        .arg(format!("--numjobs={}", job.numjobs))
        .arg(format!("--size={}", job.size))
        .arg(format!("--direct={}", u8::from(job.direct)))
        .arg(format!("--runtime={}", max_time.as_secs().max(1)))
        .arg(format!("--steadystate={criterion}"))
        .arg(format!("--ss_dur={}", window.as_secs().max(1)))
        .arg(format!("--output={}", report.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            Failure(format!(
                "cannot run fio: {e} (install it: apt-get install fio)"
            ))
        })?;
    Ok(FioLoad {
        child,
        report: report.to_path_buf(),
        criterion: criterion.to_string(),
    })
}

impl FioLoad {
    /// Whether fio has ended by itself (its steady state, its runtime, or an error).
    pub fn ended(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Stop fio if it still runs, and read its verdict.
    pub fn stop(mut self) -> Result<FioVerdict, Failure> {
        if !self.ended() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        }
        let output = self
            .child
            .wait_with_output()
            .map_err(|e| Failure(format!("fio: {e}")))?;
        let text = std::fs::read_to_string(&self.report).unwrap_or_default();
        let _ = std::fs::remove_file(&self.report);
        parse_report(&text, &self.criterion).map_err(|error| {
            Failure(format!(
                "fio: {error}: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ))
        })
    }
}

/// fio's verdict from its JSON report (which may follow lines of notices).
pub fn parse_report(text: &str, criterion: &str) -> Result<FioVerdict, String> {
    let start = text.find('{').ok_or("fio wrote no JSON report")?;
    let report: serde_json::Value = serde_json::from_str(&text[start..])
        .map_err(|error| format!("unreadable fio report: {error}"))?;
    let job = &report["jobs"][0];
    if job.is_null() {
        return Err("the fio report has no job".into());
    }
    let iops =
        job["read"]["iops"].as_f64().unwrap_or(0.0) + job["write"]["iops"].as_f64().unwrap_or(0.0);
    Ok(FioVerdict {
        criterion: criterion.to_string(),
        attained: job["steadystate"]["attained"].as_u64().unwrap_or(0) != 0,
        runtime_s: job["job_runtime"].as_f64().unwrap_or(0.0) / 1000.0,
        iops,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fio_reports_give_the_verdict() {
        let report = r#"fio: terminating on signal 2
{"fio version": "fio-3.33", "jobs": [{"jobname": "tarn-bench-run", "job_runtime": 31000,
  "read": {"iops": 0.0}, "write": {"iops": 1500.5},
  "steadystate": {"ss": "iops:20.000000%", "duration": 30, "attained": 1}}]}"#;
        let verdict = parse_report(report, "iops:20%").unwrap();
        assert!(verdict.attained);
        assert_eq!(verdict.runtime_s, 31.0);
        assert_eq!(verdict.iops, 1500.5);
        assert!(parse_report("", "x").is_err());
        assert!(parse_report("{\"jobs\": []}", "x").is_err());
    }
}
