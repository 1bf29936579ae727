//! Truncated bounds for `truncate(N)`: strings cut to N code points, binaries to N bytes. A cut
//! lower bound is still a lower bound (a prefix is never greater); an upper bound must be
//! rounded up (its last incrementable character or byte incremented), or there is none.

use iceberg::spec::{Datum, PrimitiveLiteral, PrimitiveType};

use super::MetricsMode;

/// The lower bound kept under `mode`: strings and binaries are cut to the truncation length (a
/// prefix is never greater than the value).
pub(super) fn truncate_lower(bound: Datum, mode: MetricsMode) -> Option<Datum> {
    let MetricsMode::Truncate(n) = mode else {
        return Some(bound);
    };
    Some(match (bound.data_type(), bound.literal()) {
        (PrimitiveType::String, PrimitiveLiteral::String(s)) => {
            Datum::string(truncate_str_min(s, n))
        }
        (PrimitiveType::Binary, PrimitiveLiteral::Binary(b)) => {
            Datum::binary(b.iter().take(n).copied())
        }
        (PrimitiveType::Fixed(_), PrimitiveLiteral::Binary(b)) => {
            Datum::fixed(b.iter().take(n).copied())
        }
        _ => bound,
    })
}

/// The upper bound kept under `mode`: a value longer than the truncation length is cut and its
/// last incrementable character (or byte) incremented; without one there is no bound.
pub(super) fn truncate_upper(bound: Datum, mode: MetricsMode) -> Option<Datum> {
    let MetricsMode::Truncate(n) = mode else {
        return Some(bound);
    };
    match (bound.data_type(), bound.literal()) {
        (PrimitiveType::String, PrimitiveLiteral::String(s)) => {
            truncate_str_max(s, n).map(Datum::string)
        }
        (PrimitiveType::Binary, PrimitiveLiteral::Binary(b)) => {
            truncate_bytes_max(b, n).map(Datum::binary)
        }
        (PrimitiveType::Fixed(_), PrimitiveLiteral::Binary(b)) => {
            truncate_bytes_max(b, n).map(Datum::fixed)
        }
        _ => Some(bound),
    }
}

/// The first `n` Unicode code points of `s`.
pub(crate) fn truncate_str_min(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((at, _)) => &s[..at],
        None => s,
    }
}

/// An upper bound for `s` of at most `n` code points: `s` itself when it is short enough, else its
/// first `n` code points with the last one that can be incremented incremented (and what follows
/// it dropped); `None` when every kept code point is U+10FFFF. Strings compare by code point,
/// which is UTF-8 byte order.
pub(crate) fn truncate_str_max(s: &str, n: usize) -> Option<String> {
    let prefix = truncate_str_min(s, n);
    if prefix.len() == s.len() {
        return Some(s.to_string());
    }
    let chars: Vec<char> = prefix.chars().collect();
    for i in (0..chars.len()).rev() {
        if let Some(next) = next_char(chars[i]) {
            let mut out: String = chars[..i].iter().collect();
            out.push(next);
            return Some(out);
        }
    }
    None
}

/// The next Unicode scalar value: surrogates are not characters, so U+D7FF is followed by U+E000.
fn next_char(c: char) -> Option<char> {
    let next = u32::from(c) + 1;
    let next = if (0xD800..=0xDFFF).contains(&next) {
        0xE000
    } else {
        next
    };
    char::from_u32(next)
}

/// Like [`truncate_str_max`] for bytes (unsigned lexicographic order): cut to `n` bytes and
/// increment the last byte below 0xFF, dropping what follows it.
pub(crate) fn truncate_bytes_max(b: &[u8], n: usize) -> Option<Vec<u8>> {
    if b.len() <= n {
        return Some(b.to_vec());
    }
    let mut out = b[..n].to_vec();
    while let Some(last) = out.pop() {
        if last < 0xFF {
            out.push(last + 1);
            return Some(out);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use iceberg::spec::{Datum, PrimitiveType};

    use super::*;
    use crate::table::column_stats::fixtures::*;

    #[test]
    fn strings_truncate_by_code_point_and_round_up() {
        // 17 code points, multibyte: cut after 16 code points, never inside a character.
        let s = "αβγδεζηθικλμνξοπρ";
        assert_eq!(truncate_str_min(s, 16), "αβγδεζηθικλμνξοπ");
        assert_eq!(truncate_str_max(s, 16).as_deref(), Some("αβγδεζηθικλμνξορ"));
        // Short enough: unchanged, both ways.
        assert_eq!(truncate_str_min("short", 16), "short");
        assert_eq!(truncate_str_max("short", 16).as_deref(), Some("short"));
        let exactly16 = "abcdefghijklmnop";
        assert_eq!(truncate_str_max(exactly16, 16).as_deref(), Some(exactly16));
        // The last kept code point is the maximum: the one before it is incremented.
        let max = char::MAX;
        let s = format!("{}{max}tail", "a".repeat(15));
        assert_eq!(
            truncate_str_max(&s, 16),
            Some(format!("{}b", "a".repeat(14)))
        );
        // Nothing can be incremented: no upper bound.
        let s: String = std::iter::repeat_n(max, 17).collect();
        assert_eq!(truncate_str_max(&s, 16), None);
        // U+D7FF is followed by U+E000 (surrogates are not characters).
        let s = format!("{}\u{D7FF}zz", "a".repeat(15));
        assert_eq!(
            truncate_str_max(&s, 16),
            Some(format!("{}\u{E000}", "a".repeat(15)))
        );
        // The result is a valid upper bound in UTF-8 byte order.
        for s in [
            "zzzzzzzzzzzzzzzzzz",
            "ÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿÿ",
            "a\u{10FFFF}\u{10FFFF}",
        ] {
            if let Some(up) = truncate_str_max(s, 2) {
                assert!(up.as_bytes() > s.as_bytes(), "{s:?} -> {up:?}");
            }
        }
    }

    #[test]
    fn binaries_truncate_by_byte_and_round_up() {
        let long: Vec<u8> = (0u8..20).collect();
        assert_eq!(
            truncate_bytes_max(&long, 16),
            Some((0u8..15).chain([16]).collect())
        );
        let mut ff = vec![7u8; 14];
        ff.extend([0xFF, 0xFF, 0x00]);
        let mut want = vec![7u8; 13];
        want.push(8);
        assert_eq!(truncate_bytes_max(&ff, 16), Some(want));
        assert_eq!(truncate_bytes_max(&[0xFF; 17], 16), None);
        assert_eq!(truncate_bytes_max(&[0xFF; 16], 16), Some(vec![0xFF; 16]));
    }

    #[test]
    fn binary_bounds_with_ff_bytes() {
        let mut max = vec![0x10u8; 15];
        max.extend([0xFF, 0xFF, 0xFF]);
        let meta = footer(
            "message m { optional binary b = 1; }",
            vec![vec![(2, bytes(&[0u8; 20], &max, true))]],
        );
        let s = schema(vec![prim(1, "b", PrimitiveType::Binary)]);
        let m = metrics(&meta, &s);
        assert_eq!(m.lower_bounds[&1], Datum::binary(vec![0u8; 16]));
        let mut want = vec![0x10u8; 14];
        want.push(0x11);
        assert_eq!(m.upper_bounds[&1], Datum::binary(want));
        let meta = footer(
            "message m { optional binary b = 1; }",
            vec![vec![(2, bytes(&[1], &[0xFF; 17], true))]],
        );
        let m = metrics(&meta, &s);
        assert!(m.lower_bounds.contains_key(&1));
        assert!(
            !m.upper_bounds.contains_key(&1),
            "no byte can be incremented"
        );
    }
}
