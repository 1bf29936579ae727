//! Sends a commit the registrar built (the append's updates and requirements, see
//! `table::append::producer`) through [`RestClient::commit`] and keeps the classified failure
//! for the committer.
//!
//! There is no rebase-and-retry here (iceberg's `Transaction::commit` would retry a 409 by
//! itself): on a conflict or an unknown outcome the committer reloads, re-checks which segments
//! are already in the table, and rebuilds (the design notes explain how the blind retry
//! duplicated data elsewhere).

use std::sync::Mutex;

use iceberg::table::Table;
use iceberg::{
    Error as IcebergError, ErrorKind, Result as IcebergResult, TableRequirement, TableUpdate,
};

use crate::catalog::rest::{CommitError, RestClient, TableName};

#[derive(Debug)]
pub struct CommitAdapter {
    client: RestClient,
    table: TableName,
    idempotency_key: Option<String>,
    /// What went wrong with the commit request, for the committer to act on.
    failure: Mutex<Option<CommitError>>,
}

impl CommitAdapter {
    pub fn new(client: RestClient, table: TableName, idempotency_key: Option<String>) -> Self {
        CommitAdapter {
            client,
            table,
            idempotency_key,
            failure: Mutex::new(None),
        }
    }

    /// Sends `updates` (built on `base`) under `requirements` as one commit. On failure the
    /// classified [`CommitError`] is kept for [`Self::take_failure`] and a non-retryable error
    /// returned, so a caller tells "the request failed" (a failure is kept) from "building
    /// failed" (none).
    pub async fn commit_prepared(
        &self,
        updates: Vec<TableUpdate>,
        requirements: Vec<TableRequirement>,
        base: &Table,
    ) -> IcebergResult<Table> {
        match self
            .client
            .commit(
                &self.table,
                requirements,
                updates,
                self.idempotency_key.as_deref(),
                Some(base),
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

    /// The classified failure of the commit request, if the request was made and failed.
    pub fn take_failure(&self) -> Option<CommitError> {
        self.failure.lock().ok().and_then(|mut f| f.take())
    }
}
