//! Lets iceberg's `Transaction` build a commit (manifests, manifest list, snapshot) while the
//! registrar keeps the commit itself.
//!
//! `Transaction::commit` needs a `Catalog`: it calls `load_table` (we hand back the table the
//! committer already holds, so no extra request) and then `update_table` with the finished commit,
//! which we send through [`RestClient::commit`]. Every failure comes back *non-retryable*, so the
//! library's own rebase-and-retry never runs: on a conflict or an unknown outcome the committer
//! reloads, re-checks which segments are already in the table, and rebuilds (the design notes
//! explain how the blind retry duplicated data elsewhere).

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use iceberg::table::Table;
use iceberg::{
    Catalog, Error as IcebergError, ErrorKind, Namespace, NamespaceIdent, Result as IcebergResult,
    TableCommit, TableCreation, TableIdent,
};

use crate::catalog::rest::{CommitError, RestClient, TableName};

#[derive(Debug)]
pub struct CommitAdapter {
    client: RestClient,
    table: TableName,
    base: Table,
    idempotency_key: Option<String>,
    /// What went wrong with the commit request, for the committer to act on.
    failure: Mutex<Option<CommitError>>,
}

impl CommitAdapter {
    pub fn new(
        client: RestClient,
        table: TableName,
        base: Table,
        idempotency_key: Option<String>,
    ) -> Self {
        CommitAdapter {
            client,
            table,
            base,
            idempotency_key,
            failure: Mutex::new(None),
        }
    }

    /// The classified failure of the commit request, if the request was made and failed.
    pub fn take_failure(&self) -> Option<CommitError> {
        self.failure.lock().ok().and_then(|mut f| f.take())
    }
}

fn unsupported(what: &str) -> IcebergError {
    IcebergError::new(
        ErrorKind::FeatureUnsupported,
        format!("the registrar's commit adapter does not {what}"),
    )
}

#[async_trait]
impl Catalog for CommitAdapter {
    async fn load_table(&self, ident: &TableIdent) -> IcebergResult<Table> {
        if ident == self.base.identifier() {
            Ok(self.base.clone())
        } else {
            Err(unsupported("load other tables"))
        }
    }

    async fn update_table(&self, mut commit: TableCommit) -> IcebergResult<Table> {
        let requirements = commit.take_requirements();
        let updates = commit.take_updates();
        match self
            .client
            .commit(
                &self.table,
                requirements,
                updates,
                self.idempotency_key.as_deref(),
            )
            .await
        {
            Ok(table) => Ok(table),
            Err(failure) => {
                let text = format!("{failure:?}");
                if let Ok(mut slot) = self.failure.lock() {
                    *slot = Some(failure);
                }
                // Not retryable on purpose: see the module docs.
                Err(IcebergError::new(ErrorKind::Unexpected, text))
            }
        }
    }

    async fn list_namespaces(
        &self,
        _parent: Option<&NamespaceIdent>,
    ) -> IcebergResult<Vec<NamespaceIdent>> {
        Err(unsupported("list namespaces"))
    }
    async fn create_namespace(
        &self,
        _namespace: &NamespaceIdent,
        _properties: HashMap<String, String>,
    ) -> IcebergResult<Namespace> {
        Err(unsupported("create namespaces"))
    }
    async fn get_namespace(&self, _namespace: &NamespaceIdent) -> IcebergResult<Namespace> {
        Err(unsupported("get namespaces"))
    }
    async fn namespace_exists(&self, _namespace: &NamespaceIdent) -> IcebergResult<bool> {
        Err(unsupported("check namespaces"))
    }
    async fn update_namespace(
        &self,
        _namespace: &NamespaceIdent,
        _properties: HashMap<String, String>,
    ) -> IcebergResult<()> {
        Err(unsupported("update namespaces"))
    }
    async fn drop_namespace(&self, _namespace: &NamespaceIdent) -> IcebergResult<()> {
        Err(unsupported("drop namespaces"))
    }
    async fn list_tables(&self, _namespace: &NamespaceIdent) -> IcebergResult<Vec<TableIdent>> {
        Err(unsupported("list tables"))
    }
    async fn create_table(
        &self,
        _namespace: &NamespaceIdent,
        _creation: TableCreation,
    ) -> IcebergResult<Table> {
        Err(unsupported("create tables"))
    }
    async fn drop_table(&self, _table: &TableIdent) -> IcebergResult<()> {
        Err(unsupported("drop tables"))
    }
    async fn purge_table(&self, _table: &TableIdent) -> IcebergResult<()> {
        Err(unsupported("purge tables"))
    }
    async fn table_exists(&self, _table: &TableIdent) -> IcebergResult<bool> {
        Err(unsupported("check tables"))
    }
    async fn rename_table(&self, _src: &TableIdent, _dest: &TableIdent) -> IcebergResult<()> {
        Err(unsupported("rename tables"))
    }
    async fn register_table(
        &self,
        _table: &TableIdent,
        _metadata_location: String,
    ) -> IcebergResult<Table> {
        Err(unsupported("register tables"))
    }
}
