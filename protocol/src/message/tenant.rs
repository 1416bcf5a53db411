//! Tenants' namespaces of minion ids, disjoint by construction: a tenant's name has no `-`,
//! and a tenant holds exactly the ids `<name>-…`, so an id's tenant is what comes before its
//! first `-` and no id lies in two tenants, whatever the names.

/// The separator between a tenant's name and the rest of its minions' ids. No tenant name
/// contains it, so the tenant of an id is what comes before its first `-`: no id lies in two
/// tenants, whatever the names (with `acme` and `acme-dev` both allowed, `acme-dev-db1` would).
pub const TENANT_SEPARATOR: char = '-';

/// Why a tenant name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TenantNameError {
    /// Not a valid id.
    #[error("tenant {0:?}: {1}")]
    Id(String, crate::id::IdError),
    /// Holds the separator.
    #[error(
        "tenant {0:?} may not contain '-': a tenant holds every minion id that starts with its name and '-', \
         so a name with '-' would share ids with another tenant's"
    )]
    HoldsSeparator(String),
}

/// Checks a tenant name: a valid id (`id::validate`) without `-` ([`TENANT_SEPARATOR`]).
pub fn validate_tenant(name: &str) -> Result<(), TenantNameError> {
    crate::id::validate(name).map_err(|e| TenantNameError::Id(name.to_owned(), e))?;
    if name.contains(TENANT_SEPARATOR) {
        return Err(TenantNameError::HoldsSeparator(name.to_owned()));
    }
    Ok(())
}

/// The tenant whose namespace would hold `id`, if it has one: what comes before its first `-`
/// (with at least one byte after it).
pub fn tenant_part(id: &str) -> Option<&str> {
    let (tenant, rest) = id.split_once(TENANT_SEPARATOR)?;
    (!tenant.is_empty() && !rest.is_empty()).then_some(tenant)
}

/// Whether a minion id lies in a tenant's namespace: `<tenant>-` and at least one more byte.
/// A name that is not a valid tenant's (a row written before the rule, say) holds nothing.
pub fn tenant_holds(tenant: &str, minion: &str) -> bool {
    validate_tenant(tenant).is_ok() && tenant_part(minion) == Some(tenant)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_with_the_separator_is_no_tenant() {
        assert_eq!(validate_tenant("acme"), Ok(()));
        assert_eq!(validate_tenant("acme.dev_2"), Ok(()));
        assert!(matches!(validate_tenant("acme-dev"), Err(TenantNameError::HoldsSeparator(_))));
        assert!(matches!(validate_tenant(""), Err(TenantNameError::Id(..))));
        assert!(matches!(validate_tenant("a/b"), Err(TenantNameError::Id(..))));
        // A name that could not be registered holds nothing, even if a row still carries it.
        assert!(!tenant_holds("acme-dev", "acme-dev-db1"));
    }

    #[test]
    fn an_id_lies_in_at_most_one_tenant() {
        assert!(tenant_holds("acme", "acme-web1"));
        assert!(tenant_holds("acme", "acme-dev-db1"));
        assert!(!tenant_holds("acme", "acme-"));
        assert!(!tenant_holds("acme", "acme"));
        assert!(!tenant_holds("acme", "acmedev-db1"));
        assert!(!tenant_holds("acme", "Acme-web1"));
        assert!(!tenant_holds("acme.d", "acme-d-x"));
        for id in ["acme-dev-db1", "a-b-c", "x.y-z", "-x", "nosep", "t--x"] {
            let holders: Vec<&str> = ["acme", "acme.dev", "a", "x.y", "x", "t", "nosep"]
                .into_iter()
                .filter(|t| tenant_holds(t, id))
                .collect();
            assert!(holders.len() <= 1, "{id} in {holders:?}");
            assert_eq!(holders.first().copied(), tenant_part(id).filter(|t| holders.contains(t)));
        }
    }
}
