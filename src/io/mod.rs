//! Object storage: the S3 client for the configured bucket and how its failures are classified
//! ([`store`]), and reading a segment's Parquet footer through it ([`footer`]).

pub mod footer;
pub mod store;
