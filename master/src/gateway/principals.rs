//! Gateway routes for client principals: list, register or re-key, remove. Each is the CLI's
//! request under the token's principal, so only an administrator may use them, and what it
//! may grant is decided where the CLI's request is.

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use halite_protocol::message::{PrincipalAcl, RequestBody, ResponseBody};
use schemars::JsonSchema;
use serde::Deserialize;

use super::auth::Authed;
use super::routes::{ok, unexpected, ApiError, ApiResult, Commands};

/// The routes.
pub(super) fn routes() -> Router<Commands> {
    Router::new()
        .route("/v1/principals", get(list))
        .route("/v1/principals/{name}", axum::routing::put(put).delete(remove))
}

/// A principal to register, or its new key and ACL.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PrincipalSpec {
    /// Its ed25519 public key: 64 hex digits.
    public_key: String,
    /// What it may do (default: nothing).
    #[serde(default)]
    acl: PrincipalAcl,
}

async fn list(Authed(mut s): Authed) -> ApiResult {
    match s.request(RequestBody::PrincipalList).await? {
        ResponseBody::Principals(principals) => ok("principals", principals),
        _ => Err(unexpected()),
    }
}

async fn put(Authed(mut s): Authed, Path(name): Path<String>, Json(spec): Json<PrincipalSpec>) -> ApiResult {
    let public_key = hex_key(&spec.public_key)?;
    match s.request(RequestBody::PrincipalAdd { name, public_key, acl: spec.acl }).await? {
        ResponseBody::Changed(names) => ok("changed", names),
        _ => Err(unexpected()),
    }
}

async fn remove(Authed(mut s): Authed, Path(name): Path<String>) -> ApiResult {
    s.request(RequestBody::PrincipalRemove { name }).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// 32 bytes from 64 hex digits, or a 400 naming the field.
fn hex_key(text: &str) -> Result<Vec<u8>, ApiError> {
    halite_protocol::hex::decode(text).filter(|bytes| bytes.len() == 32).ok_or_else(|| {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", "public_key: not 64 hex digits".to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_public_key_is_64_hex_digits() {
        assert_eq!(hex_key(&"ab".repeat(32)).ok(), Some(vec![0xab; 32]));
        for bad in ["abcd", &"zz".repeat(32), &"é".repeat(32)] {
            assert!(hex_key(bad).is_err(), "{bad}");
        }
    }
}
