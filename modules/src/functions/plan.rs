//! `plan.run`: several steps in one job, in order, with requisites, guards and tags.

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::{Args, Command, Context, ModuleError, Output, Typed};

/// One step of a plan.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Step {
    /// Unique name of the step.
    id: String,
    /// Function to call, e.g. `pkg.install`.
    function: String,
    /// Positional arguments.
    #[serde(default)]
    args: Vec<Value>,
    /// Keyword arguments.
    #[serde(default)]
    kwargs: BTreeMap<String, Value>,
    /// Earlier steps that must have succeeded.
    #[serde(default)]
    require: Vec<String>,
    /// Run only if one of these earlier steps changed something.
    #[serde(default)]
    onchanges: Vec<String>,
    /// Shell command that must exit 0 for the step to run (needs cmd.run allowed).
    #[serde(default)]
    onlyif: Option<String>,
    /// Shell command that must not exit 0 for the step to run (needs cmd.run allowed).
    #[serde(default)]
    unless: Option<String>,
    /// Tags for selecting steps.
    #[serde(default)]
    tags: Vec<String>,
}

/// Most bytes of a stored plan.
const MAX_PLAN: u64 = 1 << 20;

/// A stored plan's text, read off the runtime's threads without blocking on what is not a
/// regular file, and never one of the minion's secrets (a link planted in the plans directory
/// would otherwise have its target echoed back in a parse error).
async fn read_plan(guard: &crate::PathGuard, path: std::path::PathBuf) -> Result<String, ModuleError> {
    use std::io::Read as _;
    let guard = guard.clone();
    tokio::task::spawn_blocking(move || {
        let failed = |e: std::io::Error| ModuleError::Failed(format!("{}: {e}", path.display()));
        let file = guard.open_own_blocking(&path)?;
        let mut text = String::new();
        file.take(MAX_PLAN + 1).read_to_string(&mut text).map_err(failed)?;
        if text.len() as u64 > MAX_PLAN {
            return Err(ModuleError::Failed(format!(
                "{}: larger than a plan may be ({MAX_PLAN} bytes)",
                path.display()
            )));
        }
        Ok(text)
    })
    .await
    .map_err(|e| ModuleError::Failed(format!("reading the plan failed: {e}")))?
}

/// A plan file (`<plans_dir>/<name>.toml`): `[[steps]]` tables.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanFile {
    steps: Vec<Step>,
}

pub(crate) struct Run;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunArgs {
    /// A plan stored on the minion (`<plans_dir>/<name>.toml`).
    #[serde(default)]
    name: Option<String>,
    /// The steps, given inline.
    #[serde(default)]
    steps: Option<Vec<Step>>,
    /// Run only steps carrying one of these tags.
    #[serde(default)]
    tags: Option<Vec<String>>,
}

impl Typed for Run {
    const NAME: &'static str = "plan.run";
    const DOC: &'static str = "Runs steps in order in one job. A step runs when its `require` steps succeeded, one of \
         its `onchanges` steps changed something, its `onlyif` command succeeds and its `unless` command fails; \
         otherwise it is skipped, and so are its dependents when it fails. `tags` selects a subset; \
         `test=true` applies to every step. Every step, guard and stored plan goes through the minion's policy and stays within what the job's caller may call (the reach the master signs into the job). The result lists \
         each step's outcome; the job fails if any step failed.";
    const POSITIONAL: &'static [&'static str] = &["name"];
    type Args = RunArgs;
    async fn run(&self, a: RunArgs, cx: &Context) -> Result<Output, ModuleError> {
        let dispatcher =
            cx.dispatcher.as_ref().ok_or_else(|| ModuleError::Failed("no registry in this context".into()))?;
        let steps = match (a.steps, &a.name) {
            (Some(steps), None) => steps,
            (None, Some(name)) => {
                if halite_protocol::id::validate(name).is_err() {
                    return Err(ModuleError::BadArguments(format!("{name:?} is not a plan name")));
                }
                let path = dispatcher.plans_dir.join(format!("{name}.toml"));
                let text = read_plan(&dispatcher.paths, path.clone()).await?;
                toml::from_str::<PlanFile>(&text)
                    .map_err(|e| ModuleError::Failed(format!("{}: {}", path.display(), e.to_string().trim_end())))?
                    .steps
            }
            _ => return Err(ModuleError::BadArguments("give either name (a stored plan) or steps".into())),
        };
        check(&steps)?;
        let mut outcomes: BTreeMap<String, (bool, bool)> = BTreeMap::new(); // id → (succeeded, changed)
        let mut report = Vec::new();
        let (mut failed, mut skipped) = (0, 0);
        for step in &steps {
            let selected = a.tags.as_ref().is_none_or(|tags| step.tags.iter().any(|t| tags.contains(t)));
            let skip = |reason: String| json!({ "id": step.id, "function": step.function, "result": "skipped", "reason": reason });
            if !selected {
                report.push(skip("not selected by tags".into()));
                skipped += 1;
                continue;
            }
            if let Some(bad) = step.require.iter().find(|r| outcomes.get(*r).is_none_or(|(ok, _)| !ok)) {
                report.push(skip(format!("required step {bad} did not succeed")));
                skipped += 1;
                continue;
            }
            if !step.onchanges.is_empty()
                && !step.onchanges.iter().any(|r| outcomes.get(r).is_some_and(|(_, changed)| *changed))
            {
                report.push(skip(format!("no changes in {}", step.onchanges.join(", "))));
                skipped += 1;
                continue;
            }
            if let Some(reason) = guard(cx, step).await? {
                report.push(skip(reason));
                skipped += 1;
                continue;
            }
            let result = dispatcher.call(&step.function, Args::new(step.args.clone(), step.kwargs.clone()), cx).await;
            let (ok, changed, entry) = match result {
                Ok(output) => {
                    let ok = output.retcode == 0;
                    let changed = output.value.get("changed").and_then(Value::as_bool).unwrap_or(false);
                    (
                        ok,
                        changed,
                        json!({ "id": step.id, "function": step.function, "result": if ok { "succeeded" } else { "failed" },
                                          "changed": changed, "return": output.value }),
                    )
                }
                Err(error) => (
                    false,
                    false,
                    json!({ "id": step.id, "function": step.function, "result": "failed", "error": error.to_string() }),
                ),
            };
            if !ok {
                failed += 1;
            }
            outcomes.insert(step.id.clone(), (ok, changed));
            report.push(entry);
        }
        let changed = outcomes.values().any(|(_, c)| *c);
        let value = json!({ "changed": changed, "steps": report, "failed": failed, "skipped": skipped,
                            "succeeded": outcomes.values().filter(|(ok, _)| *ok).count() });
        Ok(Output { value, retcode: i32::from(failed > 0), truncated: false })
    }
}

/// Unique ids; requisites name earlier steps; no nested plans.
fn check(steps: &[Step]) -> Result<(), ModuleError> {
    let mut seen = BTreeSet::new();
    for step in steps {
        if step.function == "plan.run" {
            return Err(ModuleError::BadArguments(format!("step {}: plans cannot run plans", step.id)));
        }
        for requisite in step.require.iter().chain(&step.onchanges) {
            if !seen.contains(requisite) {
                return Err(ModuleError::BadArguments(format!("step {}: {requisite} is not an earlier step", step.id)));
            }
        }
        if !seen.insert(step.id.clone()) {
            return Err(ModuleError::BadArguments(format!("step id {} is used twice", step.id)));
        }
    }
    Ok(())
}

/// Runs `onlyif`/`unless`; `Some(reason)` to skip. Guards are shell commands, so they need
/// `cmd.run` to be allowed: a plan cannot reach a shell the policy forbids.
async fn guard(cx: &Context, step: &Step) -> Result<Option<String>, ModuleError> {
    for (command, wanted_success, word) in [(&step.onlyif, true, "onlyif"), (&step.unless, false, "unless")] {
        let Some(command) = command else { continue };
        if !cfg!(feature = "cmd") {
            // A minion built without cmd.* runs no shell, not even for a guard.
            return Err(ModuleError::Denied(format!(
                "step {} {word}: guards are shell commands, and this minion is built without cmd.*",
                step.id
            )));
        }
        if let Some(dispatcher) = &cx.dispatcher {
            dispatcher
                .permit("cmd.run", cx)
                .map_err(|e| ModuleError::Denied(format!("step {} {word}: {e}", step.id)))?;
        }
        let done = cx.runner.run(&Command::new(&["/bin/sh", "-c", command.as_str()])).await?;
        if (done.retcode == 0) != wanted_success {
            return Ok(Some(format!("{word} command {}", if wanted_success { "failed" } else { "succeeded" })));
        }
    }
    Ok(None)
}

// Plans of shell commands and guards: the full build (the locked-down one refuses guards,
// tested below).
#[cfg(test)]
#[cfg(feature = "full")]
mod tests {
    use super::*;
    use crate::{Dispatcher, Function, Policy, Registry};
    use std::sync::Arc;

    fn run(args: Value, policy: Policy, test: bool) -> Result<Output, ModuleError> {
        run_in(args, policy, test, std::env::temp_dir())
    }

    fn run_in(args: Value, policy: Policy, test: bool, plans_dir: std::path::PathBuf) -> Result<Output, ModuleError> {
        run_as(args, policy, test, plans_dir, None)
    }

    fn run_as(
        args: Value,
        policy: Policy,
        test: bool,
        plans_dir: std::path::PathBuf,
        reach: Option<&[&str]>,
    ) -> Result<Output, ModuleError> {
        let dispatcher = Arc::new(Dispatcher {
            registry: Arc::new(Registry::standard()),
            policy,
            deploy: Default::default(),
            // The minion's secrets, as a real minion keeps them, beside the plans.
            paths: crate::PathGuard::new(&[plans_dir.with_extension("state")], None),
            plans_dir,
        });
        let reach = reach.map(|r| r.iter().map(|g| (*g).to_owned()).collect());
        let cx = Context { test, dispatcher: Some(dispatcher), caller: "ops".into(), reach, ..Context::default() };
        let Value::Object(map) = args else { panic!("object expected") };
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(Run.call(Args::new(vec![], map.into_iter().collect()), &cx))
    }

    fn results(out: &Output) -> Vec<(String, String)> {
        out.value["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| (s["id"].as_str().unwrap().to_owned(), s["result"].as_str().unwrap().to_owned()))
            .collect()
    }

    #[test]
    fn requisites_guards_and_tags_decide_what_runs() {
        let dir = std::env::temp_dir().join(format!("halite-plan-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let file = dir.join("f").display().to_string();
        let steps = json!([
            {"id": "dir", "function": "file.directory", "kwargs": {"name": dir.display().to_string()}, "tags": ["fs"]},
            {"id": "file", "function": "file.managed", "kwargs": {"name": file, "contents": "x"}, "require": ["dir"], "tags": ["fs"]},
            {"id": "notify", "function": "test.echo", "args": ["changed"], "onchanges": ["file"]},
            {"id": "broken", "function": "cmd.run", "args": ["false"]},
            {"id": "after", "function": "test.ping", "require": ["broken"]},
            {"id": "guarded", "function": "test.ping", "unless": "true"},
            {"id": "allowed", "function": "test.ping", "onlyif": "true"}
        ]);
        let out = run(json!({"steps": steps}), Policy::allow_all(), false).unwrap();
        assert_eq!(out.retcode, 1, "a failed step fails the plan");
        let expect =
            |pairs: &[(&str, &str)]| pairs.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect::<Vec<_>>();
        assert_eq!(
            results(&out),
            expect(&[
                ("dir", "succeeded"),
                ("file", "succeeded"),
                ("notify", "succeeded"),
                ("broken", "failed"),
                ("after", "skipped"),
                ("guarded", "skipped"),
                ("allowed", "succeeded")
            ])
        );
        // Second run: nothing changes, so onchanges does not fire.
        let again = run(json!({"steps": steps}), Policy::allow_all(), false).unwrap();
        assert_eq!(results(&again)[2], ("notify".to_owned(), "skipped".to_owned()));
        let tagged = run(json!({"steps": steps, "tags": ["fs"]}), Policy::allow_all(), false).unwrap();
        assert_eq!(tagged.value["skipped"], 5);
    }

    #[test]
    fn test_mode_policy_and_malformed_plans() {
        let dir = std::env::temp_dir().join(format!("halite-plan-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let steps = json!([{"id": "d", "function": "file.directory", "kwargs": {"name": dir.display().to_string()}}]);
        let out = run(json!({"steps": steps}), Policy::allow_all(), true).unwrap();
        assert_eq!(out.value["changed"], true);
        assert!(!dir.exists(), "test=true changed the host");
        let denied =
            run(json!({"steps": [{"id": "c", "function": "cmd.run", "args": ["true"]}]}), Policy::default(), false)
                .unwrap();
        assert!(denied.value["steps"][0]["error"].as_str().unwrap().starts_with("denied"));
        let guard =
            run(json!({"steps": [{"id": "g", "function": "test.ping", "onlyif": "true"}]}), Policy::default(), false);
        assert!(matches!(guard, Err(ModuleError::Denied(_))));
        for (steps, why) in [
            (json!([{"id": "a", "function": "test.ping", "require": ["b"]}]), "not an earlier step"),
            (json!([{"id": "a", "function": "test.ping"}, {"id": "a", "function": "test.ping"}]), "used twice"),
            (json!([{"id": "a", "function": "plan.run"}]), "cannot run plans"),
        ] {
            let err = run(json!({"steps": steps}), Policy::allow_all(), false).unwrap_err().to_string();
            assert!(err.contains(why), "{err}");
        }
    }

    #[test]
    fn stored_plans_run_by_name() {
        let dir = std::env::temp_dir().join(format!("halite-plans-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("hello.toml"), "[[steps]]\nid = \"p\"\nfunction = \"test.echo\"\nargs = [\"hi\"]\n")
            .unwrap();
        std::fs::write(dir.join("bad.toml"), "[[steps]]\nid = \"p\"\nfuntion = \"test.ping\"\n").unwrap();
        let out = run_in(json!({"name": "hello"}), Policy::default(), false, dir.clone()).unwrap();
        assert_eq!(out.value["steps"][0]["return"], "hi");
        let err = run_in(json!({"name": "bad"}), Policy::default(), false, dir.clone()).unwrap_err().to_string();
        assert!(err.contains("funtion"), "{err}");
        // A link planted among the plans to one of the minion's secrets is refused, and its
        // content never echoed in a parse error.
        let state = dir.with_extension("state");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::write(state.join("minion.key"), "[[steps]]\nSECRET-KEY\n").unwrap();
        std::os::unix::fs::symlink(state.join("minion.key"), dir.join("leak.toml")).unwrap();
        let err = run_in(json!({"name": "leak"}), Policy::default(), false, dir.clone()).unwrap_err().to_string();
        assert!(err.contains("the minion's own") && !err.contains("SECRET"), "{err}");
        let err = run_in(json!({"name": "../etc/passwd"}), Policy::default(), false, dir).unwrap_err().to_string();
        assert!(err.contains("not a plan name"), "{err}");
    }

    /// Salt CVE-2013-4435's class: a caller allowed only `plan.run` (and what else the master
    /// signed into the job's reach) reaches nothing more through steps, guards or stored plans,
    /// even where this minion's policy allows everything.
    #[test]
    fn steps_guards_and_stored_plans_stay_within_the_callers_reach() {
        let dir = std::env::temp_dir().join(format!("halite-plan-reach-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let reach: &[&str] = &["plan.run", "test.*"];
        let steps = json!([
            {"id": "ping", "function": "test.ping"},
            {"id": "shell", "function": "deploy.apply", "kwargs": {"deployments": []}},
            {"id": "grains", "function": "grains.items"}
        ]);
        let out = run_as(json!({"steps": steps}), Policy::allow_all(), false, dir.clone(), Some(reach)).unwrap();
        assert_eq!(out.retcode, 1);
        let steps = out.value["steps"].as_array().unwrap();
        assert_eq!(steps[0]["result"], "succeeded");
        for denied in &steps[1..] {
            let error = denied["error"].as_str().unwrap();
            assert!(error.contains("beyond what ops may call"), "{error}");
        }
        let guard = run_as(
            json!({"steps": [{"id": "g", "function": "test.ping", "unless": "touch /tmp/never"}]}),
            Policy::allow_all(),
            false,
            dir.clone(),
            Some(reach),
        );
        assert!(matches!(&guard, Err(ModuleError::Denied(e)) if e.contains("cmd.run")), "{guard:?}");
        std::fs::write(dir.join("stored.toml"), "[[steps]]\nid = \"c\"\nfunction = \"cmd.run\"\nargs = [\"true\"]\n")
            .unwrap();
        let stored = run_as(json!({"name": "stored"}), Policy::allow_all(), false, dir.clone(), Some(reach)).unwrap();
        assert!(stored.value["steps"][0]["error"].as_str().unwrap().contains("beyond what ops may call"));
        // Without a reach (root's jobs) the policy alone decides.
        let root = run_as(json!({"name": "stored"}), Policy::allow_all(), false, dir, None).unwrap();
        assert_eq!(root.value["steps"][0]["result"], "succeeded");
    }
}

#[cfg(test)]
#[cfg(not(feature = "cmd"))]
mod locked_tests {
    use super::*;
    use crate::{Dispatcher, Function, Policy, Registry};
    use std::sync::Arc;

    /// Built without cmd.*, a plan's guard is refused even when the policy allows everything:
    /// no shell runs, and the guard's command is never executed.
    #[tokio::test]
    async fn a_minion_without_cmd_runs_no_guard() {
        let never = std::env::temp_dir().join(format!("halite-locked-guard-{}", std::process::id()));
        let dispatcher = Arc::new(Dispatcher {
            registry: Arc::new(Registry::standard()),
            policy: Policy { allow: vec!["*".into()], ..Policy::default() },
            plans_dir: std::env::temp_dir(),
            deploy: Default::default(),
            paths: Default::default(),
        });
        let cx = Context { dispatcher: Some(dispatcher), ..Context::default() };
        let steps = serde_json::json!([
            {"id": "g", "function": "test.ping", "unless": format!("touch {}", never.display())}
        ]);
        let args = crate::Args { positional: Vec::new(), keyword: [("steps".to_owned(), steps)].into() };
        let result = Run.call(args, &cx).await;
        assert!(matches!(&result, Err(ModuleError::Denied(why)) if why.contains("built without cmd")), "{result:?}");
        assert!(!never.exists(), "the guard's command ran");
    }
}
