//! S3 credentials the catalog vends with the table, or its remote signer (`catalog::access`):
//! renewed by a reload shortly before they expire, and once more when S3 (or the signer) refuses
//! them (a refusal of the fresh ones is `auth.failed`).

use iceberg::table::Table;

use super::CommitterState;
use crate::catalog::access::{RefusalAction, on_refusal};
use crate::error::{Error, Result};

impl CommitterState {
    /// The generation of the vended credentials `table`'s FileIO signs with (those vended for
    /// its location with the last load), if the catalog vends any.
    pub(super) fn vended_generation(&self, table: &Table) -> Option<u64> {
        let access = self.ctx().client.access(&self.name)?;
        access
            .for_table_files(table.metadata().location())
            .map(|_| access.generation())
    }

    pub(super) fn vended_generation_of_current(&self) -> Option<u64> {
        self.table.as_ref().and_then(|t| self.vended_generation(t))
    }

    /// A request with vended credentials of `generation` succeeded: they are good.
    pub(super) fn vended_worked(&mut self, generation: Option<u64>) {
        if generation.is_some() && self.reloaded_for_refusal == generation {
            self.reloaded_for_refusal = None;
        }
    }

    /// S3 refused (401/403) a request `what` made with the vended credentials of `generation`:
    /// reload the table once for fresh ones ([`on_refusal`]); a refusal of those is fatal.
    pub(super) async fn vended_refused(&mut self, generation: u64, what: &str) -> Result<()> {
        let Some(current) = self.ctx().client.access(&self.name) else {
            // The catalog stopped vending since: the store settings apply to the next attempt.
            return Ok(());
        };
        match on_refusal(generation, current.generation(), self.reloaded_for_refusal) {
            RefusalAction::Retry => Ok(()),
            RefusalAction::Reload => {
                tracing::warn!(
                    table = %self.name,
                    "S3 refused the credentials the catalog vended for the table ({what}); \
                     reloading the table for fresh ones"
                );
                let mut shutdown = self.ctx().shutdown.clone();
                self.reload(&mut shutdown).await?;
                self.reloaded_for_refusal =
                    self.ctx().client.access(&self.name).map(|a| a.generation());
                Ok(())
            }
            RefusalAction::Fatal if current.has_remote_signing() => {
                Err(Error::auth_failed(format!(
                    "table {}: S3 access through the catalog (its vended credentials or its remote \
                 signer) was refused ({what}), and again after a reload; check that the \
                 catalog's signer may sign for the table's location (the registrar's url must \
                 lie inside it, and for writes inside the catalog's warehouse), that the keys \
                 the catalog signs with may read and write there, and that store.endpoint / \
                 store.region name the store the catalog signs for (the store section's keys \
                 are not used while the catalog gives access)",
                    self.name
                )))
            }
            RefusalAction::Fatal => Err(Error::auth_failed(format!(
                "table {}: S3 refused the credentials vended by the catalog for this table \
                 ({what}), and again the fresh ones of a reload; check the catalog's credential \
                 vending for the table's location (the role or storage profile it uses, and that \
                 it may read and write there), and that store.endpoint / store.region name the \
                 store those credentials are for (the store section's keys are not used while \
                 the catalog vends credentials)",
                self.name
            ))),
        }
    }

    /// Reloads the table for fresh vended credentials when those it holds are about to expire
    /// ([`crate::catalog::access::renew_at_ms`]). Credentials that are due already when they
    /// arrive are not renewed again: they are used until S3 refuses them.
    pub(super) async fn renew_if_due(&mut self) -> Result<()> {
        let Some(access) = self.ctx().client.access(&self.name) else {
            return Ok(());
        };
        let now = chrono::Utc::now().timestamp_millis();
        let due =
            |a: &crate::catalog::access::TableAccess| a.renew_at_ms().is_some_and(|at| now >= at);
        if !due(&access) || self.renewal_exhausted == Some(access.generation()) {
            return Ok(());
        }
        tracing::info!(
            table = %self.name,
            "the S3 credentials the catalog vended for the table expire soon; reloading the table \
             for fresh ones"
        );
        let mut shutdown = self.ctx().shutdown.clone();
        self.reload(&mut shutdown).await?;
        if let Some(fresh) = self.ctx().client.access(&self.name)
            && due(&fresh)
        {
            tracing::warn!(
                table = %self.name,
                "the catalog vended credentials for the table that expire within the renewal \
                 margin (or have expired); using them until S3 refuses them"
            );
            self.renewal_exhausted = Some(fresh.generation());
        }
        Ok(())
    }
}
