//! The gateway's OpenAPI document, checked from outside: `openapi-spec-validator` accepts it as
//! OpenAPI 3.1, `openapi-python-client` generates a call for every operation in it, that client
//! runs a job and a deployment against a real master and minion, and the answers that are not
//! JSON (the health checks, `/metrics`) come with a status and content type the document gives.
//! scripts/test.sh installs both tools in `.venv`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use halite_tests::{http, wait_for, Cluster};
use serde_json::Value;

fn venv_tool(name: &str) -> PathBuf {
    let python = std::env::var("HALITE_PYTHON")
        .unwrap_or_else(|_| format!("{}/../.venv/bin/python", env!("CARGO_MANIFEST_DIR")));
    let tool = PathBuf::from(python).with_file_name(name);
    assert!(tool.exists(), "{} is missing: run scripts/test.sh, which installs it in .venv", tool.display());
    tool
}

fn run(command: &mut Command) -> String {
    let out = command.output().unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{command:?} failed: {said}");
    said
}

#[test]
fn the_openapi_document_validates_and_a_generated_python_client_runs_a_job_and_a_deployment() {
    let mut cluster = Cluster::start("[gateway]\nlisten = \"127.0.0.1:0\"\n");
    let section = cluster.deploy_section("py1");
    cluster.prepare_minion_with("py1", true, "", &section);
    cluster.start_minion("py1");
    cluster.wait_connected(&["py1"]);
    let addr_file = cluster.dir.join("master/gateway.addr");
    let addr = wait_for("the gateway", Duration::from_secs(10), || std::fs::read_to_string(&addr_file).ok());
    let addr = addr.trim().to_owned();
    let document = cluster.dir.join("openapi.json");
    std::fs::write(&document, http::request("GET", &addr, "/v1/openapi.json", None, None).body).unwrap();

    let said = run(Command::new(venv_tool("python")).args(["-m", "openapi_spec_validator"]).arg(&document));
    assert!(said.contains("OK"), "{said}");

    let package = cluster.dir.join("generated");
    std::fs::create_dir_all(&package).unwrap();
    run(Command::new(venv_tool("openapi-python-client"))
        .args(["generate", "--meta", "none", "--path"])
        .arg(&document)
        .arg("--output-path")
        .arg(package.join("halite_gateway")));
    let generated = package.join("halite_gateway/api/default");
    let spec: Value = serde_json::from_slice(&std::fs::read(&document).unwrap()).unwrap();
    for id in operation_ids(&spec) {
        let module = generated.join(format!("{}.py", snake_case(&id)));
        assert!(module.exists(), "no generated call for {id}: the generator skipped it ({})", module.display());
    }
    let token = cluster.cli(&["principal", "token", "root"]).stdout.trim().to_owned();
    let probes = [("/healthz", None), ("/readyz", None), ("/metrics", Some(token.as_str())), ("/metrics", None)];
    for (path, token) in probes {
        let answer = http::request("GET", &addr, path, token, None);
        let documented = &spec["paths"][path]["get"]["responses"][answer.status.to_string()];
        let content = resolved(&spec, documented)["content"].as_object().cloned().unwrap_or_default();
        let kind = answer.header("content-type").unwrap_or_default();
        let media = kind.split(';').next().unwrap_or_default().trim();
        assert!(content.contains_key(media), "GET {path} answered {} {kind}, documented {documented}", answer.status);
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/python/gateway_client.py");
    let said = run(Command::new(venv_tool("python"))
        .arg(script)
        .arg(&package)
        .arg(format!("http://{addr}"))
        .arg(&token)
        .arg("py1"));
    assert!(said.starts_with("ok "), "{said}");
}

/// Every operation's id.
fn operation_ids(spec: &Value) -> Vec<String> {
    let paths = spec["paths"].as_object().unwrap();
    let ids: Vec<String> = paths
        .values()
        .flat_map(|item| item.as_object().unwrap().values())
        .map(|op| op["operationId"].as_str().unwrap().to_owned())
        .collect();
    assert!(ids.len() > 30 && ids.iter().any(|id| id == "readyz"), "{ids:?}");
    ids
}

/// `listConfigs` → `list_configs`, as the generator names its modules.
fn snake_case(id: &str) -> String {
    let mut out = String::new();
    for c in id.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// A response object, or the one its `$ref` names.
fn resolved<'a>(spec: &'a Value, response: &'a Value) -> &'a Value {
    match response["$ref"].as_str() {
        Some(reference) => spec.pointer(reference.trim_start_matches('#')).unwrap_or(&Value::Null),
        None => response,
    }
}
