//! The Iceberg REST catalog, as the registrar uses it.
//!
//! `rest` speaks the protocol (with the request and response types of `iceberg-catalog-rest`)
//! through our own HTTP client, because the registrar needs what `RestCatalog` 0.10.1 cannot give:
//! a token that can change between requests, a 409 told apart from a lost response, auth failures
//! told apart from outages, idempotency keys, and direct schema commits. `adapter` sends the
//! append the registrar built (`table::append`) and keeps its classified failure. `sigv4` signs each
//! request when `catalog_sigv4` is set (AWS Glue, S3 Tables); `access` keeps the S3 credentials
//! a catalog vends with a table.

pub mod access;
pub mod adapter;
pub mod auth;
pub mod commit_retry;
pub mod outcome;
pub mod rest;
pub mod sigv4;
pub mod table_name;
pub mod tls;

pub use outcome::{CallKind, StatusOutcome, classify_status};
pub use rest::{CommitError, RestClient, Staged, TableName, redacted_url};
