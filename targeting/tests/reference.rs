//! The compiled matcher against a simple reference, on random expressions, ids and grains:
//! expressions are generated as trees, written out as compound targets, parsed by
//! halite-targeting and matched; the reference evaluates the tree itself, with a glob matcher
//! that tries every split (slow, obviously right) and Salt's rules for flat grains (a string
//! or a list of strings, compared lower-cased).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use halite_protocol::message::{TargetKind, Value};
use halite_targeting::Expr;
use proptest::prelude::*;
use serde_json::json;

#[derive(Debug, Clone)]
enum Tree {
    Glob(String),
    List(Vec<String>),
    Grain(&'static str, String),
    Not(Box<Tree>),
    And(Box<Tree>, Box<Tree>),
    Or(Box<Tree>, Box<Tree>),
}

impl Tree {
    /// As a compound target, every operation in parentheses.
    fn text(&self) -> String {
        match self {
            Tree::Glob(p) => p.clone(),
            Tree::List(ids) => format!("L@{}", ids.join(",")),
            Tree::Grain(key, p) => format!("G@{key}:{p}"),
            Tree::Not(inner) => format!("not ( {} )", inner.text()),
            Tree::And(a, b) => format!("( {} and {} )", a.text(), b.text()),
            Tree::Or(a, b) => format!("( {} or {} )", a.text(), b.text()),
        }
    }

    fn holds(&self, id: &str, grains: &BTreeMap<String, Value>) -> bool {
        match self {
            Tree::Glob(p) => glob(p, id),
            Tree::List(ids) => ids.iter().any(|i| i == id),
            Tree::Grain(key, p) => {
                let p = p.to_lowercase();
                match grains.get(*key) {
                    Some(Value::String(s)) => glob(&p, &s.to_lowercase()),
                    Some(Value::Array(items)) => {
                        items.iter().filter_map(Value::as_str).any(|s| glob(&p, &s.to_lowercase()))
                    }
                    _ => false,
                }
            }
            Tree::Not(inner) => !inner.holds(id, grains),
            Tree::And(a, b) => a.holds(id, grains) && b.holds(id, grains),
            Tree::Or(a, b) => a.holds(id, grains) || b.holds(id, grains),
        }
    }
}

/// `*` any run, `?` one character, `[ab]` one of them: every way tried.
fn glob(pattern: &str, text: &str) -> bool {
    fn go(p: &[char], t: &[char]) -> bool {
        match p.split_first() {
            None => t.is_empty(),
            Some(('*', rest)) => (0..=t.len()).any(|k| go(rest, &t[k..])),
            Some(('?', rest)) => !t.is_empty() && go(rest, &t[1..]),
            Some(('[', rest)) => {
                let Some(end) = rest.iter().position(|&c| c == ']') else {
                    return t.first() == Some(&'[') && go(rest, &t[1..]);
                };
                t.first().is_some_and(|c| rest[..end].contains(c)) && go(&rest[end + 1..], &t[1..])
            }
            Some((c, rest)) => t.first() == Some(c) && go(rest, &t[1..]),
        }
    }
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    go(&p, &t)
}

fn pattern() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(vec!["a", "b", "1", "*", "?", "[ab]", "[1b]"]), 1..5)
        .prop_map(|parts| parts.concat())
}

fn id() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(vec!['a', 'b', '1']), 1..5).prop_map(|c| c.into_iter().collect())
}

fn tree() -> impl Strategy<Value = Tree> {
    let leaf = prop_oneof![
        pattern().prop_map(Tree::Glob),
        prop::collection::vec(id(), 1..3).prop_map(Tree::List),
        (prop::sample::select(vec!["os", "roles"]), pattern()).prop_map(|(k, p)| Tree::Grain(k, p)),
    ];
    leaf.prop_recursive(4, 24, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|t| Tree::Not(Box::new(t))),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| Tree::And(Box::new(a), Box::new(b))),
            (inner.clone(), inner).prop_map(|(a, b)| Tree::Or(Box::new(a), Box::new(b))),
        ]
    })
}

fn grains() -> impl Strategy<Value = BTreeMap<String, Value>> {
    let word = || prop::sample::select(vec!["A1", "ab", "B", "1b", "bab"]);
    (word(), prop::collection::vec(word(), 0..3))
        .prop_map(|(os, roles)| BTreeMap::from([("os".to_owned(), json!(os)), ("roles".to_owned(), json!(roles))]))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_compiled_matcher_agrees_with_the_reference(tree in tree(), id in id(), grains in grains()) {
        let text = tree.text();
        let parsed = Expr::parse(TargetKind::Compound, &text, &BTreeMap::new()).unwrap();
        prop_assert_eq!(parsed.matches(&id, &grains), tree.holds(&id, &grains), "{} on {} {:?}", text, id, grains);
    }
}
