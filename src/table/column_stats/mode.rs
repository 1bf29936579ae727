//! The metrics modes (`none`, `counts`, `truncate(N)`, `full`) and which column gets which, from
//! the table's `write.metadata.metrics.*` properties, as Iceberg's writers read them.

use std::collections::HashMap;

use iceberg::spec::Schema;

use crate::runtime::warn_once;

/// The table property holding the default metrics mode.
pub(crate) const DEFAULT_MODE_PROPERTY: &str = "write.metadata.metrics.default";
/// The prefix of per-column metrics mode properties (`...column.<full column name>`).
pub(crate) const COLUMN_MODE_PREFIX: &str = "write.metadata.metrics.column.";

/// What metrics a column gets (the Iceberg spec's metrics modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MetricsMode {
    /// Nothing at all.
    None,
    /// Column size, value and null counts; no bounds.
    Counts,
    /// Counts and bounds; strings truncated to N code points, binary to N bytes.
    Truncate(usize),
    /// Counts and untruncated bounds.
    Full,
}

impl MetricsMode {
    /// Iceberg's default: `truncate(16)`.
    pub(crate) const DEFAULT: MetricsMode = MetricsMode::Truncate(16);

    /// Parses a mode as Iceberg spells it (case-insensitive): `none`, `counts`, `full`,
    /// `truncate(N)` with N > 0.
    pub(crate) fn parse(text: &str) -> Option<MetricsMode> {
        let text = text.trim().to_ascii_lowercase();
        match text.as_str() {
            "none" => Some(MetricsMode::None),
            "counts" => Some(MetricsMode::Counts),
            "full" => Some(MetricsMode::Full),
            other => {
                let n = other
                    .strip_prefix("truncate(")?
                    .strip_suffix(')')?
                    .trim()
                    .parse::<usize>()
                    .ok()?;
                (n > 0).then_some(MetricsMode::Truncate(n))
            }
        }
    }

    /// Whether the column gets sizes and counts.
    pub(super) fn counts(self) -> bool {
        self != MetricsMode::None
    }

    /// Whether the column gets lower and upper bounds.
    pub(super) fn bounds(self) -> bool {
        matches!(self, MetricsMode::Truncate(_) | MetricsMode::Full)
    }
}

/// The metrics mode of every column of a table, from its properties.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MetricsConfig {
    default: MetricsMode,
    columns: HashMap<i32, MetricsMode>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            default: MetricsMode::DEFAULT,
            columns: HashMap::new(),
        }
    }
}

impl MetricsConfig {
    /// Reads `write.metadata.metrics.default` and `write.metadata.metrics.column.<name>` (names
    /// resolved to field IDs in `schema`, nested names dotted). Like Iceberg's writers, an invalid
    /// value or an unknown column is ignored with a warning rather than failing the append.
    pub(crate) fn from_properties(properties: &HashMap<String, String>, schema: &Schema) -> Self {
        let mut config = MetricsConfig::default();
        if let Some(raw) = properties.get(DEFAULT_MODE_PROPERTY) {
            match MetricsMode::parse(raw) {
                Some(mode) => config.default = mode,
                None => warn_once::warn(format!(
                    "ignoring table property {DEFAULT_MODE_PROPERTY}={raw:?}: expected none, \
                     counts, full or truncate(N); using truncate(16)"
                )),
            }
        }
        for (key, raw) in properties {
            let Some(column) = key.strip_prefix(COLUMN_MODE_PREFIX) else {
                continue;
            };
            let Some(mode) = MetricsMode::parse(raw) else {
                warn_once::warn(format!(
                    "ignoring table property {key}={raw:?}: expected none, counts, full or \
                     truncate(N)"
                ));
                continue;
            };
            match schema.field_id_by_name(column) {
                Some(id) => {
                    config.columns.insert(id, mode);
                }
                None => warn_once::warn(format!(
                    "ignoring table property {key}: the table has no column {column:?}"
                )),
            }
        }
        config
    }

    /// Every column `full`: exact, untruncated bounds (what a partition value is decided from,
    /// whatever the table's metrics modes are).
    pub(crate) fn full() -> Self {
        MetricsConfig {
            default: MetricsMode::Full,
            columns: HashMap::new(),
        }
    }

    /// The mode of the column with this field ID.
    pub(crate) fn mode(&self, field_id: i32) -> MetricsMode {
        self.columns.get(&field_id).copied().unwrap_or(self.default)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use iceberg::spec::{Datum, NestedField, PrimitiveType, Type};

    use super::*;
    use crate::table::column_stats::file_metrics;
    use crate::table::column_stats::fixtures::*;

    #[test]
    fn modes_parse_as_iceberg_spells_them() {
        assert_eq!(MetricsMode::parse("none"), Some(MetricsMode::None));
        assert_eq!(MetricsMode::parse("Counts"), Some(MetricsMode::Counts));
        assert_eq!(MetricsMode::parse(" full "), Some(MetricsMode::Full));
        assert_eq!(MetricsMode::parse("truncate(16)"), Some(TRUNC16));
        assert_eq!(
            MetricsMode::parse("TRUNCATE( 3 )"),
            Some(MetricsMode::Truncate(3))
        );
        for bad in [
            "truncate(0)",
            "truncate(-1)",
            "truncate()",
            "truncate16",
            "most",
            "",
        ] {
            assert_eq!(MetricsMode::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn config_reads_default_and_column_overrides_by_name() {
        let s = schema(vec![
            prim(1, "a", PrimitiveType::Long),
            NestedField::optional(
                2,
                "loc",
                Type::Struct(iceberg::spec::StructType::new(vec![Arc::new(prim(
                    3,
                    "lat",
                    PrimitiveType::Double,
                ))])),
            ),
        ]);
        let props = HashMap::from([
            (DEFAULT_MODE_PROPERTY.to_string(), "counts".to_string()),
            (format!("{COLUMN_MODE_PREFIX}loc.lat"), "full".to_string()),
            (format!("{COLUMN_MODE_PREFIX}nope"), "full".to_string()),
        ]);
        let c = MetricsConfig::from_properties(&props, &s);
        assert_eq!(c.mode(1), MetricsMode::Counts);
        assert_eq!(c.mode(3), MetricsMode::Full);
        // An invalid default falls back to truncate(16), an invalid column mode to the default.
        let props = HashMap::from([
            (DEFAULT_MODE_PROPERTY.to_string(), "most".to_string()),
            (format!("{COLUMN_MODE_PREFIX}a"), "truncate(x)".to_string()),
        ]);
        let c = MetricsConfig::from_properties(&props, &s);
        assert_eq!(c.mode(1), TRUNC16);
        assert_eq!(
            MetricsConfig::from_properties(&HashMap::new(), &s).mode(3),
            TRUNC16
        );
    }

    #[test]
    fn modes_choose_what_is_kept() {
        let long = "ααααααααααααααααααααα"; // 21 code points
        let meta = footer(
            "message m { optional binary s (STRING) = 1; optional int64 n = 2; }",
            vec![vec![
                (3, bytes(long.as_bytes(), long.as_bytes(), true)),
                (3, i64s(1, 2, 0)),
            ]],
        );
        let s = schema(vec![
            prim(1, "s", PrimitiveType::String),
            prim(2, "n", PrimitiveType::Long),
        ]);
        let run = |default: &str, column: Option<&str>| {
            let mut props =
                HashMap::from([(DEFAULT_MODE_PROPERTY.to_string(), default.to_string())]);
            if let Some(mode) = column {
                props.insert(format!("{COLUMN_MODE_PREFIX}n"), mode.to_string());
            }
            file_metrics(
                &meta,
                &s,
                &MetricsConfig::from_properties(&props, &s),
                1 << 20,
            )
        };
        let none = run("none", None);
        assert!(none.column_sizes.is_empty() && none.value_counts.is_empty());
        assert!(none.null_value_counts.is_empty() && none.lower_bounds.is_empty());
        assert_eq!(
            none.split_offsets,
            Some(vec![4]),
            "split offsets are not metrics"
        );
        let counts = run("counts", None);
        assert_eq!(counts.value_counts.len(), 2);
        assert_eq!(counts.null_value_counts.len(), 2);
        assert!(counts.lower_bounds.is_empty() && counts.upper_bounds.is_empty());
        let full = run("full", None);
        assert_eq!(full.lower_bounds[&1], Datum::string(long));
        assert_eq!(full.upper_bounds[&1], Datum::string(long));
        let trunc = run("truncate(16)", None);
        assert_eq!(trunc.lower_bounds[&1], Datum::string("α".repeat(16)));
        assert_eq!(
            trunc.upper_bounds[&1],
            Datum::string(format!("{}β", "α".repeat(15)))
        );
        // A column override wins over the default.
        let mixed = run("none", Some("full"));
        assert_eq!(mixed.lower_bounds.keys().collect::<Vec<_>>(), vec![&2]);
        assert!(!mixed.value_counts.contains_key(&1));
    }
}
