//! What makes an administrative request's input valid, decided before anything is stored.

use std::collections::BTreeMap;

use halite_protocol::identity::PublicIdentity;
use halite_protocol::message::{tenant_holds, validate_tenant, PrincipalAcl, TargetKind};

use crate::request_error::RequestError;
use crate::store::PrincipalRecord;

/// A principal to register, if its name, key, tenant and rules are valid: a tenant's principal
/// is never an administrator, and every rule's targets and argument patterns parse.
pub fn new_principal(
    name: String,
    public_key: &[u8],
    acl: PrincipalAcl,
    nodegroups: &BTreeMap<String, String>,
    tenants: &[&str],
) -> Result<(PrincipalRecord, PublicIdentity), RequestError> {
    halite_protocol::id::validate(&name).map_err(|e| RequestError::bad_request(e.to_string()))?;
    if name == "root" {
        return Err(RequestError::bad_request("root is built in; its key is root.key"));
    }
    let key = PublicIdentity::from_bytes(public_key).map_err(|e| RequestError::bad_request(e.to_string()))?;
    if let Some(tenant) = &acl.tenant {
        tenant_name(tenant, tenants)?;
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

/// A new tenant's name, if it is one ([`validate_tenant`]); one with `-` is refused naming the
/// registered tenant (of `tenants`) whose namespace it would share.
fn tenant_name(tenant: &str, tenants: &[&str]) -> Result<(), RequestError> {
    let Err(error) = validate_tenant(tenant) else { return Ok(()) };
    let overlapped = tenants.iter().find(|other| tenant_holds(other, tenant));
    Err(RequestError::bad_request(match overlapped {
        Some(other) => format!(
            "{error}: it would overlap tenant {other:?}, which holds every id starting with \"{other}-\" \
             (\"{tenant}-web1\" would be in both)"
        ),
        None => error.to_string(),
    }))
}

/// A minion's id and key, as a preseed gives them.
pub fn minion_key(id: &str, public_key: &[u8]) -> Result<PublicIdentity, RequestError> {
    halite_protocol::id::validate(id).map_err(|e| RequestError::bad_request(e.to_string()))?;
    PublicIdentity::from_bytes(public_key).map_err(|e| RequestError::bad_request(e.to_string()))
}
