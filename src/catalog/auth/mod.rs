//! Where catalog requests get their `Authorization` header.
//!
//! Every catalog request (loads, commits, schema commits, namespace creation, registration) asks
//! one [`TokenSource`] for the current bearer token. A static `catalog_token` never changes
//! ([`StaticToken`]); an OAuth2 `catalog_credential` is served by the token refresher actor
//! (`actors::token_refresher::RefreshedToken`), which renews it before it expires and once more when the
//! catalog says it did.

pub(crate) mod oauth2;

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::config::Secret;
use crate::error::Result;

/// A bearer token with the generation it belongs to, so that a 401 on an old token does not
/// trigger a second renewal when another request already renewed it.
#[derive(Clone)]
pub struct BearerToken {
    pub value: Secret,
    pub generation: u64,
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BearerToken(generation {}, ***)", self.generation)
    }
}

#[async_trait]
pub trait TokenSource: Send + Sync + fmt::Debug {
    /// The token to send now, or `None` when the catalog is used without authentication.
    async fn current(&self) -> Result<Option<BearerToken>>;

    /// The catalog rejected `rejected` with 401. Returns a fresh token to retry once with, or
    /// `None` when this source cannot renew (the 401 is then fatal `auth.failed`).
    async fn renew_after_rejection(&self, rejected: &BearerToken) -> Result<Option<BearerToken>>;
}

/// No `Authorization` header at all.
#[derive(Debug, Default)]
pub(crate) struct NoAuth;

#[async_trait]
impl TokenSource for NoAuth {
    async fn current(&self) -> Result<Option<BearerToken>> {
        Ok(None)
    }
    async fn renew_after_rejection(&self, _: &BearerToken) -> Result<Option<BearerToken>> {
        Ok(None)
    }
}

/// A static `catalog_token`: sent as is, never refreshed (the spec: when it expires, the catalog
/// answers 401 and the registrar stops with `auth.failed`).
#[derive(Debug)]
pub(crate) struct StaticToken(BearerToken);

impl StaticToken {
    pub(crate) fn new(token: Secret) -> Self {
        StaticToken(BearerToken {
            value: token,
            generation: 0,
        })
    }
}

#[async_trait]
impl TokenSource for StaticToken {
    async fn current(&self) -> Result<Option<BearerToken>> {
        Ok(Some(self.0.clone()))
    }
    async fn renew_after_rejection(&self, _: &BearerToken) -> Result<Option<BearerToken>> {
        Ok(None)
    }
}

pub(crate) type SharedTokenSource = Arc<dyn TokenSource>;
