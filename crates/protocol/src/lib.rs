//! `tarn-protocol`: what the two sides of the daemon's socket share, so that neither side needs
//! the other. The CLI (`tarn-cli`), the daemon and the benchmarks (`tarn-bench`) all depend on
//! this crate; it depends on the engine (`tarn`, for the counter and row types it carries) and on
//! nothing of the command side: no daemon state, no verb's body. It does depend on clap, with
//! no feature to turn it off: a verb's arguments are one struct that clap parses and the wire
//! carries ([`request`]), and every program that links this crate parses a command line with
//! clap anyway. What lives here:
//!
//! - the wire protocol (this module): requests, responses, their version, the files beside the
//!   socket; the arguments of every verb, by family ([`request`]); the stream frames of send
//!   and receive ([`frames`]); the rows both sides print ([`rows`]);
//! - the client side of the socket ([`client`]): finding, asking, starting and stopping a daemon,
//!   and reading its tables;
//! - the kstat field tables ([`kstat`]) and the Prometheus / OpenMetrics renderer ([`metrics`]),
//!   which name the counters the same way wherever they are printed or exported;
//! - what every verb prints with: the user's [`error::Failure`], the table printer and size
//!   forms ([`format`](mod@format)), the `-j` documents in OpenZFS 2.3's schema ([`json`]), and
//!   `out!`/`err!` with the daemon's per-request capture ([`output`]).
//!
//! # The wire protocol
//! # Transport
//! A Unix stream socket: `--socket PATH`, else `$TARN_SOCKET`, else `/run/tarn/tarn.sock`. Beside
//! it the daemon keeps `PATH.lock` (flock held for the daemon's life: one daemon per socket),
//! `PATH.pid` (its process id, while it listens) and `PATH.log` (its stdout and stderr).
//! The socket is mode 0666: anyone may connect, and the daemon decides what each request may
//! do from the client's credentials (`SO_PEERCRED`): reads for everyone, changes for root and
//! for users granted them with `tarn allow` (the daemon's `authority` module).
//!
//! # Framing
//! Line-delimited JSON: the client writes one request as one line of JSON ending in `\n`, the
//! daemon answers with one response, in one line or, when it is large, in several
//! ([`response_lines`]): every line but the last has `"more": true`, and the following lines
//! carry only further elements of the first line's largest `data` array (a listing of 100,000
//! snapshots is some 70 MB of rows), so that no line passes [`RESPONSE_LINE_TARGET`] and the
//! whole stays under [`MAX_RESPONSE_BYTES`]. A connection may carry any number of requests in
//! turn. A line longer than [`MAX_LINE_BYTES`] closes the connection; a line that is not a valid
//! request gets an error response (status 2) and the connection stays usable.
//!
//! # Version
//! Every request and every response carries `"protocol": N` ([`PROTOCOL_VERSION`], raised with
//! any change to a request's or a response's shape). A daemon answers a request of another
//! version (or of none: a build from before versions) with status 2 and a message naming both
//! versions and what to restart; a CLI refuses a response of another version the same way.
//! `ping` and `stop` go without a version and are answered whatever theirs
//! ([`Request::of_any_build`]), so that any build can find out whether a daemon runs, which
//! build it is (`data.version`, `data.protocol`) and its pid, and stop it.
//!
//! # Request
//! `{"protocol": N, "verb": "<family>", "args": {"verb": "<verb>", "args": {...}}}`: the verbs are
//! nested by family, each family an enum of its verbs in [`request`] whose variants carry one
//! struct of arguments, the struct that clap parses from the command line; the JSON is those
//! enums and structs as serde writes them (verb names in snake case), for example `{"protocol":
//! 2, "verb": "scan", "args": {"verb": "scrub", "args": {"stop": false, "pause": true, "pool":
//! "tank"}}}`. Fields only the CLI reads (`-d` directories, `-j`, `-w`, the table options) do not
//! travel. Before it sends a request the client resolves what depends on its environment: paths
//! are absolute (vdevs, `-R`, `-d`, `cachefile=PATH`, mountpoints, devices named by path);
//! options travel as typed (`-s 2G`, `-o prop=value`, `PROP,PROP`) and are parsed by the same
//! function on both sides (the CLI first, to refuse a mistake without asking). The client's
//! `TARN_TUNABLE_*` variables are not sent: the daemon's tunables are fixed when it starts (the
//! CLI passes its environment to a daemon it starts). `ping` and `stop` carry no arguments and
//! are not nested, so that every build reads them.
//!
//! | family | verbs | arguments ([`request`]) |
//! | --- | --- | --- |
//! | `ping` | | none: answers `data = {"pid": N, "socket": PATH, "pools": [NAME...], "version": "0.1.0", "protocol": N}` |
//! | `stop` | | none: answers, then exports every pool and exits as on SIGTERM |
//! | `pool` | `create`, `import`, `export`, `destroy`, `sync`, `list`, `get`, `set`, `status`, `history`, `clear` | [`request::pool`] |
//! | `scan` | `scrub`, `resilver`, `status` (the scan state `pool wait` polls), `online`, `offline` | [`request::scan`] |
//! | `devices` | `attach`, `detach`, `remove`, `replace`, `add` | [`request::devices`] |
//! | `inspect` | `check`, `metaslabs`, `logs`, `map`, `spacemap`, `object` (`tarn debug ...`) | [`request::inspect`] |
//! | `stat` | `txgs`, `arc`, `zil`, `iostat` | [`request::stat`] |
//! | `dataset` | `create`, `destroy`, `list`, `get`, `set`, `inherit`, `mount`, `unmount`, `userspace`, `allow`, `unallow` | [`request::dataset`] |
//! | `snapshot` | `snapshot`, `clone`, `promote`, `destroy_snapshots`, `destroy_bookmark`, `rollback`, `rename`, `bookmark`, `debug_dataset` | [`request::snapshot`] |
//! | `replication` | `send` (the stream follows as frames, [`frames`], before the response), `receive` (the stream follows the request as frames), `receive_abort` | [`request::replication`] |
//! | `inject` | not nested: `args` is [`request::inject::InjectArgs`] | [`request::inject`] |
//!
//! What each verb answers in `data` is documented on its variant.
//!
//! # Response
//! `{"protocol": N, "status": N, "stdout": "...", "stderr": "...", "not_imported": bool,
//! "retry": bool, "data": ...}`.
//! `status` is the exit status the CLI exits with (0 success, 1 failure, 2 bad request);
//! `stdout` and `stderr` are exactly what the verb printed, which the CLI prints unchanged, so a
//! verb's output does not depend on where it ran. `not_imported` is true when the request names
//! a pool this daemon does not hold: the CLI then runs the verb in-process on the exported pool
//! (`check -d`, `debug ...`, `pool export|destroy` of an exported pool). `retry` is true when
//! the daemon is stopping and did nothing: the client waits for it to go and asks again (starting
//! a new daemon if the verb needs one). `data` carries the
//! structured rows that `pool list` and `pool status` merge with pools found on disk.

/// `println!` that never panics: output into a closed pipe (`tarn ... | head`) is dropped, so a
/// command still finishes its work (and exports its pool) when nobody reads what it prints. In
/// the daemon the line goes into the request's captured output instead.
#[macro_export]
macro_rules! out {
    () => {
        $crate::output::write_stdout_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::write_stdout_line(format_args!($($arg)*))
    };
}

/// `eprintln!` that the daemon captures like `out!`.
#[macro_export]
macro_rules! err {
    ($($arg:tt)*) => {
        $crate::output::write_stderr_line(format_args!($($arg)*))
    };
}

pub mod client;
pub mod error;
pub mod format;
pub mod frames;
pub mod json;
pub mod kstat;
pub mod metrics;
pub mod output;
pub mod request;
pub mod rows;
pub mod units;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use request::dataset::DatasetRequest;
use request::devices::DevicesRequest;
use request::inject::InjectArgs;
use request::inspect::InspectRequest;
use request::pool::PoolRequest;
use request::replication::ReplicationRequest;
use request::scan::ScanRequest;
use request::snapshot::SnapshotRequest;
use request::stat::StatRequest;

/// Make a path absolute against this process's working directory (requests to the daemon
/// carry only absolute paths: the daemon's working directory is `/`).
pub fn absolute(path: &std::path::Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|cwd| cwd.join(path))
            .unwrap_or_else(|_| path.to_path_buf())
    }
}

/// Files beside the socket: `PATH.lock` (one daemon per socket), `PATH.pid` (its process id while
/// it listens), `PATH.log` (its log).
pub fn lock_path(socket: &Path) -> PathBuf {
    suffixed(socket, ".lock")
}

pub fn pid_path(socket: &Path) -> PathBuf {
    suffixed(socket, ".pid")
}

pub fn log_path(socket: &Path) -> PathBuf {
    suffixed(socket, ".log")
}

fn suffixed(socket: &Path, suffix: &str) -> PathBuf {
    let mut text = socket.as_os_str().to_owned();
    text.push(suffix);
    PathBuf::from(text)
}

/// Longest request or response line accepted (a request is small; a large response comes in
/// several lines, [`response_lines`]).
pub const MAX_LINE_BYTES: u64 = 64 << 20;

/// The size the daemon keeps each response line under when it splits a large response.
pub const RESPONSE_LINE_TARGET: usize = 8 << 20;

/// The most a client reads of one response, all its lines together.
pub const MAX_RESPONSE_BYTES: u64 = 1 << 30;

/// Exit status of a response to a request the daemon could not parse or does not know.
pub const STATUS_BAD_REQUEST: u8 = 2;

/// The protocol's version, carried by every request and response (module documentation,
/// "Version"). Raise it with any change to a request's or a response's shape.
pub const PROTOCOL_VERSION: u32 = 7;

/// This build's version, as `tarn --version` prints it.
pub const BUILD_VERSION: &str = env!("CARGO_PKG_VERSION");

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verb", content = "args", deny_unknown_fields)]
pub enum Request {
    #[serde(rename = "ping")]
    Ping,
    #[serde(rename = "stop")]
    Stop,
    /// `pool create|import|export|destroy|sync|list|get|set|status|history|clear`.
    #[serde(rename = "pool")]
    Pool(PoolRequest),
    /// `check`, `debug metaslabs|logs|map|spacemap|object`.
    #[serde(rename = "inspect")]
    Inspect(InspectRequest),
    /// The counters of `stat` and `pool iostat`.
    #[serde(rename = "stat")]
    Stat(StatRequest),
    /// `pool scrub`, `pool resilver`, `pool online|offline` and the scan state.
    #[serde(rename = "scan")]
    Scan(ScanRequest),
    /// `pool attach|detach|remove|replace|add`.
    #[serde(rename = "devices")]
    Devices(DevicesRequest),
    /// `create`, `destroy` (of file systems), `list`, `get`, `set`, `inherit`, `mount`,
    /// `unmount`.
    #[serde(rename = "dataset")]
    Dataset(DatasetRequest),
    /// `snapshot`, `clone`, `promote`, `destroy` (of snapshots and bookmarks), `rollback`,
    /// `rename`, `bookmark`, `debug dataset`.
    #[serde(rename = "snapshot")]
    Snapshot(SnapshotRequest),
    /// `send`, `receive`, `receive -A`.
    #[serde(rename = "replication")]
    Replication(ReplicationRequest),
    /// `tarn inject`: start an injection, clear some, or list them.
    #[serde(rename = "inject")]
    Inject(InjectArgs),
}

impl Request {
    /// The verb as it appears on the wire, for the daemon's log.
    pub fn verb(&self) -> &'static str {
        match self {
            Request::Ping => "ping",
            Request::Stop => "stop",
            Request::Inject(_) => "inject",
            Request::Pool(request) => request.verb(),
            Request::Inspect(request) => request.verb(),
            Request::Stat(request) => request.verb(),
            Request::Scan(request) => request.verb(),
            Request::Devices(request) => request.verb(),
            Request::Dataset(request) => request.verb(),
            Request::Snapshot(request) => request.verb(),
            Request::Replication(request) => request.verb(),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// [`PROTOCOL_VERSION`] of the daemon that answered (0: a build from before versions).
    #[serde(default)]
    pub protocol: u32,
    pub status: u8,
    #[serde(default)]
    pub stdout: String,
    #[serde(default)]
    pub stderr: String,
    #[serde(default)]
    pub not_imported: bool,
    /// The daemon is stopping and did not act on the request: ask again (a new daemon).
    #[serde(default)]
    pub retry: bool,
    #[serde(default)]
    pub data: serde_json::Value,
    /// Another line of this response follows, whose `data` arrays continue this one's
    /// ([`response_lines`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub more: bool,
}

/// A response as the lines the daemon writes (each ending in `\n`): one line, or, when it
/// passes [`RESPONSE_LINE_TARGET`], the response with its largest top-level `data` array cut
/// to what fits, followed by lines that carry only the rest of that array (`{"protocol": N,
/// "data": {KEY: [...]}, "more": ...}`), each under the target unless one element alone is
/// larger. [`Response::continue_with`] puts them back together.
pub fn response_lines(mut response: Response) -> Vec<Vec<u8>> {
    let line = |response: &Response| {
        let mut line = serde_json::to_vec(response).expect("a response serializes");
        line.push(b'\n');
        line
    };
    let largest = response.data.as_object().and_then(|data| {
        data.iter()
            .filter_map(|(key, value)| Some((key, value.as_array()?.len())))
            .max_by_key(|(_, length)| *length)
            .map(|(key, _)| key.clone())
    });
    let Some(key) = largest else {
        return vec![line(&response)];
    };
    // The array is taken out and its elements moved into the lines, never copied: a listing
    // of 100,000 snapshots is 60 MB of rows, and copying them cost more than encoding them.
    let array = match response.data.get_mut(&key).map(serde_json::Value::take) {
        Some(serde_json::Value::Array(array)) => array,
        _ => unreachable!("the largest array was just found under {key:?}"),
    };
    let sizes: Vec<usize> = array
        .iter()
        .map(|element| encoded_size(element) + 1)
        .collect();
    let without_array = line(&response).len();
    if without_array + sizes.iter().sum::<usize>() <= RESPONSE_LINE_TARGET {
        response.data[key.as_str()] = serde_json::Value::Array(array);
        return vec![line(&response)];
    }
    // Cut the array into runs whose encodings stay under the target.
    let mut run_lengths = vec![0usize];
    let mut run_bytes = 0;
    for size in sizes {
        let run = run_lengths.last_mut().expect("one run at least");
        if *run > 0 && run_bytes + size > RESPONSE_LINE_TARGET / 2 {
            run_lengths.push(0);
            run_bytes = 0;
        }
        *run_lengths.last_mut().expect("one run at least") += 1;
        run_bytes += size;
    }
    let count = run_lengths.len();
    let mut elements = array.into_iter();
    let mut lines = Vec::with_capacity(count);
    for (index, length) in run_lengths.into_iter().enumerate() {
        let run: Vec<serde_json::Value> = elements.by_ref().take(length).collect();
        let more = index + 1 < count;
        if index == 0 {
            // The first line is the response itself, with the first run of the array.
            response.data[key.as_str()] = serde_json::Value::Array(run);
            response.more = more;
            lines.push(line(&response));
        } else {
            let mut data = serde_json::Map::new();
            data.insert(key.clone(), serde_json::Value::Array(run));
            lines.push(line(&Response {
                protocol: response.protocol,
                status: response.status,
                data: serde_json::Value::Object(data),
                more,
                ..Response::default()
            }));
        }
    }
    lines
}

/// Bytes of `value`'s JSON encoding, counted without keeping them.
fn encoded_size(value: &serde_json::Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    serde_json::to_writer(&mut counter, value).map_or(0, |()| counter.0)
}

impl Response {
    /// Add the next line of a response split by [`response_lines`]: its `data` arrays extend
    /// this one's; whether yet another line follows is the new line's `more`.
    pub fn continue_with(&mut self, next: Response) -> Result<(), String> {
        let serde_json::Value::Object(fields) = next.data else {
            return Err("a continued response line carries no data".into());
        };
        for (key, value) in fields {
            match (self.data.get_mut(&key), value) {
                (Some(serde_json::Value::Array(have)), serde_json::Value::Array(more)) => {
                    have.extend(more)
                }
                _ => {
                    return Err(format!(
                        "a continued response line carries {key:?}, which the first did not start"
                    ))
                }
            }
        }
        self.more = next.more;
        Ok(())
    }
}

impl Response {
    /// A failure with a message, printed as the CLI prints its own failures.
    pub fn failure(status: u8, message: &str) -> Response {
        Response {
            status,
            stderr: format!("tarn: {message}\n"),
            ..Response::default()
        }
    }

    /// The pool named is not held by this daemon.
    pub fn not_imported(pool: &str) -> Response {
        Response {
            status: 1,
            stderr: format!("tarn: pool {pool:?} is not imported in the daemon\n"),
            not_imported: true,
            ..Response::default()
        }
    }
}

impl Request {
    /// `ping` and `stop`: the same in every build, so sent without a version and answered by a
    /// daemon of any build (module documentation, "Version").
    pub fn of_any_build(&self) -> bool {
        matches!(self, Request::Ping | Request::Stop)
    }
}

/// One request as its line (without the newline): the request with [`PROTOCOL_VERSION`]
/// (but for requests [`Request::of_any_build`], which older daemons read as they are).
pub fn encode_request(request: &Request) -> Vec<u8> {
    let mut value = serde_json::to_value(request).expect("a request serializes");
    if let Some(fields) = value.as_object_mut().filter(|_| !request.of_any_build()) {
        fields.insert("protocol".into(), PROTOCOL_VERSION.into());
    }
    serde_json::to_vec(&value).expect("a request serializes")
}

/// Parse one request line; the error is what the daemon answers. A request of another
/// protocol version is refused, but for those [`Request::of_any_build`].
pub fn parse_request(line: &str) -> Result<Request, String> {
    let bad = |error: serde_json::Error| format!("bad request: {error}");
    let mut value: serde_json::Value = serde_json::from_str(line).map_err(bad)?;
    let protocol = value
        .as_object_mut()
        .and_then(|fields| fields.remove("protocol"));
    let version = protocol.as_ref().and_then(serde_json::Value::as_u64);
    // The version decides before the shape: a request of another build may not parse here
    // (its verbs may be nested otherwise), and it deserves the version's message, not the
    // parser's.
    let request: Result<Request, String> = serde_json::from_value(value).map_err(bad);
    match request {
        Ok(request) if request.of_any_build() => return Ok(request),
        request if version == Some(u64::from(PROTOCOL_VERSION)) => return request,
        _ => {}
    }
    let theirs = match (&protocol, version) {
        (None, _) => "a build from before protocol versions".to_string(),
        (Some(_), Some(version)) => format!("protocol {version}"),
        (Some(other), None) => format!("protocol {other}"),
    };
    Err(format!(
        "bad request: this command is a different build of tarn ({theirs}) from the daemon \
         (tarn {BUILD_VERSION}, protocol {PROTOCOL_VERSION}, pid {}): stop the daemon (tarn \
         daemon --stop, which exports its pools) and run the command again, which starts a \
         daemon of the command's build",
        std::process::id()
    ))
}

/// Why the CLI refuses `response`: a daemon of another protocol version answered.
pub fn response_mismatch(response: &Response) -> Option<String> {
    (response.protocol != PROTOCOL_VERSION).then(|| {
        let theirs = match response.protocol {
            0 => "a build from before protocol versions".to_string(),
            version => format!("protocol {version}"),
        };
        format!(
            "the tarn daemon is a different build ({theirs}) from this command (tarn \
             {BUILD_VERSION}, protocol {PROTOCOL_VERSION}): stop it (tarn daemon --stop, which \
             exports its pools) and run the command again, which starts a daemon of this build"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use request::dataset::{CreateArgs, DestroyArgs, SpaceArgs, UnmountArgs};
    use request::devices::{AddArgs, AttachArgs, DetachArgs, RemoveArgs, ReplaceArgs};
    use request::inspect::{CheckArgs, MapArgs, SpacemapArgs};
    use request::pool;
    use request::replication::{ReceiveArgs, SendArgs};
    use request::scan::{DeviceStateArgs, ScrubArgs};
    use request::{PoolName, PoolOption};

    #[test]
    fn requests_round_trip_and_name_their_verb() {
        let requests = vec![
            Request::Ping,
            Request::Stop,
            Request::Pool(PoolRequest::Create(pool::CreateArgs {
                force: false,
                size: Some("128M".into()),
                properties: vec!["feature@log_spacemap=disabled".into()],
                altroot: Some(PathBuf::from("/alt")),
                mountpoint: Some("none".into()),
                fs_properties: vec!["atime=off".into()],
                pool: "tank".into(),
                vdevs: vec!["mirror".into(), "/a".into(), "/b".into()],
            })),
            Request::Pool(PoolRequest::Import(pool::ImportArgs {
                dirs: vec![PathBuf::from("/d")],
                options: vec!["readonly=on".into()],
                rewind: true,
                missing_log: true,
                force: true,
                destroyed: true,
                pool: Some("tank".into()),
                ..pool::ImportArgs::default()
            })),
            Request::Pool(PoolRequest::Status(pool::StatusArgs {
                dirs: Vec::new(),
                json: false,
                exact: false,
                verbose: true,
                unhealthy: false,
                pool: Some("tank".into()),
            })),
            Request::Pool(PoolRequest::Clear(pool::ClearArgs {
                pool: "tank".into(),
                device: Some("/d/a.img".into()),
            })),
            Request::Pool(PoolRequest::Sync(PoolOption { pool: None })),
            Request::Inject(InjectArgs {
                clear: None,
                device: Some("a.img".into()),
                error: Some("corrupt".into()),
                io: Some("read".into()),
                percent: Some(50),
                count: Some(3),
                object: Some("tank/fs:/f".into()),
                level: Some(0),
                delay_ms: None,
                pool: Some("tank".into()),
            }),
            Request::Scan(ScanRequest::Scrub(ScrubArgs {
                stop: false,
                pause: true,
                wait: false,
                pool: "tank".into(),
            })),
            Request::Scan(ScanRequest::Resilver(PoolName {
                pool: "tank".into(),
            })),
            Request::Scan(ScanRequest::Status(PoolName {
                pool: "tank".into(),
            })),
            Request::Scan(ScanRequest::Offline(DeviceStateArgs {
                pool: "tank".into(),
                devices: vec!["/b".into()],
            })),
            Request::Devices(DevicesRequest::Attach(AttachArgs {
                pool: "tank".into(),
                device: "a.img".into(),
                new_device: "/d/b.img".into(),
                force: true,
                wait: false,
            })),
            Request::Devices(DevicesRequest::Detach(DetachArgs {
                pool: "tank".into(),
                device: "/d/a.img".into(),
            })),
            Request::Devices(DevicesRequest::Remove(RemoveArgs {
                pool: "tank".into(),
                devices: vec!["/d/cache.img".into()],
            })),
            Request::Devices(DevicesRequest::Replace(ReplaceArgs {
                pool: "tank".into(),
                device: "a.img".into(),
                new_device: None,
                force: false,
                wait: true,
            })),
            Request::Replication(ReplicationRequest::Send(SendArgs {
                from: None,
                intermediates_from: Some("tank/a@1".into()),
                properties: true,
                compressed: true,
                recursive: false,
                dry_run: false,
                verbose: true,
                parsable: true,
                resume_token: None,
                snapshot: Some("tank/a@2".into()),
            })),
            Request::Replication(ReplicationRequest::Receive(ReceiveArgs {
                force: true,
                no_mount: false,
                verbose: true,
                set: vec!["atime=off".into()],
                exclude: vec!["compression".into()],
                resumable: true,
                abort: false,
                target: "tank/b".into(),
            })),
            Request::Devices(DevicesRequest::Add(AddArgs {
                pool: "tank".into(),
                vdevs: vec!["mirror".into(), "/d/c".into(), "/d/e".into()],
                force: false,
                dry_run: true,
            })),
            Request::Pool(PoolRequest::Set(pool::SetArgs {
                setting: "feature@embedded_data=enabled".into(),
                pool: "tank".into(),
            })),
            Request::Pool(PoolRequest::Upgrade(pool::UpgradeArgs {
                all: false,
                pool: Some("tank".into()),
            })),
            Request::Stat(StatRequest::Txgs(PoolName {
                pool: "tank".into(),
            })),
            Request::Stat(StatRequest::Iostat(PoolOption { pool: None })),
            Request::Stat(StatRequest::Iostat(PoolOption {
                pool: Some("tank".into()),
            })),
            Request::Inspect(InspectRequest::Check(CheckArgs {
                dirs: Vec::new(),
                no_repair: true,
                pool: "tank".into(),
            })),
            Request::Inspect(InspectRequest::Spacemap(SpacemapArgs {
                dirs: Vec::new(),
                pool: "tank".into(),
                vdev: 1,
                metaslab: 2,
            })),
            Request::Inspect(InspectRequest::Map(MapArgs {
                dirs: Vec::new(),
                pool: "tank".into(),
                output: Some(PathBuf::from("/tmp/map.svg")),
            })),
            Request::Dataset(DatasetRequest::Create(CreateArgs {
                parents: true,
                properties: vec!["compression=zstd".into()],
                name: "tank/a".into(),
            })),
            Request::Dataset(DatasetRequest::Unmount(UnmountArgs {
                all: false,
                force: true,
                target: Some("/tank/a".into()),
            })),
            Request::Dataset(DatasetRequest::Userspace(SpaceArgs {
                kinds: vec!["user".into(), "group".into()],
                name: "tank/a@1".into(),
                ..SpaceArgs::default()
            })),
            Request::Snapshot(SnapshotRequest::DestroySnapshots(DestroyArgs {
                recursive: true,
                recursive_dependents: false,
                dry_run: true,
                verbose: false,
                defer: true,
                name: "tank/a@1%3".into(),
            })),
            Request::Snapshot(SnapshotRequest::Diff(request::snapshot::DiffArgs {
                snapshot: "tank/a@1".into(),
                to: Some("tank/a".into()),
                ..request::snapshot::DiffArgs::default()
            })),
            Request::Snapshot(SnapshotRequest::Diff(request::snapshot::DiffArgs {
                snapshot: "tank/a@1".into(),
                to: None,
                ..request::snapshot::DiffArgs::default()
            })),
            Request::Dataset(DatasetRequest::Allow(request::dataset::AllowArgs {
                users: vec!["1000".into()],
                groups: vec!["50".into()],
                everyone: false,
                local: true,
                descendent: false,
                operands: vec!["create,snapshot".into(), "tank/a".into()],
            })),
            Request::Dataset(DatasetRequest::Unallow(request::dataset::AllowArgs {
                everyone: true,
                operands: vec!["tank/a".into()],
                ..request::dataset::AllowArgs::default()
            })),
            Request::Snapshot(SnapshotRequest::Release(request::snapshot::HoldArgs {
                recursive: true,
                tag: "keep".into(),
                snapshots: vec!["tank/a@1".into(), "tank/b@1".into()],
            })),
        ];
        for request in requests {
            let line = String::from_utf8(encode_request(&request)).unwrap();
            assert!(!line.contains('\n'));
            let value: serde_json::Value = serde_json::from_str(&line).unwrap();
            // A family's requests nest: the family's name, then the verb within it.
            let verb = value["args"]["verb"].as_str().or(value["verb"].as_str());
            let verb = verb.unwrap().replace('_', " ");
            assert!(request.verb().ends_with(&verb), "{line}");
            if !request.of_any_build() {
                assert_eq!(value["protocol"], PROTOCOL_VERSION, "{line}");
            }
            assert_eq!(parse_request(&line).unwrap(), request);
        }
        assert_eq!(parse_request(r#"{"verb":"ping"}"#).unwrap(), Request::Ping);
    }

    /// A request of another build is refused with a message that names both versions and what
    /// to restart, not a bare "bad request"; `ping` is answered whatever its version.
    #[test]
    fn requests_of_another_protocol_version_are_refused_but_ping() {
        let check = r#""verb":"check","args":{"pool":"t","repair":false}"#;
        let next = format!("protocol {}", PROTOCOL_VERSION + 1);
        for (line, theirs) in [
            (format!("{{{check}}}"), "before protocol versions"),
            (format!(r#"{{"protocol":0,{check}}}"#), "protocol 0"),
            (
                format!(r#"{{"protocol":{},{check}}}"#, PROTOCOL_VERSION + 1),
                next.as_str(),
            ),
            (format!(r#"{{"protocol":"x",{check}}}"#), "protocol \"x\""),
        ] {
            let error = parse_request(&line).unwrap_err();
            assert!(error.starts_with("bad request"), "{error}");
            assert!(error.contains(theirs), "{line}: {error}");
            assert!(error.contains("tarn daemon --stop"), "{error}");
        }
        for line in [r#"{"verb":"ping"}"#, r#"{"protocol":99,"verb":"ping"}"#] {
            assert_eq!(parse_request(line).unwrap(), Request::Ping);
        }
        assert_eq!(parse_request(r#"{"verb":"stop"}"#).unwrap(), Request::Stop);
        assert_eq!(encode_request(&Request::Stop), br#"{"verb":"stop"}"#);
        let mut response = Response::failure(1, "x");
        assert!(response_mismatch(&response)
            .unwrap()
            .contains("before protocol versions"));
        response.protocol = PROTOCOL_VERSION;
        assert_eq!(response_mismatch(&response), None);
    }

    /// A listing of 100,000 snapshots is some 70 MB of rows; sent as one line it passed the
    /// client's 64 MiB line bound, and the client failed with "EOF while parsing an object"
    /// (found by `tarn bench snapshot-scale`). Large responses now go in lines under the
    /// target, and the client puts them back together; small ones stay one line.
    #[test]
    fn a_large_response_goes_in_lines_and_comes_back_whole() {
        let row = |index: usize| {
            serde_json::json!({
                "name": format!("pool/fs{:05}@hourly-{index:08}", index % 100),
                "used": index, "refer": 1u64 << 20, "padding": "x".repeat(600),
            })
        };
        let rows: Vec<_> = (0..110_000).map(row).collect();
        let response = Response {
            protocol: PROTOCOL_VERSION,
            status: 0,
            stdout: "a line of output\n".into(),
            data: serde_json::json!({ "datasets": rows, "count": 110_000 }),
            ..Response::default()
        };
        let lines = response_lines(response.clone());
        assert!(lines.len() > 8, "{} lines", lines.len());
        for line in &lines {
            assert!(
                line.len() <= RESPONSE_LINE_TARGET,
                "a line of {} bytes",
                line.len()
            );
            assert!(line.len() as u64 <= MAX_LINE_BYTES);
            assert_eq!(line.last(), Some(&b'\n'));
        }
        let joined: Vec<u8> = lines.concat();
        let mut reader = std::io::Cursor::new(joined);
        let read = client::read_response(&mut reader).unwrap();
        assert_eq!(read, response);
        // The next response on the same connection is read on its own.
        let small = Response::failure(1, "small");
        let lines = response_lines(small);
        assert_eq!(lines.len(), 1);
        assert!(!String::from_utf8_lossy(&lines[0]).contains("more"));
        // A continuation that names an array the first line did not start is refused.
        let mut first = response.clone();
        let stray = Response {
            data: serde_json::json!({ "other": [1] }),
            ..Response::default()
        };
        assert!(first.continue_with(stray).is_err());
    }

    #[test]
    fn bad_requests_are_errors_not_panics() {
        for line in [
            "",
            "{",
            "null",
            "[]",
            r#"{"verb":"frobnicate"}"#,
            r#"{"verb":"check"}"#,
            r#"{"verb":"check","args":{"pool":7,"repair":true}}"#,
            r#"{"verb":"check","args":{"pool":"t","repair":true,"extra":1}}"#,
            r#"{"protocol":1,"verb":"check","args":{"pool":"t","repair":true,"extra":1}}"#,
        ] {
            let error = parse_request(line).unwrap_err();
            assert!(error.starts_with("bad request"), "{line}: {error}");
        }
        let line = format!(r#"{{"protocol":{PROTOCOL_VERSION},"verb":"frobnicate"}}"#);
        let error = parse_request(&line).unwrap_err();
        assert!(error.contains("frobnicate"), "{error}");
    }

    /// A request of the flat shape that protocol 1 had (`"verb": "pool scrub"`), which this
    /// build cannot parse, is refused for its version, with the message that says what to
    /// restart, not with the parser's complaint about an unknown verb.
    #[test]
    fn a_request_of_an_older_shape_is_refused_for_its_version() {
        let line = r#"{"protocol":1,"verb":"pool scrub","args":{"pool":"t","action":"start"}}"#;
        let error = parse_request(line).unwrap_err();
        assert!(error.contains("protocol 1"), "{error}");
        assert!(error.contains("tarn daemon --stop"), "{error}");
    }

    #[test]
    fn responses_tolerate_missing_optional_fields() {
        let response: Response = serde_json::from_str(r#"{"status":0}"#).unwrap();
        assert_eq!(response.status, 0);
        assert!(!response.not_imported);
        assert!(response.data.is_null());
    }
}
