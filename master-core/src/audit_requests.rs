//! What the audit trail says of a client's message: the action's name, the minions it names
//! and its arguments, with what may hold secrets left out (a config's script, a deployment's
//! input values, an event's data, tokens) and the rest cut to a bound.

use halite_protocol::message::{Message, PublishRequest, RequestBody};
use serde_json::{json, Value};

/// Bytes of arguments a record keeps at most; larger ones are summarized by their size.
const MAX_DETAIL_BYTES: usize = 4096;

/// Fields whose values are withheld from the trail wherever they appear.
const WITHHELD: &[&str] = &["config", "input_values", "inputs", "data", "outputs", "token", "password", "secret"];

/// A client's message as the trail describes it: the key its answer names (request id or
/// jid), the action, the minions named and the arguments. `None`: nothing to record.
pub fn describe(msg: &Message) -> Option<(String, String, Vec<String>, Value)> {
    match msg {
        Message::Request(request) => {
            let (action, detail) = describe_body(&request.body);
            Some((request.request_id.to_string(), action, named_minions(&request.body), detail))
        }
        Message::Publish(publish) => Some(describe_publish(publish)),
        Message::Cancel(cancel) => {
            Some((cancel.jid.clone(), "cancel".into(), Vec::new(), json!({ "jid": cancel.jid })))
        }
        Message::Subscribe(subscribe) => Some((
            halite_protocol::message::SUBSCRIBE_REQUEST.into(),
            "subscribe".into(),
            Vec::new(),
            bounded(json!({ "patterns": subscribe.patterns })),
        )),
        _ => None,
    }
}

/// A publish (a client's, or a minion's `peer.publish`) as the trail describes it.
pub fn describe_publish(publish: &PublishRequest) -> (String, String, Vec<String>, Value) {
    let spec = &publish.spec;
    // A deployment's job carries its config and input values: only their names stay.
    let (args, kwargs) = if spec.function == halite_protocol::message::DEPLOY_FUNCTION {
        (json!(spec.args.len()), json!(spec.kwargs.keys().collect::<Vec<_>>()))
    } else {
        (json!(spec.args), json!(spec.kwargs))
    };
    let detail = json!({
        "target": { "kind": spec.target.kind, "expr": spec.target.expr },
        "function": spec.function,
        "args": args,
        "kwargs": kwargs,
        "rollout": spec.rollout.is_some(),
        "on_behalf_of": publish.on_behalf_of,
    });
    (publish.request_id.to_string(), "publish".into(), Vec::new(), bounded(detail))
}

/// A request's action (its variant's name) and arguments, secrets withheld.
fn describe_body(body: &RequestBody) -> (String, Value) {
    match serde_json::to_value(body).unwrap_or(Value::Null) {
        Value::String(action) => (action, json!({})),
        Value::Object(map) if map.len() == 1 => {
            let (action, mut args) = map.into_iter().next().unwrap_or_default();
            withhold(&mut args);
            (action, bounded(args))
        }
        _ => ("request".into(), json!({})),
    }
}

/// The minions a request names itself (a token's, a key's, a deployment's server).
fn named_minions(body: &RequestBody) -> Vec<String> {
    match body {
        RequestBody::KeyPreseed { id, .. } => vec![id.clone()],
        RequestBody::TokenCreate { minion, .. } => vec![minion.clone()],
        RequestBody::DeploymentCreate(new) => vec![new.server_id.clone()],
        RequestBody::ServerConfigs { server_id } => vec![server_id.clone()],
        _ => Vec::new(),
    }
}

fn withhold(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, field) in map.iter_mut() {
                if WITHHELD.contains(&key.as_str()) && !field.is_null() {
                    *field = json!("(withheld)");
                } else {
                    withhold(field);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(withhold),
        _ => {}
    }
}

fn bounded(detail: Value) -> Value {
    let size = detail.to_string().len();
    if size > MAX_DETAIL_BYTES {
        json!({ "truncated": true, "bytes": size })
    } else {
        detail
    }
}

#[cfg(test)]
mod tests {
    use halite_protocol::message::{NewDeployment, Request};

    use super::*;

    #[test]
    fn a_request_is_named_and_its_secrets_withheld() {
        let deploy = NewDeployment {
            server_id: "proja-web1".into(),
            input_values: [("password".to_owned(), json!("hunter2"))].into_iter().collect(),
            ..NewDeployment::default()
        };
        let msg = Message::Request(Request { request_id: 5, body: RequestBody::DeploymentCreate(deploy) });
        let (key, action, minions, detail) = describe(&msg).unwrap();
        assert_eq!((key.as_str(), action.as_str(), minions), ("5", "deployment_create", vec!["proja-web1".to_owned()]));
        assert!(!detail.to_string().contains("hunter2"), "{detail}");
        let list = Message::Request(Request { request_id: 6, body: RequestBody::PrincipalList });
        assert_eq!(describe(&list).unwrap().1, "principal_list");
    }
}
