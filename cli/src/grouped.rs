//! Many minions' results in table output: identical results are printed once under their
//! minions' ids, compressed as ranges (`web[01-48]`), and the closing summary names the minions
//! that did not return, by state, so a failure among hundreds is not scrolled past.

use std::collections::BTreeMap;

use halite_protocol::message::{JobReturn, MinionJobState};

/// One minion's final state and return, as the table shows it.
pub(crate) struct Final<'a> {
    pub(crate) minion: &'a str,
    pub(crate) state: MinionJobState,
    pub(crate) ret: Option<&'a JobReturn>,
}

/// Prints `finals` with identical results (same state, same text shown) once each, in the
/// order of their first minion id.
pub(crate) fn print_grouped<'a>(finals: impl IntoIterator<Item = Final<'a>>) {
    let mut groups: Vec<((MinionJobState, String), Vec<&str>)> = Vec::new();
    let mut index: BTreeMap<(MinionJobState, String), usize> = BTreeMap::new();
    let mut finals: Vec<Final<'a>> = finals.into_iter().collect();
    finals.sort_by(|a, b| a.minion.cmp(b.minion));
    for f in finals {
        let key = (f.state, crate::run::final_detail(f.state, f.ret));
        match index.get(&key) {
            Some(&at) => groups[at].1.push(f.minion),
            None => {
                index.insert(key.clone(), groups.len());
                groups.push((key, vec![f.minion]));
            }
        }
    }
    let labels: Vec<String> = groups.iter().map(|(_, ids)| compress_ids(ids)).collect();
    let width = labels.iter().map(String::len).max().unwrap_or(0);
    for (((state, detail), _), label) in groups.iter().zip(&labels) {
        crate::run::print_line(label, width, *state, detail);
    }
}

/// The closing line of `run` and `jobs show`: how many minions ended in each state; then, for
/// each state but `returned`, which minions are in it.
pub(crate) fn print_summary<'a>(jid: &str, states: impl Iterator<Item = (&'a str, &'a str)>) {
    let mut by_state: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (minion, state) in states {
        by_state.entry(state).or_default().push(minion);
    }
    let total: usize = by_state.values().map(Vec::len).sum();
    let counts: Vec<String> = by_state.iter().map(|(s, ids)| format!("{} {s}", ids.len())).collect();
    println!("\n{total} minion(s), job {jid}: {}", counts.join(", "));
    for (state, ids) in &mut by_state {
        if *state != MinionJobState::Returned.as_str() {
            ids.sort_unstable();
            println!("  {state}: {}", compress_ids(ids));
        }
    }
}

/// Ids written short: ids that differ only in one run of digits (the last one) become a
/// bracketed range, `web[01-03,07].example.com`; others are listed as they are, comma-separated.
/// Numbers of different widths stay apart (`web[8-9], web[10-12]`), so every id can be read back.
pub(crate) fn compress_ids(ids: &[&str]) -> String {
    let mut families: Vec<(Family, Vec<u128>)> = Vec::new();
    let mut plain: Vec<(usize, &str)> = Vec::new();
    for (at, id) in ids.iter().enumerate() {
        match split_number(id) {
            Some((prefix, number, width, suffix)) => {
                let key = (prefix, suffix, width);
                match families.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, numbers)) => numbers.push(number),
                    None => families.push((key, vec![number])),
                }
            }
            None => plain.push((at, id)),
        }
    }
    let mut parts: Vec<String> = plain.iter().map(|(_, id)| (*id).to_owned()).collect();
    for ((prefix, suffix, width), mut numbers) in families {
        numbers.sort_unstable();
        numbers.dedup();
        if let [only] = numbers[..] {
            parts.push(format!("{prefix}{only:0width$}{suffix}"));
            continue;
        }
        let ranges: Vec<String> = runs(&numbers)
            .into_iter()
            .map(|(first, last)| match first == last {
                true => format!("{first:0width$}"),
                false => format!("{first:0width$}-{last:0width$}"),
            })
            .collect();
        parts.push(format!("{prefix}[{}]{suffix}", ranges.join(",")));
    }
    parts.sort();
    parts.join(", ")
}

/// Ids alike but for their last number: (text before it, text after it, its width in digits).
type Family<'a> = (&'a str, &'a str, usize);

/// `id` as (text before its last run of digits, that number, the run's width, text after).
fn split_number(id: &str) -> Option<(&str, u128, usize, &str)> {
    let bytes = id.as_bytes();
    let end = bytes.iter().rposition(u8::is_ascii_digit)? + 1;
    let start = bytes[..end].iter().rposition(|b| !b.is_ascii_digit()).map_or(0, |i| i + 1);
    let number = id[start..end].parse().ok()?;
    Some((&id[..start], number, end - start, &id[end..]))
}

/// Sorted, distinct numbers as runs of consecutive ones.
fn runs(numbers: &[u128]) -> Vec<(u128, u128)> {
    let mut runs: Vec<(u128, u128)> = Vec::new();
    for &n in numbers {
        match runs.last_mut() {
            Some((_, last)) if *last + 1 == n => *last = n,
            _ => runs.push((n, n)),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::compress_ids;

    #[test]
    fn ids_differing_in_a_number_become_ranges_and_others_stay_whole() {
        let ids: Vec<String> = (1..=48).map(|n| format!("web{n:02}")).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        assert_eq!(compress_ids(&ids), "web[01-48]");
        assert_eq!(compress_ids(&["web01", "web02", "web03", "web07"]), "web[01-03,07]");
        assert_eq!(compress_ids(&["db1"]), "db1");
        assert_eq!(compress_ids(&["web9", "web10", "web8", "web11"]), "web[10-11], web[8-9]");
        assert_eq!(compress_ids(&["a1.example.com", "a2.example.com"]), "a[1-2].example.com");
        assert_eq!(compress_ids(&["gateway", "db1", "db2"]), "db[1-2], gateway");
        assert_eq!(compress_ids(&["node-1-a", "node-1-b"]), "node-1-a, node-1-b");
        assert_eq!(compress_ids(&["r1n1", "r2n1"]), "r1n1, r2n1", "only the last run of digits varies");
        // A run of digits too long for a number is kept as it is.
        let long = format!("x{}", "9".repeat(60));
        assert_eq!(compress_ids(&[&long, "x1"]), format!("x1, {long}"));
    }
}
