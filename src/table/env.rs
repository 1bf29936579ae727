//! What the parts that write a table (the held table, the append transaction, table creation)
//! need of the registrar around them, lent by the committer for each call: the catalog, the
//! sink's settings, where to report, the shutdown signal, the segment log's history and the
//! test seams. Naming them here keeps the table layer free of the actors above it.

use std::sync::Arc;

use object_store::ObjectStore;

use crate::catalog::{RestClient, TableName};
use crate::config::RegistrarConfig;
use crate::error::{Error, ErrorCode};
use crate::protocol::feed::SegmentHistory;
use crate::runtime::shutdown::Shutdown;
use crate::runtime::status::StatusBoard;
use crate::table::hooks::{self, Hooks};

/// What a table's writer borrows from the registrar (see the module docs).
#[derive(Clone, Copy)]
pub(crate) struct Env<'a> {
    pub client: &'a RestClient,
    pub config: &'a RegistrarConfig,
    pub status: &'a StatusBoard,
    pub shutdown: &'a Shutdown,
    /// The feed's random access to its records, to check watermarks against; `None` for feeds
    /// whose catalog ids never reuse a seq.
    pub history: Option<&'a Arc<dyn SegmentHistory>>,
    pub hooks: &'a Hooks,
    /// The store of the sink's `url` (the segments' bucket), where fleet intents lie.
    pub store: &'a Arc<dyn ObjectStore>,
}

impl Env<'_> {
    /// Recorded in every snapshot summary so operators can tell who wrote what.
    pub(crate) fn writer_id(&self) -> String {
        format!("thadam-iceberg/{}/{}", self.config.id, self.config.pipeline)
    }

    /// Now, by the test clock when there is one.
    pub fn now_ms(&self) -> i64 {
        hooks::now_ms(self.hooks.clock.as_ref())
    }

    /// Now by this node's wall clock (its snapshots' timestamps): the test's skewed clock when
    /// there is one.
    pub fn node_now_ms(&self) -> i64 {
        hooks::now_ms(self.hooks.node_clock.as_ref())
    }

    /// `sink.iceberg_table_missing` for `table`: where it was looked for (`catalog_uri` formats
    /// without credentials and query string) and the fix. `while_running`: it was there and is
    /// gone (dropped while the registrar ran), rather than absent when the committer started.
    pub(crate) fn table_missing(&self, table: &TableName, while_running: bool) -> Error {
        missing_table_error(table, self.config, while_running)
    }
}

fn missing_table_error(table: &TableName, config: &RegistrarConfig, while_running: bool) -> Error {
    let how = if while_running {
        " (it was dropped while the registrar ran, or never created)"
    } else {
        ""
    };
    Error::new(
        ErrorCode::TableMissing,
        format!(
            "table {table} does not exist in the catalog at {}{how}; create it, or set \
             create_table: true on sink {} to let the registrar create it",
            config.catalog_uri, config.id
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_table_names_the_catalog_without_its_secrets() {
        let config = crate::config::RegistrarConfig::builder()
            .id("lake")
            .pipeline("p1")
            .segments_dir("/data/seg")
            .dataset("telemetry")
            .url("s3://bucket/prefix")
            .catalog_uri("https://cat.example/api?secret=abc&x=y#frag")
            .namespace("ns")
            .build()
            .expect("valid");
        let table = TableName {
            namespace: vec!["ns".into()],
            name: "telemetry".into(),
        };
        for (while_running, says) in [(true, "dropped while the registrar ran"), (false, "")] {
            let err = missing_table_error(&table, &config, while_running);
            assert_eq!(err.code(), ErrorCode::TableMissing);
            for text in [err.to_string(), format!("{err:?}")] {
                assert!(
                    text.contains(
                        "table ns.telemetry does not exist in the catalog at \
                                   https://cat.example/api"
                    ),
                    "{text}"
                );
                assert!(text.contains(says), "{text}");
                assert!(text.contains("create_table: true on sink lake"), "{text}");
                for secret in ["secret", "abc", "x=y", "frag"] {
                    assert!(!text.contains(secret), "{secret} in {text}");
                }
            }
        }
    }
}
