//! Checking audit chains: every record's hash recomputed from what it holds, its signature by
//! a master trusted here, and each chain whole from its start (record 1, or the signed
//! checkpoint pruning left) to its end, in order. The first record removed, changed or moved
//! is named. The same check serves the store (`halite audit verify`) and an exported file
//! (`--file`), offline.

use std::collections::BTreeMap;

use crate::identity::PublicIdentity;

use super::record::{
    checkpoint_signed_by, hash_from_hex, record_hash, record_signed_by, AuditEntry, AuditRecord, Checkpoint,
    CHAIN_HEADS, GENESIS,
};

/// Where a chain was found broken: the first problem, by chain and record number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("chain {chain}, record {seq}: {what}")]
pub struct Broken {
    /// The chain.
    pub chain: String,
    /// The record number where it breaks.
    pub seq: u64,
    /// What is wrong.
    pub what: String,
}

/// What a whole check found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verified {
    /// Records checked.
    pub records: u64,
    /// Each chain's last record number.
    pub heads: BTreeMap<String, u64>,
}

/// Whether a public key is one of a master trusted to write the chain it signs.
pub type Trusted<'a> = dyn Fn(&PublicIdentity, &str) -> bool + Sync + 'a;

/// Checks records as they come (in store order or a file's), against the checkpoints where
/// pruned chains start; `trusted` says whether a public key is one of a master trusted to
/// write the chain it signs.
pub struct Verifier<'a> {
    trusted: &'a Trusted<'a>,
    checkpoints: BTreeMap<String, (u64, [u8; 32])>,
    chains: BTreeMap<String, (u64, [u8; 32])>,
    /// The furthest each chain was seen to reach by another chain's cross-link: the number,
    /// and which record of which chain saw it.
    attested: BTreeMap<String, (u64, String, u64)>,
    records: u64,
}

impl<'a> Verifier<'a> {
    /// A check trusting what `trusted` trusts, the chains starting at `checkpoints` (each
    /// checked now).
    pub fn new(trusted: &'a Trusted<'a>, checkpoints: &[Checkpoint]) -> Result<Self, Broken> {
        let mut starts = BTreeMap::new();
        for checkpoint in checkpoints {
            let broken =
                |what: &str| Broken { chain: checkpoint.chain.clone(), seq: checkpoint.seq, what: what.into() };
            let hash = hash_from_hex(&checkpoint.hash).ok_or_else(|| broken("its checkpoint's hash is not one"))?;
            let signer = signer(&checkpoint.signer).ok_or_else(|| broken("its checkpoint's signer is not a key"))?;
            let signature = crate::hex::decode(&checkpoint.signature).unwrap_or_default();
            if !trusted(&signer, &checkpoint.chain)
                || !checkpoint_signed_by(&signer, &checkpoint.chain, checkpoint.seq, &hash, &signature)
            {
                return Err(broken("the checkpoint where the chain starts is not signed by a master trusted here"));
            }
            starts.insert(checkpoint.chain.clone(), (checkpoint.seq, hash));
        }
        Ok(Verifier { trusted, checkpoints: starts, chains: BTreeMap::new(), attested: BTreeMap::new(), records: 0 })
    }

    /// Checks the next record.
    pub fn check(&mut self, record: &AuditRecord) -> Result<(), Broken> {
        let broken = |what: String| Broken { chain: record.chain.clone(), seq: record.seq, what };
        let (last, last_hash) = match self.chains.get(&record.chain) {
            Some(at) => *at,
            None => self.checkpoints.get(&record.chain).copied().unwrap_or((0, GENESIS)),
        };
        let expected = last + 1;
        if record.seq < expected {
            return Err(broken(format!("out of order: it comes after record {last} (moved, or a copy)")));
        }
        if record.seq > expected {
            let removed = if record.seq == expected + 1 {
                format!("record {expected} is missing (removed)")
            } else {
                format!("records {expected} to {} are missing (removed)", record.seq - 1)
            };
            return Err(broken(format!("{removed}: the chain does not go on here")));
        }
        let prev =
            hash_from_hex(&record.prev).ok_or_else(|| broken("its link to the record before is not a hash".into()))?;
        if prev != last_hash {
            return Err(broken(format!("it does not follow record {last}: one of them was changed or replaced")));
        }
        let hash = record_hash(&record.chain, record.seq, &prev, &record.body);
        if hash_from_hex(&record.hash) != Some(hash) {
            return Err(broken("changed: its hash does not match what it holds".into()));
        }
        let signature = crate::hex::decode(&record.signature).unwrap_or_default();
        let signed = signer(&record.signer)
            .is_some_and(|key| (self.trusted)(&key, &record.chain) && record_signed_by(&key, &hash, &signature));
        if !signed {
            return Err(broken("not signed by a master trusted here (written past the masters)".into()));
        }
        self.chains.insert(record.chain.clone(), (record.seq, hash));
        self.records += 1;
        self.note_cross_link(record);
        Ok(())
    }

    /// A signed record that cross-links chains: what it says each other chain reached.
    fn note_cross_link(&mut self, record: &AuditRecord) {
        if !record.body.contains(CHAIN_HEADS) {
            return;
        }
        let Ok(entry) = serde_json::from_str::<AuditEntry>(&record.body) else { return };
        if entry.kind != CHAIN_HEADS {
            return;
        }
        let Some(heads) = entry.detail.get("heads").and_then(serde_json::Value::as_object) else { return };
        for (chain, head) in heads {
            let Some(head) = head.as_u64() else { continue };
            if chain == &record.chain {
                continue;
            }
            let seen = self.attested.get(chain).map_or(0, |(seq, _, _)| *seq);
            if head > seen {
                self.attested.insert(chain.clone(), (head, record.chain.clone(), record.seq));
            }
        }
    }

    /// The end of the check: each chain must reach at least the record its writer knows it
    /// wrote last (`known_heads`: a master's own chain, which it remembers), or records at
    /// the end were removed.
    pub fn finish(self, known_heads: &BTreeMap<String, u64>) -> Result<Verified, Broken> {
        let last_of = |chain: &str| {
            let last = self.chains.get(chain).map(|(seq, _)| *seq).or_else(|| self.checkpoints.get(chain).map(|c| c.0));
            last.unwrap_or(0)
        };
        for (chain, head) in known_heads {
            let last = last_of(chain);
            if last < *head {
                return Err(Broken {
                    chain: chain.clone(),
                    seq: last + 1,
                    what: format!("records {} to {head} are missing (removed from the end)", last + 1),
                });
            }
        }
        // Each other chain must reach what the cross-links saw of it.
        for (chain, (head, by, at)) in &self.attested {
            let last = last_of(chain);
            if last < *head {
                return Err(Broken {
                    chain: chain.clone(),
                    seq: last + 1,
                    what: format!(
                        "records {} to {head} are missing (removed from the end): record {at} of chain {by} saw the \
                         chain reach {head}",
                        last + 1
                    ),
                });
            }
        }
        let heads = self.chains.into_iter().map(|(chain, (seq, _))| (chain, seq)).collect();
        Ok(Verified { records: self.records, heads })
    }
}

fn signer(hex: &str) -> Option<PublicIdentity> {
    PublicIdentity::from_bytes(&crate::hex::decode(hex)?).ok()
}

#[cfg(test)]
mod tests {
    use crate::identity::IdentityKey;

    use super::super::record::{chain_records, sign_checkpoint, AuditEntry};
    use super::*;

    fn entry(n: u64) -> AuditEntry {
        AuditEntry {
            at_ms: n,
            kind: "request".into(),
            principal: "ops".into(),
            tenant: None,
            action: "publish".into(),
            decision: "granted".into(),
            reason: None,
            minions: vec![format!("web{n}")],
            detail: serde_json::json!({ "n": n }),
        }
    }

    fn check(key: &IdentityKey, records: &[AuditRecord], checkpoints: &[Checkpoint]) -> Result<Verified, Broken> {
        let public = key.public();
        let trusted = move |k: &PublicIdentity, _: &str| *k == public;
        let mut verifier = Verifier::new(&trusted, checkpoints)?;
        for record in records {
            verifier.check(record)?;
        }
        verifier.finish(&BTreeMap::new())
    }

    #[test]
    fn a_whole_chain_verifies_and_every_tampering_is_named() {
        let key = IdentityKey::generate_os();
        let entries: Vec<AuditEntry> = (1..=5).map(entry).collect();
        let records = chain_records(&key, "m1", 0, GENESIS, &entries);
        assert_eq!(check(&key, &records, &[]).unwrap().records, 5);

        let mut changed = records.clone();
        changed[2].body = changed[2].body.replace("web3", "web9");
        assert_eq!(check(&key, &changed, &[]).unwrap_err().seq, 3);

        let mut removed = records.clone();
        removed.remove(1);
        let error = check(&key, &removed, &[]).unwrap_err();
        assert_eq!((error.seq, error.what.contains("record 2 is missing")), (3, true), "{error}");

        let mut first_removed = records.clone();
        first_removed.remove(0);
        assert!(check(&key, &first_removed, &[]).unwrap_err().what.contains("record 1 is missing"));

        let mut reordered = records.clone();
        reordered.swap(1, 2);
        assert!(check(&key, &reordered, &[]).is_err());

        // A record rewritten by someone without the key, chain and all, is not signed by it.
        let forger = IdentityKey::generate_os();
        let forged = chain_records(&forger, "m1", 0, GENESIS, &entries);
        assert!(check(&key, &forged, &[]).unwrap_err().what.contains("not signed"));

        // The end cut off is seen against the head its writer knows.
        let public = key.public();
        let trusted = move |k: &PublicIdentity, _: &str| *k == public;
        let mut verifier = Verifier::new(&trusted, &[]).unwrap();
        for record in &records[..3] {
            verifier.check(record).unwrap();
        }
        let error = verifier.finish(&[("m1".to_owned(), 5)].into()).unwrap_err();
        assert_eq!(error.seq, 4, "{error}");
    }

    #[test]
    fn a_pruned_chain_starts_at_its_signed_checkpoint() {
        let key = IdentityKey::generate_os();
        let entries: Vec<AuditEntry> = (1..=5).map(entry).collect();
        let records = chain_records(&key, "m1", 0, GENESIS, &entries);
        let cut = hash_from_hex(&records[1].hash).unwrap();
        let checkpoint = Checkpoint {
            chain: "m1".into(),
            seq: 2,
            hash: records[1].hash.clone(),
            signer: crate::hex::encode(key.public().as_bytes()),
            signature: crate::hex::encode(&sign_checkpoint(&key, "m1", 2, &cut)),
        };
        assert_eq!(check(&key, &records[2..], std::slice::from_ref(&checkpoint)).unwrap().records, 3);
        // Without it, the pruned start is a removal; with a forged one, the checkpoint is refused.
        assert!(check(&key, &records[2..], &[]).is_err());
        let forged = Checkpoint { seq: 3, hash: records[2].hash.clone(), ..checkpoint };
        assert!(check(&key, &records[3..], &[forged]).unwrap_err().what.contains("checkpoint"));
    }

    #[test]
    fn a_chain_cut_short_at_its_end_is_named_by_the_other_chain_that_saw_it_longer() {
        let (a, b) = (IdentityKey::generate_os(), IdentityKey::generate_os());
        let (a_public, b_public) = (a.public(), b.public());
        let trusted =
            move |k: &PublicIdentity, chain: &str| (chain == "a" && *k == a_public) || (chain == "b" && *k == b_public);
        let b_records = chain_records(&b, "b", 0, GENESIS, &(1..=4).map(entry).collect::<Vec<_>>());
        // Chain a saw chain b reach record 4.
        let link = AuditEntry {
            kind: CHAIN_HEADS.into(),
            action: CHAIN_HEADS.into(),
            detail: serde_json::json!({ "heads": { "b": 4, "a": 99 } }),
            ..entry(9)
        };
        let a_records = chain_records(&a, "a", 0, GENESIS, &[entry(1), link]);
        let run = |b_kept: usize| {
            let mut verifier = Verifier::new(&trusted, &[]).unwrap();
            for record in b_records[..b_kept].iter().chain(&a_records) {
                verifier.check(record).unwrap();
            }
            verifier.finish(&BTreeMap::new())
        };
        assert_eq!(run(4).unwrap().records, 6);
        // b's last two records removed: each is whole, but a's link names the cut.
        let error = run(2).unwrap_err();
        assert_eq!((error.chain.as_str(), error.seq), ("b", 3), "{error}");
        assert!(error.what.contains("record 2 of chain a saw the chain reach 4"), "{error}");
        // A link in a record nobody trusted signed is no link.
        let forged = chain_records(&b, "a", 0, GENESIS, &[entry(1)]);
        let mut verifier = Verifier::new(&trusted, &[]).unwrap();
        assert!(verifier.check(&forged[0]).is_err());
    }
}
