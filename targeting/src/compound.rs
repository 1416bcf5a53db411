//! The compound expression parser: recursive descent over whitespace-separated words, with
//! `and` binding tighter than `or` and `not` tighter than both, as in Salt. Recursion happens
//! only at `(` and `not`, each counted against [`MAX_NESTING`]; `and`/`or` chains loop and
//! build flat lists.

use std::collections::BTreeMap;

use crate::{grain, list, nodegroup, regex, subnet, Expr, TargetError, MAX_NESTING};

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
            // Parentheses may touch a word, except inside a regex, where they belong to it.
            if word.starts_with("E@") {
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
        while self.peek() == Some("and") {
            self.pos += 1;
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
        // `not not x` is `x`: count the run of `not`s instead of recursing through it.
        let mut negations = 0usize;
        while self.peek() == Some("not") {
            self.pos += 1;
            negations += 1;
        }
        let inner = self.primary()?;
        Ok(if negations % 2 == 1 { Expr::Not(Box::new(inner)) } else { inner })
    }

    fn primary(&mut self) -> Result<Expr, TargetError> {
        match self.peek() {
            None => Err(self.error("expected a target")),
            Some("(") => {
                self.descend()?;
                self.pos += 1;
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

    fn term(&self, word: &str) -> Result<Expr, TargetError> {
        let Some((prefix, rest)) = word.split_once('@').filter(|(p, _)| p.len() == 1) else {
            return Ok(Expr::Glob(word.to_owned()));
        };
        match prefix {
            "G" => grain(rest),
            "L" => list(rest),
            "E" => regex(rest),
            "N" => nodegroup(rest, self.nodegroups, self.nodegroup_depth),
            "S" => subnet(rest),
            _ => Err(TargetError::UnknownPrefix(format!("{prefix}@"))),
        }
    }
}
