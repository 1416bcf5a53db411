//! Telling an operator which function they meant: the nearest known name to a typo, and
//! halite's way of doing what a Salt function name asks for. Used where a function name is
//! refused: by the minion (an unknown function) and by the master (a function no targeted
//! minion has).

/// What halite offers for a Salt function it does not have under that name.
pub fn salt_equivalent(name: &str) -> Option<&'static str> {
    Some(match name {
        "state.apply" | "state.highstate" => {
            "plan.apply (the master's top file; from the CLI: halite apply TARGET [PLAN...]; see docs/modules.md)"
        }
        "state.sls" => "plan.run source=halite://plans/NAME.yaml (a plan the master serves; see docs/modules.md)",
        "cp.get_file" | "cp.get_url" => "file.managed with source=halite://PATH (a file the master serves)",
        "cmd.run_all" | "cmd.run_stdout" | "cmd.retcode" => "cmd.run (it returns retcode, stdout and stderr)",
        "cmd.shell" => "cmd.run with shell=true",
        "grains.item" | "grains.fetch" => "grains.get",
        "test.true" | "test.true_" => "test.ping",
        "pkg.installed" => "pkg.install",
        "pkg.removed" | "pkg.purge" => "pkg.remove",
        "pkg.list_pkgs" => "pkg.list",
        "pkg.refresh_db" => "pkg.refresh",
        "service.running" => "service.start (and service.enable)",
        "service.dead" => "service.stop",
        "file.get" | "cp.cat" => "file.read",
        "user.add" => "user.present",
        "user.delete" => "user.absent",
        "group.add" => "group.present",
        "group.delete" => "group.absent",
        "archive.tar" | "archive.unzip" => "archive.extract",
        _ => return None,
    })
}

/// The name in `known` nearest to `name` (a typo of a letter or two), if one is close.
pub fn nearest<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    known
        .into_iter()
        .map(|candidate| (edit_distance(name, candidate), candidate))
        .filter(|(distance, _)| *distance <= 2.min(name.len() / 3 + 1))
        .min_by_key(|(distance, candidate)| (*distance, *candidate))
        .map(|(_, candidate)| candidate)
}

/// "; halite's way to do that is …" for a Salt name, "; did you mean …?" for a typo of a
/// `known` one, or nothing.
pub fn hint<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    if let Some(instead) = salt_equivalent(name) {
        return format!("; halite's way to do that is {instead}");
    }
    nearest(name, known).map(|near| format!("; did you mean {near}?")).unwrap_or_default()
}

/// Levenshtein distance between two short names (ten lines do not warrant a dependency).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typos_and_salt_names_point_to_the_function() {
        let known = ["test.ping", "grains.get", "grains.items", "service.restart"];
        assert_eq!(hint("test.pong", known), "; did you mean test.ping?");
        assert_eq!(hint("servce.restart", known), "; did you mean service.restart?");
        assert_eq!(hint("grains.item", known), "; halite's way to do that is grains.get", "Salt's grains.item");
        assert!(hint("state.apply", known).contains("plan.apply (the master's top file; from the CLI: halite apply"));
        assert!(hint("state.sls", known).contains("plan.run source=halite://plans/NAME.yaml"));
        assert!(hint("cmd.run_all", known).contains("cmd.run (it returns retcode, stdout and stderr)"));
        assert_eq!(hint("frobnicate.now", known), "");
    }
}
