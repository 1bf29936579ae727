//! Object storage: the S3 client for the configured bucket ([`store`]: the one client builder,
//! with object [`keys`], S3 [`status`] classes, [`credentials`] and how failures are classified
//! ([`classify`])), iceberg's FileIO over the same client ([`file_io`]), and reading a segment's
//! Parquet footer through it ([`footer`]). The FileIOs of the catalog client share their built
//! clients ([`clients`]). A client can have every request signed remotely ([`signer`]), and
//! counts its requests by kind ([`requests`]).

pub(crate) mod classify;
pub(crate) mod clients;
mod connector;
pub(crate) mod credentials;
pub(crate) mod file_io;
pub(crate) mod footer;
pub(crate) mod keys;
pub(crate) mod requests;
pub(crate) mod signer;
pub(crate) mod status;
pub(crate) mod store;
