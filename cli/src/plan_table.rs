//! A plan's result (`plan.run`, `plan.apply`) as Salt's highstate output shows one: a row per
//! step (step, function, result, duration, a one-line comment), the diff of each step that
//! has one, and a summary line.

use serde_json::Value;

use crate::output::paint;

/// Longest comment shown in a row; `--out json` has the whole of it.
const COMMENT_WIDTH: usize = 100;

/// The table of a plan's result, or `None` for a value that is not one.
pub(crate) fn render(value: &Value) -> Option<String> {
    let steps = value.get("steps")?.as_array()?;
    let count = |key: &str| value.get(key).and_then(Value::as_u64);
    let (succeeded, failed, skipped) = (count("succeeded")?, count("failed")?, count("skipped")?);
    let test = value.get("test").and_then(Value::as_bool).unwrap_or(false);
    let mut out = String::new();
    if let Some(comment) = value.get("comment").and_then(Value::as_str) {
        out.push_str(&format!("{comment}\n"));
    }
    let rows: Vec<Row> = steps.iter().map(|step| Row::of(step, test)).collect();
    if !rows.is_empty() {
        out.push_str(&table(&rows));
    }
    for (row, step) in rows.iter().zip(steps) {
        if let Some(diff) = step.pointer("/return/details/diff").and_then(Value::as_str).filter(|d| !d.is_empty()) {
            out.push_str(&format!("\n{}:\n", paint(&format!("diff of {}", row.id), "1")));
            for line in diff.lines() {
                out.push_str(&format!("  {}\n", colour_diff_line(line)));
            }
        }
    }
    let changed = rows.iter().filter(|row| row.changed).count();
    let duration = value.get("duration_ms").and_then(Value::as_u64).unwrap_or(0);
    let word = if test { "would change" } else { "changed" };
    let failed_text = format!("Failed: {failed}");
    out.push_str(&format!(
        "\nSucceeded: {succeeded} ({word}={changed})  {}  Skipped: {skipped}  Total: {}  Duration: {}\n",
        if failed > 0 { paint(&failed_text, "31") } else { failed_text },
        count("total").unwrap_or(steps.len() as u64),
        duration_text(duration)
    ));
    Some(out)
}

/// One step as the table shows it.
struct Row {
    id: String,
    function: String,
    result: &'static str,
    changed: bool,
    duration: String,
    comment: String,
}

impl Row {
    fn of(step: &Value, test: bool) -> Row {
        let text = |key: &str| step.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
        let changed = step.get("changed").and_then(Value::as_bool).unwrap_or(false);
        let result = match (text("result").as_str(), changed) {
            ("succeeded", true) if test => "would change",
            ("succeeded", true) => "changed",
            ("succeeded", false) => "ok",
            ("skipped", _) => "skipped",
            _ => "failed",
        };
        let duration = match (result, step.get("duration_ms").and_then(Value::as_u64)) {
            ("skipped", _) | (_, None) => "-".to_owned(),
            (_, Some(ms)) => duration_text(ms),
        };
        let mut comment = text("comment");
        if let Some((cut, _)) = comment.char_indices().nth(COMMENT_WIDTH) {
            comment = format!("{}…", &comment[..cut]);
        }
        Row { id: text("id"), function: text("function"), result, changed, duration, comment }
    }

    fn colour(&self) -> &'static str {
        match self.result {
            "ok" => "32",
            "changed" | "would change" => "36",
            "failed" => "31",
            _ => "33",
        }
    }
}

/// Rows aligned under a header, padded before colouring so widths count what is visible.
fn table(rows: &[Row]) -> String {
    let header = ["STEP", "FUNCTION", "RESULT", "DURATION", "COMMENT"];
    let cells = |row: &Row| [row.id.clone(), row.function.clone(), row.result.to_owned(), row.duration.clone()];
    let mut widths: Vec<usize> = header[..4].iter().map(|h| h.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(cells(row)) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let pad = |text: &str, width: usize| format!("{text}{}", " ".repeat(width.saturating_sub(text.chars().count())));
    let mut out = String::new();
    let titles: Vec<String> = header[..4].iter().zip(&widths).map(|(h, w)| pad(h, *w)).collect();
    out.push_str(&paint(&format!("{}  {}", titles.join("  "), header[4]), "1"));
    out.push('\n');
    for row in rows {
        let [id, function, result, duration] = cells(row);
        let line = format!(
            "{}  {}  {}  {}  {}",
            pad(&id, widths[0]),
            pad(&function, widths[1]),
            paint(&pad(&result, widths[2]), row.colour()),
            pad(&duration, widths[3]),
            row.comment
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn colour_diff_line(line: &str) -> String {
    match line.as_bytes().first() {
        Some(b'+') if !line.starts_with("+++") => paint(line, "32"),
        Some(b'-') if !line.starts_with("---") => paint(line, "31"),
        _ => line.to_owned(),
    }
}

/// `850 ms`, `1.2 s`, `2 min 5 s`.
fn duration_text(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms} ms"),
        1_000..=59_999 => format!("{:.1} s", ms as f64 / 1000.0),
        _ => format!("{} min {} s", ms / 60_000, ms % 60_000 / 1000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_plan_result_is_a_row_per_step_with_diffs_and_a_summary() {
        let value = json!({
            "changed": true, "test": false, "succeeded": 2, "failed": 1, "skipped": 1, "total": 4, "duration_ms": 1234,
            "steps": [
                {"id": "web:pkg", "function": "pkg.install", "result": "succeeded", "changed": false,
                 "comment": "all packages are already installed", "duration_ms": 5},
                {"id": "web:conf", "function": "file.managed", "result": "succeeded", "changed": true,
                 "comment": "/etc/app.conf updated: content", "duration_ms": 12,
                 "return": {"details": {"diff": "--- a\n+++ b\n-old\n+new\n"}}},
                {"id": "web:check", "function": "cmd.run", "result": "failed", "changed": false,
                 "comment": "denied: cmd.run is beyond what ops may call on this minion", "duration_ms": 0},
                {"id": "web:restart", "function": "service.restart", "result": "skipped", "changed": false,
                 "comment": "required step web:check did not succeed", "duration_ms": 0}
            ]
        });
        let text = render(&value).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "STEP         FUNCTION         RESULT   DURATION  COMMENT");
        assert_eq!(lines[1], "web:pkg      pkg.install      ok       5 ms      all packages are already installed");
        assert_eq!(lines[2], "web:conf     file.managed     changed  12 ms     /etc/app.conf updated: content");
        assert!(lines[3].starts_with("web:check    cmd.run          failed   0 ms      denied: cmd.run is beyond"));
        assert!(lines[4].starts_with("web:restart  service.restart  skipped  -         required step web:check"));
        assert!(text.contains("\ndiff of web:conf:\n  --- a\n  +++ b\n  -old\n  +new\n"), "{text}");
        assert!(
            text.ends_with("\nSucceeded: 2 (changed=1)  Failed: 1  Skipped: 1  Total: 4  Duration: 1.2 s\n"),
            "{text}"
        );
        let test_mode = render(&json!({"test": true, "succeeded": 1, "failed": 0, "skipped": 0, "duration_ms": 2,
            "steps": [{"id": "c", "function": "file.managed", "result": "succeeded", "changed": true, "duration_ms": 2}]}))
        .unwrap();
        assert!(test_mode.contains("c     file.managed  would change  2 ms"), "{test_mode}");
        assert!(test_mode.contains("Succeeded: 1 (would change=1)  Failed: 0  Skipped: 0  Total: 1  Duration: 2 ms"));
    }

    #[test]
    fn nothing_to_apply_says_so_and_other_values_are_not_plans() {
        let none = json!({"steps": [], "succeeded": 0, "failed": 0, "skipped": 0, "total": 0, "duration_ms": 0,
                          "comment": "no plans for db1 in halite://top.yaml"});
        assert_eq!(
            render(&none).unwrap(),
            "no plans for db1 in halite://top.yaml\n\nSucceeded: 0 (changed=0)  Failed: 0  Skipped: 0  Total: 0  Duration: 0 ms\n"
        );
        for other in [json!({"error": "x"}), json!({"steps": "x"}), json!(true), json!({"steps": []})] {
            assert!(render(&other).is_none(), "{other}");
        }
        assert_eq!(duration_text(125_000), "2 min 5 s");
    }
}
