//! The replication family: `tarn send` and `tarn receive` (whose stream travels over the
//! request's connection as frames, [`crate::frames`]) and `tarn receive -A` (which carries none).

use clap::Args;
use serde::{Deserialize, Serialize};

use crate::error::Failure;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verb", content = "args", rename_all = "snake_case")]
pub enum ReplicationRequest {
    /// The stream follows as frames before the response: `data = {"bytes", "records",
    /// "blocks"}`.
    Send(SendArgs),
    /// The stream follows the request as frames: `data = {"snapshots": [names], "bytes",
    /// "records", "blocks", "write_transactions"}`.
    Receive(ReceiveArgs),
    /// `receive -A FS`: its partial receive is destroyed; `data = {"destroyed": name}`.
    ReceiveAbort(ReceiveArgs),
}

impl ReplicationRequest {
    /// The verb as the daemon's log and the pool history name it.
    pub fn verb(&self) -> &'static str {
        match self {
            ReplicationRequest::Send(_) => "send",
            ReplicationRequest::Receive(_) => "receive",
            ReplicationRequest::ReceiveAbort(_) => "receive abort",
        }
    }
}

/// `tarn send [-R] [-i|-I SNAP] [-c] [-p] [-n] [-v] [-P] FS@SNAP`, or `tarn send [-v] [-P] -t TOKEN`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SendArgs {
    /// Incremental from this snapshot (FS@SNAP or @SNAP) or bookmark (FS#NAME or #NAME).
    #[arg(short = 'i', conflicts_with = "intermediates_from")]
    pub from: Option<String>,
    /// Incremental from this snapshot, with every snapshot in between.
    #[arg(short = 'I')]
    pub intermediates_from: Option<String>,
    /// Carry the file system's local properties.
    #[arg(short = 'p')]
    pub properties: bool,
    /// Send compressed blocks as they are stored (the receiver stores them as they come).
    #[arg(short = 'c')]
    pub compressed: bool,
    /// The file system's whole tree: every descendant with the snapshot, with every
    /// snapshot up to it and their local properties.
    #[arg(short = 'R')]
    pub recursive: bool,
    /// Write no stream, only estimate its size (with -v or -P, print it).
    #[arg(short = 'n')]
    pub dry_run: bool,
    /// Say what is sent (each substream and its size, then the total: on stdout with -n,
    /// else on stderr after the stream), and show progress on a terminal.
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Say what is sent in machine-parsable lines, as zfs send -P: `full\tSNAP\tBYTES` or
    /// `incremental\tFROM\tSNAP\tBYTES` per substream, then `size\tBYTES`; on stdout with
    /// -n, else on stderr once the stream is written (exact sizes).
    #[arg(short = 'P')]
    pub parsable: bool,
    /// Continue an interrupted `receive -s` from the target's receive_resume_token (which
    /// says what the stream is: source, snapshot, whether compressed).
    #[arg(short = 't', value_name = "TOKEN", conflicts_with_all = ["from", "intermediates_from", "recursive", "properties", "compressed", "snapshot"])]
    pub resume_token: Option<String>,
    /// FS@SNAP (not with -t).
    #[arg(required_unless_present = "resume_token")]
    pub snapshot: Option<String>,
}

impl SendArgs {
    /// The snapshot or bookmark an incremental stream starts from (`-i` or `-I`), and whether
    /// the snapshots between travel too (`-I`).
    pub fn source(&self) -> (Option<String>, bool) {
        match &self.intermediates_from {
            Some(from) => (Some(from.clone()), true),
            None => (self.from.clone(), false),
        }
    }

    /// The snapshot named (empty with `-t`, where the token names it).
    pub fn snapshot(&self) -> &str {
        self.snapshot.as_deref().unwrap_or_default()
    }
}

/// `tarn receive [-F] [-u] [-v] [-s] [-o prop=val]... [-x prop]... FS[@SNAP]`, or `tarn receive
/// -A FS`.
#[derive(Args, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiveArgs {
    /// Roll the target back to the stream's source first (discarding changes and newer
    /// snapshots).
    #[arg(short = 'F')]
    pub force: bool,
    /// Do not mount a newly received file system.
    #[arg(short = 'u')]
    pub no_mount: bool,
    /// Say what was received, and show progress on a terminal.
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Set a property on the received file systems (prop=value, repeatable).
    #[arg(short = 'o')]
    pub set: Vec<String>,
    /// Do not take this property from the stream (repeatable).
    #[arg(short = 'x')]
    pub exclude: Vec<String>,
    /// Keep what a receive that stops part-way applied, for `send -t` to continue (the
    /// target's receive_resume_token).
    #[arg(short = 's')]
    pub resumable: bool,
    /// Abandon the partial receive into the target (no stream is read).
    #[arg(short = 'A', conflicts_with_all = ["force", "no_mount", "verbose", "resumable", "set", "exclude"])]
    #[serde(skip)]
    pub abort: bool,
    /// FS, or FS@SNAP to name the received snapshot.
    pub target: String,
}

impl ReceiveArgs {
    /// The `-o prop=value` settings as (name, value).
    pub fn settings(&self) -> Result<Vec<(String, String)>, Failure> {
        self.set
            .iter()
            .map(|setting| {
                setting
                    .split_once('=')
                    .map(|(name, value)| (name.to_string(), value.to_string()))
                    .ok_or_else(|| Failure(format!("-o {setting:?}: expected property=value")))
            })
            .collect()
    }
}
