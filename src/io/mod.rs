//! Object storage: the S3 client for the configured bucket and how its failures are classified
//! ([`store`]), iceberg's FileIO over the same client ([`file_io`]), and reading a segment's
//! Parquet footer through it ([`footer`]).

pub mod file_io;
pub mod footer;
pub mod store;
