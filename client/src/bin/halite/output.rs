//! Output formats: aligned (optionally coloured) tables for humans, JSON, YAML and NDJSON for
//! machines.

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
}

/// Prints a machine-readable document in `format` (Table falls back to YAML-like rendering).
pub(crate) fn print_document(format: Format, value: &Value) {
    match format {
        Format::Json => println!("{}", serde_json::to_string_pretty(value).unwrap_or_default()),
        Format::Ndjson => println!("{}", serde_json::to_string(value).unwrap_or_default()),
        Format::Yaml | Format::Table => print!("{}", yaml(value)),
    }
}

/// Whether to colour: stdout is a terminal and NO_COLOR is unset.
pub(crate) fn colour() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

/// Wraps `text` in an ANSI colour when colouring.
pub(crate) fn paint(text: &str, code: &str) -> String {
    if colour() {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_owned()
    }
}

/// Prints rows as an aligned table with a header. Cells may carry ANSI colour; widths count
/// visible characters only.
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

/// A compact one-line rendering of a value for table cells.
pub(crate) fn compact(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// Renders a JSON value as YAML (block style; strings quoted when YAML would misread them).
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
                out.push_str(&format!("{pad}{}:", scalar_key(key)));
                write_nested(out, v, indent);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for v in items {
                out.push_str(&format!("{pad}-"));
                write_nested(out, v, indent);
            }
        }
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

fn scalar_key(key: &str) -> String {
    if needs_quotes(key) {
        serde_json::to_string(key).unwrap_or_default()
    } else {
        key.to_owned()
    }
}

fn scalar_text(value: &Value, indent: usize) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Object(_) => "{}".into(),
        Value::Array(_) => "[]".into(),
        Value::String(s) if s.contains('\n') => {
            let pad = " ".repeat(indent);
            let body: Vec<String> = s.trim_end_matches('\n').lines().map(|l| format!("{pad}{l}")).collect();
            let chomp = if s.ends_with('\n') { "" } else { "-" };
            format!("|{chomp}\n{}", body.join("\n"))
        }
        Value::String(s) if needs_quotes(s) => serde_json::to_string(s).unwrap_or_default(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn needs_quotes(s: &str) -> bool {
    s.is_empty()
        || s.trim() != s
        || s.parse::<f64>().is_ok()
        || matches!(s.to_ascii_lowercase().as_str(), "true" | "false" | "null" | "yes" | "no" | "on" | "off" | "~")
        || s.starts_with([
            '-', '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`',
        ])
        || s.contains(": ")
        || s.contains(" #")
        || s.chars().any(char::is_control)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
