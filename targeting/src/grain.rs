//! Grain targets (`-G`, `G@`, and `P@` with regexes) matched as Salt matches them: Salt's
//! `salt.utils.data.subdict_match` and `traverse_dict_and_list`, step for step.
//!
//! - The expression is cut at each delimiter (`:` unless `G|@…` names another), the longest key
//!   path first: `a:b:c` tries key `a:b` with pattern `c`, then key `a` with pattern `b:c`.
//! - A key path walks dicts by key and lists by index (negative from the end) or, for a word,
//!   into the first dict of the list that has it.
//! - A value that is a dict matches a pattern naming one of its keys, `*`, or a path below it;
//!   a pattern starting `*:` looks at every key. A list matches when one member does.
//! - Scalars compare as Python prints them (`True`, `None`, `4`, `1.0`), value and pattern both
//!   lower-cased: `G@os:debian` and `G@flag:true` match `Debian` and `true`. Globs are
//!   Python's `fnmatch`; a regex must match the whole value, where Salt's `re.match` matches
//!   from its start (as `-E` does on the master: an ACL's regex admits no more than it shows).
//!
//! Every pattern the walk can try is a suffix of the expression starting after a delimiter (or
//! a `:` below a dict), so each is prepared once, when the target is parsed.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use halite_protocol::glob;
use halite_protocol::message::Value;
use regex::Regex;

use crate::TargetError;

/// Most places an expression may be cut (each a pattern prepared, a regex compiled for `P@`).
pub const MAX_GRAIN_CUTS: usize = 64;

/// The delimiter below a dict value: Salt's recursive call does not pass the target's own.
const NESTED: char = ':';

/// A prepared grain target.
#[derive(Debug, Clone)]
pub struct GrainTarget {
    expr: String,
    delimiter: char,
    /// Each pattern the walk may try, by its offset in `expr`.
    patterns: HashMap<usize, Pattern>,
}

#[derive(Debug, Clone)]
enum Pattern {
    /// A glob, lower-cased.
    Glob(String),
    /// A regex on the whole value, case-insensitive; `None` where that suffix is no valid
    /// regex (Salt counts such a try as no match).
    Regex(Option<Regex>),
}

impl GrainTarget {
    /// `expr` cut at `delimiter`, its patterns globs (`regex` false) or regexes.
    pub(crate) fn new(expr: &str, delimiter: char, regex: bool, size_limit: usize) -> Result<Self, TargetError> {
        let starts: Vec<usize> = std::iter::once(0)
            .chain(expr.char_indices().filter(|&(_, c)| c == delimiter || c == NESTED).map(|(i, c)| i + c.len_utf8()))
            .collect();
        if starts.len() > MAX_GRAIN_CUTS + 1 {
            return Err(TargetError::TooManyCuts(expr.chars().take(40).collect()));
        }
        let mut patterns = HashMap::new();
        let mut any_valid = !regex;
        let mut first_error = None;
        for start in starts {
            let text = &expr[start..];
            let pattern = if regex {
                let compiled = regex::RegexBuilder::new(&format!("^(?:{text})$"))
                    .case_insensitive(true)
                    .size_limit(size_limit)
                    .build();
                match compiled {
                    Ok(re) => {
                        any_valid = true;
                        Pattern::Regex(Some(re))
                    }
                    Err(error) => {
                        first_error.get_or_insert_with(|| error.to_string());
                        Pattern::Regex(None)
                    }
                }
            } else {
                Pattern::Glob(text.to_lowercase())
            };
            patterns.insert(start, pattern);
        }
        if !any_valid {
            let reason = first_error.unwrap_or_default();
            return Err(TargetError::BadRegex { pattern: expr.to_owned(), reason });
        }
        Ok(GrainTarget { expr: expr.to_owned(), delimiter, patterns })
    }

    /// Whether a minion with these grains matches.
    pub(crate) fn matches(&self, grains: &BTreeMap<String, Value>) -> bool {
        let mut walk = Walk { memo: HashMap::new(), steps_left: MAX_STEPS };
        self.subdict_match(&mut walk, Node::Root(grains), &self.expr, self.delimiter)
    }

    /// Where a suffix of the expression starts in it.
    fn offset(&self, suffix: &str) -> usize {
        suffix.as_ptr() as usize - self.expr.as_ptr() as usize
    }

    /// Salt's `subdict_match` of `expr` (a suffix of the whole expression) in `data`. Salt tries
    /// the same suffix on the same place again and again (each cut, then each cut below a
    /// dict): each answer is kept, so a nested grain costs what its places and the expression's
    /// suffixes cost, not their powers.
    fn subdict_match(&self, walk: &mut Walk, data: Node<'_>, expr: &str, delimiter: char) -> bool {
        let key = (Step::Subdict(delimiter == NESTED), self.offset(expr), data.address());
        if let Some(&known) = walk.memo.get(&key) {
            return known;
        }
        let matched = self.subdict_walk(walk, data, expr, delimiter);
        walk.memo.insert(key, matched);
        matched
    }

    fn subdict_walk(&self, walk: &mut Walk, data: Node<'_>, expr: &str, delimiter: char) -> bool {
        let cuts: Vec<usize> = expr.char_indices().filter(|&(_, c)| c == delimiter).map(|(i, _)| i).collect();
        // The longest key path first: the last cut, then the one before.
        for &cut in cuts.iter().rev() {
            if !walk.step() {
                return false;
            }
            let key = &expr[..cut];
            let (pattern, found) = if key == "*" {
                (expr, Some(data))
            } else {
                (&expr[cut + delimiter.len_utf8()..], traverse(data, key.split(delimiter)))
            };
            let Some(found) = found else { continue };
            if let Some(map) = found.as_map() {
                // Salt skips an empty dict: it cannot tell it from "not found".
                if map.is_empty() {
                    continue;
                }
                if self.dict_match(walk, map, pattern) {
                    return true;
                }
                continue;
            }
            if let Node::Value(Value::Array(members)) = found {
                for member in members {
                    if let Value::Object(map) = member {
                        if self.dict_match(walk, MapRef::Json(map), pattern) {
                            return true;
                        }
                    }
                    if self.scalar_match(walk, member, pattern) {
                        return true;
                    }
                }
                continue;
            }
            if let Node::Value(value) = found {
                if self.scalar_match(walk, value, pattern) {
                    return true;
                }
            }
        }
        false
    }

    /// Salt's `_dict_match`: a dict value against what is left of the expression.
    fn dict_match(&self, walk: &mut Walk, map: MapRef<'_>, pattern: &str) -> bool {
        let key = (Step::Dict, self.offset(pattern), Node::Map(map).address());
        if let Some(&known) = walk.memo.get(&key) {
            return known;
        }
        let matched = self.dict_walk(walk, map, pattern);
        walk.memo.insert(key, matched);
        matched
    }

    fn dict_walk(&self, walk: &mut Walk, map: MapRef<'_>, pattern: &str) -> bool {
        if !walk.step() {
            return false;
        }
        let (wildcard, pattern) = match pattern.strip_prefix("*:") {
            Some(rest) => (true, rest),
            None => (false, pattern),
        };
        if pattern == "*" || map.get(pattern).is_some() {
            return true;
        }
        if self.subdict_match(walk, Node::Map(map), pattern, NESTED) {
            return true;
        }
        wildcard
            && map.values().any(|value| match value {
                Value::Object(inner) => self.dict_match(walk, MapRef::Json(inner), pattern),
                Value::Array(items) => items.iter().any(|item| self.scalar_match(walk, item, pattern)),
                other => self.scalar_match(walk, other, pattern),
            })
    }

    /// Salt's `_match`: a value, printed as Python prints it and lower-cased, against a
    /// pattern (a suffix of the expression, prepared when it was parsed).
    fn scalar_match(&self, walk: &mut Walk, value: &Value, pattern: &str) -> bool {
        if !walk.step() {
            return false;
        }
        let Some(prepared) = self.patterns.get(&self.offset(pattern)) else { return false };
        // A mapping or list is matched as Python prints it, up to a bound: past it no
        // pattern written for a value is meant to match its text.
        let Some(text) = python_str_within(value, REPR_MAX) else { return false };
        // What is read costs steps too: a huge value is not read again and again.
        if !walk.charge(text.len() / 256) {
            return false;
        }
        let text = text.to_lowercase();
        match prepared {
            Pattern::Glob(lower) => glob::matches(lower, &text),
            Pattern::Regex(Some(re)) => re.is_match(&text),
            Pattern::Regex(None) => false,
        }
    }
}

/// Most steps one minion's grains take to match one grain target: far more than any real
/// grain takes (tens), and a bound on what hostile grains and expressions cost the master,
/// whose core matches every targeted minion in turn. Past it the minion does not match.
const MAX_STEPS: u32 = 20_000;

/// Which of Salt's two functions an answer kept is of (`subdict_match` cut at the target's
/// own delimiter or at `:` below a dict, or `_dict_match`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Step {
    Subdict(bool),
    Dict,
}

/// One match's answers kept and its budget.
struct Walk {
    memo: HashMap<(Step, usize, usize), bool>,
    steps_left: u32,
}

impl Walk {
    /// Takes one step of the budget; false once it is spent.
    fn step(&mut self) -> bool {
        self.charge(1)
    }

    /// Takes `steps` of the budget; false once it is spent.
    fn charge(&mut self, steps: usize) -> bool {
        match u32::try_from(steps).ok().and_then(|steps| self.steps_left.checked_sub(steps)) {
            Some(left) => {
                self.steps_left = left;
                true
            }
            None => {
                self.steps_left = 0;
                false
            }
        }
    }
}

/// The longest text of a mapping or list matched as Python prints it.
const REPR_MAX: usize = 4096;

/// The value at `path` (keys cut at `delimiter`) in the grains, walked as Salt's
/// `traverse_dict_and_list` walks them (`grains.get`): dict keys, list indexes (negative from
/// the end), and words looked up in the first dict of a list that has them.
pub fn lookup<'a>(grains: &'a BTreeMap<String, Value>, path: &str, delimiter: char) -> Option<&'a Value> {
    match traverse(Node::Root(grains), path.split(delimiter))? {
        Node::Value(value) => Some(value),
        Node::Root(_) | Node::Map(_) => None,
    }
}

/// A place in the grains: the grains themselves, a dict below them, or any value.
#[derive(Clone, Copy)]
enum Node<'a> {
    Root(&'a BTreeMap<String, Value>),
    Map(MapRef<'a>),
    Value(&'a Value),
}

impl<'a> Node<'a> {
    /// Where it is in memory: the same place is the same node (for the answers kept).
    fn address(self) -> usize {
        match self {
            Node::Root(map) | Node::Map(MapRef::Grains(map)) => std::ptr::from_ref(map) as usize,
            Node::Map(MapRef::Json(map)) => std::ptr::from_ref(map) as usize,
            Node::Value(value) => std::ptr::from_ref(value) as usize,
        }
    }

    fn as_map(self) -> Option<MapRef<'a>> {
        match self {
            Node::Root(map) => Some(MapRef::Grains(map)),
            Node::Map(map) => Some(map),
            Node::Value(Value::Object(map)) => Some(MapRef::Json(map)),
            Node::Value(_) => None,
        }
    }
}

/// A dict: the grains' own map or one inside a value.
#[derive(Clone, Copy)]
enum MapRef<'a> {
    Grains(&'a BTreeMap<String, Value>),
    Json(&'a serde_json::Map<String, Value>),
}

impl<'a> MapRef<'a> {
    fn get(self, key: &str) -> Option<&'a Value> {
        match self {
            MapRef::Grains(map) => map.get(key),
            MapRef::Json(map) => map.get(key),
        }
    }

    fn is_empty(self) -> bool {
        match self {
            MapRef::Grains(map) => map.is_empty(),
            MapRef::Json(map) => map.is_empty(),
        }
    }

    fn values(self) -> Box<dyn Iterator<Item = &'a Value> + 'a> {
        match self {
            MapRef::Grains(map) => Box::new(map.values()),
            MapRef::Json(map) => Box::new(map.values()),
        }
    }
}

/// Salt's `traverse_dict_and_list`: follows `keys` from `data`; `None` where one is missing.
fn traverse<'a, 'k>(data: Node<'a>, keys: impl Iterator<Item = &'k str>) -> Option<Node<'a>> {
    let mut at = data;
    for key in keys {
        at = match at {
            Node::Value(Value::Array(items)) => match python_int(key) {
                // A word: the first dict of the list that has it.
                None => items.iter().find_map(|item| item.as_object().and_then(|m| m.get(key))).map(Node::Value)?,
                Some(index) => {
                    let len = i64::try_from(items.len()).ok()?;
                    let index = if index < 0 { index + len } else { index };
                    Node::Value(items.get(usize::try_from(index).ok()?)?)
                }
            },
            other => Node::Value(other.as_map()?.get(key)?),
        };
    }
    Some(at)
}

/// What Python's `int()` reads from a string: surrounding whitespace, a sign, digits with
/// single underscores between them.
fn python_int(text: &str) -> Option<i64> {
    let text = text.trim();
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if digits.is_empty() || digits.starts_with('_') || digits.ends_with('_') || digits.contains("__") {
        return None;
    }
    if !digits.chars().all(|c| c.is_ascii_digit() || c == '_') {
        return None;
    }
    let value: i64 = digits.replace('_', "").parse().ok()?;
    Some(if negative { -value } else { value })
}

/// A value as Python's `str()` prints it (grains arrive as JSON: Salt's are Python objects).
pub(crate) fn python_str(value: &Value) -> Cow<'_, str> {
    match value {
        Value::String(text) => Cow::Borrowed(text),
        other => Cow::Owned(python_repr(other)),
    }
}

/// The same, `None` for a mapping or list whose text is longer than `max` bytes (it is not
/// printed whole to find out).
fn python_str_within(value: &Value, max: usize) -> Option<Cow<'_, str>> {
    fn size(value: &Value, budget: &mut usize) -> bool {
        let own = match value {
            Value::String(text) => text.len() + 2,
            Value::Array(items) => return items.iter().all(|item| take(budget, 2) && size(item, budget)),
            Value::Object(map) => {
                return map.iter().all(|(k, v)| take(budget, k.len() + 4) && size(v, budget));
            }
            _ => 24,
        };
        take(budget, own)
    }
    fn take(budget: &mut usize, n: usize) -> bool {
        match budget.checked_sub(n) {
            Some(left) => {
                *budget = left;
                true
            }
            None => false,
        }
    }
    let mut budget = max;
    match value {
        Value::Array(_) | Value::Object(_) if !size(value, &mut budget) => None,
        other => Some(python_str(other)),
    }
}

fn python_repr(value: &Value) -> String {
    match value {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(number) => match (number.as_i64(), number.as_u64(), number.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(f)) => python_float(f),
            _ => number.to_string(),
        },
        Value::String(text) => format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'")),
        Value::Array(items) => format!("[{}]", items.iter().map(python_repr).collect::<Vec<_>>().join(", ")),
        Value::Object(map) => format!(
            "{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{}: {}", python_repr(&Value::String(k.clone())), python_repr(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// A float as Python's `repr`: the shortest digits that read back, positional between 1e-4 and
/// 1e16 (with `.0` when whole), else `1e+20`, `1.5e-05`.
fn python_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let magnitude = f.abs();
    if magnitude == 0.0 || (1e-4..1e16).contains(&magnitude) {
        let text = f.to_string();
        return if text.contains('.') { text } else { format!("{text}.0") };
    }
    let text = format!("{f:e}");
    let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
    let (sign, digits) = match exponent.strip_prefix('-') {
        Some(rest) => ('-', rest),
        None => ('+', exponent),
    };
    format!("{mantissa}e{sign}{digits:0>2}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_print_as_python_prints_them() {
        for (value, printed) in [
            (json!(true), "True"),
            (json!(null), "None"),
            (json!(4), "4"),
            (json!(-3), "-3"),
            (json!(1.0), "1.0"),
            (json!(2.5), "2.5"),
            (json!(1e20), "1e+20"),
            (json!(1.5e-5), "1.5e-05"),
            (json!(0.0001), "0.0001"),
            (json!({"a": 1}), "{'a': 1}"),
            (json!(["x", true]), "['x', True]"),
        ] {
            assert_eq!(python_str(&value), printed, "{value}");
        }
    }

    /// Salt's walk tries each suffix at each place once per way of reaching it: on a grain
    /// nested 40 deep that is 2^60 tries for these expressions. Kept answers make it a few
    /// thousand steps, and the budget bounds any shape (these would hang the master's core).
    #[test]
    fn a_deeply_nested_grain_costs_polynomial_steps_not_exponential() {
        let mut nested = json!("leaf");
        for _ in 0..40 {
            nested = json!({ "a": nested });
        }
        let grains = BTreeMap::from([("a".to_owned(), nested)]);
        let target = |expr: &str| GrainTarget::new(expr, ':', false, 1 << 20).unwrap();
        assert!(target(&format!("{}leaf", "a:".repeat(41))).matches(&grains));
        assert!(!target(&format!("{}zzz", "a:".repeat(60))).matches(&grains));
        assert!(!target(&format!("{}zzz", "*:".repeat(60))).matches(&grains));
        assert!(target(&format!("{}leaf", "*:".repeat(41))).matches(&grains));
    }

    #[test]
    fn a_huge_value_is_read_within_the_budget() {
        let big = json!([{ "k": "x".repeat(100_000) }, "a".repeat(1_000_000)]);
        let grains = BTreeMap::from([("g".to_owned(), big)]);
        let target = GrainTarget::new(&format!("g:{}", "*:".repeat(30)), ':', false, 1 << 20).unwrap();
        assert!(!target.matches(&grains));
        let small = BTreeMap::from([("g".to_owned(), json!([{ "k": "v" }]))]);
        assert!(GrainTarget::new("g:{'k'*", ':', false, 1 << 20).unwrap().matches(&small), "a small mapping's text");
    }

    #[test]
    fn integers_read_as_python_reads_them() {
        assert_eq!(python_int(" 1 "), Some(1));
        assert_eq!(python_int("+2"), Some(2));
        assert_eq!(python_int("-1"), Some(-1));
        assert_eq!(python_int("1_0"), Some(10));
        for bad in ["", "x", "1__0", "_1", "1_", "1.0", "--1"] {
            assert_eq!(python_int(bad), None, "{bad:?}");
        }
    }
}
