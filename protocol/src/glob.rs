//! Shell-style glob matching (`*`, `?`, `[abc]`, `[a-z]`, `[!abc]`), anchored at both ends: minion
//! targets, key patterns, event tags and function policies all use it. The rules are those of
//! Python's `fnmatch`, which Salt uses: case-sensitive, `[!...]` negates and `[^...]` does not
//! (`^` is a member), a `]` first in a class is a member, an unclosed `[` is literal, a reversed
//! range matches nothing, and a backslash is an ordinary character.

/// Whether `text` matches `pattern` as a whole.
///
/// No backtracking: the pattern is cut at its `*`s into segments that each match a fixed number
/// of characters; the first and last are anchored, each middle one is taken at its leftmost
/// match (which never loses a match). A literal segment is found with `str::find` (linear), so a
/// pattern of literals and stars costs O(pattern + text) whatever its shape; a segment with `?`
/// or a class is tried at each position, and a pattern asking for more characters than the
/// text has is refused before any search.
pub fn matches(pattern: &str, text: &str) -> bool {
    if !is_pattern(pattern) {
        return pattern == text;
    }
    let p: Vec<char> = pattern.chars().collect();
    let tokens = tokenize(&p);
    let mut segments = tokens.split(|t| matches!(t, Token::Star));
    let first = segments.next().unwrap_or_default();
    let Some(last) = segments.next_back() else {
        // No star: one anchored segment.
        return anchored(&p, first, text, 0) == Some(text.len());
    };
    let needed = tokens.iter().filter(|t| !matches!(t, Token::Star)).count();
    if needed > text.chars().count() {
        return false;
    }
    let Some(mut at) = anchored(&p, first, text, 0) else { return false };
    for middle in segments {
        match leftmost(&p, middle, text, at) {
            Some(end) => at = end,
            None => return false,
        }
    }
    // The last segment takes exactly the last `last.len()` characters.
    let tail = text.char_indices().rev().nth(last.len().wrapping_sub(1)).map_or(text.len(), |(i, _)| i);
    tail >= at && anchored(&p, last, text, tail) == Some(text.len())
}

/// One element of a pattern: a star, or something that matches exactly one character.
#[derive(Debug, Clone, Copy)]
enum Token {
    Star,
    Literal(char),
    Any,
    /// A closed `[...]` class starting at this index of the pattern.
    Class(usize),
}

fn tokenize(p: &[char]) -> Vec<Token> {
    let mut tokens = Vec::with_capacity(p.len());
    let mut i = 0;
    while i < p.len() {
        let (token, next) = match p[i] {
            '*' => (Token::Star, i + 1),
            '?' => (Token::Any, i + 1),
            '[' => match class_end(p, i) {
                Some(end) => (Token::Class(i), end),
                None => (Token::Literal('['), i + 1),
            },
            c => (Token::Literal(c), i + 1),
        };
        // Consecutive stars are one star.
        if !(matches!(token, Token::Star) && matches!(tokens.last(), Some(Token::Star))) {
            tokens.push(token);
        }
        i = next;
    }
    tokens
}

fn token_matches(p: &[char], token: Token, c: char) -> bool {
    match token {
        Token::Star | Token::Any => true,
        Token::Literal(l) => l == c,
        Token::Class(start) => class(p, start, c).is_some_and(|(matched, _)| matched),
    }
}

/// Matches a star-free segment at byte offset `at`; the byte offset after it.
fn anchored(p: &[char], segment: &[Token], text: &str, at: usize) -> Option<usize> {
    let mut chars = text.get(at..)?.char_indices();
    for &token in segment {
        let (_, c) = chars.next()?;
        if !token_matches(p, token, c) {
            return None;
        }
    }
    Some(chars.next().map_or(text.len(), |(i, _)| at + i))
}

/// The end of the leftmost match of a star-free segment at or after byte offset `from`.
fn leftmost(p: &[char], segment: &[Token], text: &str, from: usize) -> Option<usize> {
    if segment.iter().all(|t| matches!(t, Token::Literal(_))) {
        let literal: String =
            segment.iter().filter_map(|t| if let Token::Literal(c) = t { Some(*c) } else { None }).collect();
        return text.get(from..)?.find(&literal).map(|i| from + i + literal.len());
    }
    shift_and(p, segment, text, from)
}

/// The leftmost match of a star-free segment with wildcards, bit-parallel (shift-and): one
/// pass over the text, a word operation per 64 tokens per character, so a segment of thousands
/// of `?` against a long text (a grain value) costs their product over 64, never their product.
/// Which tokens a character matches is worked out once per distinct character.
fn shift_and(p: &[char], segment: &[Token], text: &str, from: usize) -> Option<usize> {
    let Some(last) = segment.len().checked_sub(1) else { return Some(from) };
    let words = segment.len().div_ceil(64);
    let set = |bits: &mut [u64], k: usize| bits[k / 64] |= 1 << (k % 64);
    // Tokens every character matches, and each literal's.
    let mut any = vec![0u64; words];
    let mut literals: std::collections::HashMap<char, Vec<u64>> = std::collections::HashMap::new();
    let mut classes = Vec::new();
    for (k, &token) in segment.iter().enumerate() {
        match token {
            Token::Literal(c) => set(literals.entry(c).or_insert_with(|| vec![0; words]), k),
            Token::Class(_) => classes.push(k),
            Token::Any | Token::Star => set(&mut any, k),
        }
    }
    let mut masks: std::collections::HashMap<char, Vec<u64>> = std::collections::HashMap::new();
    let mut state = vec![0u64; words];
    for (i, c) in text.get(from..)?.char_indices() {
        if masks.len() > 4096 {
            masks.clear();
        }
        let mask = masks.entry(c).or_insert_with(|| {
            let mut mask = any.clone();
            if let Some(literal) = literals.get(&c) {
                mask.iter_mut().zip(literal).for_each(|(m, l)| *m |= l);
            }
            for &k in &classes {
                if token_matches(p, segment[k], c) {
                    set(&mut mask, k);
                }
            }
            mask
        });
        // Every partial match moves one token on, a new one starts here.
        let mut carry = 1;
        for (word, m) in state.iter_mut().zip(mask.iter()) {
            let next_carry = *word >> 63;
            *word = ((*word << 1) | carry) & m;
            carry = next_carry;
        }
        if state[last / 64] & (1 << (last % 64)) != 0 {
            return Some(from + i + c.len_utf8());
        }
    }
    None
}

/// Whether every text `inner` matches is also matched by `outer` (so a subscription to `inner`
/// can be allowed by an ACL glob `outer`). Conservative: `inner`'s wildcards are covered only by
/// a `*` of `outer`, and an `inner` with a `[class]` is covered only by an `outer` of `*`s.
/// Quadratic in the lengths, which callers cap.
pub fn covers(outer: &str, inner: &str) -> bool {
    let o: Vec<char> = outer.chars().collect();
    let i: Vec<char> = inner.chars().collect();
    if i.contains(&'[') {
        return o.iter().all(|&c| c == '*');
    }
    let wild = |c: char| c == '*' || c == '?';
    // reach[j]: `o[..oi]` can match `i[..j]`.
    let mut reach = vec![false; i.len() + 1];
    reach[0] = true;
    let mut oi = 0;
    while oi < o.len() {
        let mut next = vec![false; i.len() + 1];
        let mut step = 1;
        match o[oi] {
            '*' => {
                let mut any = false;
                for j in 0..=i.len() {
                    any |= reach[j];
                    next[j] = any;
                }
            }
            '[' => match class_end(&o, oi) {
                Some(end) => {
                    for j in 0..i.len() {
                        next[j + 1] = reach[j] && !wild(i[j]) && class(&o, oi, i[j]).is_some_and(|(m, _)| m);
                    }
                    step = end - oi;
                }
                None => {
                    for j in 0..i.len() {
                        next[j + 1] = reach[j] && i[j] == '[';
                    }
                }
            },
            '?' => {
                for j in 0..i.len() {
                    next[j + 1] = reach[j] && i[j] != '*';
                }
            }
            c => {
                for j in 0..i.len() {
                    next[j + 1] = reach[j] && i[j] == c;
                }
            }
        }
        reach = next;
        oi += step;
    }
    reach[i.len()]
}

/// The index after the class starting at `p[start] == '['`, if it is closed.
fn class_end(p: &[char], start: usize) -> Option<usize> {
    class(p, start, '\0').map(|(_, end)| end)
}

/// Matches `c` against the class starting at `p[start] == '['`; returns whether it matched and
/// the index after the class, or `None` if the class is not closed (then `[` is literal).
fn class(p: &[char], start: usize, c: char) -> Option<(bool, usize)> {
    let mut i = start + 1;
    // `!` negates, as in Python's fnmatch (Salt's); a leading `^` is a member like any other.
    let negate = p.get(i) == Some(&'!');
    if negate {
        i += 1;
    }
    let mut matched = false;
    let mut first = true;
    while i < p.len() {
        if p[i] == ']' && !first {
            return Some((matched != negate, i + 1));
        }
        if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
            matched |= p[i] <= c && c <= p[i + 2];
            i += 3;
        } else {
            matched |= p[i] == c;
            i += 1;
        }
        first = false;
    }
    None
}

/// Whether a pattern has glob metacharacters (a plain id otherwise).
pub fn is_pattern(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

#[cfg(test)]
mod tests {
    use super::{covers, matches};

    #[test]
    fn coverage_of_one_glob_by_another() {
        assert!(covers("halite/job/*", "halite/job/*/ret/*"));
        assert!(covers("minion/db*/*", "minion/db1/app/ready"));
        assert!(covers("*", "anything/[ab]"));
        assert!(covers("a?c", "a?c"));
        assert!(!covers("a?c", "a*c"), "? covers one character, * many");
        assert!(!covers("halite/job/*", "halite/*"));
        assert!(!covers("minion/db*/*", "minion/*/app"));
        assert!(!covers("minion/db*", "minion/[dw]b1"));
        assert!(covers("minion/[dw]b1/*", "minion/db1/x"));
        assert!(!covers("minion/[dw]b1/*", "minion/?b1/x"));
        assert!(!covers("", "x"));
        assert!(covers("", ""));
    }

    #[test]
    fn globs_match_like_a_shell() {
        assert!(matches("web*", "web1"));
        assert!(matches("web*", "web"));
        assert!(!matches("web*", "db1"));
        assert!(matches("*", ""));
        assert!(matches("w?b[0-9]", "web7"));
        assert!(!matches("w?b[0-9]", "webx"));
        assert!(matches("db[!12]", "db3"));
        assert!(!matches("db[!12]", "db1"));
        assert!(matches("*.example.com", "a.b.example.com"));
        assert!(matches("a*b*c", "axxbyyc"));
        assert!(!matches("a*b*c", "axxbyy"));
        assert!(matches("[ab", "[ab"));
        assert!(matches("Debian*", "Debian GNU/Linux"));
        assert!(matches("**a**", "xay"));
        assert!(matches("*a", "aaa"));
        assert!(!matches("a*a", "a"));
        assert!(matches("é*[à-ü]", "été"));
        assert!(matches("*[!/]", "x/y"));
        assert!(!matches("*?", ""));
        assert!(matches("a*", "a"));
        assert!(matches("*b*", "abc"));
        assert!(!matches("*b*c", "acb"));
    }

    /// The shapes that made a backtracking matcher slow (many stars, long literals, a pattern
    /// longer than the text) agree with a simple reference on every small case.
    #[test]
    fn agrees_with_a_reference_matcher() {
        fn reference(p: &[char], t: &[char]) -> bool {
            match p.first() {
                None => t.is_empty(),
                Some('*') => (0..=t.len()).any(|k| reference(&p[1..], &t[k..])),
                Some(&c) => t.first().is_some_and(|&d| c == '?' || c == d) && reference(&p[1..], &t[1..]),
            }
        }
        let alphabet = ['a', 'b', '*', '?'];
        let mut patterns = vec![String::new()];
        for _ in 0..4 {
            let longer: Vec<String> =
                patterns.iter().flat_map(|p| alphabet.iter().map(move |c| format!("{p}{c}"))).collect();
            patterns.extend(longer);
        }
        patterns.dedup();
        let texts = ["", "a", "b", "ab", "ba", "aab", "abab", "bbba", "aaaaa"];
        for pattern in &patterns {
            for text in texts {
                let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
                assert_eq!(matches(pattern, text), reference(&p, &t), "{pattern:?} on {text:?}");
            }
        }
    }

    #[test]
    fn a_long_pattern_on_a_long_text_costs_no_more_than_reading_them() {
        // A backtracking matcher takes pattern × text steps here, each time.
        let text = "a".repeat(100_000);
        let pattern = format!("*{}b*", "a".repeat(50_000));
        assert!(!matches(&pattern, &text));
        let pattern = "*a".repeat(50_000) + "b";
        assert!(!matches(&pattern, &text));
        assert!(matches(&"*a".repeat(50_000), &text));
        // Wildcards in a middle segment: a grain value an attacker grew, a pattern of `?`s.
        let grain = "a".repeat(60_000);
        let pattern = format!("*{}b*", "?".repeat(4_000));
        assert!(!matches(&pattern, &grain));
        assert!(matches(&format!("*{}[ab]*", "?".repeat(4_000)), &grain));
    }

    #[test]
    fn wildcard_segments_match_like_the_reference() {
        for (pattern, text, expected) in [
            ("*a?c*", "xxabcxx", true),
            ("*a?c*", "xxabxcx", false),
            ("*[bc]?d*", "aacxdz", true),
            ("*?*", "", false),
            ("x*?[!a]?*y", "x1a2y", false),
            ("x*?[!a]?*y", "x1b2y", true),
            ("*é?*", "aéb", true),
        ] {
            assert_eq!(matches(pattern, text), expected, "{pattern:?} on {text:?}");
        }
    }
}
