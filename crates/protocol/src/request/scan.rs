//! The scan family: `pool scrub [-s|-p|-w] POOL`, `pool resilver POOL`, `pool online|offline
//! POOL DEVICE...`, and the scan and RAID-Z expansion state that `pool wait -t
//! scrub|resilver|raidz_expand` polls.

use clap::Args;
use serde::{Deserialize, Serialize};

use super::PoolName;
use crate::error::Failure;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verb", content = "args", rename_all = "snake_case")]
pub enum ScanRequest {
    /// Start, stop or pause a scrub.
    Scrub(ScrubArgs),
    /// Start a resilver, or start the one in progress again: `data = {"outcome": "not
    /// needed"|"started"|"restarted"|"replaces scrub"}`.
    Resilver(PoolName),
    /// The scan state of a pool: `data = {"scan": {function, state, paused, examined,
    /// to_examine, ...}, "expand": {vdev, vdev_id, width, finished, paused, start_time,
    /// end_time, copied, reflowed, total}}` (each null when the pool never had one).
    Status(PoolName),
    /// Bring devices online.
    Online(DeviceStateArgs),
    /// Take devices offline.
    Offline(DeviceStateArgs),
}

impl ScanRequest {
    /// The verb as the daemon's log and the pool history name it.
    pub fn verb(&self) -> &'static str {
        match self {
            ScanRequest::Scrub(_) => "pool scrub",
            ScanRequest::Resilver(_) => "pool resilver",
            ScanRequest::Status(_) => "pool scan status",
            ScanRequest::Online(_) => "pool online",
            ScanRequest::Offline(_) => "pool offline",
        }
    }

    /// The pool the request names.
    pub fn pool(&self) -> &str {
        match self {
            ScanRequest::Scrub(ScrubArgs { pool, .. })
            | ScanRequest::Resilver(PoolName { pool })
            | ScanRequest::Status(PoolName { pool })
            | ScanRequest::Online(DeviceStateArgs { pool, .. })
            | ScanRequest::Offline(DeviceStateArgs { pool, .. }) => pool,
        }
    }
}

/// `pool scrub [-s|-p|-w] POOL`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScrubArgs {
    /// Stop (cancel) the scrub or resilver in progress.
    #[arg(short = 's')]
    pub stop: bool,
    /// Pause the scrub in progress; `tarn pool scrub POOL` resumes it.
    #[arg(short = 'p')]
    pub pause: bool,
    /// Wait until the scrub has finished (as `tarn pool wait -t scrub POOL`).
    #[arg(short = 'w')]
    #[serde(skip)]
    pub wait: bool,
    pub pool: String,
}

/// What `pool scrub` asks of the pool's scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScrubAction {
    Start,
    Stop,
    Pause,
}

impl ScrubArgs {
    /// The action the flags ask for; flags that contradict each other are an error.
    pub fn action(&self) -> Result<ScrubAction, Failure> {
        match (self.stop, self.pause, self.wait) {
            (true, true, _) => Err(Failure("-s and -p cannot be given together".into())),
            (true, _, true) | (_, true, true) => Err(Failure(
                "-w waits for a scrub to finish: not with -s or -p".into(),
            )),
            (true, false, false) => Ok(ScrubAction::Stop),
            (false, true, false) => Ok(ScrubAction::Pause),
            (false, false, _) => Ok(ScrubAction::Start),
        }
    }
}

/// `pool online|offline POOL DEVICE...`: devices by path (absolute), file name or guid.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceStateArgs {
    pub pool: String,
    pub devices: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrub(stop: bool, pause: bool, wait: bool) -> Result<ScrubAction, Failure> {
        ScrubArgs {
            stop,
            pause,
            wait,
            pool: "tank".into(),
        }
        .action()
    }

    /// The flags of `pool scrub` give one action, or an error for flags that contradict each
    /// other; `-w` is the CLI's alone and never travels, so the daemon sees it false.
    #[test]
    fn scrub_flags_give_one_action() {
        assert_eq!(scrub(false, false, false).unwrap(), ScrubAction::Start);
        assert_eq!(scrub(false, false, true).unwrap(), ScrubAction::Start);
        assert_eq!(scrub(true, false, false).unwrap(), ScrubAction::Stop);
        assert_eq!(scrub(false, true, false).unwrap(), ScrubAction::Pause);
        assert!(scrub(true, true, false)
            .unwrap_err()
            .0
            .contains("-s and -p"));
        assert!(scrub(true, false, true).unwrap_err().0.contains("-w"));
        assert!(scrub(false, true, true).unwrap_err().0.contains("-w"));
        let args = ScrubArgs {
            stop: false,
            pause: true,
            wait: true,
            pool: "tank".into(),
        };
        let sent: ScrubArgs = serde_json::from_str(&serde_json::to_string(&args).unwrap()).unwrap();
        assert!(!sent.wait);
        assert_eq!(sent.action().unwrap(), ScrubAction::Pause);
    }
}
