//! Prometheus' two text formats. `prometheus-client` writes OpenMetrics; readers that do not
//! ask for it (and `promtool check metrics`) expect the classic format (0.0.4), which differs
//! in two details this converts.

/// The classic text format of an OpenMetrics exposition: the same lines, except that a
/// counter's `# HELP` and `# TYPE` name its samples (`…_total`) and there is no `# EOF`.
pub fn openmetrics_to_classic(open: &str) -> String {
    let mut counters = std::collections::HashSet::new();
    for line in open.lines() {
        if let Some(name) = line.strip_prefix("# TYPE ").and_then(|rest| rest.strip_suffix(" counter")) {
            counters.insert(name.to_owned());
        }
    }
    let mut text = String::with_capacity(open.len() + counters.len() * 12);
    for line in open.lines() {
        if line == "# EOF" {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters.contains(name).then(|| format!("{prefix}{name}_total {tail}"))
        });
        text.push_str(renamed.as_deref().unwrap_or(line));
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_named_by_their_samples_and_eof_goes() {
        let open =
            "# HELP jobs Jobs.\n# TYPE jobs counter\njobs_total 3\n# HELP up Up.\n# TYPE up gauge\nup 1\n# EOF\n";
        assert_eq!(
            openmetrics_to_classic(open),
            "# HELP jobs_total Jobs.\n# TYPE jobs_total counter\njobs_total 3\n# HELP up Up.\n# TYPE up gauge\nup 1\n"
        );
    }
}
