//! [`Secret`]: a string that must never reach a log line, an error message or a `Debug` dump.
//! Below every module that holds one (config, io, catalog); `crate::config::Secret` is its public
//! path.

use std::fmt;

/// A secret value (bearer token, OAuth2 client secret, S3 keys), already resolved from
/// `${file:...}` / `${env:...}`.
///
/// `Debug` prints `Secret(***)` and `Display` prints `***`, so a config struct that derives
/// `Debug` can be logged safely. The value is reachable only through [`Secret::expose`], which
/// makes every place that uses it easy to find. There is deliberately no `Serialize`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value. Callers build secrets from config input only.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret value, for the one place that must send it (a header, a form body, a signer).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}
