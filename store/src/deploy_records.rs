//! Configs and deployments as the store writes them: their own document shapes, converted from
//! and to the protocol's (Heat's model, `protocol/src/message/deploy.rs`), so a rename on the
//! wire never makes stored documents unreadable. Every field has a default, so a document
//! written before a field existed still reads.

use halite_protocol::message::{ConfigInput, ConfigOutput, NewDeployment, SoftwareConfig, SoftwareDeployment, Value};
use serde::{Deserialize, Serialize};
use serde_json::Map;

use super::deploy::DeploymentRecord;
use super::records::{json, to_json};
use super::StoreError;

/// Field-by-field conversions both ways between a wire type and its stored mirror: fields
/// kept as they are, then (`lists`) lists of mirrored items, then (`nested`) mirrored values.
macro_rules! mirror {
    ($wire:ident <=> $stored:ident { $($field:ident),* }
     $(lists { $($list:ident),* })? $(nested { $($inner:ident),* })?) => {
        impl From<$wire> for $stored {
            fn from(v: $wire) -> Self {
                $stored {
                    $($field: v.$field,)*
                    $($($list: v.$list.into_iter().map(Into::into).collect(),)*)?
                    $($($inner: v.$inner.into(),)*)?
                }
            }
        }
        impl From<$stored> for $wire {
            fn from(v: $stored) -> Self {
                $wire {
                    $($field: v.$field,)*
                    $($($list: v.$list.into_iter().map(Into::into).collect(),)*)?
                    $($($inner: v.$inner.into(),)*)?
                }
            }
        }
    };
}

#[derive(Default, Serialize, Deserialize)]
#[serde(default)]
struct StoredInput {
    name: String,
    #[serde(rename = "type")]
    kind: String,
    default: Option<Value>,
    description: Option<String>,
    replace_on_change: bool,
}

#[derive(Default, Serialize, Deserialize)]
#[serde(default)]
struct StoredOutput {
    name: String,
    #[serde(rename = "type")]
    kind: String,
    description: Option<String>,
    error_output: bool,
}

#[derive(Default, Serialize, Deserialize)]
#[serde(default)]
struct StoredConfig {
    id: String,
    name: String,
    group: String,
    config: Value,
    inputs: Vec<StoredInput>,
    outputs: Vec<StoredOutput>,
    options: Option<Map<String, Value>>,
    creation_time: String,
}

#[derive(Default, Serialize, Deserialize)]
#[serde(default)]
struct StoredSpec {
    config_id: String,
    server_id: String,
    input_values: Map<String, Value>,
    action: Option<String>,
    stack_id: String,
    resource_name: String,
    signal_transport: Option<String>,
    signal_id: Option<String>,
    signal_verb: Option<String>,
    timeout_secs: Option<u64>,
    input_key: Option<String>,
    input_values_validation: Option<String>,
}

#[derive(Default, Serialize, Deserialize)]
#[serde(default)]
struct StoredDeployment {
    id: String,
    config_id: String,
    server_id: String,
    input_values: Map<String, Value>,
    output_values: Map<String, Value>,
    action: String,
    status: String,
    status_reason: String,
    derived_config_id: String,
    creation_time: String,
    updated_time: Option<String>,
}

#[derive(Default, Serialize, Deserialize)]
#[serde(default)]
struct StoredRecord {
    /// Kept in the row's `owner` column, not the document.
    #[serde(skip)]
    owner: String,
    deployment: StoredDeployment,
    spec: StoredSpec,
    jid: String,
    item: Value,
    relay_pending: bool,
    last_signal: Option<Value>,
    finish_id: String,
}

mirror!(ConfigInput <=> StoredInput { name, kind, default, description, replace_on_change });
mirror!(ConfigOutput <=> StoredOutput { name, kind, description, error_output });
mirror!(SoftwareConfig <=> StoredConfig { id, name, group, config, options, creation_time } lists { inputs, outputs });
mirror!(NewDeployment <=> StoredSpec {
    config_id, server_id, input_values, action, stack_id, resource_name, signal_transport, signal_id,
    signal_verb, timeout_secs, input_key, input_values_validation
});
mirror!(SoftwareDeployment <=> StoredDeployment {
    id, config_id, server_id, input_values, output_values, action, status, status_reason, derived_config_id,
    creation_time, updated_time
});

mirror!(DeploymentRecord <=> StoredRecord { owner, jid, item, relay_pending, last_signal, finish_id } nested { deployment, spec });

pub(crate) fn config_json(config: &SoftwareConfig) -> String {
    to_json(&StoredConfig::from(config.clone()))
}

pub(crate) fn config_from_json(text: &str) -> Result<SoftwareConfig, StoreError> {
    json::<StoredConfig>(text).map(Into::into)
}

pub(crate) fn record_json(record: &DeploymentRecord) -> String {
    to_json(&StoredRecord::from(record.clone()))
}

pub(crate) fn record_from_json(text: &str) -> Result<DeploymentRecord, StoreError> {
    json::<StoredRecord>(text).map(Into::into)
}

/// A deployment row: its document, and its owner from its own column.
#[cfg(feature = "io")]
pub(crate) fn record_from_row<R: sqlx::Row>(row: &R) -> Result<DeploymentRecord, StoreError>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let mut record = record_from_json(&row.try_get::<String, _>("body")?)?;
    record.owner = row.try_get("owner")?;
    Ok(record)
}

/// A deployment group row: its document, and the revision beside it.
#[cfg(feature = "io")]
pub(crate) fn group_from_row<R: sqlx::Row>(row: &R) -> Result<super::GroupRecord, StoreError>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let mut record: super::GroupRecord = json(&row.try_get::<String, _>("body")?)?;
    record.revision = row.try_get("revision")?;
    Ok(record)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Documents written before the store had its own shapes (the wire's JSON) read back
    /// unchanged, and are written the same way: existing rows stay readable.
    #[test]
    fn documents_in_the_wire_shape_read_back() {
        let config = SoftwareConfig {
            id: "c1".into(),
            name: "web".into(),
            group: "script".into(),
            config: json!("#!/bin/sh\necho hi"),
            inputs: vec![ConfigInput {
                name: "port".into(),
                kind: "Number".into(),
                default: Some(json!(80)),
                description: None,
                replace_on_change: true,
            }],
            outputs: vec![ConfigOutput {
                name: "url".into(),
                kind: "String".into(),
                description: Some("where".into()),
                error_output: false,
            }],
            options: None,
            creation_time: "2026-11-22T00:00:00Z".into(),
        };
        let old = serde_json::to_string(&config).unwrap();
        assert_eq!(config_from_json(&old).unwrap(), config);
        assert_eq!(config_json(&config), old);
        let spec: NewDeployment =
            serde_json::from_value(json!({"config_id": "c1", "server_id": "web1", "input_values": {"port": 8080}}))
                .unwrap();
        let deployment = SoftwareDeployment {
            id: "d1".into(),
            config_id: "c1".into(),
            server_id: "web1".into(),
            input_values: spec.input_values.clone(),
            output_values: Map::new(),
            action: "CREATE".into(),
            status: "IN_PROGRESS".into(),
            status_reason: String::new(),
            derived_config_id: "c1-d".into(),
            creation_time: "2026-11-22T00:00:00Z".into(),
            updated_time: None,
        };
        let record = DeploymentRecord {
            owner: String::new(),
            deployment,
            spec,
            jid: "1".into(),
            item: json!({"id": "c1-d"}),
            relay_pending: false,
            last_signal: None,
            finish_id: String::new(),
        };
        let text = record_json(&record);
        assert_eq!(record_from_json(&text).unwrap(), record);
        // A document missing fields added later still reads, with defaults.
        let sparse = record_from_json(r#"{"deployment": {"id": "d2"}, "spec": {}, "jid": "2"}"#).unwrap();
        assert_eq!((sparse.deployment.id.as_str(), sparse.jid.as_str()), ("d2", "2"));
    }
}
