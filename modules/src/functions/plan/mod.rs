//! `plan.run` and `plan.apply`: several steps in one job, in order, with requisites, guards
//! and tags; plans given inline, stored on the minion, or kept on the master and chosen for
//! each minion by a top file, as Salt's states and `top.sls` are.

mod document;
mod exec;
mod source;
mod step;
mod top;

#[cfg(test)]
mod tests;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::{Context, ModuleError, Output, Typed};
use step::Placed;

pub(crate) struct Run;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunArgs {
    /// A plan stored on the minion (`<plans_dir>/<name>.toml`, `.yaml`, `.yml` or `.json`).
    #[serde(default)]
    name: Option<String>,
    /// A plan kept on the master: `halite://path` under its file root, ending in `.yaml`, `.yml`,
    /// `.toml` or `.json`.
    #[serde(default)]
    source: Option<String>,
    /// The steps, given inline (fields as above).
    #[serde(default)]
    steps: Option<Vec<step::Step>>,
    /// Run only steps carrying one of these tags.
    #[serde(default)]
    tags: Option<Vec<String>>,
}

impl Typed for Run {
    const NAME: &'static str = "plan.run";
    const DOC: &'static str = r#"Runs steps in order in one job. A step runs when its `require` steps succeeded, one of its `onchanges` steps changed something, its `onlyif` command succeeds and its `unless` command fails; otherwise it is skipped, and so are its dependents when it fails. `tags` selects a subset. The plan is given inline (`steps`), stored on the minion (`name`), or kept on the master (`source=halite://plans/web.yaml`, fetched from its file root; `plan.apply` chooses plans by a top file). Every step, guard and plan goes through the minion's policy and stays within what the job's caller may call (the reach the master signs into the job), whichever way the plan came. The result lists each step's outcome (`result`: succeeded, failed or skipped; `changed`; `comment`, one line; `duration_ms`; the step's `return` or `error`) with counts; the job fails if any step failed.

With `test=true` every step is called with `test=true`: state-changing functions report what they would change (`file.managed` gives a diff) and change nothing. Guards still run, as in Salt.

A plan file holds `steps`, a list of steps with these fields:

| field | type | default | meaning |
|---|---|---|---|
| `id` | text | required | The step's name, unique in the plan: requisites and the output use it. |
| `function` | text | required | The function to call, e.g. `pkg.install` (never a `plan.*` function). |
| `args` | list | `[]` | Positional arguments. |
| `kwargs` | mapping | `{}` | Keyword arguments, as `halite run` takes them after `key=`. |
| `require` | list of ids | `[]` | Earlier steps that must have succeeded; if one did not, this step is skipped. |
| `onchanges` | list of ids | `[]` | Run only if one of these earlier steps changed something (a restart after a config change). |
| `onlyif` | text | none | Shell command that must exit 0 for the step to run (needs `cmd.run` allowed). |
| `unless` | text | none | Shell command that must not exit 0 for the step to run (needs `cmd.run` allowed). |
| `tags` | list of text | `[]` | Labels; `tags=[...]` runs only the steps that carry one of them. |

In YAML (`halite://plans/web.yaml`):

```yaml
steps:
  - id: nginx
    function: pkg.install
    args: [nginx]
  - id: config
    function: file.managed
    kwargs:
      name: /etc/nginx/nginx.conf
      source: halite://web/nginx.conf
      mode: "0644"
    require: [nginx]
  - id: reload
    function: service.reload
    args: [nginx]
    onchanges: [config]
    unless: nginx -t 2>&1 | grep -q failed
    tags: [service]
```

The same in TOML (`web.toml`):

```toml
[[steps]]
id = "nginx"
function = "pkg.install"
args = ["nginx"]

[[steps]]
id = "config"
function = "file.managed"
kwargs = { name = "/etc/nginx/nginx.conf", source = "halite://web/nginx.conf", mode = "0644" }
require = ["nginx"]

[[steps]]
id = "reload"
function = "service.reload"
args = ["nginx"]
onchanges = ["config"]
unless = "nginx -t 2>&1 | grep -q failed"
tags = ["service"]
```

JSON (`.json`) is `{"steps": [...]}` with the same fields. YAML is read as YAML 1.2 with its core schema: `yes`, `no`, `on` and `off` are text, `0644` is the number 644, so quote what must stay text (Salt's YAML 1.1 reader differs here). Anchors and aliases, tags other than `!!str` and several documents in one file are refused. An error in a plan file names the file and the line."#;
    const POSITIONAL: &'static [&'static str] = &["name"];
    type Args = RunArgs;
    async fn run(&self, a: RunArgs, cx: &Context) -> Result<Output, ModuleError> {
        let steps: Vec<Placed> = match (a.steps, a.name, a.source) {
            (Some(steps), None, None) => steps.into_iter().map(|step| Placed { step, file: None, line: 0 }).collect(),
            (None, Some(name), None) => source::stored(cx, &name).await?,
            (None, None, Some(url)) => source::fetched(cx, &url).await?,
            _ => {
                return Err(ModuleError::BadArguments(
                    "give one of name (a plan stored on the minion), source (a halite:// plan) or steps".into(),
                ))
            }
        };
        step::check(&steps)?;
        exec::run(&steps, a.tags.as_deref(), cx).await
    }
}

pub(crate) struct Apply;

/// Plans named on the command line: a list, or one text of comma-separated names
/// (`plan.apply nginx,app`, as Salt's `state.apply`).
#[derive(Deserialize, JsonSchema)]
#[serde(untagged)]
pub(crate) enum PlanNames {
    /// `nginx,app`.
    Text(String),
    /// `["nginx", "app"]`.
    List(Vec<String>),
}

impl PlanNames {
    fn into_list(self) -> Vec<String> {
        match self {
            PlanNames::Text(text) => {
                text.split(',').map(str::trim).filter(|n| !n.is_empty()).map(str::to_owned).collect()
            }
            PlanNames::List(names) => names,
        }
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApplyArgs {
    /// Run these plans instead of the top file's: names (as in a top file) or `halite://` URLs.
    #[serde(default)]
    plans: Option<PlanNames>,
    /// The top file: a `halite://` URL ending in `.yaml`, `.yml`, `.toml` or `.json`
    /// (default `halite://top.yaml`). Plans are named under the `plans/` directory beside it.
    #[serde(default)]
    top: Option<String>,
    /// Run only steps carrying one of these tags.
    #[serde(default)]
    tags: Option<Vec<String>>,
}

/// Where the top file is unless `top` says.
const DEFAULT_TOP: &str = "halite://top.yaml";

impl Typed for Apply {
    const NAME: &'static str = "plan.apply";
    const DOC: &'static str = r#"Runs the plans the master's top file gives this minion, as Salt's `state.apply` runs its highstate (`halite apply TARGET` publishes it). The top file (`top`, default `halite://top.yaml` in the master's `[files] root`) maps targets to lists of plans, in order:

```yaml
'*': [common]
'web*': [nginx, app]
'L@web1,web2': [canary]
'G@role:db': [postgres]
'G@os_family:debian': [apt]
```

The minion fetches it and matches each target against itself, as Salt's minion does: a glob on its id, `L@` ids, or `G@grain:glob` (nested grains as `G@a:b:glob`), by the master's rules for each. Compound targets, `E@`, `S@` and nodegroups are refused with the line they are on (write one target per entry) rather than matched otherwise than the master would. The plans of every matching entry run in the top file's order, each once, as one plan: a step's id becomes `<plan>:<id>`, and a requisite names a step of its own plan by its id or one of an earlier plan as `<plan>:<id>`.

A plan name `nginx` is the first of `nginx.yaml`, `nginx.yml`, `nginx.toml` and `nginx.json` in the `plans/` directory beside the top file (`halite://plans/nginx.yaml` for the default top); `app/db` is in a subdirectory; a `halite://` URL is taken as it is. With `plans` (`plan.apply nginx,app`), those plans run and the top file is not read (Salt's `state.apply nginx,app`). The top file may also be `.toml` (`"web*" = ["nginx"]`) or `.json`.

A minion the top file gives no plan returns `changed: false`, no steps and the comment `no plans for <id> in <top>`: not a failure (Salt reports "No Top file or master_tops data matches found" as one), since applying nothing leaves it as it should be. Every step passes the minion's policy and the caller's reach, exactly as `plan.run`'s do; `test=true`, tags, the step fields and the result are `plan.run`'s."#;
    const POSITIONAL: &'static [&'static str] = &["plans"];
    type Args = ApplyArgs;
    async fn run(&self, a: ApplyArgs, cx: &Context) -> Result<Output, ModuleError> {
        let top = a.top.unwrap_or_else(|| DEFAULT_TOP.to_owned());
        let syntax = source::syntax_of(&top)?;
        crate::master_files::source_path(&top)?;
        let base = match top.rsplit_once('/') {
            Some((dir, _)) if dir != "halite:/" => format!("{dir}/plans"),
            _ => "halite://plans".to_owned(),
        };
        let plans = match a.plans {
            Some(names) => names.into_list(),
            None => {
                let text = crate::master_files::read_text(cx, &top, source::MAX_PLAN)
                    .await?
                    .ok_or_else(|| ModuleError::Failed(format!("{top}: no top file on the master")))?;
                let tree = document::parse(&text, syntax).map_err(|e| step::at(&top, e.line, e.message))?;
                top::plans_for(&top::entries(tree, &top)?, &cx.minion, &cx.grains)
            }
        };
        if plans.is_empty() {
            let value = json!({ "changed": false, "test": cx.test, "plans": [], "top": top, "steps": [],
                                "succeeded": 0, "failed": 0, "skipped": 0, "total": 0, "duration_ms": 0,
                                "comment": format!("no plans for {} in {top}", cx.minion) });
            return Ok(Output::ok(value));
        }
        let mut steps = Vec::new();
        for plan in &plans {
            steps.extend(step::qualify(plan, source::named(cx, &base, plan).await?));
        }
        step::check(&steps)?;
        let mut output = exec::run(&steps, a.tags.as_deref(), cx).await?;
        if let Value::Object(map) = &mut output.value {
            map.insert("plans".into(), json!(plans));
            map.insert("top".into(), json!(top));
        }
        Ok(output)
    }
}
