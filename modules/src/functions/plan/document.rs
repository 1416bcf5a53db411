//! Plan and top files as trees that remember the line of every value, so every error about
//! one names the file and the line. YAML is read by `saphyr-parser`'s events (YAML 1.2, core
//! schema: `yes` and `on` are text, `0644` is the number 644, quote what must stay text), JSON by
//! the same reader (a JSON document is a YAML 1.2 document), TOML by the `toml` crate with its
//! spans.
//!
//! The YAML tree is built here rather than by a YAML library's loader so that its size is
//! bounded before it exists: nesting past [`MAX_DEPTH`] and more than [`MAX_VALUES`] values are
//! refused, and aliases (which can multiply a small file into a huge tree) are not accepted.

use halite_protocol::message::Value;
use saphyr_parser::{Event, Parser, ScalarStyle, Span};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// Deepest nesting of lists and mappings in a plan or top file. Far above what a plan needs
/// (a step's keyword arguments nest a few levels), and well below what a message may nest
/// once a step's arguments are echoed in a return the master wraps for its clients.
pub(crate) const MAX_DEPTH: usize = 32;

/// Most values (scalars, lists and mappings) in one file.
pub(crate) const MAX_VALUES: usize = 100_000;

/// The syntax a file is written in, from its name's extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Syntax {
    /// `.yaml`, `.yml`.
    Yaml,
    /// `.json`.
    Json,
    /// `.toml`.
    Toml,
}

impl Syntax {
    /// The extensions tried, in order, for a plan on the master named without one.
    pub(crate) const EXTENSIONS: [(&'static str, Syntax); 4] =
        [("yaml", Syntax::Yaml), ("yml", Syntax::Yaml), ("toml", Syntax::Toml), ("json", Syntax::Json)];

    /// The syntax of a file named `name`, or `None` for an extension that is not a plan's.
    pub(crate) fn of(name: &str) -> Option<Syntax> {
        let (_, extension) = name.rsplit_once('.')?;
        Syntax::EXTENSIONS.iter().find(|(known, _)| *known == extension).map(|(_, syntax)| *syntax)
    }
}

/// A value and the line (1-based) it starts on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Marked {
    pub(crate) line: usize,
    pub(crate) node: Node,
}

/// A value of a plan or top file.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    /// Text, a number, a boolean or null.
    Scalar(Value),
    /// A list.
    List(Vec<Marked>),
    /// A mapping, in the file's order: key, the key's line, value.
    Map(Vec<(String, usize, Marked)>),
}

impl Marked {
    /// The plain value (the lines dropped).
    pub(crate) fn into_value(self) -> Value {
        match self.node {
            Node::Scalar(value) => value,
            Node::List(items) => Value::Array(items.into_iter().map(Marked::into_value).collect()),
            Node::Map(entries) => Value::Object(entries.into_iter().map(|(k, _, v)| (k, v.into_value())).collect()),
        }
    }

    /// What the value is, for errors ("a list", "text", ...).
    pub(crate) fn kind(&self) -> &'static str {
        match &self.node {
            Node::Scalar(Value::String(_)) => "text",
            Node::Scalar(Value::Null) => "empty",
            Node::Scalar(Value::Bool(_)) => "a boolean",
            Node::Scalar(_) => "a number",
            Node::List(_) => "a list",
            Node::Map(_) => "a mapping",
        }
    }
}

/// Why a file could not be read as a tree: the line and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    pub(crate) line: usize,
    pub(crate) message: String,
}

/// Reads `text` written in `syntax`.
pub(crate) fn parse(text: &str, syntax: Syntax) -> Result<Marked, SyntaxError> {
    match syntax {
        Syntax::Yaml | Syntax::Json => yaml(text),
        Syntax::Toml => toml_tree(text),
    }
}

/// The tree being built: each open list or mapping, with its line, and a mapping's key
/// waiting for its value.
enum Open {
    List(usize, Vec<Marked>),
    Map(usize, Vec<(String, usize, Marked)>, Option<(String, usize)>),
}

fn yaml(text: &str) -> Result<Marked, SyntaxError> {
    let line_of = |span: &Span| span.start.line();
    let mut stack: Vec<Open> = Vec::new();
    let mut done: Option<Marked> = None;
    let mut values = 0usize;
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(|e| SyntaxError { line: e.marker().line(), message: e.info().to_owned() })?;
        let line = line_of(&span);
        let error = |message: &str| SyntaxError { line, message: message.to_owned() };
        let finished = match event {
            Event::StreamStart | Event::StreamEnd | Event::Nothing | Event::DocumentEnd => continue,
            Event::DocumentStart(_) if done.is_some() => {
                return Err(error("a second document: a plan or top file holds one"));
            }
            Event::DocumentStart(_) => continue,
            Event::Alias(_) => {
                return Err(error("aliases (*name) are not accepted: write the value out"));
            }
            Event::Scalar(text, style, _, tag) => {
                let forced_text = tag.as_ref().is_some_and(|t| t.suffix == "str");
                if let Some(tag) = tag.filter(|t| t.suffix != "str") {
                    return Err(error(&format!("tag {tag} is not accepted (only !!str)")));
                }
                Marked { line, node: Node::Scalar(scalar(&text, style, forced_text)) }
            }
            Event::SequenceStart(..) | Event::MappingStart(..) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(error(&format!("nested more than {MAX_DEPTH} deep")));
                }
                stack.push(match event {
                    Event::SequenceStart(..) => Open::List(line, Vec::new()),
                    _ => Open::Map(line, Vec::new(), None),
                });
                continue;
            }
            Event::SequenceEnd | Event::MappingEnd => match stack.pop() {
                Some(Open::List(line, items)) => Marked { line, node: Node::List(items) },
                Some(Open::Map(line, entries, _)) => Marked { line, node: Node::Map(entries) },
                None => return Err(error("a list or mapping ends that never began")),
            },
        };
        values += 1;
        if values > MAX_VALUES {
            return Err(error(&format!("more than {MAX_VALUES} values")));
        }
        match stack.last_mut() {
            None => done = Some(finished),
            Some(Open::List(_, items)) => items.push(finished),
            Some(Open::Map(_, entries, key)) => match key.take() {
                Some((key, key_line)) => {
                    if entries.iter().any(|(k, _, _)| *k == key) {
                        return Err(SyntaxError { line: key_line, message: format!("key {key:?} given twice") });
                    }
                    entries.push((key, key_line, finished));
                }
                None => match finished.node {
                    Node::Scalar(Value::String(text)) => *key = Some((text, finished.line)),
                    Node::Scalar(other) => *key = Some((other.to_string(), finished.line)),
                    _ => return Err(error("a key must be text, not a list or mapping")),
                },
            },
        }
    }
    Ok(done.unwrap_or(Marked { line: 1, node: Node::Scalar(Value::Null) }))
}

/// A scalar as YAML 1.2's core schema reads it: quoted and block scalars are text; plain ones
/// may be null, a boolean, an integer or a float (infinities and NaN stay text: JSON has none).
fn scalar(text: &str, style: ScalarStyle, forced_text: bool) -> Value {
    if forced_text || style != ScalarStyle::Plain {
        return Value::String(text.to_owned());
    }
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    let integer = |digits: &str, radix| i64::from_str_radix(digits, radix).ok().map(Value::from);
    let parsed = if let Some(octal) = text.strip_prefix("0o") {
        integer(octal, 8)
    } else if let Some(hex) = text.strip_prefix("0x") {
        integer(hex, 16)
    } else if is_decimal(text) {
        integer(text, 10)
    } else if is_float(text) {
        text.parse::<f64>().ok().and_then(serde_json::Number::from_f64).map(Value::Number)
    } else {
        None
    };
    parsed.unwrap_or_else(|| Value::String(text.to_owned()))
}

/// `[-+]?[0-9]+`.
fn is_decimal(text: &str) -> bool {
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?` (the core schema's float).
fn is_float(text: &str) -> bool {
    let body = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (mantissa, exponent) = match body.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => (mantissa, Some(exponent)),
        None => (body, None),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = digits(whole) && digits(fraction) && !(whole.is_empty() && fraction.is_empty());
    let exponent_ok = exponent.is_none_or(is_decimal);
    mantissa_ok && exponent_ok
}

/// TOML through the `toml` crate, every value wrapped in its span. Its parser bounds nesting
/// itself (80 deep), and TOML has no aliases: the tree is no larger than the text.
fn toml_tree(text: &str) -> Result<Marked, SyntaxError> {
    // Where each line starts, so a span's line is a binary search, not a scan of the text.
    let starts: Vec<usize> =
        std::iter::once(0).chain(text.bytes().enumerate().filter(|(_, b)| *b == b'\n').map(|(i, _)| i + 1)).collect();
    let line_at = |offset: usize| starts.partition_point(|start| *start <= offset).max(1);
    let root: toml::Spanned<TomlNode> = toml::from_str(text).map_err(|e| SyntaxError {
        line: e.span().map_or(1, |span| line_at(span.start)),
        message: e.message().trim_end().to_owned(),
    })?;
    Ok(toml_marked(root, &line_at))
}

/// A TOML value with its children's spans, as the `toml` deserializer gives them.
enum TomlNode {
    Scalar(Value),
    List(Vec<toml::Spanned<TomlNode>>),
    Map(Vec<(String, toml::Spanned<TomlNode>)>),
}

fn toml_marked(node: toml::Spanned<TomlNode>, line_at: &impl Fn(usize) -> usize) -> Marked {
    let line = line_at(node.span().start);
    let node = match node.into_inner() {
        TomlNode::Scalar(value) => Node::Scalar(value),
        TomlNode::List(items) => Node::List(items.into_iter().map(|item| toml_marked(item, line_at)).collect()),
        TomlNode::Map(entries) => Node::Map(
            entries
                .into_iter()
                .map(|(key, value)| {
                    // The value's line: the key's for `key = value`, the header's for a table.
                    let line = line_at(value.span().start);
                    (key, line, toml_marked(value, line_at))
                })
                .collect(),
        ),
    };
    Marked { line, node }
}

impl<'de> Deserialize<'de> for TomlNode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TomlVisitor)
    }
}

struct TomlVisitor;

impl<'de> Visitor<'de> for TomlVisitor {
    type Value = TomlNode;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a TOML value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<TomlNode, E> {
        Ok(TomlNode::Scalar(Value::Bool(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<TomlNode, E> {
        Ok(TomlNode::Scalar(Value::from(v)))
    }
    fn visit_u64<E>(self, v: u64) -> Result<TomlNode, E> {
        Ok(TomlNode::Scalar(Value::from(v)))
    }
    fn visit_f64<E>(self, v: f64) -> Result<TomlNode, E> {
        // TOML's inf and nan have no JSON form: kept as text, as YAML's are.
        Ok(TomlNode::Scalar(serde_json::Number::from_f64(v).map_or(Value::String(v.to_string()), Value::Number)))
    }
    fn visit_str<E>(self, v: &str) -> Result<TomlNode, E> {
        Ok(TomlNode::Scalar(Value::String(v.to_owned())))
    }
    fn visit_string<E>(self, v: String) -> Result<TomlNode, E> {
        Ok(TomlNode::Scalar(Value::String(v)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TomlNode, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(TomlNode::List(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TomlNode, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            // A date or time comes as a mapping of one private key to its text, which has no
            // span: kept as that text.
            if key.starts_with("$__toml_private") {
                return Ok(TomlNode::Scalar(Value::String(map.next_value::<String>()?)));
            }
            entries.push((key, map.next_value::<toml::Spanned<TomlNode>>()?));
        }
        Ok(TomlNode::Map(entries))
    }
}
