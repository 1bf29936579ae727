//! The Iceberg REST catalog, as the registrar uses it.
//!
//! `rest` speaks the protocol (with the request and response types of `iceberg-catalog-rest`)
//! through our own HTTP client, because the registrar needs what `RestCatalog` 0.10.1 cannot give:
//! a token that can change between requests, a 409 told apart from a lost response, auth failures
//! told apart from outages, idempotency keys, and direct schema commits. A commit's failure
//! comes back as a [`CommitError`] (classified by status, see `outcome`), and `commit_retry`
//! says what a writer does next. `sigv4` signs each
//! request when `catalog_sigv4` is set (AWS Glue, S3 Tables); `access` keeps the S3 credentials
//! a catalog vends with a table, or its remote signing, which `signer` speaks. `error_message`
//! reads what an error answer says, for `rest` and `signer` alike.

pub mod access;
pub mod auth;
pub mod commit_retry;
pub(crate) mod error_message;
pub mod outcome;
pub mod rest;
pub mod signer;
pub mod sigv4;
pub mod table_name;
pub mod tls;

pub use outcome::{CallKind, StatusOutcome, classify_status};
pub use rest::{CommitError, RestClient, Staged, TableName};
