//! A table's schema merger: makes the table ready for a file before the file is appended.
//!
//! For each footer it converts the file's schema (keeping its field IDs), then either creates the
//! table from it (`create_table: true`, table absent), or merges it into the table's schema by
//! field ID. A change is committed on its own, straight to the REST endpoint, *before* the append:
//! a crash between the two leaves an evolved table and a segment still in the catalog, and the
//! next attempt re-derives "nothing to change" and only appends.
//!
//! There is one per table, a child of that table's committer: each table serialises its own
//! commits, schema commits (and their backoff) included, and one table's slow or failing schema
//! commit never holds up another table. The committer stays the only owner of its table: it lends
//! the merger a read-only view of the metadata it holds, and the merger answers with the version
//! of the table the committer must adopt, if any; the merger keeps nothing between requests.

use std::collections::HashMap;

use iceberg::spec::{Schema, TableMetadata, TableMetadataRef};
use iceberg::table::Table;
use iceberg::{TableRequirement, TableUpdate};
use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::actors::HandlerResult;
use crate::actors::context::SharedContext;
use crate::catalog::commit_retry::{Failures, Next, after_failure};
use crate::catalog::{CommitError, TableName};
use crate::error::{Error, ErrorCode, Result};
use crate::protocol::messages::{SchemaMergerMsg, SchemaReconciled};
use crate::runtime::retry::{Op, ReportTo, retry_transient};
use crate::table::create::create_table;
use crate::table::partition;
use crate::table::schema::convert::file_schema;
use crate::table::schema::merge::{FieldHistory, MergeOutcome, merge_table};

pub struct SchemaMerger;

/// The table a merger serves.
pub struct SchemaMergerArgs {
    pub ctx: SharedContext,
    pub dataset: String,
}

pub struct SchemaMergerState {
    ctx: SharedContext,
    dataset: String,
    name: TableName,
}

impl Actor for SchemaMerger {
    type Msg = SchemaMergerMsg;
    type State = SchemaMergerState;
    type Arguments = SchemaMergerArgs;

    async fn pre_start(
        &self,
        _: ActorRef<Self::Msg>,
        args: SchemaMergerArgs,
    ) -> Result<SchemaMergerState, ActorProcessingErr> {
        let name = args.ctx.table_name(&args.dataset);
        Ok(SchemaMergerState {
            ctx: args.ctx,
            dataset: args.dataset,
            name,
        })
    }

    async fn handle(
        &self,
        _: ActorRef<Self::Msg>,
        msg: SchemaMergerMsg,
        state: &mut SchemaMergerState,
    ) -> HandlerResult {
        let SchemaMergerMsg::Reconcile {
            current,
            footer,
            reply,
        } = msg;
        let result = match file_schema(&footer.arrow_schema, &state.dataset) {
            Ok(schema) => reconcile(state, current, &schema).await,
            Err(e) => Err(e),
        };
        // The committer decides what a failure means (it stops the table, or the service).
        let _ = reply.send(result);
        Ok(())
    }
}

/// Creates the table (when `current` is `None`) or evolves it until its schema covers `file`;
/// retries a schema commit that conflicted or whose outcome is unknown against the table as it
/// is then.
async fn reconcile(
    state: &SchemaMergerState,
    current: Option<TableMetadataRef>,
    file: &Schema,
) -> Result<SchemaReconciled> {
    let (ctx, name, dataset) = (&state.ctx, &state.name, state.dataset.as_str());
    let mut shutdown = ctx.shutdown.clone();
    // The newest version of the table this merger took from the catalog (a creation, a reload):
    // the committer must adopt it even when the file then needs no change.
    let mut latest: Option<Table> = None;
    let mut failures = Failures::default();
    let table_name = name.to_string();
    let mut metadata = match current {
        Some(m) => {
            warn_if_partition_by_ignored(ctx, name, &m);
            m
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
                Some(ReportTo {
                    board: &ctx.status,
                    table: &table_name,
                }),
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
            .await?
            // A table that appeared meanwhile (another writer) comes back from register; merge
            // into it like into any existing table.
            .ok_or_else(shutting_down)?;
            let m = created.metadata_ref();
            latest = Some(created);
            m
        }
    };
    loop {
        let current = metadata.current_schema();
        let next_id = metadata
            .schemas_iter()
            .map(|s| s.schema_id())
            .max()
            .unwrap_or(0)
            + 1;
        let evolved = match merge_table(current, &FieldHistory::of(&metadata), file, next_id) {
            Ok(MergeOutcome::Unchanged) => {
                return Ok(latest.map_or(SchemaReconciled::Unchanged, |t| {
                    SchemaReconciled::Changed(Box::new(t))
                }));
            }
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
                uuid: metadata.uuid(),
            },
            TableRequirement::CurrentSchemaIdMatch {
                current_schema_id: current.schema_id(),
            },
            TableRequirement::LastAssignedFieldIdMatch {
                last_assigned_field_id: metadata.last_column_id(),
            },
        ];
        let updates = vec![
            TableUpdate::AddSchema { schema: evolved },
            TableUpdate::SetCurrentSchema { schema_id: -1 },
        ];
        let committed = tokio::select! {
            c = ctx.client.commit(name, requirements, updates, None, None) => c,
            _ = shutdown.requested() => return Err(shutting_down()),
        };
        let failure = match committed {
            Ok(t) => {
                metrics::counter!("thadam_iceberg_schema_changes_total", "table" => name.to_string())
                    .increment(1);
                tracing::info!(table = %name, schema_id = t.metadata().current_schema_id(), "schema evolved");
                return Ok(SchemaReconciled::Changed(Box::new(t)));
            }
            Err(failure) => failure,
        };
        // Someone else changed the table, or we do not know whether our change landed: reload
        // and derive the change again against what the table is now, after the same pause an
        // append takes (growing with each failure in a row).
        let (next, after) = after_failure(
            &failure,
            failures,
            ctx.retry(),
            std::time::Duration::ZERO,
            rand::random(),
        );
        failures = after;
        let delay = match (next, failure) {
            (Next::Stop, CommitError::Fatal(e)) => return Err(e),
            (Next::Stop, _) => return Err(Error::internal("a retryable schema commit stopped")),
            (Next::Reload { delay }, CommitError::Conflict(why)) => {
                tracing::info!(table = %name, ?delay, "schema commit conflicted ({why}); reloading");
                delay
            }
            (Next::Reload { delay }, CommitError::Unknown(e) | CommitError::NotApplied(e)) => {
                crate::runtime::retry::count_retry(Op::SchemaCommit, e.retry_cause());
                tracing::warn!(table = %name, ?delay, "schema commit outcome unknown or failed ({e}); reloading");
                delay
            }
            (Next::Reload { delay }, CommitError::Fatal(_)) => delay,
        };
        if !shutdown.sleep(delay).await {
            return Err(shutting_down());
        }
        let reloaded = retry_transient(
            Op::Load,
            ctx.retry(),
            &mut shutdown,
            "reloading the table",
            Some(ReportTo {
                board: &ctx.status,
                table: &table_name,
            }),
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
        metadata = reloaded.metadata_ref();
        latest = Some(reloaded);
    }
}

/// `partition_by` shapes only the tables the registrar creates: an existing table keeps its own
/// default spec (its owner may have evolved it on purpose), so a differing `partition_by` is
/// reported once, not applied, and not an error.
fn warn_if_partition_by_ignored(ctx: &SharedContext, name: &TableName, metadata: &TableMetadata) {
    let terms = &ctx.config.partition_by;
    let spec = metadata.default_partition_spec();
    let schema = metadata.current_schema();
    if terms.is_empty() || partition::spec_matches(terms, spec, schema) {
        return;
    }
    let wanted: Vec<String> = terms.iter().map(ToString::to_string).collect();
    crate::runtime::warn_once::warn(format!(
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
