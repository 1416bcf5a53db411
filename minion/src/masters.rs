//! Where the masters are: `master = "host:port"` or a list (`master = ["a:4506", "b:4506"]`,
//! also spelled `masters`), as Salt's `master` takes one or many. A minion connects to one and
//! moves to the next when it goes away; every master of a cluster shares one store, so any of
//! them can take its session, its jobs and its outbox.

use std::hash::{Hash, Hasher};

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

/// One master address or several, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasterList(pub Vec<String>);

impl MasterList {
    /// The addresses in the order this minion tries them: rotated by a hash of its id, so a
    /// fleet of minions spreads over the masters instead of all trying the first.
    pub fn order_for(&self, id: &str) -> Vec<String> {
        let mut list = self.0.clone();
        if list.len() > 1 {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            id.hash(&mut hasher);
            let start = usize::try_from(hasher.finish() % list.len() as u64).unwrap_or(0);
            list.rotate_left(start);
        }
        list
    }
}

impl From<String> for MasterList {
    fn from(addr: String) -> Self {
        MasterList(vec![addr])
    }
}

impl From<&str> for MasterList {
    fn from(addr: &str) -> Self {
        MasterList(vec![addr.to_owned()])
    }
}

impl Serialize for MasterList {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0.as_slice() {
            [one] => serializer.serialize_str(one),
            many => many.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for MasterList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Addrs;
        impl<'de> Visitor<'de> for Addrs {
            type Value = MasterList;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a \"host:port\" address or a list of them")
            }

            fn visit_str<E: de::Error>(self, addr: &str) -> Result<MasterList, E> {
                Ok(MasterList(vec![addr.to_owned()]))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MasterList, A::Error> {
                let mut list = Vec::new();
                while let Some(addr) = seq.next_element::<String>()? {
                    list.push(addr);
                }
                if list.is_empty() {
                    return Err(de::Error::custom("the list of masters is empty"));
                }
                Ok(MasterList(list))
            }
        }
        deserializer.deserialize_any(Addrs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, Serialize)]
    struct Doc {
        master: MasterList,
    }

    #[test]
    fn one_address_or_a_list_and_a_clear_error_otherwise() {
        let one: Doc = toml::from_str("master = \"m:4506\"").unwrap();
        assert_eq!(one.master.0, ["m:4506"]);
        assert_eq!(toml::to_string(&one).unwrap().trim(), "master = \"m:4506\"");
        let many: Doc = toml::from_str("master = [\"a:1\", \"b:2\"]").unwrap();
        assert_eq!(many.master.0, ["a:1", "b:2"]);
        let error = toml::from_str::<Doc>("master = 4506").unwrap_err().to_string();
        assert!(error.contains("a \"host:port\" address or a list of them"), "{error}");
        let error = toml::from_str::<Doc>("master = []").unwrap_err().to_string();
        assert!(error.contains("empty"), "{error}");
    }

    #[test]
    fn minions_spread_over_the_masters() {
        let list = MasterList((0..3).map(|i| format!("m{i}:4506")).collect());
        let mut first = [0; 3];
        for n in 0..300 {
            let order = list.order_for(&format!("web{n}"));
            assert_eq!(order.len(), 3);
            let index = list.0.iter().position(|a| *a == order[0]).unwrap();
            assert_eq!(order[1], list.0[(index + 1) % 3], "the rest follow in order");
            first[index] += 1;
        }
        assert!(first.iter().all(|&n| n > 60), "{first:?}");
        assert_eq!(list.order_for("web1"), list.order_for("web1"), "the same minion, the same order");
    }
}
