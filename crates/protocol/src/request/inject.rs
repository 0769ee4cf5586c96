//! `tarn inject` (zinject): start an injection in a pool, clear injections (`-c`), or list them.
//! The arguments travel as given; [`InjectArgs::action`] says which of the three they ask for,
//! on both sides.

use clap::Args;
use serde::{Deserialize, Serialize};

use crate::error::Failure;

/// `tarn inject [-d DEV] [-e io|corrupt|delay|vanish] [-T read|write|all] [-f PERCENT] [-n
/// COUNT] [-o DATASET:PATH|OBJECT [-l LEVEL]] [-D MS] POOL`, `tarn inject -c ID|all [POOL]`, or
/// `tarn inject [POOL]` (list).
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InjectArgs {
    /// Clear injection ID, or all of them (of POOL, or of every pool).
    #[arg(short = 'c', value_name = "ID|all", conflicts_with_all = ["device", "error", "io", "percent", "count", "object", "level", "delay_ms"])]
    pub clear: Option<String>,
    /// The device (its path or file name, as `pool status` shows it); default: every device.
    #[arg(short = 'd', value_name = "DEV")]
    pub device: Option<String>,
    /// The fault: io (EIO), corrupt (silent damage), delay, vanish (a pulled disk).
    #[arg(short = 'e', value_name = "FAULT")]
    pub error: Option<String>,
    /// The I/O it hits: read, write or all.
    #[arg(short = 'T', value_name = "IO")]
    pub io: Option<String>,
    /// The percentage of matching I/Os hit.
    #[arg(short = 'f', value_name = "PERCENT")]
    pub percent: Option<u32>,
    /// Hit this many I/Os, then stop (default: until cleared).
    #[arg(short = 'n', value_name = "COUNT")]
    pub count: Option<u64>,
    /// Only the copies of this object's blocks (as of the last synced txg).
    #[arg(short = 'o', value_name = "DATASET:PATH|OBJECT")]
    pub object: Option<String>,
    /// With -o: only blocks of this level (0: data, 1 and up: indirect).
    #[arg(short = 'l', value_name = "LEVEL")]
    pub level: Option<u8>,
    /// With -e delay: the delay of each I/O, in milliseconds.
    #[arg(short = 'D', value_name = "MS")]
    pub delay_ms: Option<u64>,
    pub pool: Option<String>,
}

/// What `tarn inject` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InjectAction {
    /// Start `spec` in `pool`.
    Start { pool: String, spec: InjectSpec },
    /// Clear injection `which` (an id, or `all`) of `pool`, or of every pool.
    Clear { pool: Option<String>, which: String },
    /// List the injections of `pool`, or of every pool.
    List { pool: Option<String> },
}

/// An injection as `tarn inject` asks for it, defaults filled in (the daemon resolves names
/// to devices and byte ranges).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InjectSpec {
    /// A device of the pool (its path, or the path's last component), or every device.
    pub device: Option<String>,
    /// `io`, `corrupt`, `delay` or `vanish`.
    pub error: String,
    /// `read`, `write` or `all`.
    pub io: String,
    pub percent: u32,
    pub count: Option<u64>,
    pub delay_ms: u64,
    /// Only the copies of one object's blocks: `DATASET:PATH` or `DATASET:OBJECT`.
    pub object: Option<String>,
    /// With `object`: only blocks of this level (0: data).
    pub level: Option<u8>,
}

impl InjectArgs {
    /// Whether any of the options that describe an injection was given.
    fn describes_injection(&self) -> bool {
        self.device.is_some()
            || self.error.is_some()
            || self.io.is_some()
            || self.percent.is_some()
            || self.count.is_some()
            || self.object.is_some()
            || self.level.is_some()
            || self.delay_ms.is_some()
    }

    /// What the arguments ask for; options that do not go together are an error.
    pub fn action(&self) -> Result<InjectAction, Failure> {
        if self.delay_ms.is_some() && self.error.as_deref() != Some("delay") {
            return Err(Failure("-D MS goes with -e delay".into()));
        }
        let pool = self.pool.clone();
        match (&self.clear, pool) {
            (Some(which), pool) => Ok(InjectAction::Clear {
                pool,
                which: which.clone(),
            }),
            (None, Some(pool)) => Ok(InjectAction::Start {
                pool,
                spec: InjectSpec {
                    device: self.device.clone(),
                    error: self.error.clone().unwrap_or_else(|| "io".into()),
                    io: self.io.clone().unwrap_or_else(|| "all".into()),
                    percent: self.percent.unwrap_or(100),
                    count: self.count,
                    delay_ms: self.delay_ms.unwrap_or(100),
                    object: self.object.clone(),
                    level: self.level,
                },
            }),
            (None, None) if self.describes_injection() => Err(Failure(
                "name the pool to inject into: tarn inject [options] POOL".into(),
            )),
            (None, None) => Ok(InjectAction::List { pool: None }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(pool: Option<&str>) -> InjectArgs {
        InjectArgs {
            clear: None,
            device: None,
            error: None,
            io: None,
            percent: None,
            count: None,
            object: None,
            level: None,
            delay_ms: None,
            pool: pool.map(str::to_string),
        }
    }

    /// A pool alone starts the default injection (EIO on every I/O of every device), -c
    /// clears, nothing lists; options without a pool, or -D without -e delay, are errors.
    #[test]
    fn inject_arguments_give_one_action() {
        match args(Some("tank")).action().unwrap() {
            InjectAction::Start { pool, spec } => {
                assert_eq!(pool, "tank");
                assert_eq!((spec.error.as_str(), spec.io.as_str()), ("io", "all"));
                assert_eq!((spec.percent, spec.delay_ms), (100, 100));
            }
            other => panic!("{other:?}"),
        }
        let mut clear = args(None);
        clear.clear = Some("all".into());
        assert_eq!(
            clear.action().unwrap(),
            InjectAction::Clear {
                pool: None,
                which: "all".into()
            }
        );
        assert_eq!(
            args(None).action().unwrap(),
            InjectAction::List { pool: None }
        );
        let mut orphan = args(None);
        orphan.percent = Some(5);
        assert!(orphan.action().unwrap_err().0.contains("name the pool"));
        let mut delay = args(Some("tank"));
        delay.delay_ms = Some(5);
        assert!(delay.action().unwrap_err().0.contains("-D MS"));
    }
}
