//! The transport between the kernel and a mount's serving threads: `/dev/fuse` (a `read` and a
//! `writev` per request) or FUSE over io_uring (per-CPU queues of ring entries; one
//! `io_uring_enter` answers a request and waits for the next). The protocol work for both is in
//! tarn's fork of fuser (`crates/fuser`, module `uring`); this module is what tarn decides
//! around it: which transport a mount asks for, and the host's switch.
//!
//! The kernel offers the ring only while the host-wide module parameter
//! `/sys/module/fuse/parameters/enable_uring` is on. tarn never turns it on behind the user's
//! back: [`TransportChoice::Auto`] uses the ring when the kernel offers it and `/dev/fuse`
//! otherwise, and only an explicit [`TransportChoice::Uring`] (the daemon's
//! `--fuse-transport uring`) calls [`enable_host_uring`], which logs that it did.

use std::io;
use std::sync::OnceLock;

pub use fuser::{OpcodeCount, TransportChoice, TransportState, UringOptions};

/// The host's FUSE-over-io_uring switch.
pub const ENABLE_URING_PARAMETER: &str = "/sys/module/fuse/parameters/enable_uring";

/// The environment variable that sets the transport of mounts made without an explicit one
/// (`dev`, `auto` or `uring`): how a test run, or a daemon started implicitly, picks one.
pub const TRANSPORT_ENV: &str = "TARN_FUSE_TRANSPORT";

/// Parses a transport's name as the command line and [`TRANSPORT_ENV`] spell it.
pub fn parse_transport(name: &str) -> Result<TransportChoice, String> {
    match name {
        "auto" => Ok(TransportChoice::Auto),
        "uring" => Ok(TransportChoice::Uring),
        "dev" => Ok(TransportChoice::Dev),
        other => Err(format!(
            "unknown FUSE transport '{other}': expected auto, uring or dev"
        )),
    }
}

/// The name [`parse_transport`] reads.
pub fn transport_name(choice: TransportChoice) -> &'static str {
    match choice {
        TransportChoice::Auto => "auto",
        TransportChoice::Uring => "uring",
        TransportChoice::Dev => "dev",
    }
}

/// The transport a process's mounts ask for, when set (the daemon's `--fuse-transport`).
static PROCESS_TRANSPORT: OnceLock<TransportChoice> = OnceLock::new();

/// Sets the transport of every mount this process makes from now on (once; a second call is
/// ignored and returns false).
pub fn set_process_transport(choice: TransportChoice) -> bool {
    PROCESS_TRANSPORT.set(choice).is_ok()
}

/// The transport mounts ask for: the process's ([`set_process_transport`]), else the one
/// [`TRANSPORT_ENV`] names, else `auto`.
pub fn default_transport() -> Result<TransportChoice, String> {
    match PROCESS_TRANSPORT.get() {
        Some(choice) => Ok(*choice),
        None => transport_from_env(),
    }
}

/// The transport [`TRANSPORT_ENV`] names, or `auto`; a name that is not one is an error.
pub fn transport_from_env() -> Result<TransportChoice, String> {
    match std::env::var(TRANSPORT_ENV) {
        Ok(name) => parse_transport(name.trim()).map_err(|e| format!("{TRANSPORT_ENV}: {e}")),
        Err(_) => Ok(TransportChoice::Auto),
    }
}

/// Whether the running kernel can serve FUSE over io_uring, and whether it is switched on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostUring {
    /// The kernel has no FUSE over io_uring (before 6.14, or built without it).
    Absent,
    Off,
    On,
}

/// Reads the host's switch.
pub fn host_uring() -> HostUring {
    match std::fs::read_to_string(ENABLE_URING_PARAMETER) {
        Err(_) => HostUring::Absent,
        Ok(text) if matches!(text.trim(), "Y" | "1") => HostUring::On,
        Ok(_) => HostUring::Off,
    }
}

/// Turns the host's switch on, for an explicit `uring` transport, and logs it: the parameter is
/// host-wide (it lets every FUSE server started from now on ask for the ring). Connections made
/// before are unaffected, and it is not turned off again.
pub fn enable_host_uring() -> io::Result<()> {
    match host_uring() {
        HostUring::On => Ok(()),
        HostUring::Absent => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this kernel has no FUSE over io_uring (it needs Linux 6.14 or later, built with \
             CONFIG_FUSE_IO_URING)",
        )),
        HostUring::Off => {
            std::fs::write(ENABLE_URING_PARAMETER, "Y").map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot turn on FUSE over io_uring ({ENABLE_URING_PARAMETER}): {e}"),
                )
            })?;
            log::warn!(
                "FUSE over io_uring enabled host-wide ({ENABLE_URING_PARAMETER}: N -> Y) for \
                 --fuse-transport uring"
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_names_round_trip_and_others_are_refused() {
        for choice in [
            TransportChoice::Auto,
            TransportChoice::Uring,
            TransportChoice::Dev,
        ] {
            assert_eq!(parse_transport(transport_name(choice)), Ok(choice));
        }
        assert!(parse_transport("ring")
            .unwrap_err()
            .contains("auto, uring or dev"));
    }
}
