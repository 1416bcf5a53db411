//! The tenants the stored principals are confined to, checked when the master starts: a store
//! written before tenant names were kept apart may hold a tenant whose name has `-`
//! (`acme-dev` beside `acme`), whose namespace another tenant's would share. The master does
//! not serve such a store; `halite-master tenant rename` (`halite_master::rename_tenant`) repairs it.

use std::collections::BTreeMap;

use halite_protocol::message::{tenant_holds, validate_tenant};

use crate::store::PrincipalRecord;

/// The stored tenants whose names break the rule, each with its principals and the valid
/// tenants whose namespaces it shares.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the store holds tenants that would share minion ids with other tenants (a tenant's name may not contain \
     '-'): {}. Stop the masters and give each a name without '-': `halite-master tenant rename OLD NEW` \
     (for example `halite-master tenant rename {} {}`); its principals keep their names and rules, and its \
     minions, whose ids start with OLD-, are re-enrolled as NEW-…",
    describe(.0),
    .0.first().map_or("", |t| t.name.as_str()),
    .0.first().map_or(String::new(), |t| t.name.replace('-', ""))
)]
pub struct StoredTenantsError(pub Vec<BadTenant>);

/// One stored tenant whose name breaks the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadTenant {
    /// Its name.
    pub name: String,
    /// The principals confined to it.
    pub principals: Vec<String>,
    /// The valid tenants whose namespaces hold ids of its own.
    pub overlaps: Vec<String>,
}

fn describe(bad: &[BadTenant]) -> String {
    let one = |t: &BadTenant| {
        let overlap = match t.overlaps.as_slice() {
            [] => String::new(),
            others => format!(
                ", overlapping tenant {} (every id {}-… is in both)",
                others.iter().map(|o| format!("{o:?}")).collect::<Vec<_>>().join(", "),
                t.name
            ),
        };
        format!("tenant {:?} (principals {}){overlap}", t.name, t.principals.join(", "))
    };
    bad.iter().map(one).collect::<Vec<_>>().join("; ")
}

/// Refuses principals confined to tenants whose names break the rule ([`validate_tenant`]).
pub fn check<'a>(principals: impl IntoIterator<Item = &'a PrincipalRecord>) -> Result<(), StoredTenantsError> {
    let mut tenants: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for principal in principals {
        if let Some(tenant) = principal.acl.tenant.as_deref() {
            tenants.entry(tenant).or_default().push(principal.name.clone());
        }
    }
    let valid: Vec<&str> = tenants.keys().copied().filter(|t| validate_tenant(t).is_ok()).collect();
    let bad: Vec<BadTenant> = tenants
        .iter()
        .filter(|(name, _)| validate_tenant(name).is_err())
        .map(|(name, principals)| BadTenant {
            name: (*name).to_owned(),
            principals: principals.clone(),
            overlaps: valid.iter().filter(|v| tenant_holds(v, name)).map(|v| (*v).to_owned()).collect(),
        })
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(StoredTenantsError(bad))
    }
}

#[cfg(test)]
mod tests {
    use halite_protocol::message::PrincipalAcl;

    use super::*;

    fn principal(name: &str, tenant: Option<&str>) -> PrincipalRecord {
        let acl = PrincipalAcl { tenant: tenant.map(str::to_owned), ..PrincipalAcl::default() };
        PrincipalRecord { name: name.into(), public_key: [1; 32], acl }
    }

    #[test]
    fn a_stored_tenant_with_the_separator_is_named_with_what_it_overlaps() {
        let ok = [principal("acme", Some("acme")), principal("ops", None)];
        assert_eq!(check(&ok), Ok(()));
        let stored =
            [principal("acme", Some("acme")), principal("acme-dev", Some("acme-dev")), principal("x", Some("x-y"))];
        let error = check(&stored).unwrap_err();
        assert_eq!(error.0.len(), 2);
        assert_eq!(error.0[0].overlaps, vec!["acme".to_owned()]);
        assert!(error.0[1].overlaps.is_empty());
        let text = error.to_string();
        assert!(text.contains(r#"tenant "acme-dev" (principals acme-dev), overlapping tenant "acme""#), "{text}");
        assert!(text.contains("halite-master tenant rename acme-dev acmedev"), "{text}");
    }
}
