//! Making the table ready for a batch's files: creating it, or evolving its schema, before the
//! append.

use std::sync::Arc;

use super::{ACCEPTED_SCHEMAS, CommitterState};
use crate::error::{Error, Result};
use crate::protocol::messages::SchemaMergerMsg;
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
            let table = self.table.clone();
            let table = self
                .args
                .merger
                .call(
                    |reply| SchemaMergerMsg::Reconcile {
                        table_name: self.name.clone(),
                        dataset: self.args.dataset.clone(),
                        table,
                        footer: Arc::clone(&r.footer),
                        reply,
                    },
                    None,
                )
                .await
                .map_err(|e| Error::internal(format!("the schema merger is gone: {e}")))?;
            let table = match table {
                ractor::rpc::CallResult::Success(Ok(table)) => table,
                ractor::rpc::CallResult::Success(Err(e)) if is_about_the_file(e.code()) => {
                    return Ok(Err((r.segment.seq, e)));
                }
                ractor::rpc::CallResult::Success(Err(e)) => return Err(e),
                _ => return Err(Error::internal("the schema merger did not answer")),
            };
            let unchanged = self.table.as_ref().is_some_and(|t| {
                t.metadata_location() == table.metadata_location()
                    && t.metadata().current_snapshot_id() == table.metadata().current_snapshot_id()
            });
            if !unchanged {
                // A created table, or a schema commit's answer: either may hold snapshots other
                // writers added since the batch was filtered.
                self.adopt(table);
            }
            if self.accepted.len() >= ACCEPTED_SCHEMAS {
                self.accepted.clear();
            }
            self.accepted.push(Arc::clone(&r.footer.arrow_schema));
        }
        Ok(Ok(()))
    }
}
