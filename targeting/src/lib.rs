//! Target expressions, resolved on the master against its registry (glob, list, regex, grain,
//! compound, nodegroup). A real parser with errors that say what is wrong and where; nothing is
//! ever evaluated as code.
//!
//! Every target comes from a peer (a client, a gateway token, a minion's `peer.publish`), so the
//! parser holds against hostile input: an expression is at most [`MAX_EXPR_LEN`] bytes, nests at
//! most [`MAX_NESTING`] parentheses and `not`s deep (a parse error past that, never a deep
//! recursion), and chains of `and`/`or` are flat lists, so neither matching nor dropping a
//! parsed expression recurses deeper than its nesting.
//!
//! This crate does not resolve targets against a registry or decide who may target what: the
//! master does both.

pub use halite_protocol::glob;

use std::collections::BTreeMap;

use halite_protocol::message::{TargetKind, Value};
use regex::Regex;

/// Longest target expression accepted (but a list).
pub const MAX_EXPR_LEN: usize = 4096;
/// Longest list target accepted (`-L`): about 16,000 fully qualified names.
pub const MAX_LIST_LEN: usize = 256 * 1024;
/// Compiled-size limit for `-E` regexes, so a pathological pattern cannot eat the master.
const REGEX_SIZE_LIMIT: usize = 256 * 1024;
/// Salt's `DEFAULT_TARGET_DELIM`: what separates a grain's keys from each other and the value.
const DEFAULT_DELIMITER: char = ':';
/// Nodegroups may refer to nodegroups, this deep.
const MAX_NODEGROUP_DEPTH: usize = 8;
/// Parentheses and `not`s nest at most this deep in one compound expression. Salt's own
/// compound targets rarely nest past three; the bound keeps the parser's recursion (and the
/// matcher's) a few kilobytes of stack whatever a peer sends.
pub const MAX_NESTING: usize = 32;

/// Why a target could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TargetError {
    /// Nothing to match.
    #[error("empty target expression")]
    Empty,
    /// Longer than [`MAX_EXPR_LEN`] ([`MAX_LIST_LEN`] for a list).
    #[error("target expression longer than {0} bytes")]
    TooLong(usize),
    /// An `S@` target that is not an address or a subnet.
    #[error("subnet target {0:?} must be an address or address/prefix (10.0.0.0/24, fd00::/8)")]
    BadSubnet(String),
    /// An `S@` subnet whose address has bits set past its prefix (Salt matches nothing).
    #[error("subnet target {given:?} has host bits set: the network is {network} ({DIFFERENCES})")]
    HostBits {
        /// As written.
        given: String,
        /// The network it lies in.
        network: String,
    },
    /// A grain expression with more delimiters than are prepared.
    #[error("grain target {0:?}… has more than {max} delimiters", max = grain::MAX_GRAIN_CUTS)]
    TooManyCuts(String),
    /// A target engine Salt has that halite does not (yet).
    #[error("{engine} targets are not supported: {why} ({DIFFERENCES})")]
    Unsupported {
        /// The prefix.
        engine: &'static str,
        /// Why, and what to use.
        why: &'static str,
    },
    /// A bad regular expression.
    #[error("bad regular expression {pattern:?}: {reason}")]
    BadRegex {
        /// The pattern.
        pattern: String,
        /// What the regex engine said.
        reason: String,
    },
    /// A grain target without `key:pattern`.
    #[error("grain target {0:?} must be key:pattern")]
    BadGrain(String),
    /// An unknown `X@` prefix in a compound expression.
    #[error("unknown target prefix {0:?} (use G@, P@, L@, E@, N@, S@ or a plain glob; {DIFFERENCES})")]
    UnknownPrefix(String),
    /// A nodegroup not in the master config.
    #[error("no nodegroup named {0:?} in the master config ({DIFFERENCES})")]
    UnknownNodegroup(String),
    /// Nodegroups nested too deep (or in a cycle).
    #[error("nodegroup {0:?} nests more than {MAX_NODEGROUP_DEPTH} levels deep (a cycle?)")]
    NodegroupDepth(String),
    /// Parentheses or `not`s nested deeper than [`MAX_NESTING`].
    #[error("compound expression nests parentheses and 'not' more than {MAX_NESTING} deep (at word {position})")]
    TooDeep {
        /// 1-based index of the word where the limit was passed.
        position: usize,
    },
    /// A compound expression is malformed.
    #[error("bad compound expression at word {position} ({word:?}): {reason}")]
    Syntax {
        /// 1-based index of the offending word.
        position: usize,
        /// The word (empty at the end).
        word: String,
        /// What was expected.
        reason: &'static str,
    },
}

/// Where the rules that differ from Salt's are listed, named by the errors they cause.
pub const DIFFERENCES: &str = "see \"Targets: where halite differs from Salt\" in docs/operations.md";

/// A parsed target.
#[derive(Debug, Clone)]
pub enum Expr {
    /// Glob on the id.
    Glob(String),
    /// Exact ids.
    List(std::collections::HashSet<String>),
    /// Regex on the whole id (Salt's `-E` matches from the start only: see [`DIFFERENCES`]).
    Regex(Regex),
    /// A grain target (`G@`, or `P@` with regexes), as Salt matches it ([`grain`]).
    Grain(Box<GrainTarget>),
    /// Minions with an address (their `ipv4` or `ipv6` grain) in a subnet.
    Subnet(Subnet),
    /// Every one of these (a chain of `and`, kept flat).
    All(Vec<Expr>),
    /// Any one of these (a chain of `or`, kept flat).
    Any(Vec<Expr>),
    /// Not.
    Not(Box<Expr>),
}

impl Expr {
    /// Parses `expr` as `kind`, expanding nodegroups from `nodegroups`.
    pub fn parse(kind: TargetKind, expr: &str, nodegroups: &BTreeMap<String, String>) -> Result<Expr, TargetError> {
        parse_at_depth(kind, expr, nodegroups, 0)
    }

    /// The ids this target names outright (a list, or a glob without wildcards): each is
    /// expected to be a minion, so one that matches none can be shown as unknown instead of
    /// silently left out. `None` for a target that only describes minions.
    pub fn named_ids(&self) -> Option<Vec<&str>> {
        match self {
            Expr::List(ids) => Some(ids.iter().map(String::as_str).collect()),
            Expr::Glob(pattern) if !pattern.contains(['*', '?', '[']) => Some(vec![pattern.as_str()]),
            _ => None,
        }
    }

    /// Whether a minion with this id and these grains is targeted.
    pub fn matches(&self, id: &str, grains: &BTreeMap<String, Value>) -> bool {
        match self {
            Expr::Glob(pattern) => glob::matches(pattern, id),
            Expr::List(ids) => ids.contains(id),
            Expr::Subnet(subnet) => ["ipv4", "ipv6"]
                .iter()
                .filter_map(|key| grains.get(*key).and_then(Value::as_array))
                .flatten()
                .filter_map(Value::as_str)
                .any(|address| subnet.holds(address)),
            Expr::Regex(re) => re.is_match(id),
            Expr::Grain(target) => target.matches(grains),
            Expr::All(all) => all.iter().all(|e| e.matches(id, grains)),
            Expr::Any(any) => any.iter().any(|e| e.matches(id, grains)),
            Expr::Not(a) => !a.matches(id, grains),
        }
    }
}

fn parse_at_depth(
    kind: TargetKind,
    expr: &str,
    nodegroups: &BTreeMap<String, String>,
    depth: usize,
) -> Result<Expr, TargetError> {
    let expr = expr.trim();
    if expr.is_empty() {
        return Err(TargetError::Empty);
    }
    let limit = if kind == TargetKind::List { MAX_LIST_LEN } else { MAX_EXPR_LEN };
    if expr.len() > limit {
        return Err(TargetError::TooLong(limit));
    }
    match kind {
        TargetKind::Glob => Ok(Expr::Glob(expr.to_owned())),
        TargetKind::List => list(expr),
        TargetKind::Regex => regex(expr),
        TargetKind::Grain => grain(expr, DEFAULT_DELIMITER, false),
        TargetKind::Compound => Compound::new(expr, nodegroups, depth).parse(),
        TargetKind::Nodegroup => nodegroup(expr, nodegroups, depth),
    }
}

/// Ids separated by commas or whitespace (a file of one id per line, joined or not).
fn list(expr: &str) -> Result<Expr, TargetError> {
    let ids: std::collections::HashSet<String> =
        expr.split(|c: char| c == ',' || c.is_whitespace()).filter(|s| !s.is_empty()).map(str::to_owned).collect();
    if ids.is_empty() {
        return Err(TargetError::Empty);
    }
    Ok(Expr::List(ids))
}

fn regex(pattern: &str) -> Result<Expr, TargetError> {
    regex::RegexBuilder::new(&format!("^(?:{pattern})$"))
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map(Expr::Regex)
        .map_err(|e| TargetError::BadRegex { pattern: pattern.to_owned(), reason: e.to_string() })
}

/// A grain target cut at `delimiter`, with globs or (`regex`) regexes. Without the delimiter
/// it matches nothing, as in Salt (which logs it): `G@os` is a false term, not an error.
fn grain(expr: &str, delimiter: char, regex: bool) -> Result<Expr, TargetError> {
    if !expr.contains(delimiter) {
        return Ok(Expr::Any(Vec::new()));
    }
    GrainTarget::new(expr, delimiter, regex, REGEX_SIZE_LIMIT).map(|target| Expr::Grain(Box::new(target)))
}

fn nodegroup(name: &str, nodegroups: &BTreeMap<String, String>, depth: usize) -> Result<Expr, TargetError> {
    if depth >= MAX_NODEGROUP_DEPTH {
        return Err(TargetError::NodegroupDepth(name.to_owned()));
    }
    let expr = nodegroups.get(name).ok_or_else(|| TargetError::UnknownNodegroup(name.to_owned()))?;
    parse_at_depth(TargetKind::Compound, expr, nodegroups, depth + 1)
}

mod compound;
pub mod grain;
mod nodegroups;
mod subnet;
use compound::Compound;
pub use grain::GrainTarget;
pub use nodegroups::nodegroup_expression;
pub use subnet::Subnet;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn minions() -> Vec<(&'static str, BTreeMap<String, Value>)> {
        let g = |os: &str, role: &str| {
            BTreeMap::from([
                ("os".to_owned(), json!(os)),
                ("roles".to_owned(), json!([role, "base"])),
                ("num_cpus".to_owned(), json!(4)),
                ("net".to_owned(), json!({"eth0": "10.0.0.1"})),
            ])
        };
        vec![
            ("web1", g("Debian", "web")),
            ("web2", g("Alpine", "web")),
            ("db1", g("Debian", "db")),
            ("db2", g("RedHat", "db")),
            ("test-web", g("Debian", "web")),
        ]
    }

    #[test]
    fn lists_and_plain_ids_name_their_minions_and_patterns_do_not() {
        let named = |kind, expr| {
            let mut ids: Vec<String> = Expr::parse(kind, expr, &BTreeMap::new())
                .unwrap()
                .named_ids()
                .map(|ids| ids.into_iter().map(str::to_owned).collect())?;
            ids.sort();
            Some(ids)
        };
        assert_eq!(named(TargetKind::List, "web2, web1 web2"), Some(vec!["web1".to_owned(), "web2".to_owned()]));
        assert_eq!(named(TargetKind::Glob, "web1"), Some(vec!["web1".to_owned()]));
        assert_eq!(named(TargetKind::Glob, "web*"), None);
        assert_eq!(named(TargetKind::Glob, "web[12]"), None);
        assert_eq!(named(TargetKind::Regex, "web1"), None);
        assert_eq!(named(TargetKind::Compound, "L@web1 and G@os:Debian"), None);
    }

    fn select(kind: TargetKind, expr: &str) -> Result<Vec<&'static str>, TargetError> {
        let groups = BTreeMap::from([
            ("webs".to_owned(), "web* and not E@test.*".to_owned()),
            ("nested".to_owned(), "N@webs or db1".to_owned()),
            ("loop".to_owned(), "N@loop".to_owned()),
        ]);
        let parsed = Expr::parse(kind, expr, &groups)?;
        Ok(minions().into_iter().filter(|(id, grains)| parsed.matches(id, grains)).map(|(id, _)| id).collect())
    }

    #[test]
    fn simple_targets() {
        assert_eq!(select(TargetKind::Glob, "web*").unwrap(), ["web1", "web2"]);
        assert_eq!(select(TargetKind::List, "db1, web2,nope").unwrap(), ["web2", "db1"]);
        assert_eq!(select(TargetKind::Regex, "(web|db)1").unwrap(), ["web1", "db1"]);
        assert_eq!(select(TargetKind::Regex, "web").unwrap(), Vec::<&str>::new(), "a regex matches the whole id");
        assert_eq!(select(TargetKind::Regex, r"web\d+").unwrap(), ["web1", "web2"]);
        assert_eq!(select(TargetKind::Regex, r"(?i)WEB\d").unwrap(), ["web1", "web2"]);
        assert_eq!(select(TargetKind::Grain, "os:debian").unwrap(), ["web1", "db1", "test-web"], "values fold case");
        assert_eq!(select(TargetKind::Grain, "os:Deb*").unwrap(), ["web1", "db1", "test-web"]);
        assert_eq!(select(TargetKind::Grain, "roles:db").unwrap(), ["db1", "db2"]);
        assert_eq!(select(TargetKind::Grain, "num_cpus:4").unwrap().len(), 5);
        assert_eq!(select(TargetKind::Grain, "net:eth0:10.*").unwrap().len(), 5);
        assert_eq!(select(TargetKind::Nodegroup, "webs").unwrap(), ["web1", "web2"]);
        assert_eq!(select(TargetKind::Nodegroup, "nested").unwrap(), ["web1", "web2", "db1"]);
    }

    #[test]
    fn subnets_match_the_address_grains() {
        let host = |ipv4: &[&str], ipv6: &[&str]| {
            BTreeMap::from([("ipv4".to_owned(), json!(ipv4)), ("ipv6".to_owned(), json!(ipv6))])
        };
        let matches = |expr: &str, grains: &BTreeMap<String, Value>| {
            Expr::parse(TargetKind::Compound, expr, &BTreeMap::new()).unwrap().matches("h", grains)
        };
        let a = host(&["127.0.0.1", "10.1.2.3"], &["::1", "fd00::5"]);
        assert!(matches("S@10.1.2.0/24", &a));
        assert!(matches("S@10.0.0.0/8 and h", &a));
        assert!(!matches("S@10.1.3.0/24", &a));
        assert!(matches("S@10.1.2.3", &a), "one address");
        assert!(matches("S@fd00::/8", &a));
        assert!(matches("S@0.0.0.0/0", &a));
        assert!(!matches("S@192.168.0.0/16", &host(&[], &[])));
        for bad in ["S@10.0.0.0/33", "S@nope", "S@10.0.0.0/x"] {
            let error = Expr::parse(TargetKind::Compound, bad, &BTreeMap::new()).unwrap_err().to_string();
            assert!(error.contains("must be an address or address/prefix"), "{bad}: {error}");
        }
    }

    #[test]
    fn compound_precedence_and_parentheses() {
        let expr = "web* and G@os:Debian or L@db1,db2 and not E@db2";
        assert_eq!(select(TargetKind::Compound, expr).unwrap(), ["web1", "db1"]);
        assert_eq!(select(TargetKind::Compound, "( web* or db* ) and G@os:Debian").unwrap(), ["web1", "db1"]);
        assert_eq!(select(TargetKind::Compound, "(web* or db*) and not G@os:Debian").unwrap(), ["web2", "db2"]);
        assert_eq!(select(TargetKind::Compound, "db* not db2").unwrap(), ["db1"], "A not B is A and not B");
        assert_eq!(select(TargetKind::Compound, "not web* not db*").unwrap(), ["test-web"]);
        assert_eq!(select(TargetKind::Compound, "( ) or db1").unwrap(), ["db1"], "( ) is false");
        assert_eq!(select(TargetKind::Compound, "P@os:deb.* and web*").unwrap(), ["web1"]);
        assert_eq!(select(TargetKind::Compound, "P@os:deb").unwrap(), Vec::<&str>::new());
        assert_eq!(select(TargetKind::Compound, "G|@os|Alpine").unwrap(), ["web2"]);
        assert_eq!(select(TargetKind::Compound, "G@os or db2").unwrap(), ["db2"], "G@ without ':' is false");
        assert_eq!(select(TargetKind::Compound, "E@(web|db)2").unwrap(), ["web2", "db2"]);
        assert_eq!(select(TargetKind::Compound, "N@webs and G@os:Alpine").unwrap(), ["web2"]);
    }

    #[test]
    fn malformed_expressions_say_what_and_where() {
        let syntax = |expr| match select(TargetKind::Compound, expr) {
            Err(TargetError::Syntax { position, reason, .. }) => (position, reason),
            other => panic!("{expr:?}: expected a syntax error, got {other:?}"),
        };
        assert_eq!(syntax("web* and"), (3, "expected a target"));
        assert_eq!(syntax("( web*"), (3, "expected ')'"));
        assert_eq!(syntax("web* db*"), (2, "expected 'and', 'or' or the end"));
        assert_eq!(syntax("or web*"), (1, "expected a target"));
        assert_eq!(syntax("web* )"), (2, "expected 'and', 'or' or the end"));
        assert!(matches!(select(TargetKind::Compound, "X@foo"), Err(TargetError::UnknownPrefix(_))));
        assert_eq!(syntax("not not db1"), (2, "'not' cannot follow 'not'"));
        assert!(matches!(select(TargetKind::Compound, "I@role:web"), Err(TargetError::Unsupported { .. })));
        assert!(matches!(select(TargetKind::Regex, "(unclosed"), Err(TargetError::BadRegex { .. })));
        assert!(matches!(select(TargetKind::Regex, "a{1000}{1000}"), Err(TargetError::BadRegex { .. })));
        assert!(matches!(select(TargetKind::Nodegroup, "missing"), Err(TargetError::UnknownNodegroup(_))));
        assert!(matches!(select(TargetKind::Nodegroup, "loop"), Err(TargetError::NodegroupDepth(_))));
        assert_eq!(select(TargetKind::Glob, "  ").unwrap_err(), TargetError::Empty);
        assert_eq!(select(TargetKind::Glob, &"x".repeat(5000)).unwrap_err(), TargetError::TooLong(MAX_EXPR_LEN));
        // A list may be far longer: thousands of names, from a file.
        let names: Vec<String> = (0..10_000).map(|i| format!("host{i}.example.com")).collect();
        assert!(select(TargetKind::List, &names.join("\n")).is_ok());
        let too_many = "x,".repeat(MAX_LIST_LEN);
        assert_eq!(select(TargetKind::List, &too_many).unwrap_err(), TargetError::TooLong(MAX_LIST_LEN));
    }

    #[test]
    fn deep_nesting_is_a_parse_error_not_a_stack_overflow() {
        // About 2,500 nested parentheses overflowed the master's stack before nesting was bounded.
        for expr in ["(".repeat(3000) + "web1", "( ".repeat(1000) + "web1" + &" )".repeat(1000)] {
            assert!(matches!(select(TargetKind::Compound, &expr), Err(TargetError::TooDeep { .. })), "{}", &expr[..20]);
        }
        let mixed = "not ( ".repeat(600) + "web1";
        assert!(matches!(select(TargetKind::Compound, &mixed), Err(TargetError::TooDeep { .. })));
        let at_limit = "(".repeat(MAX_NESTING) + "web1" + &")".repeat(MAX_NESTING);
        assert_eq!(select(TargetKind::Compound, &at_limit).unwrap(), ["web1"]);
        let past = "(".repeat(MAX_NESTING + 1) + "web1" + &")".repeat(MAX_NESTING + 1);
        let error = select(TargetKind::Compound, &past).unwrap_err();
        assert_eq!(error, TargetError::TooDeep { position: MAX_NESTING + 1 });
        assert!(error.to_string().contains("more than 32 deep"), "{error}");
    }

    #[test]
    fn long_chains_and_runs_of_not_stay_flat() {
        let chain = vec!["web1"; 500].join(" or ");
        assert_eq!(select(TargetKind::Compound, &chain).unwrap(), ["web1"]);
        let chain = vec!["web*"; 450].join(" and ");
        assert_eq!(select(TargetKind::Compound, &chain).unwrap(), ["web1", "web2"]);
        // A run of `not`s is refused at its second word, however long.
        let nots = "not ".repeat(1000) + "db1";
        assert!(matches!(select(TargetKind::Compound, &nots), Err(TargetError::Syntax { position: 2, .. })));
    }
}
