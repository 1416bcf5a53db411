//! Plans end to end within the crate: requisites, guards, tags, test mode, the policy and the
//! caller's reach, stored plans, and what a plan file's errors say.

use super::document::{self, Marked, Node, Syntax, MAX_DEPTH};
use super::*;
use serde_json::json;

/// Every field of a step is in the documented table (docs/modules.md comes from the doc).
#[test]
fn the_documentation_describes_every_step_field() {
    let schema = serde_json::to_value(schemars::schema_for!(step::Step)).unwrap();
    let fields: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
    assert_eq!(fields.len(), 9);
    for field in fields {
        assert!(Run::DOC.contains(&format!("| `{field}` |")), "plan.run's doc lacks the step field {field}");
    }
}

fn yaml(text: &str) -> Result<Marked, document::SyntaxError> {
    document::parse(text, Syntax::Yaml)
}

#[test]
fn yaml_reads_the_core_schema_and_keeps_every_line() {
    let tree =
        yaml("a: yes\nb: 0644\nc: '0644'\nd: ~\ne: True\nf: 1.5\ng: 0x1F\nh: !!str 12\ni: .inf\nj: |\n  x\n").unwrap();
    assert_eq!(
        tree.clone().into_value(),
        json!({"a": "yes", "b": 644, "c": "0644", "d": null, "e": true, "f": 1.5, "g": 31, "h": "12", "i": ".inf",
               "j": "x\n"})
    );
    let Node::Map(entries) = tree.node else { panic!() };
    let lines: Vec<usize> = entries.iter().map(|(_, line, _)| *line).collect();
    assert_eq!(lines, (1..=10).collect::<Vec<_>>());
    // JSON is YAML 1.2, tabs and all.
    let json = document::parse("{\n\t\"steps\": [\n\t\t{\"id\": \"a\", \"n\": 1e3}\n\t]\n}\n", Syntax::Json).unwrap();
    assert_eq!(json.clone().into_value(), json!({"steps": [{"id": "a", "n": 1000.0}]}));
    let Node::Map(entries) = json.node else { panic!() };
    let Node::List(steps) = &entries[0].2.node else { panic!() };
    assert_eq!(steps[0].line, 3);
}

#[test]
fn toml_keeps_every_line_and_the_order_of_keys() {
    let tree = document::parse("z = 1\na = \"x\"\n\n[[steps]]\nid = \"s\"\n", Syntax::Toml).unwrap();
    let Node::Map(entries) = &tree.node else { panic!() };
    let keys: Vec<(&str, usize)> = entries.iter().map(|(k, line, _)| (k.as_str(), *line)).collect();
    assert_eq!(keys, [("z", 1), ("a", 2), ("steps", 4)]);
    // A date is kept as its text.
    let date = document::parse("d = 1979-05-27\n", Syntax::Toml).map(Marked::into_value);
    assert_eq!(date, Ok(json!({"d": "1979-05-27"})));
    let error = document::parse("a = 1\nb = [\n", Syntax::Toml).unwrap_err();
    assert_eq!(error.line, 3, "{error:?}");
}

/// A plan file cannot make the minion build a huge or deep tree: aliases are refused (a few
/// lines of them would otherwise expand to billions of values), and so is nesting past the
/// bound, before the tree exists.
#[test]
fn hostile_yaml_is_refused_before_it_grows() {
    let laughs = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n";
    let error = yaml(laughs).unwrap_err();
    assert_eq!(error.line, 2);
    assert!(error.message.contains("aliases"), "{error:?}");
    let deeper = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
    let error = yaml(&deeper).unwrap_err();
    assert!(error.message.contains(&format!("more than {MAX_DEPTH} deep")), "{error:?}");
    assert!(yaml(&("[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH))).is_ok());
    // Far deeper, the parser's own bound stops it first.
    let deep = "[".repeat(100_000) + &"]".repeat(100_000);
    assert!(yaml(&deep).is_err());
    let error = yaml("a: 1\na: 2\n").unwrap_err();
    assert_eq!((error.line, error.message.as_str()), (2, "key \"a\" given twice"));
    let wide = format!("[{}]", "1,".repeat(document::MAX_VALUES + 1));
    assert!(yaml(&wide).unwrap_err().message.contains("values"));
    assert!(yaml("--- a\n--- b\n").unwrap_err().message.contains("second document"));
    assert!(yaml("a: !!binary aGk=\n").unwrap_err().message.contains("only !!str"));
}

#[test]
fn a_plan_files_errors_name_the_file_and_the_line() {
    let steps = |text: &str, syntax| source::steps(text, syntax, "halite://plans/web.yaml").map(|s| s.len());
    assert_eq!(steps("steps:\n  - id: a\n    function: test.ping\n", Syntax::Yaml).unwrap(), 1);
    for (text, syntax, line, why) in [
        (
            "steps:\n  - id: a\n    function: test.ping\n  - id: b\n    funtion: test.ping\n",
            Syntax::Yaml,
            5,
            "unknown step field `funtion`",
        ),
        ("steps:\n  - id: a\n    function: test.ping\n    require: b\n", Syntax::Yaml, 2, "invalid type"),
        ("steps:\n  - id: a\n    function: [x\n", Syntax::Yaml, 4, ""),
        ("step:\n  - id: a\n", Syntax::Yaml, 1, "unknown key `step`"),
        ("steps: {}\n", Syntax::Yaml, 1, "`steps` is a list of steps, not a mapping"),
        ("steps:\n  - test.ping\n", Syntax::Yaml, 2, "a step is a mapping, not text"),
        (
            "[[steps]]\nid = \"a\"\nfunction = \"test.ping\"\n\n[[steps]]\nid = \"b\"\nfuntion = \"x\"\n",
            Syntax::Toml,
            7,
            "unknown step field",
        ),
        ("[[steps]]\nid = \"a\"\nfunction = \n", Syntax::Toml, 3, ""),
        ("{\"steps\": [\n {\"id\": \"a\",\n  \"function\": 1}]}\n", Syntax::Json, 2, "invalid type: integer"),
    ] {
        let error = steps(text, syntax).unwrap_err().to_string();
        assert!(error.starts_with(&format!("halite://plans/web.yaml line {line}: ")), "{text:?}: {error}");
        assert!(error.contains(why), "{text:?}: {error}");
    }
    // Requisites are checked with the line of the step that names them.
    let placed = source::steps(
        "steps:\n  - id: a\n    function: test.ping\n  - id: b\n    function: test.ping\n    require: [c]\n",
        Syntax::Yaml,
        "halite://plans/web.yaml",
    )
    .unwrap();
    let error = step::check(&placed).unwrap_err().to_string();
    assert_eq!(error, "halite://plans/web.yaml line 4: step b: c is not an earlier step");
}

/// Plans run together by `plan.apply`: ids are qualified by their plan, requisites follow
/// them, and a later plan may require an earlier plan's step by its qualified id.
#[test]
fn plans_run_together_keep_their_requisites() {
    let parse = |text: &str| source::steps(text, Syntax::Yaml, "p").unwrap();
    let common = step::qualify(
        "common",
        parse("steps:\n  - {id: a, function: test.ping}\n  - {id: b, function: test.ping, require: [a]}\n"),
    );
    let web = step::qualify(
        "web",
        parse("steps:\n  - {id: a, function: test.ping, require: [\"common:b\"], onchanges: [common:a]}\n"),
    );
    let all: Vec<Placed> = common.into_iter().chain(web).collect();
    step::check(&all).unwrap();
    let ids: Vec<(&str, &[String])> = all.iter().map(|p| (p.step.id.as_str(), p.step.require.as_slice())).collect();
    assert_eq!(ids[1], ("common:b", &["common:a".to_owned()][..]));
    assert_eq!(ids[2], ("web:a", &["common:b".to_owned()][..]));
    assert_eq!(all[2].step.onchanges, ["common:a"]);
    let backwards = step::qualify("web", parse("steps:\n  - {id: a, function: test.ping, require: [\"later:x\"]}\n"));
    assert!(step::check(&backwards).unwrap_err().to_string().contains("later:x is not an earlier step"));
}

#[test]
fn plan_names_are_checked_before_anything_is_fetched() {
    let cx = Context::default();
    let run = |name: &str| {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(source::named(
            &cx,
            "halite://plans",
            name,
        ))
    };
    for bad in ["../secret", "a//b", "/etc/passwd", "a b", ""] {
        let error = run(bad).unwrap_err().to_string();
        assert!(error.contains("is not a plan name"), "{bad}: {error}");
    }
    // A good name reaches the fetch, which needs a master.
    assert!(run("app/db").unwrap_err().to_string().contains("need a master"));
    assert!(
        run("web.txt").unwrap_err().to_string().contains("need a master"),
        "an extension that is not a plan's is part of the name"
    );
    assert!(source::syntax_of("halite://plans/web.txt")
        .unwrap_err()
        .to_string()
        .contains(".yaml, .yml, .toml or .json"));
}

#[test]
fn plan_names_on_a_command_line_are_a_list_or_commas() {
    let text: PlanNames = serde_json::from_value(json!("nginx, app,")).unwrap();
    assert_eq!(text.into_list(), ["nginx", "app"]);
    let list: PlanNames = serde_json::from_value(json!(["a/b"])).unwrap();
    assert_eq!(list.into_list(), ["a/b"]);
}

// Plans of shell commands and guards: the full build (the locked-down one refuses guards,
// tested below).
#[cfg(feature = "full")]
mod full {
    use super::*;
    use crate::{Args, Dispatcher, Function, Policy, Registry};
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

    /// With test=true each step reports what it would do (a file's diff), nothing changes, and
    /// every step says how it ended in one line.
    #[test]
    fn test_mode_shows_each_steps_diff_and_changes_nothing() {
        let dir = std::env::temp_dir().join(format!("halite-plan-diff-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("conf");
        std::fs::write(&file, "old\n").unwrap();
        let steps = json!([
            {"id": "conf", "function": "file.managed", "kwargs": {"name": file.display().to_string(), "contents": "new\n"}},
            {"id": "run", "function": "cmd.run", "args": ["touch /tmp/never"], "onchanges": ["conf"]}
        ]);
        let out = run(json!({"steps": steps}), Policy::allow_all(), true).unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "old\n", "test=true changed the file");
        assert_eq!((out.value["test"].clone(), out.value["total"].clone()), (json!(true), json!(2)));
        let conf = &out.value["steps"][0];
        assert_eq!(conf["changed"], true);
        assert!(conf["return"]["details"]["diff"].as_str().unwrap().contains("-old\n+new\n"), "{conf}");
        assert!(conf["comment"].as_str().unwrap().contains("conf"), "{conf}");
        assert!(conf["duration_ms"].is_u64());
        assert_eq!(out.value["steps"][1]["comment"], "would run touch /tmp/never");
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
        let err =
            run_in(json!({"name": "../etc/passwd"}), Policy::default(), false, dir.clone()).unwrap_err().to_string();
        assert!(err.contains("not a plan name"), "{err}");
        // YAML too, when there is no TOML of that name.
        std::fs::write(dir.join("yam.yaml"), "steps:\n  - id: y\n    function: test.echo\n    args: [yes]\n").unwrap();
        let out = run_in(json!({"name": "yam"}), Policy::default(), false, dir.clone()).unwrap();
        assert_eq!(out.value["steps"][0]["return"], "yes");
        let err = run_in(json!({"name": "none"}), Policy::default(), false, dir).unwrap_err().to_string();
        assert!(err.contains("no plan none in"), "{err}");
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

#[cfg(not(feature = "cmd"))]
mod locked {
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
