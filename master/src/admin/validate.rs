//! What makes an administrative request's input valid, decided before anything is stored.

use std::collections::BTreeMap;

use halite_protocol::identity::PublicIdentity;
use halite_protocol::message::{PrincipalAcl, TargetKind};

use crate::request_error::RequestError;
use crate::store::PrincipalRecord;

/// A principal to register, if its name, key, tenant and rules are valid: a tenant's principal
/// is never an administrator, and every rule's targets and argument patterns parse.
pub(crate) fn new_principal(
    name: String,
    public_key: &[u8],
    acl: PrincipalAcl,
    nodegroups: &BTreeMap<String, String>,
) -> Result<(PrincipalRecord, PublicIdentity), RequestError> {
    halite_protocol::id::validate(&name).map_err(|e| RequestError::bad_request(e.to_string()))?;
    if name == "root" {
        return Err(RequestError::bad_request("root is built in; its key is root.key"));
    }
    let key = PublicIdentity::from_bytes(public_key).map_err(|e| RequestError::bad_request(e.to_string()))?;
    if let Some(tenant) = &acl.tenant {
        halite_protocol::id::validate(tenant)
            .map_err(|e| RequestError::bad_request(format!("tenant {tenant:?}: {e}")))?;
        if acl.admin {
            return Err(RequestError::bad_request(
                "a tenant's principal cannot be an administrator (administrators see every tenant)",
            ));
        }
    }
    for rule in &acl.rules {
        crate::target::Expr::parse(TargetKind::Compound, &rule.targets, nodegroups)
            .map_err(|e| RequestError::bad_request(format!("targets {:?}: {e}", rule.targets)))?;
        for pattern in rule.args.values() {
            regex::Regex::new(pattern)
                .map_err(|e| RequestError::bad_request(format!("args pattern {pattern:?}: {e}")))?;
        }
    }
    Ok((PrincipalRecord { name, public_key: *key.as_bytes(), acl }, key))
}

/// A minion's id and key, as a preseed gives them.
pub(crate) fn minion_key(id: &str, public_key: &[u8]) -> Result<PublicIdentity, RequestError> {
    halite_protocol::id::validate(id).map_err(|e| RequestError::bad_request(e.to_string()))?;
    PublicIdentity::from_bytes(public_key).map_err(|e| RequestError::bad_request(e.to_string()))
}
