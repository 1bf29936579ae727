//! The `partition_by` grammar: the terms a table created by the registrar is partitioned by, as
//! written in the config (`[hour(ts), bucket(16, device)]`), parsed and checked at load. Resolving
//! them against a table's schema, and computing a file's partition value, is `table::partition`.

use std::fmt;

use iceberg::spec::Transform;

/// The config key the terms come from (for messages).
pub const KEY: &str = "config.partition_by";

/// One entry of `partition_by`: a transform of a source column, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionTerm {
    pub transform: Transform,
    /// The source column's (dotted, for nested fields) name.
    pub column: String,
}

impl PartitionTerm {
    /// Parses one term: a bare column name (identity), `identity(c)`, `year(c)`, `month(c)`,
    /// `day(c)`, `hour(c)` (also Spark's plurals `years(c)` ...), `void(c)`, `bucket(N, c)` or
    /// `truncate(W, c)` with N, W > 0. The error says what is wrong, without the key.
    pub fn parse(text: &str) -> Result<PartitionTerm, String> {
        let text = text.trim();
        let Some(open) = text.find('(') else {
            check_column(text)?;
            return Ok(PartitionTerm {
                transform: Transform::Identity,
                column: text.to_string(),
            });
        };
        let name = text[..open].trim().to_ascii_lowercase();
        let Some(args) = text[open + 1..].strip_suffix(')') else {
            return Err(format!("`{text}` is missing its closing `)`"));
        };
        let args: Vec<&str> = args.split(',').map(str::trim).collect();
        let one = |transform: Transform| -> Result<PartitionTerm, String> {
            match args.as_slice() {
                [column] => {
                    check_column(column)?;
                    Ok(PartitionTerm {
                        transform,
                        column: column.to_string(),
                    })
                }
                _ => Err(format!(
                    "`{text}`: {name} takes one column, e.g. {name}(ts)"
                )),
            }
        };
        let sized = |make: fn(u32) -> Transform| -> Result<PartitionTerm, String> {
            let [n, column] = args.as_slice() else {
                return Err(format!(
                    "`{text}`: {name} takes a number and a column, e.g. {name}(16, device)"
                ));
            };
            let n = match n.parse::<u32>() {
                Ok(n) if n > 0 => n,
                _ => {
                    return Err(format!(
                        "`{text}`: the {name} width must be a whole number greater than 0"
                    ));
                }
            };
            check_column(column)?;
            Ok(PartitionTerm {
                transform: make(n),
                column: column.to_string(),
            })
        };
        match name.as_str() {
            "identity" => one(Transform::Identity),
            "year" | "years" => one(Transform::Year),
            "month" | "months" => one(Transform::Month),
            "day" | "days" | "date" => one(Transform::Day),
            "hour" | "hours" | "date_hour" => one(Transform::Hour),
            "void" => one(Transform::Void),
            "bucket" => sized(Transform::Bucket),
            "truncate" => sized(Transform::Truncate),
            _ => Err(format!(
                "`{text}`: unknown transform `{name}`; use a column name (identity), year, \
                 month, day, hour, bucket(N, col), truncate(W, col) or void"
            )),
        }
    }

    /// The partition field's name, as Iceberg's Java `PartitionSpec.Builder` names it:
    /// `col` (identity), `col_year`, `col_month`, `col_day`, `col_hour`, `col_bucket`,
    /// `col_trunc`, `col_null` (void).
    pub fn field_name(&self) -> String {
        let suffix = match self.transform {
            Transform::Identity => return self.column.clone(),
            Transform::Year => "year",
            Transform::Month => "month",
            Transform::Day => "day",
            Transform::Hour => "hour",
            Transform::Bucket(_) => "bucket",
            Transform::Truncate(_) => "trunc",
            Transform::Void | Transform::Unknown => "null",
        };
        format!("{}_{suffix}", self.column)
    }
}

impl fmt::Display for PartitionTerm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.transform {
            Transform::Identity => f.write_str(&self.column),
            Transform::Bucket(n) => write!(f, "bucket({n}, {})", self.column),
            Transform::Truncate(w) => write!(f, "truncate({w}, {})", self.column),
            other => write!(f, "{other}({})", self.column),
        }
    }
}

fn check_column(column: &str) -> Result<(), String> {
    if column.is_empty() {
        return Err("a partition term needs a column name".to_string());
    }
    if column
        .chars()
        .any(|c| c.is_control() || c.is_whitespace() || "(),".contains(c))
    {
        return Err(format!(
            "`{column}` is not a column name (no spaces, commas or parentheses)"
        ));
    }
    Ok(())
}

/// Parses a whole `partition_by` list: every term, and no two terms naming the same partition
/// field (`[bucket(4, d), bucket(8, d)]` would both be `d_bucket`). Errors carry the index.
///
/// In a YAML flow list, `[day(ts), bucket(16, device)]` arrives as `day(ts)`, `bucket(16` and
/// `device)`: an entry with an unclosed `(` is joined with the entries after it until the
/// parentheses balance, so the term can be written as it reads, unquoted.
pub fn parse_all(texts: &[String]) -> Result<Vec<PartitionTerm>, (usize, String)> {
    let mut joined: Vec<(usize, String)> = Vec::with_capacity(texts.len());
    let mut open = false;
    for (i, text) in texts.iter().enumerate() {
        match joined.last_mut() {
            Some((_, last)) if open => {
                last.push_str(", ");
                last.push_str(text);
            }
            _ => joined.push((i, text.clone())),
        }
        let last = joined.last().map_or("", |(_, t)| t.as_str());
        open = last.matches('(').count() > last.matches(')').count();
    }
    let mut terms: Vec<PartitionTerm> = Vec::with_capacity(joined.len());
    for (i, text) in &joined {
        let i = *i;
        let term = PartitionTerm::parse(text).map_err(|e| (i, e))?;
        if let Some(first) = terms
            .iter()
            .position(|t| t.field_name() == term.field_name())
        {
            return Err((
                i,
                format!(
                    "`{term}` names partition field `{}` like entry {first} (`{}`); keep one",
                    term.field_name(),
                    terms[first]
                ),
            ));
        }
        terms.push(term);
    }
    Ok(terms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(t: &str) -> PartitionTerm {
        PartitionTerm::parse(t).expect("parses")
    }

    #[test]
    fn terms_parse_as_iceberg_names_them() {
        let cases = [
            ("device", Transform::Identity, "device", "device"),
            ("identity(device)", Transform::Identity, "device", "device"),
            ("hour(ts)", Transform::Hour, "ts", "ts_hour"),
            (" HOURS( ts ) ", Transform::Hour, "ts", "ts_hour"),
            ("day(ts)", Transform::Day, "ts", "ts_day"),
            ("month(ts)", Transform::Month, "ts", "ts_month"),
            ("years(ts)", Transform::Year, "ts", "ts_year"),
            (
                "bucket(16, device)",
                Transform::Bucket(16),
                "device",
                "device_bucket",
            ),
            (
                "truncate(4,name)",
                Transform::Truncate(4),
                "name",
                "name_trunc",
            ),
            ("void(x)", Transform::Void, "x", "x_null"),
            ("loc.city", Transform::Identity, "loc.city", "loc.city"),
        ];
        for (text, transform, column, name) in cases {
            let t = term(text);
            assert_eq!(
                (t.transform, t.column.as_str()),
                (transform, column),
                "{text}"
            );
            assert_eq!(t.field_name(), name, "{text}");
            // Display is the canonical spelling and parses back to the same term.
            assert_eq!(term(&t.to_string()), t, "{text}");
        }
        assert_eq!(term("bucket(16,device)").to_string(), "bucket(16, device)");
    }

    #[test]
    fn bad_terms_say_what_is_wrong() {
        for (text, says) in [
            ("", "column name"),
            ("a b", "not a column name"),
            ("hour(ts", "closing"),
            ("hour()", "column name"),
            ("hour(ts, x)", "one column"),
            ("bucket(ts)", "a number and a column"),
            ("bucket(0, ts)", "greater than 0"),
            ("truncate(-1, s)", "greater than 0"),
            ("truncate(x, s)", "greater than 0"),
            ("minute(ts)", "unknown transform"),
        ] {
            let e = PartitionTerm::parse(text).expect_err(text);
            assert!(e.contains(says), "{text}: {e}");
        }
        let texts = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (i, e) = parse_all(&texts(&["hour(ts)", "bucket(4, d)", "bucket(8, d)"]))
            .expect_err("duplicate name");
        assert_eq!(i, 2);
        assert!(e.contains("d_bucket"), "{e}");
        assert!(parse_all(&texts(&["day(ts)", "device", "bucket(4, d)"])).is_ok());
        // A flow list split inside a term's parentheses is joined back.
        let terms = parse_all(&texts(&["day(ts)", "bucket(16", "device)", "x"])).expect("joined");
        let shown: Vec<String> = terms.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["day(ts)", "bucket(16, device)", "x"]);
        let (i, e) = parse_all(&texts(&["a", "bucket(16", "device"])).expect_err("unclosed");
        assert_eq!(i, 1);
        assert!(e.contains("closing"), "{e}");
    }
}
