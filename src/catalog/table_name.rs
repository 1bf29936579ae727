//! A table's name in the catalog, as every part of the registrar refers to it.

use iceberg::{NamespaceIdent, TableIdent};

use crate::error::{Error, Result};

/// A table's place in the catalog: namespace levels and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableName {
    pub namespace: Vec<String>,
    pub name: String,
}

impl TableName {
    pub(crate) fn ident(&self) -> Result<TableIdent> {
        let ns = NamespaceIdent::from_vec(self.namespace.clone()).map_err(|e| {
            Error::config_invalid(format!("namespace is not valid: {e}")).with_source(e)
        })?;
        Ok(TableIdent::new(ns, self.name.clone()))
    }
}

impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.namespace.join("."), self.name)
    }
}
