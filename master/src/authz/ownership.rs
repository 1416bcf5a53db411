//! Who may see and act on what an engine created: configs, deployments, deployment groups,
//! enrollment tokens and gateway tokens each record the principal that created them (their
//! owner). Its creator, root and administrators see it; to anyone else it does not exist, and
//! is answered exactly like an id that was never used, so ids cannot be probed.

use super::Who;

/// Whether `who` may see and act on an object created by `owner`.
pub(crate) fn may_own(who: Who<'_>, owner: &str) -> bool {
    who.sees_all() || who.name == owner
}

/// The owner a listing or deletion done in the store is narrowed to for `who`: `None` (every
/// owner's) for root and administrators, else only `who`'s own. The same decision as
/// [`may_own`], for queries that filter rows rather than check one.
pub(crate) fn owned_by<'a>(who: Who<'a>) -> Option<&'a str> {
    (!who.sees_all()).then_some(who.name)
}

#[cfg(test)]
mod tests {
    use halite_protocol::message::PrincipalAcl;

    use super::*;

    #[test]
    fn creators_root_and_administrators_own_and_no_one_else() {
        let narrow = PrincipalAcl::default();
        let admin = PrincipalAcl { admin: true, ..PrincipalAcl::default() };
        let tenant_a = Who { name: "tenanta", acl: Some(&narrow) };
        let tenant_b = Who { name: "tenantb", acl: Some(&narrow) };
        let ops = Who { name: "ops", acl: Some(&admin) };
        let root = Who { name: "root", acl: None };
        assert!(may_own(tenant_a, "tenanta"));
        assert!(!may_own(tenant_b, "tenanta"));
        assert!(!may_own(tenant_a, "root"), "rows from before owners are root's");
        assert!(may_own(ops, "tenanta") && may_own(root, "tenanta"));
        assert_eq!(owned_by(tenant_b), Some("tenantb"));
        assert_eq!((owned_by(ops), owned_by(root)), (None, None));
    }
}
