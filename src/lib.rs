//! # thadam-iceberg: the Iceberg registrar
//!
//! Registers Parquet segments that a pipeline has already shipped to object storage into Apache
//! Iceberg tables through a REST catalog, with metadata-only appends: no data is rewritten. Each
//! table's schema follows the files by Parquet field ID, every file is registered exactly once
//! (crashes, restarts, lost responses and concurrent writers included), and none is dropped.
//!
//! An embedding runtime needs only the names at this root:
//!
//! - [`Config`] (a thadam YAML file) or [`RegistrarConfig::builder`] (a config made in code,
//!   checked by the same rules) for what to run;
//! - [`Registrar::builder`] to start it, fed by the parquet sink's segment catalog file or by
//!   the host's own catalog through a [`SegmentFeed`] such as [`ChannelFeed`] (each entry an
//!   [`UploadedSegment`]);
//! - the [`RegistrarHandle`] it returns: [`RegistrarHandle::status`], [`RegistrarHandle::updates`],
//!   `stop` and `wait`;
//! - [`Error`] with its stable [`ErrorCode`].
//!
//! How a segment travels from the log line to the snapshot is in the README's "How it works"
//! (in detail: docs/operations.md); by module: [`protocol`] (what comes in and what the actors
//! exchange), `actors` (who does what), `table` (what a commit is made of; one append attempt
//! reads top to bottom in `table::append::transaction`), `catalog` (how it reaches the catalog),
//! `io` (object storage), [`runtime`] (shutdown, retries, status, metrics), [`ops`] (running it
//! as a service). Only [`config`], [`protocol`], [`runtime`], [`ops`] and the names below are
//! public; the rest are internals, and [`testing`] names those the project's own tests and tools
//! use.

pub mod config;
pub mod ops;
pub mod protocol;
pub mod runtime;
pub mod testing;

mod actors;
mod catalog;
mod error;
mod io;
mod registrar;
mod secret;
mod table;

pub use actors::tuning::Tuning;
pub use config::{Config, ConfigBuilder, RegistrarConfig};
pub use error::{Error, ErrorCode, Result};
pub use protocol::feed::{ChannelFeed, FeedSender, SegmentFeed};
pub use protocol::segment::UploadedSegment;
pub use registrar::{Registrar, RegistrarBuilder, RegistrarHandle};
pub use runtime::status::{RegistrarStatus, StatusUpdates};

// The unit tests write real Parquet files with the examples' demo helpers, which name the crate
// as its users do.
#[cfg(test)]
extern crate self as thadam_iceberg;
#[cfg(test)]
#[path = "../examples/support/demo.rs"]
mod demo;
