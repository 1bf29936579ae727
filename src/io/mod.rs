//! Object storage: the S3 client for the configured bucket and how its failures are classified
//! ([`store`]), iceberg's FileIO over the same client ([`file_io`]), and reading a segment's
//! Parquet footer through it ([`footer`]). The FileIOs of the catalog client share their built
//! clients ([`clients`]). A client can have every request signed remotely ([`signer`]).

pub mod clients;
pub mod file_io;
pub mod footer;
pub mod signer;
pub mod store;
