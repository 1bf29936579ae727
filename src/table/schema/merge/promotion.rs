//! Which type changes Iceberg allows (format v2 promotions): a column may widen, never narrow
//! or change kind. Kept apart from the walk because it is the one rule that follows the spec's
//! table of promotions rather than the shape of the schemas.

use iceberg::spec::PrimitiveType;

use super::report::describe_primitive;

/// Whether Iceberg allows widening a column from `table` to `file` (format v2 promotions), and if
/// not, why.
pub(super) fn promotion(table: &PrimitiveType, file: &PrimitiveType) -> Result<(), String> {
    use PrimitiveType as P;
    let t = describe_primitive(table);
    let f = describe_primitive(file);
    match (table, file) {
        (P::Int, P::Long) | (P::Float, P::Double) => Ok(()),
        (P::Long, P::Int) | (P::Double, P::Float) => Err(format!("narrowing from {t} to {f}")),
        (
            P::Decimal {
                precision: tp,
                scale: ts,
            },
            P::Decimal {
                precision: fp,
                scale: fs,
            },
        ) => {
            if ts != fs {
                Err(format!(
                    "decimal scale change from {ts} to {fs} (only the precision may widen)"
                ))
            } else if fp > tp {
                Ok(())
            } else {
                Err(format!("narrowing from {t} to {f}"))
            }
        }
        _ => Err(format!(
            "incompatible types: Iceberg cannot change {t} into {f}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use crate::table::schema::merge::fixtures::*;
    use crate::table::schema::merge::{Violation, describe_type};

    #[test]
    fn promotes_int_to_long_top_level() {
        let table = schema(vec![req(1, "a", int())]);
        let file = schema(vec![req(1, "a", long())]);
        let (schema, changes) = evolved(&table, &file);
        assert_eq!(field_type(&schema, 1), long());
        assert!(schema.field_by_id(1).expect("a").required);
        assert_eq!(changes, vec![promoted("a", 1, "int", "long")]);
    }

    #[test]
    fn promotes_float_to_double_top_level() {
        let table = schema(vec![opt(1, "a", float())]);
        let file = schema(vec![opt(1, "a", double())]);
        let (schema, changes) = evolved(&table, &file);
        assert_eq!(field_type(&schema, 1), double());
        assert_eq!(changes, vec![promoted("a", 1, "float", "double")]);
    }

    #[test]
    fn promotes_decimal_precision_top_level() {
        let table = schema(vec![opt(1, "a", decimal(10, 2))]);
        let file = schema(vec![opt(1, "a", decimal(12, 2))]);
        let (schema, changes) = evolved(&table, &file);
        assert_eq!(field_type(&schema, 1), decimal(12, 2));
        assert_eq!(
            changes,
            vec![promoted("a", 1, "decimal(10,2)", "decimal(12,2)")]
        );
    }

    #[test]
    fn promotes_inside_a_struct() {
        let table = schema(vec![opt(
            1,
            "s",
            strukt(vec![
                opt(2, "i", int()),
                opt(3, "f", float()),
                opt(4, "d", decimal(9, 3)),
            ]),
        )]);
        let file = schema(vec![opt(
            1,
            "s",
            strukt(vec![
                opt(2, "i", long()),
                opt(3, "f", double()),
                opt(4, "d", decimal(18, 3)),
            ]),
        )]);
        let (schema, changes) = evolved(&table, &file);
        assert_eq!(field_type(&schema, 2), long());
        assert_eq!(field_type(&schema, 3), double());
        assert_eq!(field_type(&schema, 4), decimal(18, 3));
        assert_eq!(
            changes,
            vec![
                promoted("s.i", 2, "int", "long"),
                promoted("s.f", 3, "float", "double"),
                promoted("s.d", 4, "decimal(9,3)", "decimal(18,3)"),
            ]
        );
    }

    #[test]
    fn promotes_list_elements() {
        for (from, to) in [
            (int(), long()),
            (float(), double()),
            (decimal(5, 1), decimal(7, 1)),
        ] {
            let table = schema(vec![opt(1, "l", list(2, from.clone()))]);
            let file = schema(vec![opt(1, "l", list(2, to.clone()))]);
            let (schema, changes) = evolved(&table, &file);
            assert_eq!(field_type(&schema, 2), to);
            assert_eq!(field_type(&schema, 1), list(2, to.clone()));
            assert_eq!(
                changes,
                vec![promoted(
                    "l.element",
                    2,
                    &describe_type(&from),
                    &describe_type(&to)
                )]
            );
        }
    }

    #[test]
    fn promotes_map_values_and_keys() {
        for (from, to) in [
            (int(), long()),
            (float(), double()),
            (decimal(5, 1), decimal(7, 1)),
        ] {
            let table = schema(vec![opt(1, "m", map(2, string(), 3, from.clone()))]);
            let file = schema(vec![opt(1, "m", map(2, string(), 3, to.clone()))]);
            let (schema, changes) = evolved(&table, &file);
            assert_eq!(field_type(&schema, 3), to);
            assert_eq!(
                changes,
                vec![promoted(
                    "m.value",
                    3,
                    &describe_type(&from),
                    &describe_type(&to)
                )]
            );
        }
        // A key may be promoted like any field (and stays required).
        let table = schema(vec![opt(1, "m", map(2, int(), 3, string()))]);
        let file = schema(vec![opt(1, "m", map(2, long(), 3, string()))]);
        let (schema, changes) = evolved(&table, &file);
        assert_eq!(field_type(&schema, 2), long());
        assert!(schema.field_by_id(2).expect("key").required);
        assert_eq!(changes, vec![promoted("m.key", 2, "int", "long")]);
    }

    #[test]
    fn narrowing_long_to_int_is_a_violation() {
        let v = single_violation(vec![opt(1, "a", long())], vec![opt(1, "a", int())]);
        assert_eq!(
            v,
            Violation {
                path: "a".to_string(),
                field_id: 1,
                table_type: "long".to_string(),
                file_type: "int".to_string(),
                reason: "narrowing from long to int".to_string(),
            }
        );
    }

    #[test]
    fn narrowing_double_to_float_is_a_violation() {
        let v = single_violation(vec![opt(1, "a", double())], vec![opt(1, "a", float())]);
        assert_eq!(v.reason, "narrowing from double to float");
        assert_eq!(
            (v.table_type.as_str(), v.file_type.as_str()),
            ("double", "float")
        );
    }

    #[test]
    fn decimal_narrowing_is_a_violation() {
        let v = single_violation(
            vec![opt(1, "a", decimal(12, 2))],
            vec![opt(1, "a", decimal(10, 2))],
        );
        assert_eq!(v.reason, "narrowing from decimal(12,2) to decimal(10,2)");
    }

    #[test]
    fn decimal_scale_change_is_a_violation() {
        let v = single_violation(
            vec![opt(1, "a", decimal(10, 2))],
            vec![opt(1, "a", decimal(12, 3))],
        );
        assert!(
            v.reason.starts_with("decimal scale change from 2 to 3"),
            "{}",
            v.reason
        );
        assert_eq!(v.file_type, "decimal(12,3)");
    }

    #[test]
    fn string_to_int_is_a_violation() {
        let v = single_violation(vec![opt(1, "a", string())], vec![opt(1, "a", int())]);
        assert!(v.reason.starts_with("incompatible types"), "{}", v.reason);
        assert_eq!(
            (v.table_type.as_str(), v.file_type.as_str()),
            ("string", "int")
        );
    }
}
