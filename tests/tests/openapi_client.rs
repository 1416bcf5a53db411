//! The gateway's OpenAPI document, checked from outside: `openapi-spec-validator` accepts it as
//! OpenAPI 3.1, and a Python client generated from it (`openapi-python-client`) runs a job and a
//! deployment against a real master and minion. scripts/test.sh installs both in `.venv`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use halite_tests::{http, wait_for, Cluster};

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
    let token = cluster.cli(&["principal", "token", "root"]).stdout.trim().to_owned();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/python/gateway_client.py");
    let said = run(Command::new(venv_tool("python"))
        .arg(script)
        .arg(&package)
        .arg(format!("http://{addr}"))
        .arg(&token)
        .arg("py1"));
    assert!(said.starts_with("ok "), "{said}");
}
