//! The schema merger: makes a table ready for a file before the file is appended.
//!
//! For each footer it converts the file's schema (keeping its field IDs), then either creates the
//! table from it (`create_table: true`, table absent), or merges it into the table's schema by
//! field ID. A change is committed on its own, straight to the REST endpoint, *before* the append:
//! a crash between the two leaves an evolved table and a segment still in the catalog, and the
//! next attempt re-derives "nothing to change" and only appends.

use std::collections::HashMap;

use iceberg::spec::Schema;
use iceberg::table::Table;
use iceberg::{TableRequirement, TableUpdate};
use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::actors::HandlerResult;
use crate::actors::context::SharedContext;
use crate::catalog::{CommitError, TableName};
use crate::error::{Error, ErrorCode, Result};
use crate::protocol::messages::SchemaMergerMsg;
use crate::runtime::retry::{Op, retry_transient};
use crate::table::create::create_table;
use crate::table::partition;
use crate::table::schema::convert::file_schema;
use crate::table::schema::merge::{FieldHistory, MergeOutcome, merge_table};

pub struct SchemaMerger;

impl Actor for SchemaMerger {
    type Msg = SchemaMergerMsg;
    type State = SharedContext;
    type Arguments = SharedContext;

    async fn pre_start(
        &self,
        _: ActorRef<Self::Msg>,
        ctx: SharedContext,
    ) -> Result<SharedContext, ActorProcessingErr> {
        Ok(ctx)
    }

    async fn handle(
        &self,
        _: ActorRef<Self::Msg>,
        msg: SchemaMergerMsg,
        ctx: &mut SharedContext,
    ) -> HandlerResult {
        let SchemaMergerMsg::Reconcile {
            table_name,
            dataset,
            table,
            footer,
            reply,
        } = msg;
        let result = match file_schema(&footer.arrow_schema, &dataset) {
            Ok(schema) => reconcile(ctx, &table_name, &dataset, table, &schema).await,
            Err(e) => Err(e),
        };
        // The committer decides what a failure means (it stops the service on fatal ones).
        let _ = reply.send(result);
        Ok(())
    }
}

async fn reconcile(
    ctx: &SharedContext,
    name: &TableName,
    dataset: &str,
    table: Option<Table>,
    file: &Schema,
) -> Result<Table> {
    let mut shutdown = ctx.shutdown.clone();
    let mut table = match table {
        Some(t) => {
            warn_if_partition_by_ignored(ctx, name, &t);
            t
        }
        None => {
            let location = ctx.table_location(dataset);
            let props = crate::table::create::creation_properties(
                &ctx.config.table_properties,
                HashMap::from([
                    ("thadam.pipeline".to_string(), ctx.config.pipeline.clone()),
                    ("thadam.dataset".to_string(), dataset.to_string()),
                    ("thadam.created-by".to_string(), ctx.writer_id()),
                ]),
            );
            let created = retry_transient(
                Op::Create,
                ctx.retry(),
                &mut shutdown,
                "creating the table",
                || {
                    create_table(
                        &ctx.client,
                        name,
                        file,
                        ctx.config.table_location,
                        &location,
                        props.clone(),
                        &ctx.config.partition_by,
                    )
                },
            )
            .await?;
            // A table that appeared meanwhile (another writer) comes back from register; merge
            // into it like into any existing table.
            created.ok_or_else(shutting_down)?
        }
    };
    loop {
        let current = table.metadata().current_schema();
        let next_id = table
            .metadata()
            .schemas_iter()
            .map(|s| s.schema_id())
            .max()
            .unwrap_or(0)
            + 1;
        let evolved = match merge_table(current, &FieldHistory::of(table.metadata()), file, next_id)
        {
            Ok(MergeOutcome::Unchanged) => return Ok(table),
            Ok(MergeOutcome::Evolved { schema, changes }) => {
                for change in &changes {
                    tracing::info!(table = %name, "schema change: {change}");
                }
                schema
            }
            Err(mismatch) => return Err(mismatch.into_error(&name.to_string())),
        };
        let requirements = vec![
            TableRequirement::UuidMatch {
                uuid: table.metadata().uuid(),
            },
            TableRequirement::CurrentSchemaIdMatch {
                current_schema_id: current.schema_id(),
            },
            TableRequirement::LastAssignedFieldIdMatch {
                last_assigned_field_id: table.metadata().last_column_id(),
            },
        ];
        let updates = vec![
            TableUpdate::AddSchema { schema: evolved },
            TableUpdate::SetCurrentSchema { schema_id: -1 },
        ];
        let committed = tokio::select! {
            c = ctx.client.commit(name, requirements, updates, None) => c,
            _ = shutdown.requested() => return Err(shutting_down()),
        };
        match committed {
            Ok(t) => {
                metrics::counter!("thadam_iceberg_schema_changes_total", "table" => name.to_string())
                    .increment(1);
                tracing::info!(table = %name, schema_id = t.metadata().current_schema_id(), "schema evolved");
                return Ok(t);
            }
            // Someone else changed the table, or we do not know whether our change landed:
            // reload and derive the change again against what the table is now.
            Err(CommitError::Conflict(why)) => {
                tracing::info!(table = %name, "schema commit conflicted ({why}); reloading");
            }
            Err(CommitError::Unknown(e)) | Err(CommitError::NotApplied(e)) => {
                crate::runtime::retry::count_retry(Op::SchemaCommit, e.retry_cause());
                tracing::warn!(table = %name, "schema commit outcome unknown or failed ({e}); reloading");
                if !shutdown
                    .sleep(crate::runtime::retry::delay_for(ctx.retry(), 0, &e))
                    .await
                {
                    return Err(shutting_down());
                }
            }
            Err(CommitError::Fatal(e)) => return Err(e),
        }
        table = retry_transient(
            Op::Load,
            ctx.retry(),
            &mut shutdown,
            "reloading the table",
            || ctx.client.load_table(name),
        )
        .await?
        .ok_or_else(shutting_down)?
        .ok_or_else(|| {
            Error::new(
                ErrorCode::TableMissing,
                format!("table {name} disappeared while its schema was being changed"),
            )
        })?;
    }
}

/// `partition_by` shapes only the tables the registrar creates: an existing table keeps its own
/// default spec (its owner may have evolved it on purpose), so a differing `partition_by` is
/// reported once, not applied, and not an error.
fn warn_if_partition_by_ignored(ctx: &SharedContext, name: &TableName, table: &Table) {
    let terms = &ctx.config.partition_by;
    let metadata = table.metadata();
    let spec = metadata.default_partition_spec();
    let schema = metadata.current_schema();
    if terms.is_empty() || partition::spec_matches(terms, spec, schema) {
        return;
    }
    let wanted: Vec<String> = terms.iter().map(ToString::to_string).collect();
    crate::table::column_stats::warn_once(format!(
        "table {name} exists with partition spec {} (spec id {}); partition_by [{}] of sink {} \
         applies only to tables the registrar creates, so files are registered under the \
         table's spec",
        partition::describe_spec(spec, schema),
        spec.spec_id(),
        wanted.join(", "),
        ctx.config.id
    ));
}

fn shutting_down() -> Error {
    Error::cancelled()
}
