//! Python's `str()` and `json.dumps()` of JSON values, byte for byte.
//!
//! heat-agents turns non-string inputs into text with these two, and scripts written for Heat
//! depend on the exact result (`True`, `None`, `1.0`, `{'a': 1}`, `{"a": 1}` with `\uXXXX`).

use serde_json::{Number, Value};

/// `str(value)` as Python prints the value `json.loads` would give.
pub(crate) fn str_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => repr(other),
    }
}

/// `repr(value)`: strings quoted, containers recursive.
fn repr(value: &Value) -> String {
    match value {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => number(n),
        Value::String(s) => repr_str(s),
        Value::Array(items) => format!("[{}]", items.iter().map(repr).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => {
            let entries: Vec<String> = map.iter().map(|(k, v)| format!("{}: {}", repr_str(k), repr(v))).collect();
            format!("{{{}}}", entries.join(", "))
        }
    }
}

fn number(n: &Number) -> String {
    match n.as_f64() {
        Some(f) if !n.is_i64() && !n.is_u64() => float(f),
        _ => n.to_string(),
    }
}

/// `float.__repr__`: the shortest digits that round-trip, positional for exponents -4..16,
/// scientific (`1e+100`, `1.5e-07`) otherwise.
fn float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    // `{:e}` gives the shortest round-trip digits: "1.2345e-7", "-1e100", "0e0".
    let sci = format!("{f:e}");
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = mantissa.strip_prefix('-').map_or(("", mantissa), |m| ("-", m));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if (-4..16).contains(&exponent) {
        let point = exponent + 1;
        let body = if point <= 0 {
            format!("0.{}{}", "0".repeat(point.unsigned_abs() as usize), digits)
        } else {
            let point = point as usize;
            if digits.len() <= point {
                format!("{}{}.0", digits, "0".repeat(point - digits.len()))
            } else {
                format!("{}.{}", &digits[..point], &digits[point..])
            }
        };
        format!("{sign}{body}")
    } else {
        let (first, rest) = digits.split_at(1);
        let fraction = if rest.is_empty() { String::new() } else { format!(".{rest}") };
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        format!("{sign}{first}{fraction}e{exp_sign}{:02}", exponent.unsigned_abs())
    }
}

/// `repr(str)`: single quotes unless the text has a single quote and no double quote;
/// backslash escapes for the quote, `\\`, `\t`, `\n`, `\r` and non-printable characters.
fn repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !printable(c) => {
                let code = u32::from(c);
                if code <= 0xff {
                    out.push_str(&format!("\\x{code:02x}"));
                } else if code <= 0xffff {
                    out.push_str(&format!("\\u{code:04x}"));
                } else {
                    out.push_str(&format!("\\U{code:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's `str.isprintable` for the characters that occur in practice: controls, separators
/// other than the space, and the invisible format characters.
fn printable(c: char) -> bool {
    !(c.is_control()
        || (c.is_whitespace() && c != ' ')
        || matches!(c, '\u{ad}' | '\u{200b}'..='\u{200f}' | '\u{2060}'..='\u{2064}' | '\u{feff}'))
}

/// `json.dumps(value)` with Python's defaults: `", "` and `": "` separators, non-ASCII as
/// `\uXXXX` (surrogate pairs above the BMP), key order kept.
pub(crate) fn json_dumps(value: &Value) -> String {
    let mut out = String::new();
    dump(value, &mut out);
    out
}

fn dump(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&number(n)),
        Value::String(s) => dump_str(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                dump(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                dump_str(k, out);
                out.push_str(": ");
                dump(v, out);
            }
            out.push('}');
        }
    }
}

fn dump_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            c => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn str_matches_python() {
        let cases = [
            (json!(null), "None"),
            (json!(true), "True"),
            (json!(false), "False"),
            (json!(1), "1"),
            (json!(-7), "-7"),
            (json!(1.0), "1.0"),
            (json!(1e100), "1e+100"),
            (json!(0.00001), "1e-05"),
            (json!(0.0001), "0.0001"),
            (json!(1.5e-7), "1.5e-07"),
            (json!(123456789012345678.0), "1.2345678901234568e+17"),
            (json!(1e16), "1e+16"),
            (json!(999999999999999.0), "999999999999999.0"),
            (json!(-2.5), "-2.5"),
            (json!(0.1), "0.1"),
            (json!("plain"), "plain"),
            (json!(["a", 1, null]), "['a', 1, None]"),
            (json!({"k": "it's", "n": {"x": true}}), "{'k': \"it's\", 'n': {'x': True}}"),
            (json!(["tab\there", "nl\n", "é", "\u{7}"]), "['tab\\there', 'nl\\n', 'é', '\\x07']"),
        ];
        for (value, expected) in cases {
            assert_eq!(str_of(&value), expected, "str({value})");
        }
    }

    #[test]
    fn json_dumps_matches_python() {
        let value: Value =
            serde_json::from_str(r#"{"z": [1, 2.0, "é😀"], "a": {"b": null, "c": "q\"\u0001"}}"#).unwrap();
        assert_eq!(json_dumps(&value), r#"{"z": [1, 2.0, "\u00e9\ud83d\ude00"], "a": {"b": null, "c": "q\"\u0001"}}"#);
    }
}
