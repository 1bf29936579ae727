//! A table's schema merger: makes the table ready for a file before the file is appended.
//!
//! For each footer it converts the file's schema (keeping its field IDs), creates the table from
//! it when it is absent (`create_table: true`), and merges it into the table's schema by field
//! ID. A change is a commit of its own, *before* the append: a crash between the two leaves an
//! evolved table and a segment still in the catalog, and the next attempt re-derives "nothing to
//! change" and only appends. The merger derives the change; the committer's append transaction
//! sends it (`table::append::transaction`), so every commit of the table is sent, classified and
//! retried in one place.
//!
//! There is one per table, a child of that table's committer: one table's slow creation never
//! holds up another table. The committer stays the only owner of its table: it lends the merger
//! a read-only view of the metadata it holds, and the merger answers with the version of the
//! table the committer must adopt (a creation), if any, and the change to send; the merger keeps
//! nothing between requests.

use std::collections::HashMap;

use iceberg::spec::{Schema, TableMetadata, TableMetadataRef};
use iceberg::table::Table;
use iceberg::{TableRequirement, TableUpdate};
use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::actors::HandlerResult;
use crate::actors::context::SharedContext;
use crate::catalog::TableName;
use crate::error::{Error, Result};
use crate::protocol::messages::{SchemaChange, SchemaMergerMsg, SchemaReconciled};
use crate::runtime::retry::{Op, ReportTo, retry_transient};
use crate::table::create::create_table;
use crate::table::partition;
use crate::table::schema::convert::file_schema;
use crate::table::schema::merge::{FieldHistory, MergeOutcome, merge_table};

pub(crate) struct SchemaMerger;

/// The table a merger serves.
pub(crate) struct SchemaMergerArgs {
    pub ctx: SharedContext,
    pub dataset: String,
}

pub(crate) struct SchemaMergerState {
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

/// Creates the table (when `current` is `None`), then derives the schema change that makes it
/// cover `file`, if any; the committer sends that change (see the module docs).
async fn reconcile(
    state: &SchemaMergerState,
    current: Option<TableMetadataRef>,
    file: &Schema,
) -> Result<SchemaReconciled> {
    let (ctx, name, dataset) = (&state.ctx, &state.name, state.dataset.as_str());
    // A table this merger created (or found created by another writer): the committer must
    // adopt it even when the file then needs no change.
    let mut created: Option<Table> = None;
    let metadata = match current {
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
                    ("thadam.created-by".to_string(), ctx.env().writer_id()),
                ]),
            );
            let table_name = name.to_string();
            let mut shutdown = ctx.shutdown.clone();
            let table = retry_transient(
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
            .ok_or_else(Error::cancelled)?;
            let m = table.metadata_ref();
            created = Some(table);
            m
        }
    };
    let change = schema_change(name, &metadata, file)?;
    Ok(SchemaReconciled {
        table: created.map(Box::new),
        change,
    })
}

/// The commit that brings `metadata`'s schema to cover `file` by field ID (`None` when it does
/// already), behind the requirements that the table is still the one it was derived from; or
/// `sink.iceberg_schema_mismatch` listing every violation.
fn schema_change(
    name: &TableName,
    metadata: &TableMetadata,
    file: &Schema,
) -> Result<Option<SchemaChange>> {
    let current = metadata.current_schema();
    let next_id = metadata
        .schemas_iter()
        .map(|s| s.schema_id())
        .max()
        .unwrap_or(0)
        + 1;
    let evolved = match merge_table(current, &FieldHistory::of(metadata), file, next_id) {
        Ok(MergeOutcome::Unchanged) => return Ok(None),
        Ok(MergeOutcome::Evolved { schema, changes }) => {
            for change in &changes {
                tracing::info!(table = %name, "schema change: {change}");
            }
            schema
        }
        Err(mismatch) => return Err(mismatch.into_error(&name.to_string())),
    };
    Ok(Some(SchemaChange {
        requirements: vec![
            TableRequirement::UuidMatch {
                uuid: metadata.uuid(),
            },
            TableRequirement::CurrentSchemaIdMatch {
                current_schema_id: current.schema_id(),
            },
            TableRequirement::LastAssignedFieldIdMatch {
                last_assigned_field_id: metadata.last_column_id(),
            },
        ],
        updates: vec![
            TableUpdate::AddSchema { schema: evolved },
            TableUpdate::SetCurrentSchema { schema_id: -1 },
        ],
    }))
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
