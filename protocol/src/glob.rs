//! Shell-style glob matching (`*`, `?`, `[abc]`, `[a-z]`, `[!abc]`), anchored at both ends: minion
//! targets, key patterns, event tags and function policies all use it.

/// Whether `text` matches `pattern` as a whole.
pub fn matches(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // Iterative matcher with backtracking to the last `*`: linear in practice, no recursion.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() {
            match p[pi] {
                '*' => {
                    star = Some((pi, ti));
                    pi += 1;
                    continue;
                }
                '?' => {
                    pi += 1;
                    ti += 1;
                    continue;
                }
                '[' => {
                    if let Some((matched, next)) = class(&p, pi, t[ti]) {
                        if matched {
                            pi = next;
                            ti += 1;
                            continue;
                        }
                    } else if t[ti] == '[' {
                        pi += 1;
                        ti += 1;
                        continue;
                    }
                }
                c if c == t[ti] => {
                    pi += 1;
                    ti += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, st)) => {
                pi = sp + 1;
                ti = st + 1;
                star = Some((sp, st + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == '*')
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
    let negate = matches!(p.get(i), Some('!') | Some('^'));
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
    }
}
