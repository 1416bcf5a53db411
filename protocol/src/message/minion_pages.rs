//! A fleet listed a page at a time (`MinionList` with `after` and `limit`): the one place that
//! decides what to ask after and when the list is whole, for every client of the protocol.

use super::admin::MinionInfo;

/// The minions gathered so far from a paged `MinionList`.
#[derive(Debug, Clone, Default)]
pub struct MinionPages {
    minions: Vec<MinionInfo>,
}

impl MinionPages {
    /// Nothing gathered yet.
    pub fn new() -> MinionPages {
        MinionPages::default()
    }

    /// What the next page is asked after: the last id gathered.
    pub fn after(&self) -> Option<String> {
        self.minions.last().map(|m| m.id.clone())
    }

    /// Adds the page asked for after [`MinionPages::after`] with `limit`; whether the list is
    /// now whole. A page shorter than asked is the last. A master from before pages ignores
    /// `after` and `limit` and answers every match from the first: a first answer longer than
    /// asked is then the whole list, and a later one starting again at or before the last id
    /// gathered adds nothing.
    pub fn add(&mut self, page: Vec<MinionInfo>, limit: u32) -> bool {
        let repeated = match (self.minions.last(), page.first()) {
            (Some(last), Some(first)) => first.id <= last.id,
            _ => false,
        };
        if repeated {
            return true;
        }
        let last = page.len() != limit as usize;
        self.minions.extend(page);
        last
    }

    /// The minions gathered, in id order.
    pub fn into_minions(self) -> Vec<MinionInfo> {
        self.minions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minions(ids: &[&str]) -> Vec<MinionInfo> {
        ids.iter()
            .map(|id| MinionInfo {
                id: (*id).into(),
                connected: true,
                connected_elsewhere: false,
                last_seen_ms: 0,
                grains: Default::default(),
                functions: Vec::new(),
            })
            .collect()
    }

    #[test]
    fn pages_are_asked_after_the_last_id_until_one_is_short() {
        let mut pages = MinionPages::new();
        assert_eq!(pages.after(), None);
        assert!(!pages.add(minions(&["a", "b"]), 2));
        assert_eq!(pages.after(), Some("b".into()));
        assert!(!pages.add(minions(&["c", "d"]), 2));
        assert!(pages.add(minions(&["e"]), 2));
        let ids: Vec<String> = pages.into_minions().into_iter().map(|m| m.id).collect();
        assert_eq!(ids, ["a", "b", "c", "d", "e"]);
    }

    #[test]
    fn an_empty_page_ends_the_list() {
        let mut pages = MinionPages::new();
        assert!(!pages.add(minions(&["a", "b"]), 2));
        assert!(pages.add(Vec::new(), 2));
        assert_eq!(pages.into_minions().len(), 2);
    }

    #[test]
    fn a_master_that_ignores_paging_is_listed_once() {
        // Longer than asked: that master's whole answer.
        let mut pages = MinionPages::new();
        assert!(pages.add(minions(&["a", "b", "c"]), 2));
        assert_eq!(pages.into_minions().len(), 3);
        // Exactly as long as asked, then the same again: the repeat adds nothing.
        let mut pages = MinionPages::new();
        assert!(!pages.add(minions(&["a", "b"]), 2));
        assert!(pages.add(minions(&["a", "b"]), 2));
        assert_eq!(pages.into_minions().len(), 2);
    }
}
