//! Turning one sink's raw YAML values into resolved, typed values, with errors that name the sink
//! and the key path (`sink "iceberg": config.store.region: ...`).
//!
//! Messages never quote the value of a secret key, nor the text of a value that failed to
//! resolve or has the wrong type; callers quote non-secret values (names, URLs, durations) only
//! where it helps the operator fix them.

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_yaml_ng::Value;

use super::interpolate;
use crate::error::Error;
use crate::secret::Secret;

/// The sink being read and the directory relative paths are resolved against.
pub(crate) struct Ctx<'a> {
    pub sink: &'a str,
    pub base_dir: &'a Path,
}

impl Ctx<'_> {
    /// A `config.invalid` error about `key` (a path below the sink, e.g. `config.url`).
    pub fn err(&self, key: &str, msg: impl Display) -> Error {
        Error::config_invalid(format!("sink \"{}\": {key}: {msg}", self.sink))
    }

    /// Deserialises a mapping-valued section (`config`, `config.store`, ...) into its raw
    /// struct. serde then reports only key problems (unknown or duplicate keys), never values.
    pub fn section<T: DeserializeOwned>(&self, key: &str, value: &Value) -> Result<T, Error> {
        // Checked here so serde never gets to say "invalid type: string <the value>".
        if !value.is_mapping() {
            return Err(self.err(key, "must be a mapping of keys to values"));
        }
        serde_yaml_ng::from_value(value.clone()).map_err(|e| {
            self.err(
                key,
                format!("{e}; remove the key or fix its spelling (a typo never passes silently)"),
            )
        })
    }

    /// [`Ctx::section`] for a key that may be absent (or null).
    pub fn optional_section<T: DeserializeOwned>(
        &self,
        key: &str,
        value: Option<&Value>,
    ) -> Result<Option<T>, Error> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(value) => self.section(key, value).map(Some),
        }
    }

    /// A string value with references resolved. Integers are accepted as their decimal text;
    /// other non-strings are refused (a float such as `1.10` would not survive as text).
    pub fn text(&self, key: &str, value: Option<&Value>) -> Result<Option<String>, Error> {
        let Some(raw) = self.literal(key, value)? else {
            return Ok(None);
        };
        interpolate::resolve(&raw, self.base_dir)
            .map(Some)
            .map_err(|e| self.err(key, e.0))
    }

    /// The value as written, before resolution.
    fn literal(&self, key: &str, value: Option<&Value>) -> Result<Option<String>, Error> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Ok(Some(n.to_string())),
            Some(_) => Err(self.err(key, "must be a string (quote it)")),
        }
    }

    /// A required, non-empty string; `how` says what to set it to.
    pub fn required(&self, key: &str, value: Option<&Value>, how: &str) -> Result<String, Error> {
        match self.text(key, value)? {
            Some(s) if !s.is_empty() => Ok(s),
            Some(_) => Err(self.err(key, format!("must not be empty; {how}"))),
            None => Err(self.err(key, format!("is required; {how}"))),
        }
    }

    /// An optional string that must not be empty when present.
    pub fn optional(&self, key: &str, value: Option<&Value>) -> Result<Option<String>, Error> {
        match self.text(key, value)? {
            Some(s) if s.is_empty() => {
                Err(self.err(key, "must not be empty; omit the key instead"))
            }
            other => Ok(other),
        }
    }

    /// A secret value. Same as [`Ctx::text`], but wrapped at once so it can't leak by accident.
    pub fn secret(&self, key: &str, value: Option<&Value>) -> Result<Option<Secret>, Error> {
        Ok(self.text(key, value)?.map(Secret::new))
    }

    /// A boolean: YAML `true`/`false`, or a string resolving to `true`/`false`.
    pub fn flag(&self, key: &str, value: Option<&Value>) -> Result<Option<bool>, Error> {
        let text = match value {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Bool(b)) => return Ok(Some(*b)),
            Some(Value::String(_)) => self.text(key, value)?.unwrap_or_default(),
            Some(_) => String::new(),
        };
        match text.as_str() {
            "true" => Ok(Some(true)),
            "false" => Ok(Some(false)),
            _ => Err(self.err(key, "must be true or false")),
        }
    }

    /// A file-system path; relative paths are relative to the config file's directory.
    pub fn path(&self, key: &str, value: Option<&Value>) -> Result<Option<PathBuf>, Error> {
        Ok(self.optional(key, value)?.map(|p| self.base_dir.join(p)))
    }

    /// A positive whole number (YAML integer, or a string resolving to one).
    pub fn count(&self, key: &str, value: Option<&Value>) -> Result<Option<u64>, Error> {
        let Some(text) = self.text(key, value)? else {
            return Ok(None);
        };
        match text.trim().parse::<u64>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err(self.err(key, "must be a whole number greater than 0")),
        }
    }

    /// A size in bytes: a number, or a number with a unit (`512MiB`, `1 GiB`, `64MB`).
    pub fn byte_size(&self, key: &str, value: Option<&Value>) -> Result<Option<u64>, Error> {
        let Some(text) = self.text(key, value)? else {
            return Ok(None);
        };
        match text.trim().parse::<bytesize::ByteSize>() {
            Ok(size) if size.as_u64() > 0 => Ok(Some(size.as_u64())),
            _ => Err(self.err(
                key,
                "must be a size greater than 0, e.g. 512MiB, 1GiB or a number of bytes",
            )),
        }
    }

    /// A humantime duration (`1s`, `500ms`, `2m`).
    pub fn duration(&self, key: &str, value: Option<&Value>) -> Result<Option<Duration>, Error> {
        let Some(text) = self.text(key, value)? else {
            return Ok(None);
        };
        humantime::parse_duration(&text).map(Some).map_err(|e| {
            // Quote the value as written, so a `${...}` reference shows as itself. humantime's
            // detail can quote part of the text, so it is left out for resolved references.
            let written = self.literal(key, value).ok().flatten().unwrap_or_default();
            let detail = if written == text {
                format!(" ({e})")
            } else {
                String::new()
            };
            self.err(
                key,
                format!("`{written}` is not a duration{detail}; write e.g. 1s, 500ms or 2m"),
            )
        })
    }
}
