//! The YAML as written: the `sinks:` list, and serde structs for the sink configs the registrar
//! reads.
//!
//! Every leaf is kept as an unresolved [`Value`] and converted later by `field::Ctx`, which knows
//! the key path and resolves `${file:}`/`${env:}`. Two reasons: serde's type errors do not say
//! which key they are about, and deserialising resolved text could echo a secret inside a serde
//! message ("invalid type: string ..."). Here serde only checks key names, which is what
//! `deny_unknown_fields` is for.

use std::collections::HashMap;

use serde::Deserialize;
use serde_yaml_ng::Value;

use crate::error::{Error, Result};

/// One entry of `sinks:`.
#[derive(Debug)]
pub(crate) struct RawSink {
    pub id: String,
    pub kind: String,
    /// The `config:` value, not yet interpreted (other kinds' configs are never looked at).
    pub config: Value,
}

/// `kind: iceberg`: exactly the spec's keys.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawIceberg {
    pub from: Option<Value>,
    pub pipeline: Option<Value>,
    pub catalog_uri: Option<Value>,
    pub catalog_ca_file: Option<Value>,
    pub catalog_token: Option<Value>,
    pub catalog_credential: Option<Value>,
    pub catalog_client_cert: Option<Value>,
    pub catalog_client_key: Option<Value>,
    pub catalog_warehouse: Option<Value>,
    pub catalog_headers: Option<Value>,
    pub catalog_sigv4: Option<Value>,
    pub url: Option<Value>,
    pub namespace: Option<Value>,
    pub create_table: Option<Value>,
    pub table_location: Option<Value>,
    pub partition_by: Option<Value>,
    pub store: Option<Value>,
    pub retry: Option<Value>,
    pub commit: Option<Value>,
    pub footer_readers: Option<Value>,
    pub memory: Option<Value>,
    pub unready_after: Option<Value>,
    pub on_bad_segment: Option<Value>,
    pub quarantine_file: Option<Value>,
    pub table_properties: Option<Value>,
    pub snapshot_retention: Option<Value>,
}

/// `catalog_credential:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCredential {
    pub client_id: Option<Value>,
    pub client_secret: Option<Value>,
    pub scope: Option<Value>,
    pub oauth2_server_uri: Option<Value>,
    pub client_auth: Option<Value>,
}

/// `catalog_sigv4:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSigV4 {
    pub region: Option<Value>,
    pub signing_name: Option<Value>,
    pub access_key_id: Option<Value>,
    pub secret_access_key: Option<Value>,
    pub session_token: Option<Value>,
}

/// `store:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStore {
    pub endpoint: Option<Value>,
    pub region: Option<Value>,
    pub allow_http: Option<Value>,
    pub access_key_id: Option<Value>,
    pub secret_access_key: Option<Value>,
    pub credentials: Option<Value>,
}

/// `retry:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRetry {
    pub initial: Option<Value>,
    pub max: Option<Value>,
    pub jitter: Option<Value>,
}

/// `commit:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCommit {
    pub max_segments: Option<Value>,
    pub max_bytes: Option<Value>,
    pub linger: Option<Value>,
    pub min_interval: Option<Value>,
    pub intents: Option<Value>,
    pub intents_key: Option<Value>,
}

/// `memory:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMemory {
    pub segments: Option<Value>,
    pub footer_bytes: Option<Value>,
}

/// `snapshot_retention:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRetention {
    pub max_age: Option<Value>,
    pub min_snapshots: Option<Value>,
}

/// `kind: parquet`: only what the registrar needs; thadam's other keys are ignored.
#[derive(Debug, Deserialize)]
pub(crate) struct RawParquet {
    pub dir: Option<Value>,
    pub catalog: Option<Value>,
    pub unsigned: Option<Value>,
    pub datasets: Option<Value>,
}

/// `kind: object_store` (the shipper): only the keys the registrar must agree with.
#[derive(Debug, Deserialize)]
pub(crate) struct RawObjectStore {
    pub from: Option<Value>,
    pub pipeline: Option<Value>,
    pub url: Option<Value>,
}

/// Parses the document and checks the `sinks:` list (rule 1).
pub(crate) fn parse_sinks(text: &str) -> Result<Vec<RawSink>> {
    let mut doc: Value = serde_yaml_ng::from_str(text).map_err(|e| syntax_error(&e))?;
    // `<<: *anchor` merge keys are common in hand-written configs; without this they would
    // reach deny_unknown_fields as a key named `<<`.
    doc.apply_merge().map_err(|e| syntax_error(&e))?;
    let Some(list) = doc.get("sinks") else {
        return Err(Error::config_invalid(
            "no top-level `sinks:` list; the registrar reads its `kind: iceberg` sinks from it",
        ));
    };
    let Value::Sequence(items) = list else {
        return Err(Error::config_invalid(
            "`sinks` must be a list of {id, kind, config} entries",
        ));
    };
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut sinks = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let sink = parse_sink(index, item)?;
        if let Some(first) = seen.insert(sink.id.clone(), index) {
            return Err(Error::config_invalid(format!(
                "sinks[{index}]: id \"{}\" is already used by sinks[{first}]; sink ids must be \
                 unique, rename one",
                sink.id
            )));
        }
        sinks.push(sink);
    }
    Ok(sinks)
}

fn parse_sink(index: usize, item: &Value) -> Result<RawSink> {
    let at = format!("sinks[{index}]");
    if !item.is_mapping() {
        return Err(Error::config_invalid(format!(
            "{at}: a sink must be a mapping with `id`, `kind` and `config`"
        )));
    }
    let id = match item.get("id") {
        Some(Value::String(id)) if !id.is_empty() => id.clone(),
        None | Some(Value::Null) => {
            return Err(Error::config_invalid(format!(
                "{at}.id: is required; give the sink a unique id"
            )));
        }
        Some(_) => {
            return Err(Error::config_invalid(format!(
                "{at}.id: must be a non-empty string"
            )));
        }
    };
    let kind = match item.get("kind") {
        Some(Value::String(kind)) if !kind.is_empty() => kind.clone(),
        _ => {
            return Err(Error::config_invalid(format!(
                "sink \"{id}\": kind: is required and must be a string (e.g. parquet, \
                 object_store, iceberg)"
            )));
        }
    };
    let config = match item.get("config") {
        Some(Value::Null) | None => {
            return Err(Error::config_invalid(format!(
                "sink \"{id}\": config: is required; add the sink's `config:` mapping"
            )));
        }
        Some(config) => config.clone(),
    };
    Ok(RawSink { id, kind, config })
}

/// Rule 18: a YAML error gives the line and column when libyaml knows them (the caller adds the
/// file's path).
fn syntax_error(e: &serde_yaml_ng::Error) -> Error {
    // serde_yaml_ng's message already ends with "at line L column C" when it has a location;
    // keep it and make sure the location is there even if a future version drops it.
    let mut msg = format!("invalid YAML: {e}");
    if let Some(loc) = e.location()
        && !msg.contains("line")
    {
        msg.push_str(&format!(" at line {} column {}", loc.line(), loc.column()));
    }
    Error::config_invalid(msg)
}
