//! Making the table ready for a batch's files: creating it, or evolving its schema, before the
//! append.

use std::sync::Arc;

use iceberg::table::Table;
use ractor::rpc::CallResult;

use super::{ACCEPTED_SCHEMAS, CommitterState};
use crate::error::{Error, Result};
use crate::protocol::messages::{SchemaMergerMsg, SchemaReconciled};
use crate::table::append::ReadySegment;
use crate::table::quarantine::is_about_the_file;

impl CommitterState {
    /// Brings the table to a schema that covers every file of the batch (created if absent).
    /// A file that cannot be taken for a reason about the file ([`is_about_the_file`]) is the
    /// inner error, with its seq.
    pub(super) async fn reconcile_schema(
        &mut self,
        batch: &[ReadySegment],
    ) -> Result<std::result::Result<(), (u64, Error)>> {
        let mut last_schema: Option<&arrow_schema::SchemaRef> = None;
        for r in batch {
            // Consecutive segments usually share a schema: reconcile each distinct one once.
            if last_schema.is_some_and(|s| s == &r.footer.arrow_schema) {
                continue;
            }
            last_schema = Some(&r.footer.arrow_schema);
            if self.table.is_some() && self.accepted.contains(&r.footer.arrow_schema) {
                continue;
            }
            if self.table.is_none() && !self.ctx().config.create_table {
                return Err(self.table_missing());
            }
            let current = self.table.as_ref().map(Table::metadata_ref);
            let answer = self
                .merger
                .call(
                    |reply| SchemaMergerMsg::Reconcile {
                        current,
                        footer: Arc::clone(&r.footer),
                        reply,
                    },
                    None,
                )
                .await
                .map_err(|e| self.merger_gone(&e.to_string()))?;
            match answer {
                CallResult::Success(Ok(SchemaReconciled::Unchanged)) => {}
                // A created table, or a schema commit's answer: either may hold snapshots other
                // writers added since the batch was filtered.
                CallResult::Success(Ok(SchemaReconciled::Changed(table))) => self.adopt(*table),
                CallResult::Success(Err(e)) if is_about_the_file(e.code()) => {
                    return Ok(Err((r.segment.seq, e)));
                }
                CallResult::Success(Err(e)) => return Err(e),
                CallResult::Timeout | CallResult::SenderError => {
                    return Err(self.merger_gone("it stopped without answering"));
                }
            }
            if self.accepted.len() >= ACCEPTED_SCHEMAS {
                self.accepted.clear();
            }
            self.accepted.push(Arc::clone(&r.footer.arrow_schema));
        }
        Ok(Ok(()))
    }

    /// The schema merger of this table could not answer: it failed (a panic: its message is in
    /// the log) or stopped.
    fn merger_gone(&self, why: &str) -> Error {
        Error::internal(format!(
            "the schema merger of table {} is gone ({why}); the registrar stops, and a restart \
             starts the table again",
            self.name
        ))
    }
}
