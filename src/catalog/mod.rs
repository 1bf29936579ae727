//! The Iceberg REST catalog, as the registrar uses it.
//!
//! `rest` speaks the protocol (with the request and response types of `iceberg-catalog-rest`)
//! through our own HTTP client, because the registrar needs what `RestCatalog` 0.10.1 cannot give:
//! a token that can change between requests, a 409 told apart from a lost response, auth failures
//! told apart from outages, idempotency keys, and direct schema commits. A commit's failure
//! comes back as a [`CommitFailure`]: what happened on the wire; what it means for the writer is
//! decided by the writer (`table::append::retry`). `sigv4` signs each
//! request when `catalog_sigv4` is set (AWS Glue, S3 Tables); `access` keeps the S3 credentials
//! a catalog vends with a table, or its remote signing, which `signer` speaks. `error_message`
//! reads what an error answer says, for `rest` and `signer` alike.

pub(crate) mod access;
pub(crate) mod auth;
pub(crate) mod error_message;
pub(crate) mod outcome;
pub(crate) mod rest;
pub(crate) mod signer;
pub(crate) mod sigv4;
pub(crate) mod table_name;
pub(crate) mod tls;

pub use rest::{CommitFailure, CommitRequest, RestClient, Staged, TableName};
