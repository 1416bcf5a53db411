//! Salt's own matcher cases, answered by halite's targeting.
//!
//! `salt_cases.jsonl` holds one case a line: the matcher (`kind`), the expression, the minion's
//! id and grains, what Salt answers (`expected`), and where that answer comes from (`src`): a
//! file of Salt's test suite (`tests/pytests/unit/matchers/test_*.py`,
//! `tests/pytests/unit/utils/test_data.py`, `tests/unit/utils/test_minions.py`,
//! `tests/pytests/unit/modules/test_match.py`, `tests/pytests/unit/utils/test_network.py`), or
//! `derived:` and the Salt source whose reading gives it (each checked by running Salt 3008's
//! matcher code on it).
//!
//! Every case must answer as Salt does, except the ones listed in [`DIFFERENCES`], each with the
//! rule of `docs/operations.md` ("Targets: where halite differs from Salt") that explains it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use halite_protocol::message::{TargetKind, Value};
use halite_targeting::{nodegroup_expression, Expr};
use serde_json::json;

/// Cases halite answers otherwise on purpose: (kind, expression or `src:` Salt's test, the rule
/// in the docs' table).
const DIFFERENCES: &[(&str, &str, &str)] = &[
    ("compound", "G@example-grain:True and I@example-pillar:True", "pillar targets"),
    ("compound", "G@example-grain:True or I@false", "pillar targets"),
    ("compound", "G@example-grain:True and I@false", "pillar targets"),
    ("compound", "( G@example-grain:True or I@false ) and G@example-grain:True", "pillar targets"),
    ("compound", "(G@example-grain:True or I@false) and G@example-grain:True", "pillar targets"),
    ("compound", r#"["G@example-grain:True","and","I@example-pillar:True"]"#, "pillar targets"),
    ("compound", "G@true and (I@true", "pillar targets"),
    ("compound", "R@%foo or web1", "range targets"),
    ("compound", "and true", "invalid expressions are refused"),
    ("compound", "not not web1", "invalid expressions are refused"),
    ("compound", "web1 web2", "invalid expressions are refused"),
    ("compound", "web1 and", "invalid expressions are refused"),
    ("compound", "( and web1 )", "invalid expressions are refused"),
    ("compound", ") web1", "invalid expressions are refused"),
    ("compound", "web1 AND web1", "invalid expressions are refused"),
    ("compound", "not S@10.1.2.3/24", "invalid expressions are refused"),
    ("compound", "g@os:Debian", "unknown engines are refused"),
    ("compound", "N@missing or web1", "unknown nodegroups are refused"),
    ("compound", "web1 or N@missing", "unknown nodegroups are refused"),
    ("compound", "src:-> web* or (db* and ...)", "a nodegroup is one term"),
    ("ipcidr", "not-an-ip", "invalid expressions are refused"),
    ("ipcidr", "10.1.2.3/24", "invalid expressions are refused"),
    ("in_subnet", "10.10.8.0/40", "invalid expressions are refused"),
    ("glob", "", "invalid expressions are refused"),
    ("grain_pcre", "os:[", "invalid expressions are refused"),
    ("list", "a, b", "-L lists"),
    ("pcre", "web", "regexes match the whole id or value"),
    ("pcre", r"web\d+", "regexes match the whole id or value"),
    ("grain_pcre", "os:deb", "regexes match the whole id or value"),
    ("nodegroup_comp", "src:test_circular_nodegroup_reference", "cyclic nodegroups"),
    ("nodegroup_comp", "src:self-cycle partial expansion", "cyclic nodegroups"),
];

struct Case {
    line: usize,
    kind: String,
    expr: Value,
    id: Option<String>,
    grains: BTreeMap<String, Value>,
    extra: Value,
    expected: Value,
    src: String,
}

fn cases() -> Vec<Case> {
    let mut nodegroups = Value::Null;
    include_str!("salt_cases.jsonl")
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            let doc: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("line {}: {e}", i + 1));
            let mut extra = doc.get("extra").cloned().unwrap_or(Value::Null);
            // "<same as previous line>": the nodegroups of the case before.
            match extra.get("nodegroups") {
                Some(Value::String(_)) => extra["nodegroups"] = nodegroups.clone(),
                Some(groups) => nodegroups = groups.clone(),
                None => {}
            }
            let grains = match doc.get("grains") {
                Some(Value::Object(map)) => map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                _ => BTreeMap::new(),
            };
            Case {
                line: i + 1,
                kind: doc["kind"].as_str().unwrap().to_owned(),
                expr: doc["expr"].clone(),
                id: doc["id"].as_str().map(str::to_owned),
                grains,
                extra,
                expected: doc["expected"].clone(),
                src: doc["src"].as_str().unwrap_or_default().to_owned(),
            }
        })
        .collect()
}

/// The nodegroups of a case, as halite's config reads them (a string or a list of words).
fn nodegroups_of(case: &Case) -> BTreeMap<String, String> {
    let Some(Value::Object(groups)) = case.extra.get("nodegroups") else { return BTreeMap::new() };
    groups
        .iter()
        .map(|(name, group)| {
            let words: Vec<String> = match group {
                Value::String(text) => text.split_whitespace().map(str::to_owned).collect(),
                Value::Array(items) => items.iter().map(|w| w.as_str().unwrap_or_default().to_owned()).collect(),
                _ => Vec::new(),
            };
            (name.clone(), nodegroup_expression(&words))
        })
        .collect()
}

/// What halite answers: `Ok(matched)`, `Err(why)` when it refuses the expression, or `None`
/// for a case that does not apply to halite (see the reasons below).
fn answer(case: &Case) -> Option<Result<bool, String>> {
    let expr = case.expr.as_str();
    let id = case.id.as_deref().unwrap_or("m");
    let parse = |kind, text: &str| Expr::parse(kind, text, &nodegroups_of(case)).map_err(|e| e.to_string());
    let matched = |kind, text: &str| Some(parse(kind, text).map(|e| e.matches(id, &case.grains)));
    let delimited = |engine: char, text: &str| {
        let delimiter = case.extra.get("delimiter").and_then(Value::as_str).unwrap_or("");
        format!("{engine}{delimiter}@{text}")
    };
    match case.kind.as_str() {
        // Salt's matchers also take a missing id or a non-string target (and answer False);
        // halite's ids and targets are always strings.
        _ if case.id.is_none() && matches!(case.kind.as_str(), "glob" | "compound") => None,
        _ if expr.is_none() && case.kind != "traverse" && case.kind != "compound" => None,
        "compound" => match &case.expr {
            Value::String(text) => matched(TargetKind::Compound, text),
            // A list of words: Salt's API form; halite's is the words joined.
            Value::Array(words) => {
                let text: Vec<&str> = words.iter().filter_map(Value::as_str).collect();
                matched(TargetKind::Compound, &text.join(" "))
            }
            _ => None,
        },
        "glob" => matched(TargetKind::Glob, expr?),
        "pcre" => matched(TargetKind::Regex, expr?),
        "list" => matched(TargetKind::List, expr?),
        "grain" | "subdict" => matched(TargetKind::Compound, &delimited('G', expr?)),
        "grain_pcre" => matched(TargetKind::Compound, &delimited('P', expr?)),
        "ipcidr" => matched(TargetKind::Compound, &format!("S@{}", expr?)),
        "in_subnet" => {
            let addresses = case.grains.get("addrs").cloned().unwrap_or(Value::Null);
            let grains =
                BTreeMap::from([("ipv4".to_owned(), json!([addresses])), ("ipv6".to_owned(), json!([addresses]))]);
            Some(parse(TargetKind::Compound, &format!("S@{}", expr?)).map(|e| e.matches("m", &grains)))
        }
        "traverse" => {
            let path: String = match &case.expr {
                Value::String(text) => text.clone(),
                Value::Array(words) => words.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(":"),
                _ => return None,
            };
            // A dict with an integer key: JSON grains cannot hold one.
            if case.extra.get("python_data").is_some() {
                return None;
            }
            let found = halite_targeting::grain::lookup(&case.grains, &path, ':').cloned();
            let default = case.extra.get("default").cloned().unwrap_or(Value::Null);
            Some(Ok(found.unwrap_or(default) == case.expected))
        }
        "nodegroup_comp" => {
            // Salt's word list and halite's expression must select the same minions.
            let name = expr?;
            let words: Vec<&str> = case.expected.as_array()?.iter().filter_map(Value::as_str).collect();
            let halite = parse(TargetKind::Nodegroup, name);
            let salt = Expr::parse(TargetKind::Compound, &words.join(" "), &BTreeMap::new());
            let (halite, salt) = match (halite, salt) {
                (Ok(h), Ok(s)) => (h, s),
                (Err(why), _) => return Some(Err(why)),
                (Ok(_), Err(why)) => panic!("line {}: Salt's expansion does not parse: {why}", case.line),
            };
            let probes = ["host1", "host4", "web1x", "bl1.domain.com", "foo.domain.com", "other", "bar.domain.com"];
            let grains = [
                BTreeMap::new(),
                BTreeMap::from([("foo".to_owned(), json!("bar")), ("os".to_owned(), json!("Debian"))]),
            ];
            let same = probes.iter().all(|id| grains.iter().all(|g| halite.matches(id, g) == salt.matches(id, g)));
            Some(Ok(same))
        }
        // Salt's parser internals (`parse_target`) and its resource engines (T@, M@): not
        // halite's.
        "parse_target" | "resource" | "managing_minion" => None,
        other => panic!("line {}: unknown kind {other}", case.line),
    }
}

#[test]
fn salts_own_cases_answer_as_salt_answers_them() {
    let cases = cases();
    assert!(cases.len() >= 200, "the cases were read: {}", cases.len());
    let (mut agreed, mut differ, mut not_applicable) = (0, 0, 0);
    let mut used = std::collections::HashSet::new();
    let mut wrong = Vec::new();
    for case in &cases {
        let Some(answer) = answer(case) else {
            not_applicable += 1;
            continue;
        };
        let expected = match (&case.kind[..], &case.expected) {
            ("traverse" | "nodegroup_comp", _) => true,
            (_, Value::Bool(b)) => *b,
            (_, other) => panic!("line {}: expected {other}", case.line),
        };
        let expr = match &case.expr {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        let listed = DIFFERENCES.iter().find(|(kind, e, _)| {
            *kind == case.kind && (e.strip_prefix("src:").map_or(*e == expr, |test| case.src.ends_with(test)))
        });
        match (answer, listed) {
            (Ok(got), None) if got == expected => agreed += 1,
            (Ok(got), Some((_, _, rule))) if got == expected => wrong
                .push(format!("line {}: {expr:?} now agrees with Salt; drop it from DIFFERENCES ({rule})", case.line)),
            // Listed: halite refuses it, or answers as the table says.
            (_, Some(entry)) => {
                differ += 1;
                used.insert(entry.1);
            }
            (got, None) => wrong.push(format!(
                "line {} ({}, {}): {expr:?} on {:?} {:?}: halite {got:?}, Salt {expected}",
                case.line, case.kind, case.src, case.id, case.grains
            )),
        }
    }
    assert!(wrong.is_empty(), "{} cases differ from Salt:\n{}", wrong.len(), wrong.join("\n"));
    let unused: Vec<&str> = DIFFERENCES.iter().map(|d| d.1).filter(|e| !used.contains(e)).collect();
    assert!(unused.is_empty(), "listed differences with no case: {unused:?}");
    assert!(agreed >= 165, "{agreed} agreed, {differ} differ on purpose, {not_applicable} not applicable");
}
