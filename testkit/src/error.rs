//! Why a test server could not be started or driven.

/// A server that would not start, a cluster that would not form, or a
/// command to one of them that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A process could not be started, or did not become ready in time.
    #[error("{0}")]
    Setup(String),
    /// The server binary lacks what the test asked of it (a build without
    /// TLS): the test is skipped with this message, not failed.
    #[error("{0}")]
    Unsupported(String),
    /// A command to a server failed.
    #[error("redis error: {0}")]
    Redis(#[from] redis::RedisError),
}

/// The result of a test-server call.
pub type Result<T> = std::result::Result<T, Error>;
