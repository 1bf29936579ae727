//! The commit request as it goes over the wire, in Java's conventions.
//!
//! iceberg-rust's `TableUpdate::AddSchema` has no `last-column-id`. The REST spec marks the
//! field deprecated, but Java's client always sends it and strict servers require it: Project
//! Nessie 0.99.0 fails the whole request ("Cannot build AddSchema, some of required attributes
//! are not set \[lastColumnId\]", answered as a 500). So every `add-schema` leaves here with the
//! value Java would send: the table's last column ID after the schema is added.

use iceberg_catalog_rest::CommitTableRequest;
use serde_json::Value;

use crate::error::{Error, Result};

/// The JSON body of a commit request, with `last-column-id` on every `add-schema` (see the
/// module docs).
pub(super) fn commit_body(request: &CommitTableRequest) -> Result<Vec<u8>> {
    let encoding = |e: serde_json::Error| {
        Error::internal(format!("cannot encode a commit request: {e}")).with_source(e)
    };
    // Appends (the hot path) add no schema: encoded directly, without the detour through a
    // JSON tree.
    if !request
        .updates
        .iter()
        .any(|u| matches!(u, iceberg::TableUpdate::AddSchema { .. }))
    {
        return serde_json::to_vec(request).map_err(encoding);
    }
    let mut value = serde_json::to_value(request).map_err(encoding)?;
    add_last_column_ids(&mut value);
    serde_json::to_vec(&value).map_err(encoding)
}

/// Sets `last-column-id` on each `add-schema` update that lacks one: the highest of the table's
/// last column ID as the request asserts it (`assert-last-assigned-field-id`), the schema's
/// highest field ID and what an earlier `add-schema` of the same request set. Java's server
/// refuses a value below the table's current one, so without the assertion (a new table) the
/// schema's own highest ID is the answer.
fn add_last_column_ids(request: &mut Value) {
    let mut last = request["requirements"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["type"] == "assert-last-assigned-field-id")
        .filter_map(|r| r["last-assigned-field-id"].as_i64())
        .max()
        .unwrap_or(0);
    let Some(updates) = request["updates"].as_array_mut() else {
        return;
    };
    for update in updates {
        if update["action"] != "add-schema" {
            continue;
        }
        last = last.max(highest_field_id(&update["schema"]));
        if let Some(fields) = update.as_object_mut() {
            fields
                .entry("last-column-id")
                .or_insert_with(|| Value::from(last));
        }
    }
}

/// The highest `id` of any field, element or key/value anywhere in a JSON schema.
fn highest_field_id(node: &Value) -> i64 {
    match node {
        Value::Object(map) => {
            let own = ["id", "element-id", "key-id", "value-id"]
                .iter()
                .filter_map(|k| map.get(*k).and_then(Value::as_i64))
                .max()
                .unwrap_or(0);
            // `schema-id` and `required` are not field IDs; only nested nodes are walked.
            map.iter()
                .filter(|(k, _)| {
                    matches!(k.as_str(), "fields" | "type" | "element" | "key" | "value")
                })
                .map(|(_, v)| highest_field_id(v))
                .fold(own, i64::max)
        }
        Value::Array(items) => items.iter().map(highest_field_id).fold(0, i64::max),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_new_table_s_schema_carries_its_highest_field_id() {
        let mut request = json!({
            "requirements": [{"type": "assert-create"}],
            "updates": [
                {"action": "assign-uuid", "uuid": "u"},
                {"action": "add-schema", "schema": {"type": "struct", "schema-id": 0, "fields": [
                    {"id": 5, "name": "ts", "required": true, "type": "long"},
                    {"id": 9, "name": "tags", "required": false, "type":
                        {"type": "map", "key-id": 12, "key": "string", "value-id": 13,
                         "value": {"type": "list", "element-id": 14, "element": "int",
                                   "element-required": false},
                         "value-required": false}},
                ]}},
                {"action": "set-current-schema", "schema-id": -1},
            ]
        });
        add_last_column_ids(&mut request);
        assert_eq!(request["updates"][1]["last-column-id"], 14);
        assert!(request["updates"][0].get("last-column-id").is_none());
    }

    #[test]
    fn an_evolution_never_lowers_the_table_s_last_column_id() {
        let mut request = json!({
            "requirements": [
                {"type": "assert-current-schema-id", "current-schema-id": 0},
                {"type": "assert-last-assigned-field-id", "last-assigned-field-id": 40},
            ],
            "updates": [
                {"action": "add-schema", "schema": {"type": "struct", "schema-id": 1, "fields": [
                    {"id": 7, "name": "a", "required": false, "type": "int"}]}},
                {"action": "add-schema", "schema": {"type": "struct", "schema-id": 2, "fields": [
                    {"id": 41, "name": "b", "required": false, "type": "int"}]}},
            ]
        });
        add_last_column_ids(&mut request);
        assert_eq!(request["updates"][0]["last-column-id"], 40);
        assert_eq!(request["updates"][1]["last-column-id"], 41);
    }

    #[test]
    fn a_value_already_set_is_kept() {
        let mut request = json!({"requirements": [], "updates": [
            {"action": "add-schema", "last-column-id": 99,
             "schema": {"type": "struct", "schema-id": 0, "fields": []}}]});
        add_last_column_ids(&mut request);
        assert_eq!(request["updates"][0]["last-column-id"], 99);
    }
}
