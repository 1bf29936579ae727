//! The registrar's actors, one job each. They talk only through `crate::protocol::messages`.
//!
//! - [`supervisor`]: starts the others, routes segments to committers, stops everything on a
//!   fatal error and reports its code.
//! - [`watcher`]: tails the segment feed.
//! - [`footer_pool`]: a pool of footer readers, so footer I/O runs in parallel.
//! - [`committer`]: one per table; serialises that table's appends.
//! - [`schema_merger`]: one per table, the committer's child; creates the table and keeps its
//!   schema in step with the files.
//! - [`token_refresher`]: owns the OAuth2 access token of a `catalog_credential` and renews it.

pub(crate) mod committer;
pub(crate) mod context;
pub(crate) mod footer_pool;
pub(crate) mod schema_merger;
pub(crate) mod supervisor;
pub(crate) mod token_refresher;
pub(crate) mod tuning;
pub(crate) mod watcher;

/// ractor's error type for handlers; our `Error` travels inside it and is recovered by the
/// supervisor with a downcast.
pub(crate) type HandlerResult = Result<(), ractor::ActorProcessingErr>;
