//! # thadam-iceberg: the Iceberg registrar
//!
//! Registers Parquet segments that a pipeline has already shipped to object storage into Apache
//! Iceberg tables through a REST catalog, with metadata-only appends: no data is rewritten. Each
//! table's schema follows the files by Parquet field ID, every file is registered exactly once
//! (crashes, restarts, lost responses and concurrent writers included), and none is dropped.
//!
//! Start with [`Registrar`] and [`config::Config`]; feed it from the segment catalog file of a
//! parquet sink, or from your own catalog through [`protocol::feed::SegmentFeed`].

pub mod actors;
pub mod catalog;
pub mod config;
pub mod error;
pub mod io;
pub mod ops;
pub mod protocol;
pub mod registrar;
pub mod runtime;
pub mod table;

pub use error::{Error, ErrorCode, Result};

// The unit tests write real Parquet files with the examples' demo helpers, which name the crate
// as its users do.
#[cfg(test)]
extern crate self as thadam_iceberg;
#[cfg(test)]
#[path = "../examples/support/demo.rs"]
mod demo;
pub use registrar::{Registrar, RegistrarHandle};
