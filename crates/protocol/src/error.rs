//! The one error type of the command line: a failure the user should read.

use tarn::PoolError;

/// A failure the user should read: printed to stderr, exit status 1.
#[derive(Debug)]
pub struct Failure(pub String);

impl From<PoolError> for Failure {
    fn from(error: PoolError) -> Self {
        Failure(error.to_string())
    }
}

impl From<String> for Failure {
    fn from(error: String) -> Self {
        Failure(error)
    }
}

/// Exit status of a command.
pub type Status = u8;
