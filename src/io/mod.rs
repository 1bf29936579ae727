//! Object storage: the S3 client for the configured bucket ([`store`]: the one client builder,
//! with object [`keys`], S3 [`status`] classes, [`credentials`] and how failures are classified
//! ([`classify`])), iceberg's FileIO over the same client ([`file_io`]), and reading a segment's
//! Parquet footer through it ([`footer`]). The FileIOs of the catalog client share their built
//! clients ([`clients`]). A client can have every request signed remotely ([`signer`]).

pub mod classify;
pub mod clients;
mod connector;
pub mod credentials;
pub mod file_io;
pub mod footer;
pub mod keys;
pub mod signer;
pub mod status;
pub mod store;
