//! Output formats: aligned (optionally coloured) tables for humans, JSON, YAML and NDJSON for
//! machines, Salt's `txt` lines for grep.

use std::io::IsTerminal;

use serde_json::Value;

/// `--out`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// Aligned tables and readable values.
    Table,
    /// One JSON document.
    Json,
    /// One YAML document.
    Yaml,
    /// One JSON object per line, streamed.
    Ndjson,
    /// Salt's `txt` outputter: `minion: value` lines, one per minion (a value on one line).
    Txt,
}

/// What `--out` names: an output format, or (for `halite audit export`) the file to write.
#[derive(Debug, Clone)]
pub(crate) enum Out {
    /// How to print.
    Format(Format),
    /// Where an export goes.
    File(std::path::PathBuf),
}

/// `--out`: a format's name, or else a file path (refused by every command but an export).
pub(crate) fn parse_out(text: &str) -> Result<Out, String> {
    use clap::ValueEnum;
    if let Ok(format) = Format::from_str(text, true) {
        return Ok(Out::Format(format));
    }
    if text.is_empty() {
        return Err("expected table, json, yaml, ndjson or txt".into());
    }
    Ok(Out::File(text.into()))
}

/// Prints a machine-readable document in `format` (Table falls back to YAML-like rendering).
pub(crate) fn print_document(format: Format, value: &Value) {
    match format {
        Format::Json => println!("{}", serde_json::to_string_pretty(value).unwrap_or_default()),
        // One object per line: a list prints one line per element.
        Format::Ndjson => match value {
            Value::Array(items) => {
                for item in items {
                    println!("{}", serde_json::to_string(item).unwrap_or_default());
                }
            }
            other => println!("{}", serde_json::to_string(other).unwrap_or_default()),
        },
        Format::Yaml | Format::Table => print!("{}", yaml(value)),
        Format::Txt => print_txt(value),
    }
}

/// `key: value` for each entry of an object (each element of a list), the value on one line:
/// text as it is, anything else as compact JSON.
fn print_txt(value: &Value) {
    let one_line = |v: &Value| match v {
        Value::String(text) => terminal_safe(&text.replace('\n', "\\n")).into_owned(),
        other => serde_json::to_string(other).unwrap_or_default(),
    };
    match value {
        Value::Object(map) => map.iter().for_each(|(k, v)| println!("{}: {}", terminal_safe(k), one_line(v))),
        Value::Array(items) => items.iter().for_each(|v| println!("{}", one_line(v))),
        other => println!("{}", one_line(other)),
    }
}

/// Whether to colour: stdout is a terminal and NO_COLOR is unset.
pub(crate) fn colour() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// Wraps `text` in an ANSI colour when colouring.
/// `text` with control characters (but line breaks and tabs) written as escapes: what a
/// minion returns must not speak to the operator's terminal.
pub(crate) fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return std::borrow::Cow::Borrowed(text);
    }
    text.chars()
        .map(|c| match c {
            '\n' | '\t' => c.to_string(),
            c if c.is_control() => c.escape_unicode().to_string(),
            c => c.to_string(),
        })
        .collect::<String>()
        .into()
}

pub(crate) fn paint(text: &str, code: &str) -> String {
    if colour() {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

/// Prints rows as an aligned table with a header. Cells may carry ANSI colour; widths count
/// visible characters only.
/// A list as `format` asks: a table of `row`s under `header`, or the items as a document.
pub(crate) fn print_list<T: serde::Serialize>(
    format: Format,
    items: &[T],
    header: &[&str],
    row: impl Fn(&T) -> Vec<String>,
) -> anyhow::Result<()> {
    if format == Format::Table {
        print_table(header, &items.iter().map(row).collect::<Vec<_>>());
    } else {
        print_document(format, &serde_json::to_value(items)?);
    }
    Ok(())
}

pub(crate) fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let visible = |s: &str| strip_ansi(s).chars().count();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(visible(cell));
            }
        }
    }
    let line = |cells: Vec<String>| {
        let last = cells.len().saturating_sub(1);
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            out.push_str(cell);
            if i < last {
                out.push_str(&" ".repeat(widths[i] - visible(cell) + 2));
            }
        }
        println!("{}", out.trim_end());
    };
    line(header.iter().map(|h| paint(h, "1")).collect());
    for row in rows {
        line(row.clone());
    }
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_escape = false;
    for c in s.chars() {
        match (in_escape, c) {
            (false, '\x1b') => in_escape = true,
            (true, 'm') => in_escape = false,
            (true, _) => {}
            (false, c) => out.push(c),
        }
    }
    out
}

/// A return's value as a table shows it: a plan's result (`plan.run`, `plan.apply`) as its
/// step table, any other value as YAML.
pub(crate) fn return_text(value: &Value) -> String {
    crate::plan_table::render(value).unwrap_or_else(|| yaml(value))
}

/// A compact one-line rendering of a value for table cells.
pub(crate) fn compact(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// Renders a JSON value as YAML: block style, a multi-line string as a literal block when that
/// reads back exactly, and every other string plain only when no YAML reader (1.1 or 1.2) could
/// take it for anything else, double-quoted otherwise. Checked by parsing the output back with
/// PyYAML and ruamel.yaml (`tests/yaml_roundtrip.py`).
pub(crate) fn yaml(value: &Value) -> String {
    let mut out = String::new();
    write_yaml(&mut out, value, 0);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

fn write_yaml(out: &mut String, value: &Value, indent: usize) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (key, v) in map {
                out.push_str(&format!("{pad}{}:", flow_string(key)));
                write_nested(out, v, indent);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for v in items {
                out.push_str(&format!("{pad}-"));
                write_nested(out, v, indent);
            }
        }
        // A block scalar cannot stand at the top level at column 0.
        Value::String(s) => out.push_str(&format!("{pad}{}\n", flow_string(s))),
        scalar => out.push_str(&format!("{pad}{}\n", scalar_text(scalar, indent))),
    }
}

fn write_nested(out: &mut String, value: &Value, indent: usize) {
    match value {
        Value::Object(m) if !m.is_empty() => {
            out.push('\n');
            write_yaml(out, value, indent + 2);
        }
        Value::Array(a) if !a.is_empty() => {
            out.push('\n');
            write_yaml(out, value, indent + 2);
        }
        scalar => out.push_str(&format!(" {}\n", scalar_text(scalar, indent + 2))),
    }
}

fn scalar_text(value: &Value, indent: usize) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Object(_) => "{}".into(),
        Value::Array(_) => "[]".into(),
        Value::String(s) if literal_block_ok(s) => {
            let pad = " ".repeat(indent);
            let body: Vec<String> = s.trim_end_matches('\n').split('\n').map(|l| format!("{pad}{l}")).collect();
            let chomp = if s.ends_with('\n') { "" } else { "-" };
            format!("|{chomp}\n{}", body.join("\n"))
        }
        Value::String(s) => flow_string(s),
        Value::Number(n) => number_text(n),
        Value::Bool(b) => b.to_string(),
    }
}

/// A float as both YAML 1.1 and 1.2 read it back: with a fraction and a signed exponent
/// (`1e300` is a string to a YAML 1.1 reader).
fn number_text(n: &serde_json::Number) -> String {
    let text = n.to_string();
    if n.is_f64() && !text.contains(['.', 'e', 'E']) {
        return format!("{text}.0");
    }
    match text.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => {
            let mantissa = if mantissa.contains('.') { mantissa.to_owned() } else { format!("{mantissa}.0") };
            let exponent = if exponent.starts_with(['-', '+']) { exponent.to_owned() } else { format!("+{exponent}") };
            format!("{mantissa}e{exponent}")
        }
        None => text,
    }
}

/// A multi-line string a literal block gives back exactly: lines of printable text, the first
/// not indented (it would set the block's indentation), none blank but for spaces (a reader
/// folds them), and at most one final newline.
fn literal_block_ok(s: &str) -> bool {
    let body = s.strip_suffix('\n').unwrap_or(s);
    body.contains('\n')
        && !body.ends_with('\n')
        && !body.starts_with([' ', '\t', '\n'])
        && body.split('\n').all(|line| {
            line.chars().all(|c| c == '\t' || printable(c))
                && (line.is_empty() || !line.chars().all(|c| c == ' ' || c == '\t'))
                && !line.ends_with([' ', '\t'])
        })
}

/// A key or single-line string: plain when unmistakable, double-quoted otherwise.
fn flow_string(s: &str) -> String {
    if plain_ok(s) {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if printable(c) && c != '\u{feff}' => out.push(c),
            c if u32::from(c) <= 0xffff => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push_str(&format!("\\U{:08x}", u32::from(c))),
        }
    }
    out.push('"');
    out
}

/// YAML's printable characters (`c-printable`), less the line breaks and tab handled apart.
fn printable(c: char) -> bool {
    matches!(u32::from(c), 0x20..=0x7e | 0x85 | 0xa0..=0xd7ff | 0xe000..=0xfffd | 0x10000..=0x10ffff)
        && !matches!(c, '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// Plain (unquoted) only for words no reader takes for a number, date, boolean, null or
/// syntax: a letter first, then letters, digits and `_ - . / @ + =` with single inner spaces.
fn plain_ok(s: &str) -> bool {
    let mut chars = s.chars();
    let starts_with_letter = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    starts_with_letter
        && s.chars().all(|c| c.is_ascii_alphanumeric() || "_-./@+= ".contains(c))
        && !s.ends_with(' ')
        && !s.contains("  ")
        && !matches!(
            s.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "y" | "n" | "null"
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_returns_control_characters_are_escaped_for_the_terminal() {
        assert_eq!(terminal_safe("te\u{1b}[31mxt\n\tok"), "te\\u{1b}[31mxt\n\tok");
        assert!(matches!(terminal_safe("plain\n"), std::borrow::Cow::Borrowed(_)));
    }

    #[test]
    fn yaml_renders_nested_values_and_quotes_ambiguous_strings() {
        let v = json!({"web1": {"retcode": 0, "stdout": "a\nb\n", "ok": true, "list": [1, "2", "yes"], "empty": {}}});
        assert_eq!(
            yaml(&v),
            // Keys keep their order (serde_json's preserve_order).
            "web1:\n  retcode: 0\n  stdout: |\n    a\n    b\n  ok: true\n  list:\n    - 1\n    - \"2\"\n    - \"yes\"\n  empty: {}\n"
        );
        assert_eq!(yaml(&json!(true)), "true\n");
        assert_eq!(yaml(&json!("- x")), "\"- x\"\n");
    }

    /// Strings YAML readers are known to misread, and random ones over characters that matter.
    fn arb_string() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let tricky = prop::sample::select(vec![
            "0x1F",
            "2024-01-01",
            "1_000",
            "0o17",
            "1e3",
            ".5",
            ".inf",
            "~",
            "null",
            "Null",
            "yes",
            "No",
            "on",
            "y",
            "- a",
            "a: b",
            "a #b",
            "#x",
            " lead",
            "trail ",
            "a\n b",
            "\n",
            "  \n",
            "x\n\n",
            "\tx",
            "12:30:00",
            "@x",
            "`x",
            "!x",
            "&x",
            "*x",
            "%x",
            "|",
            ">",
            "'x'",
            "\"x\"",
            "[a]",
            "{a}",
            "?",
            ",",
            "a,b",
            "=",
            "<<",
            "\u{feff}x",
            "a\u{2028}b",
            "\u{85}",
            "\r\n",
            "é",
            "x\u{7f}",
            "\u{1f600}",
            "",
        ]);
        let random = "[ -~\n\t\r\u{0}-\u{1f}\u{7f}-\u{a0}é\u{2028}\u{feff}\u{1f600}]{0,14}";
        prop_oneof![tricky.prop_map(str::to_owned), random]
    }

    fn arb_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| json!(f)),
            arb_string().prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(arb_string(), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Every output, parsed back by PyYAML (1.1) and ruamel.yaml (1.2), is the value printed.
    #[test]
    fn yaml_reads_back_as_the_same_value_in_yaml_1_1_and_1_2_readers() {
        use proptest::strategy::{Strategy, ValueTree};
        use std::io::Write;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let strategy = arb_value();
        let cases: Vec<Value> = (0..800).map(|_| strategy.new_tree(&mut runner).unwrap().current()).collect();
        let docs: Vec<(String, String)> = cases.iter().map(|v| (yaml(v), v.to_string())).collect();
        let python = std::env::var_os("HALITE_PYTHON")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python"));
        assert!(
            python.exists(),
            "{}: run scripts/test.sh (it makes the venv with PyYAML and ruamel.yaml)",
            python.display()
        );
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/yaml_roundtrip.py");
        let mut child = std::process::Command::new(python)
            .arg(script)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(serde_json::to_string(&docs).unwrap().as_bytes()).unwrap();
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success(), "the round-trip script failed");
        let failures: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(failures, json!([]), "YAML that reads back wrong");
    }
}
