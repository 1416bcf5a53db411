//! The compound expression parser: recursive descent over whitespace-separated words, with
//! `and` binding tighter than `or` and `not` tighter than both, as in Salt (which evaluates
//! the words as a Python expression). As in Salt, `A not B` reads `A and not B`, `not not A`
//! is refused, and `( )` is false. Recursion happens only at `(` and `not`, each counted
//! against [`MAX_NESTING`]; `and`/`or` chains loop and build flat lists.

use std::collections::BTreeMap;

use crate::subnet::subnet;
use crate::{grain, list, nodegroup, regex, Expr, TargetError, DEFAULT_DELIMITER, MAX_NESTING};

pub(crate) struct Compound<'a> {
    words: Vec<&'a str>,
    pos: usize,
    nodegroups: &'a BTreeMap<String, String>,
    /// How deep nodegroups have nested to reach this expression.
    nodegroup_depth: usize,
    /// How deep parentheses and `not`s are nested where the parser is.
    nesting: usize,
}

impl<'a> Compound<'a> {
    pub(crate) fn new(expr: &'a str, nodegroups: &'a BTreeMap<String, String>, nodegroup_depth: usize) -> Self {
        let mut words = Vec::new();
        for word in expr.split_whitespace() {
            // Parentheses may touch a word (Salt wants them apart), except a regex's (`E@`,
            // `P@`, `P|@`), where they belong to it.
            let regex_word = word.starts_with("E@")
                || word.strip_prefix('P').is_some_and(|rest| rest.starts_with('@') || rest.chars().nth(1) == Some('@'));
            if regex_word {
                words.push(word);
                continue;
            }
            let inner = word.trim_start_matches('(');
            words.extend(std::iter::repeat_n("(", word.len() - inner.len()));
            let core = inner.trim_end_matches(')');
            if !core.is_empty() {
                words.push(core);
            }
            words.extend(std::iter::repeat_n(")", inner.len() - core.len()));
        }
        Compound { words, pos: 0, nodegroups, nodegroup_depth, nesting: 0 }
    }

    pub(crate) fn parse(mut self) -> Result<Expr, TargetError> {
        let expr = self.or()?;
        if self.pos < self.words.len() {
            return Err(self.error("expected 'and', 'or' or the end"));
        }
        Ok(expr)
    }

    fn error(&self, reason: &'static str) -> TargetError {
        TargetError::Syntax {
            position: self.pos + 1,
            word: self.words.get(self.pos).map(|w| (*w).to_owned()).unwrap_or_default(),
            reason,
        }
    }

    fn peek(&self) -> Option<&'a str> {
        self.words.get(self.pos).copied()
    }

    fn or(&mut self) -> Result<Expr, TargetError> {
        let mut any = vec![self.and()?];
        while self.peek() == Some("or") {
            self.pos += 1;
            any.push(self.and()?);
        }
        Ok(if any.len() == 1 { any.swap_remove(0) } else { Expr::Any(any) })
    }

    fn and(&mut self) -> Result<Expr, TargetError> {
        let mut all = vec![self.not()?];
        // `A not B` is `A and not B`, as Salt reads it.
        while let Some(word @ ("and" | "not")) = self.peek() {
            if word == "and" {
                self.pos += 1;
            }
            all.push(self.not()?);
        }
        Ok(if all.len() == 1 { all.swap_remove(0) } else { Expr::All(all) })
    }

    /// Enters a parenthesis or a `not`: one level deeper, refused past the bound.
    fn descend(&mut self) -> Result<(), TargetError> {
        if self.nesting >= MAX_NESTING {
            return Err(TargetError::TooDeep { position: self.pos + 1 });
        }
        self.nesting += 1;
        Ok(())
    }

    fn not(&mut self) -> Result<Expr, TargetError> {
        if self.peek() != Some("not") {
            return self.primary();
        }
        self.pos += 1;
        // Salt reads `not not x` as `not and not x` and refuses it.
        if self.peek() == Some("not") {
            return Err(self.error("'not' cannot follow 'not'"));
        }
        Ok(Expr::Not(Box::new(self.primary()?)))
    }

    fn primary(&mut self) -> Result<Expr, TargetError> {
        match self.peek() {
            None => Err(self.error("expected a target")),
            Some("(") => {
                self.descend()?;
                self.pos += 1;
                // `( )` is false, as Python's `()` is.
                if self.peek() == Some(")") {
                    self.pos += 1;
                    self.nesting -= 1;
                    return Ok(Expr::Any(Vec::new()));
                }
                let inner = self.or()?;
                if self.peek() != Some(")") {
                    return Err(self.error("expected ')'"));
                }
                self.pos += 1;
                self.nesting -= 1;
                Ok(inner)
            }
            Some(")" | "and" | "or") => Err(self.error("expected a target")),
            Some(word) => {
                self.pos += 1;
                self.term(word)
            }
        }
    }

    /// A word: `X@pattern` (`G` and `P` may name their delimiter, `G|@os|Debian`, as Salt's
    /// `TARGET_REX` allows), or a glob.
    fn term(&self, word: &str) -> Result<Expr, TargetError> {
        let Some((prefix, rest)) = word.split_once('@') else { return Ok(Expr::Glob(word.to_owned())) };
        let mut letters = prefix.chars();
        let (Some(engine), delimiter) = (letters.next(), letters.next()) else {
            return Ok(Expr::Glob(word.to_owned()));
        };
        if letters.next().is_some() || (delimiter.is_some() && !matches!(engine, 'G' | 'P' | 'I' | 'J')) {
            return Ok(Expr::Glob(word.to_owned()));
        }
        let delimiter = delimiter.unwrap_or(DEFAULT_DELIMITER);
        match engine {
            'G' => grain(rest, delimiter, false),
            'P' => grain(rest, delimiter, true),
            'L' => list(rest),
            'E' => regex(rest),
            'N' => nodegroup(rest, self.nodegroups, self.nodegroup_depth),
            'S' => subnet(rest),
            'I' | 'J' => Err(TargetError::Unsupported {
                engine: "pillar (I@, J@)",
                why: "halite has no per-minion data to match yet; target by grains",
            }),
            'R' => Err(TargetError::Unsupported {
                engine: "range (R@)",
                why: "halite has no range server; use a list, a glob or a nodegroup",
            }),
            _ => Err(TargetError::UnknownPrefix(format!("{prefix}@"))),
        }
    }
}
