//! Nodegroups as Salt's master config writes them: a compound expression, or a list of words
//! (YAML's `[host1, host2]`, TOML's `["host1", "host2"]`). Salt's `nodegroup_comp` turns a
//! group of plain ids (a list, or a string of ids separated by spaces or commas) into one
//! `L@` list, and one with regex characters into an `E@` regex; anything with an operator, a
//! `*` or an `X@` term stays the compound it is.

/// The compound expression of a nodegroup written as these words.
pub fn nodegroup_expression<S: AsRef<str>>(words: &[S]) -> String {
    let words: Vec<&str> = words.iter().map(AsRef::as_ref).collect();
    let operator = |w: &&str| matches!(*w, "and" | "or" | "not" | "(" | ")");
    let engine = |w: &&str| {
        let b = w.as_bytes();
        b.len() >= 2 && b[0].is_ascii_uppercase() && b[1] == b'@'
    };
    if words.iter().any(operator) || words.iter().any(|w| w.contains('*') || engine(w)) {
        return words.join(" ");
    }
    let joined = words.join(",");
    if words.iter().any(|w| w.contains(['(', '[', '{', '\\', '?', '}', ']', ')'])) {
        format!("E@{joined}")
    } else if joined.is_empty() {
        joined
    } else {
        format!("L@{joined}")
    }
}

#[cfg(test)]
mod tests {
    use super::nodegroup_expression;

    /// The cases of Salt's `tests/unit/utils/test_minions.py` (`test_nodegroup_comp`), as
    /// the expression halite parses.
    #[test]
    fn groups_become_what_salts_nodegroup_comp_makes_of_them() {
        assert_eq!(nodegroup_expression(&["host1", "host2"]), "L@host1,host2");
        assert_eq!(nodegroup_expression(&["host1,host2"]), "L@host1,host2");
        assert_eq!(nodegroup_expression(&["[foo,bar,baz].domain.com"]), "E@[foo,bar,baz].domain.com");
        assert_eq!(nodegroup_expression(&["web*"]), "web*");
        assert_eq!(nodegroup_expression(&["G@os:Debian", "and", "web*"]), "G@os:Debian and web*");
        assert_eq!(nodegroup_expression(&["L@a,b", "or", "c"]), "L@a,b or c");
    }
}
