//! The OpenAPI 3.1 document of the gateway. Schemas are generated from the Rust types the
//! handlers (de)serialise, so they cannot drift from the implementation; the paths mirror
//! `routes::router` one for one, method by method (`coverage.rs` reads the routes from their
//! source and compares), the health checks and `/metrics` included.

use halite_protocol::message::{
    DeploymentGroup, DeploymentGroupUpdate, DeploymentUpdate, JobDetail, JobSummary, KeyInfo, MinionInfo,
    NewDeployment, NewDeploymentGroup, NewSoftwareConfig, PrincipalInfo, SoftwareConfig, SoftwareDeployment,
};
use schemars::generate::SchemaSettings;
use serde_json::{json, Map, Value};

use super::routes::{FiredEvent, JobRequest, RunRequest};

fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

/// A JSON body `{ key: <schema> }`, as every answer is wrapped.
fn wrapped(key: &str, schema: Value) -> Value {
    json!({ "description": "OK", "content": { "application/json": { "schema": {
        "type": "object", "required": [key], "properties": { key: schema } } } } })
}

fn body(name: &str) -> Value {
    json!({ "required": true, "content": { "application/json": { "schema": schema_ref(name) } } })
}

fn path_param(name: &str) -> Value {
    json!({ "name": name, "in": "path", "required": true, "schema": { "type": "string" } })
}

fn pattern() -> Value {
    query_param("pattern", "string", "Minion id glob (default: every one)")
}

fn query_param(name: &str, kind: &str, description: &str) -> Value {
    json!({ "name": name, "in": "query", "required": false, "description": description, "schema": { "type": kind } })
}

/// The error statuses every authenticated operation may answer: a refusal by the core (400,
/// 403, 404), a missing or dead token (401), the store failing (500), the core not answering
/// (503).
const ERRORS: &[&str] = &["400", "401", "403", "404", "500", "503"];

/// Those only an operation with a JSON body answers: a body over the size limit (413), not
/// sent as `application/json` (415), or not fitting the schema (422).
const BODY_ERRORS: &[&str] = &["413", "415", "422"];

fn operation(id: &str, summary: &str, parameters: Vec<Value>, request: Option<Value>, ok: Value) -> Value {
    let mut op = json!({
        "operationId": id,
        "summary": summary,
        "parameters": parameters,
        "responses": { "200": ok },
    });
    let body_errors = if request.is_some() { BODY_ERRORS } else { &[] };
    with_errors(&mut op, ERRORS.iter().chain(body_errors));
    if let Some(request) = request {
        op["requestBody"] = request;
    }
    op
}

/// Adds the documented error body under each of `statuses`.
fn with_errors<'a>(op: &mut Value, statuses: impl IntoIterator<Item = &'a &'a str>) {
    if let Some(responses) = op["responses"].as_object_mut() {
        for status in statuses {
            responses.insert((*status).to_owned(), schema_ref_response());
        }
    }
}

/// An operation that may also answer `409 conflict` (the state forbids it: a job already
/// finished, a key already accepted).
fn conflicting(mut op: Value) -> Value {
    with_errors(&mut op, &["409"]);
    op
}

/// A plain-text answer.
fn text(description: &str) -> Value {
    json!({ "description": description, "content": { "text/plain": { "schema": { "type": "string" } } } })
}

/// `/healthz` and `/readyz` (no token) and `/metrics` (a token of root or an administrator),
/// as `metrics_http.rs` serves them on the gateway too.
fn health_and_metrics() -> Value {
    let not_ready = json!({ "description": "Not ready: the core has not finished a step for 5 s, or the last write \
                              to the store failed; the error's message says which (`not ready: …`)",
                             "content": { "application/json": { "schema": schema_ref("Error") } } });
    let figures = json!({ "description": "Prometheus' text format: OpenMetrics 1.0 to a reader that asks for it \
                            (`Accept: application/openmetrics-text`, as Prometheus does), the classic 0.0.4 format \
                            otherwise",
                           "content": { "text/plain": { "schema": { "type": "string" } },
                                        "application/openmetrics-text": { "schema": { "type": "string" } } } });
    json!({
        "/healthz": { "get": { "operationId": "healthz", "summary": "Liveness: `ok` while the process serves",
            "security": [], "responses": { "200": text("`ok`") } } },
        "/readyz": { "get": { "operationId": "readyz",
            "summary": "Readiness: `ready` while the core steps and the store takes its writes",
            "security": [], "responses": { "200": text("`ready`"), "503": not_ready } } },
        "/metrics": { "get": { "operationId": "metrics",
            "summary": "The master's figures, fleet-wide: for a token of root or an administrator (any other gets 403)",
            "responses": { "200": figures, "401": schema_ref_response(), "403": schema_ref_response() } } },
    })
}

/// `GET /v1/events`: refused before the stream starts when the principal may not subscribe, and
/// ended by a last `error` event when its token's authorisation ends.
fn events_stream() -> Value {
    let mut op = operation(
        "events",
        "Server-sent events: one `halite` event per bus event, data {tag, data}",
        vec![query_param("tag", "string", "Comma-separated tag globs (default: all the principal may see)")],
        None,
        json!({ "description": "An event stream. It ends when the token is revoked or expires, or its principal \
                 is removed or changed, after a last `error` event whose data is the error body \
                 ({\"error\": {\"kind\": \"unauthorized\", \"message\": \"token revoked\"}})",
                 "content": { "text/event-stream": { "schema": { "type": "string" } } } }),
    );
    let refusal =
        |why: &str| json!({ "description": why, "content": { "application/json": { "schema": schema_ref("Error") } } });
    op["responses"]["403"] = refusal("A tag pattern the principal's `events` rules do not cover (no stream is opened)");
    op["responses"]["400"] = refusal("No tag pattern, too many, or one too long (no stream is opened)");
    op
}

/// `GET /v1/audit`: a page as JSON, or with `Accept: text/event-stream` the trail followed.
fn audit_trail() -> Value {
    let page = json!({ "type": "object", "required": ["records", "next"], "properties": {
        "records": { "type": "array", "items": schema_ref("AuditRecord") },
        "next": { "type": ["integer", "null"],
                  "description": "The cursor of the next page: pass it as `after` (the same cursor when no record came)" } } });
    let parameters = vec![
        query_param("principal", "string", "Who asked (`root`, a name, `minion:<id>`, `master`)"),
        query_param("tenant", "string", "The tenant's records (a tenant's principal reads its own alone: naming another finds nothing)"),
        query_param("minion", "string", "Records that concern this minion"),
        query_param("action", "string", "The action (`publish`, `key_accept`, `job_end`, ...)"),
        query_param("decision", "string", "`granted`, `refused`, `failed`, or a final state"),
        query_param("since_ms", "integer", "At or after, Unix milliseconds"),
        query_param("until_ms", "integer", "Before, Unix milliseconds"),
        query_param("reads", "boolean", "Also the records of reads of the trail (`audit_list`, left out unless asked for, so that paging never grows what it reads)"),
        query_param("after", "integer", "Only records after this id (the `next` of the page before)"),
        query_param("limit", "integer", "At most this many (default 100, at most 1000)"),
    ];
    operation(
        "listAudit",
        "The audit trail in store order: a page of records after a cursor, or with `Accept: text/event-stream` \
         every record from the cursor (or `Last-Event-ID`) on, then each one as it is appended",
        parameters,
        None,
        json!({ "description": "A page of records; or an event stream of `audit` events, each with the record's id \
                 as its event id and the record as its data. The stream ends when the token is revoked or expires, \
                 or its principal is removed or changed, after a last `error` event whose data is the error body",
                 "content": { "application/json": { "schema": page },
                              "text/event-stream": { "schema": { "type": "string" } } } }),
    )
}

fn schema_ref_response() -> Value {
    json!({ "$ref": "#/components/responses/Error" })
}

fn no_content(id: &str, summary: &str, parameters: Vec<Value>) -> Value {
    let mut op = operation(id, summary, parameters, None, json!({ "description": "unused" }));
    if let Some(responses) = op["responses"].as_object_mut() {
        responses.remove("200");
        responses.insert("204".into(), json!({ "description": "Deleted" }));
    }
    op
}

/// An enum of plain strings whose variants carry doc comments comes out of the generator as a
/// `oneOf` of one-value schemas, which client generators turn into a type per value: folded
/// here into one `enum` (the values' descriptions join the schema's), everywhere in `schema`.
fn one_enum_per_type(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            let values: Option<Vec<(Value, Option<String>)>> =
                map.get("oneOf").and_then(Value::as_array).and_then(|variants| {
                    variants
                        .iter()
                        .map(|v| {
                            let value = v.get("const").cloned().or_else(|| match v.get("enum") {
                                Some(Value::Array(one)) if one.len() == 1 => one.first().cloned(),
                                _ => None,
                            })?;
                            if !value.is_string() {
                                return None;
                            }
                            Some((value, v.get("description").and_then(Value::as_str).map(str::to_owned)))
                        })
                        .collect::<Option<Vec<_>>>()
                });
            if let Some(values) = values.filter(|v| !v.is_empty()) {
                map.remove("oneOf");
                map.insert("type".into(), json!("string"));
                let described: Vec<String> = values
                    .iter()
                    .filter_map(|(value, text)| Some(format!("`{}`: {}", value.as_str()?, text.as_deref()?)))
                    .collect();
                map.insert("enum".into(), Value::Array(values.into_iter().map(|(value, _)| value).collect()));
                if !described.is_empty() {
                    let head =
                        map.get("description").and_then(Value::as_str).map(|d| format!("{d}\n\n")).unwrap_or_default();
                    map.insert("description".into(), json!(format!("{head}{}", described.join("; "))));
                }
            }
            for value in map.values_mut() {
                one_enum_per_type(value);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(one_enum_per_type),
        _ => {}
    }
}

/// The whole document.
pub(super) fn document() -> Value {
    // OpenAPI 3.1 schemas are JSON Schema 2020-12 (`nullable` is 3.0's, and gone).
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = "/components/schemas".into();
    settings.meta_schema = None;
    // `true` is a valid schema, but client generators want `{}`.
    let mut no_bool_schemas = schemars::transform::ReplaceBoolSchemas::default();
    no_bool_schemas.skip_additional_properties = true;
    settings.transforms.push(Box::new(no_bool_schemas));
    let mut generator = settings.into_generator();
    let names = [
        ("NewSoftwareConfig", generator.subschema_for::<NewSoftwareConfig>()),
        ("SoftwareConfig", generator.subschema_for::<SoftwareConfig>()),
        ("NewDeployment", generator.subschema_for::<NewDeployment>()),
        ("DeploymentUpdate", generator.subschema_for::<DeploymentUpdate>()),
        ("SoftwareDeployment", generator.subschema_for::<SoftwareDeployment>()),
        ("NewDeploymentGroup", generator.subschema_for::<NewDeploymentGroup>()),
        ("DeploymentGroup", generator.subschema_for::<DeploymentGroup>()),
        ("DeploymentGroupUpdate", generator.subschema_for::<DeploymentGroupUpdate>()),
        ("JobRequest", generator.subschema_for::<JobRequest>()),
        ("RunRequest", generator.subschema_for::<RunRequest>()),
        ("FiredEvent", generator.subschema_for::<FiredEvent>()),
        ("MinionInfo", generator.subschema_for::<MinionInfo>()),
        ("KeyInfo", generator.subschema_for::<KeyInfo>()),
        ("TokenRequest", generator.subschema_for::<super::fleet::TokenRequest>()),
        ("PrincipalSpec", generator.subschema_for::<super::principals::PrincipalSpec>()),
        ("PrincipalInfo", generator.subschema_for::<PrincipalInfo>()),
        ("JobSummary", generator.subschema_for::<JobSummary>()),
        ("JobDetail", generator.subschema_for::<JobDetail>()),
        ("AuditRecord", generator.subschema_for::<halite_protocol::audit::AuditRecord>()),
    ];
    let mut schemas: Map<String, Value> = generator.take_definitions(true);
    for (name, schema) in names {
        // Types defined inline by the generator are referenced by name; keep both.
        if !schemas.contains_key(name) {
            schemas.insert(name.into(), schema.to_value());
        }
    }
    for schema in schemas.values_mut() {
        one_enum_per_type(schema);
    }
    schemas.insert(
        "Error".into(),
        json!({ "type": "object", "required": ["error"], "properties": { "error": {
            "type": "object", "required": ["kind", "message"],
            "properties": { "kind": { "type": "string" }, "message": { "type": "string" } } } } }),
    );
    let list = |name: &str| json!({ "type": "array", "items": schema_ref(name) });
    let id = || vec![path_param("id")];
    let mut doc = json!({
        "openapi": "3.1.0",
        "servers": [{ "url": "/", "description": "the gateway that serves this document" }],
        "info": {
            "title": "halite gateway",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Software configs, deployments, jobs and events of a halite master. \
                            Authenticate with `Authorization: Bearer <token>` (`halite principal token NAME`).",
        },
        "security": [{ "bearer": [] }],
        "paths": {
            "/v1/software_configs": {
                "get": operation("listConfigs", "List configs, newest first",
                    vec![query_param("limit", "integer", "At most this many (default 100)")], None,
                    wrapped("software_configs", list("SoftwareConfig"))),
                "post": operation("createConfig", "Create an immutable config", vec![], Some(body("NewSoftwareConfig")),
                    wrapped("software_config", schema_ref("SoftwareConfig"))),
            },
            "/v1/software_configs/{id}": {
                "get": operation("showConfig", "One config", id(), None,
                    wrapped("software_config", schema_ref("SoftwareConfig"))),
                "delete": no_content("deleteConfig", "Delete a config", id()),
            },
            "/v1/software_deployments": {
                "get": operation("listDeployments", "List deployments, newest first",
                    vec![query_param("server_id", "string", "Only this server's")], None,
                    wrapped("software_deployments", list("SoftwareDeployment"))),
                "post": operation("createDeployment", "Deploy a config to a server (pushed at once or on connect)",
                    vec![], Some(body("NewDeployment")), wrapped("software_deployment", schema_ref("SoftwareDeployment"))),
            },
            "/v1/software_deployments/{id}": {
                "get": operation("showDeployment", "One deployment", id(), None,
                    wrapped("software_deployment", schema_ref("SoftwareDeployment"))),
                "put": operation("updateDeployment", "Re-derive and push with new inputs, config or action", id(),
                    Some(body("DeploymentUpdate")), wrapped("software_deployment", schema_ref("SoftwareDeployment"))),
                "delete": no_content("deleteDeployment", "Delete a deployment", id()),
            },
            "/v1/software_deployment_groups": {
                "post": operation("createDeploymentGroup", "Deploy a config to several servers, rolled out", vec![],
                    Some(body("NewDeploymentGroup")), wrapped("software_deployment_group", schema_ref("DeploymentGroup"))),
            },
            "/v1/software_deployment_groups/{id}": {
                "get": operation("showDeploymentGroup", "One deployment group: each server's status and the rollout", id(),
                    None, wrapped("software_deployment_group", schema_ref("DeploymentGroup"))),
                "put": operation("updateDeploymentGroup",
                    "Change a group in place: kept servers run UPDATE, new ones CREATE, as the rollout allows",
                    id(), Some(body("DeploymentGroupUpdate")), wrapped("software_deployment_group", schema_ref("DeploymentGroup"))),
            },
            "/v1/software_deployments/metadata/{server_id}": {
                "get": operation("serverMetadata", "Every derived config of a server (Heat's per-server metadata)",
                    vec![path_param("server_id")], None, wrapped("metadata", json!({ "type": "array", "items": { "type": "object" } }))),
            },
            "/v1/minions": {
                "get": operation("listMinions", "Minions (accepted keys) with presence and grains", vec![pattern()], None,
                    wrapped("minions", list("MinionInfo"))),
            },
            "/v1/minions/{id}": {
                "get": operation("showMinion", "One minion with its presence and grains", id(), None,
                    wrapped("minion", schema_ref("MinionInfo"))),
            },
            "/v1/principals": {
                "get": operation("listPrincipals", "Client principals with their ACLs (admin)", vec![], None,
                    wrapped("principals", list("PrincipalInfo"))),
            },
            "/v1/principals/{name}": {
                "put": operation("putPrincipal", "Register a principal, or give it a new key and ACL (admin)",
                    vec![path_param("name")], Some(body("PrincipalSpec")),
                    wrapped("changed", json!({ "type": "array", "items": { "type": "string" } }))),
                "delete": no_content("deletePrincipal", "Remove a principal; its sessions are cut (admin)",
                    vec![path_param("name")]),
            },
            "/v1/keys": {
                "get": operation("listKeys", "Keys by state (admin)", vec![pattern()], None, wrapped("keys", list("KeyInfo"))),
            },
            "/v1/keys/{id}": {
                "delete": operation("deleteKey", "Delete a minion's keys; its session is cut (admin)", id(), None,
                    wrapped("changed", json!({ "type": "array", "items": { "type": "string" } }))),
            },
            "/v1/keys/{id}/accept": {
                "post": operation("acceptKey", "Accept a pending or rejected key (admin)", id(), None,
                    wrapped("changed", json!({ "type": "array", "items": { "type": "string" } }))),
            },
            "/v1/keys/{id}/reject": {
                "post": operation("rejectKey", "Reject a key; its session is cut (admin)", id(), None,
                    wrapped("changed", json!({ "type": "array", "items": { "type": "string" } }))),
            },
            "/v1/enrollment_tokens": {
                "post": conflicting(operation("createEnrollmentToken",
                    "A one-time enrollment token for a minion id, with its enrollment file and cloud-init user_data (admin, or deploy.apply on that id while it has no accepted key)",
                    vec![], Some(body("TokenRequest")), wrapped("enrollment_token", json!({ "type": "object",
                        "required": ["token", "minion", "expires_at_ms", "enrollment", "user_data"],
                        "properties": { "token": { "type": "string" }, "minion": { "type": "string" },
                            "expires_at_ms": { "type": "integer" }, "enrollment": { "type": "string" },
                            "user_data": { "type": "string" } } })))),
            },
            "/v1/jobs": {
                "get": operation("listJobs", "Recent jobs, newest first",
                    vec![
                        query_param("limit", "integer", "At most this many (default 100)"),
                        query_param("function", "string", "Glob on the function (pkg.*)"),
                        query_param("target", "string", "Glob on the target as it was given"),
                        query_param("caller", "string", "Glob on who published the job"),
                        query_param("state", "string", "Jobs with at least one minion in this state (failed, running, ...)"),
                        query_param("since_ms", "integer", "Published at or after, Unix milliseconds"),
                        query_param("until_ms", "integer", "Published before, Unix milliseconds"),
                    ], None,
                    wrapped("jobs", list("JobSummary"))),
                "post": operation("publishJob", "Run a function on a target; returns the jid at once", vec![],
                    Some(body("JobRequest")), wrapped("job", json!({ "type": "object", "required": ["jid", "minions"],
                        "properties": { "jid": { "type": "string" }, "minions": { "type": "array", "items": { "type": "string" } },
                            "unknown": { "type": "array", "items": { "type": "string" },
                                "description": "Ids the target named that no minion the caller may target has (each also in the job as unknown)" } } }))),
            },
            "/v1/jobs/{jid}": {
                "get": operation("showJob", "One job with every minion's state and return", vec![path_param("jid")], None,
                    wrapped("job", schema_ref("JobDetail"))),
            },
            "/v1/jobs/{jid}/pause": {
                "post": operation("pauseJob", "Pause a job's rollout: running targets finish, no new one starts",
                    vec![path_param("jid")], None, wrapped("job", schema_ref("JobDetail"))),
            },
            "/v1/jobs/{jid}/resume": {
                "post": operation("resumeJob", "Resume a paused rollout", vec![path_param("jid")], None,
                    wrapped("job", schema_ref("JobDetail"))),
            },
            "/v1/jobs/{jid}/cancel": {
                "post": conflicting(operation("cancelJob",
                    "Cancel a running job: a rollout starts no more targets, running ones are stopped (409 once it has finished)",
                    vec![path_param("jid")], None, wrapped("job", schema_ref("JobDetail")))),
            },
            "/v1/events": {
                "get": events_stream(),
                "post": operation("fireEvent", "Fire an event on the bus as engine/<principal>/<tag> (what rollouts abort on)",
                    vec![], Some(body("FiredEvent")), wrapped("event", json!({ "type": "object", "required": ["tag"],
                        "properties": { "tag": { "type": "string" } } }))),
            },
            "/v1/openapi.json": {
                "get": { "operationId": "openapi", "summary": "This document", "security": [],
                         "responses": { "200": { "description": "OK", "content": { "application/json": {
                             "schema": { "type": "object" } } } } } },
            },
        },
        "components": {
            "schemas": schemas,
            "responses": { "Error": { "description": "The request failed", "content": { "application/json": {
                "schema": schema_ref("Error") } } } },
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
        },
    });
    // Beside the rest: one more path in the literal above passes `json!`'s recursion limit.
    doc["paths"]["/v1/run"] = run_path();
    if let (Some(paths), Value::Object(more)) = (doc["paths"].as_object_mut(), health_and_metrics()) {
        paths.extend(more);
        paths.insert("/v1/audit".into(), json!({ "get": audit_trail() }));
    }
    doc
}

#[cfg(test)]
mod coverage;

/// `POST /v1/run`: a job published and waited for.
fn run_path() -> Value {
    let answer = json!({ "type": "object", "required": ["jid", "done", "still_going", "job"],
        "properties": { "jid": { "type": "string" },
            "done": { "type": "boolean", "description": "Every minion finished within wait_secs" },
            "still_going": { "type": "array", "items": { "type": "string" },
                "description": "Minions still running the job when the wait ended" },
            "job": schema_ref("JobDetail") } });
    let ok = json!({ "description": "OK", "content": { "application/json": { "schema": answer } } });
    let summary = "Run a function on a target and wait for every minion's return (salt-api's client=local)";
    json!({ "post": operation("runJob", summary, vec![], Some(body("RunRequest")), ok) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(r)) = map.get("$ref") {
                    out.push(r.clone());
                }
                map.values().for_each(|v| refs(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }

    #[test]
    fn every_reference_resolves_and_schemas_come_from_the_types() {
        let doc = document();
        let mut all = Vec::new();
        refs(&doc, &mut all);
        assert!(all.len() > 20);
        for reference in all {
            let pointer = reference.trim_start_matches('#');
            assert!(doc.pointer(pointer).is_some(), "{reference} does not resolve");
        }
        let deployment = &doc["components"]["schemas"]["NewDeployment"];
        assert!(deployment["properties"]["signal_id"].is_object(), "{deployment}");
        assert_eq!(deployment["additionalProperties"], json!(false), "deny_unknown_fields is described");
        let required: Vec<&str> = deployment["required"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert_eq!(required, ["config_id", "server_id"]);
    }

    #[test]
    fn the_event_stream_documents_its_refusals_and_its_end() {
        let doc = document();
        let events = &doc["paths"]["/v1/events"]["get"];
        let forbidden = events["responses"]["403"]["description"].as_str().unwrap();
        assert!(forbidden.contains("`events` rules"), "{forbidden}");
        assert_eq!(events["responses"]["403"]["content"]["application/json"]["schema"], schema_ref("Error"));
        assert!(events["responses"]["400"]["description"].as_str().unwrap().contains("too long"));
        let ok = events["responses"]["200"]["description"].as_str().unwrap();
        assert!(ok.contains("revoked") && ok.contains("`error` event"), "{ok}");
    }

    #[test]
    fn the_document_is_openapi_3_1_with_one_enum_per_type_and_a_server() {
        let text = document().to_string();
        assert!(!text.contains("\"nullable\""), "3.0's nullable is not 3.1");
        let doc = document();
        assert_eq!(doc["servers"][0]["url"], "/");
        let state = &doc["components"]["schemas"]["MinionJobState"];
        assert!(state.get("oneOf").is_none(), "{state}");
        let values: Vec<&str> = state["enum"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert!(values.contains(&"returned") && values.contains(&"skipped"), "{state}");
        assert!(state["description"].as_str().unwrap().contains("`returned`: Returned successfully."), "{state}");
    }
}
