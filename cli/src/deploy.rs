//! `halite config` and `halite deployment`: Heat's software configs and deployments.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use halite_client::Client;
use halite_protocol::message::{
    status, ConfigInput, ConfigOutput, DeploymentGroup, NewDeployment, NewDeploymentGroup, NewSoftwareConfig,
    SoftwareDeployment, Value,
};
use serde_json::{json, Map};

use crate::duration;
use crate::output::{self, paint, Format};
use crate::rollout_args::RolloutArgs;

#[derive(Subcommand)]
pub(crate) enum ConfigCommand {
    /// Store a config (immutable; a change is a new config).
    Create {
        /// Name.
        name: String,
        /// The hook: `script` (built in) or an installed heat-agents hook.
        #[arg(long, default_value = "script")]
        group: String,
        /// The script (or config text) from this file; `-` for standard input.
        #[arg(long, conflicts_with = "definition")]
        file: Option<PathBuf>,
        /// A declared input: `name`, `name=default`, `name:Type` or `name:Type=default`.
        #[arg(long = "input", value_name = "NAME[:TYPE][=DEFAULT]")]
        inputs: Vec<String>,
        /// A declared output.
        #[arg(long = "output", value_name = "NAME")]
        outputs: Vec<String>,
        /// A declared output whose presence fails the deployment (`error_output`).
        #[arg(long = "error-output", value_name = "NAME")]
        error_outputs: Vec<String>,
        /// The whole config as a JSON file (`{group, config, inputs, outputs, options}`), for
        /// structured configs.
        #[arg(long)]
        definition: Option<PathBuf>,
    },
    /// Show a config.
    Show {
        /// Config id.
        id: String,
    },
    /// List configs, newest first.
    List {
        /// How many.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Delete a config.
    Delete {
        /// Config id.
        id: String,
    },
}

#[derive(Subcommand)]
pub(crate) enum DeploymentCommand {
    /// Deploy a config to a server (pushed at once, or when the minion connects).
    Create {
        /// Config id.
        config_id: String,
        /// The server's minion id.
        server: String,
        /// An input value: `name=value` (JSON values are parsed: 3, true, [1,2]; else text).
        #[arg(long = "input", value_name = "NAME=VALUE")]
        inputs: Vec<String>,
        /// CREATE, UPDATE, DELETE, SUSPEND or RESUME.
        #[arg(long, default_value = "CREATE")]
        action: String,
        /// Also send the signal to this URL (Heat's deploy_signal_id).
        #[arg(long)]
        signal_url: Option<String>,
        /// POST or PUT for --signal-url.
        #[arg(long, default_value = "POST")]
        signal_verb: String,
        /// How long the hook may run.
        #[arg(long, value_parser = duration::parse)]
        timeout: Option<std::time::Duration>,
        /// Wait until COMPLETE or FAILED (exit 3 when FAILED).
        #[arg(long)]
        wait: bool,
    },
    /// Show a deployment with its outputs.
    Show {
        /// Deployment id.
        id: String,
    },
    /// List deployments, newest first.
    List {
        /// Only this server's.
        #[arg(long)]
        server: Option<String>,
    },
    /// Delete a deployment.
    Delete {
        /// Deployment id.
        id: String,
    },
    /// Deploy a config to several servers, rolled out (Heat's SoftwareDeploymentGroup).
    Group {
        /// Config id.
        config_id: String,
        /// The servers' minion ids (deployed in id order).
        #[arg(required = true)]
        servers: Vec<String>,
        /// An input value: `name=value` (JSON values are parsed: 3, true, [1,2]; else text).
        #[arg(long = "input", value_name = "NAME=VALUE")]
        inputs: Vec<String>,
        /// CREATE, UPDATE, DELETE, SUSPEND or RESUME.
        #[arg(long, default_value = "CREATE")]
        action: String,
        /// How long each server's hook may run.
        #[arg(long, value_parser = duration::parse)]
        timeout: Option<std::time::Duration>,
        /// How the deployments start over time.
        #[command(flatten)]
        rollout: RolloutArgs,
        /// Wait until the group is COMPLETE or FAILED (exit 3 when FAILED).
        #[arg(long)]
        wait: bool,
    },
    /// Show a deployment group: each server's status, the rollout and why it stopped.
    GroupShow {
        /// Group id.
        id: String,
    },
    /// Wait until a deployment group is COMPLETE (exit 0) or FAILED (exit 3).
    GroupWait {
        /// Group id.
        id: String,
        /// Give up after this long (exit 1).
        #[arg(long, value_parser = duration::parse)]
        timeout: Option<std::time::Duration>,
    },
    /// Wait until a deployment is COMPLETE (exit 0) or FAILED (exit 3).
    Wait {
        /// Deployment id.
        id: String,
        /// Give up after this long (exit 1).
        #[arg(long, value_parser = duration::parse)]
        timeout: Option<std::time::Duration>,
    },
}

/// `name[:Type][=default]`.
fn parse_input(spec: &str) -> anyhow::Result<ConfigInput> {
    let (head, default) = match spec.split_once('=') {
        Some((head, default)) => (head, Some(Value::String(default.to_owned()))),
        None => (spec, None),
    };
    let (name, kind) = head.split_once(':').unwrap_or((head, "String"));
    anyhow::ensure!(!name.is_empty(), "--input {spec:?}: the name is empty");
    Ok(ConfigInput { name: name.into(), kind: kind.into(), default, description: None, replace_on_change: false })
}

fn read_text(path: &PathBuf) -> anyhow::Result<String> {
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)?;
        Ok(text)
    } else {
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }
}

pub(crate) async fn config(client: &Client, command: ConfigCommand, format: Format) -> anyhow::Result<ExitCode> {
    match command {
        ConfigCommand::Create { name, group, file, inputs, outputs, error_outputs, definition } => {
            let new = match definition {
                Some(path) => {
                    let mut value: Value = serde_json::from_str(&read_text(&path)?)
                        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
                    value["name"] = json!(name);
                    serde_json::from_value(value).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
                }
                None => {
                    let output = |name: &String, error_output| ConfigOutput {
                        name: name.clone(),
                        kind: "String".into(),
                        description: None,
                        error_output,
                    };
                    NewSoftwareConfig {
                        name,
                        group,
                        config: Value::String(file.as_ref().map(read_text).transpose()?.unwrap_or_default()),
                        inputs: inputs.iter().map(|s| parse_input(s)).collect::<anyhow::Result<_>>()?,
                        outputs: outputs
                            .iter()
                            .map(|n| output(n, false))
                            .chain(error_outputs.iter().map(|n| output(n, true)))
                            .collect(),
                        options: None,
                    }
                }
            };
            let config = client.create_config(new).await?;
            match format {
                Format::Table => println!("{}", config.id),
                _ => output::print_document(format, &serde_json::to_value(&config)?),
            }
        }
        ConfigCommand::Show { id } => {
            let config = client.show_config(&id).await?;
            match format {
                Format::Table => output::print_document(Format::Yaml, &serde_json::to_value(&config)?),
                _ => output::print_document(format, &serde_json::to_value(&config)?),
            }
        }
        ConfigCommand::List { limit } => {
            let configs = client.list_configs(limit).await?;
            match format {
                Format::Table => {
                    let rows: Vec<Vec<String>> = configs
                        .iter()
                        .map(|c| vec![c.id.clone(), c.name.clone(), c.group.clone(), c.creation_time.clone()])
                        .collect();
                    output::print_table(&["ID", "NAME", "GROUP", "CREATED"], &rows);
                }
                _ => output::print_document(format, &serde_json::to_value(&configs)?),
            }
        }
        ConfigCommand::Delete { id } => {
            client.delete_config(&id).await?;
            if format == Format::Table {
                println!("deleted {id}");
            } else {
                output::print_document(format, &json!({ "deleted": id }));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `name=value`: JSON when it parses as JSON, text otherwise.
fn parse_value(spec: &str) -> anyhow::Result<(String, Value)> {
    let (name, value) = spec.split_once('=').ok_or_else(|| anyhow::anyhow!("--input {spec:?}: expected NAME=VALUE"))?;
    let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_owned()));
    Ok((name.to_owned(), value))
}

fn status_colour(status: &str) -> &'static str {
    match status {
        status::COMPLETE => "32",
        status::FAILED => "31",
        _ => "33",
    }
}

fn print_deployment(deployment: &SoftwareDeployment, format: Format) -> anyhow::Result<()> {
    match format {
        Format::Table => {
            println!(
                "{}  {}  {}",
                deployment.id,
                deployment.server_id,
                paint(&deployment.status, status_colour(&deployment.status))
            );
            println!("  action: {}  config: {}", deployment.action, deployment.config_id);
            println!("  reason: {}", deployment.status_reason);
            if !deployment.output_values.is_empty() {
                println!("  outputs:");
                for line in output::yaml(&Value::Object(deployment.output_values.clone())).lines() {
                    println!("    {line}");
                }
            }
        }
        _ => output::print_document(format, &serde_json::to_value(deployment)?),
    }
    Ok(())
}

fn print_group(group: &DeploymentGroup, format: Format) -> anyhow::Result<()> {
    if format != Format::Table {
        output::print_document(format, &serde_json::to_value(group)?);
        return Ok(());
    }
    println!("{}  {}", group.id, paint(&group.status, status_colour(&group.status)));
    println!("  action: {}  config: {}", group.action, group.config_id);
    println!("  reason: {}", group.status_reason);
    if let Some(reason) = &group.rollout.reason {
        println!("  rollout stopped: {reason}");
    }
    let rows: Vec<Vec<String>> = group
        .members
        .iter()
        .map(|m| {
            vec![
                m.server_id.clone(),
                paint(&m.status, status_colour(&m.status)),
                m.deployment_id.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    output::print_table(&["SERVER", "STATUS", "DEPLOYMENT"], &rows);
    Ok(())
}

fn finished(deployment: &SoftwareDeployment) -> ExitCode {
    if deployment.status == status::COMPLETE {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::EXIT_TARGETS_FAILED)
    }
}

pub(crate) async fn deployment(
    client: &Client,
    command: DeploymentCommand,
    format: Format,
) -> anyhow::Result<ExitCode> {
    match command {
        DeploymentCommand::Create { config_id, server, inputs, action, signal_url, signal_verb, timeout, wait } => {
            let input_values: Map<String, Value> =
                inputs.iter().map(|s| parse_value(s)).collect::<anyhow::Result<_>>()?;
            let spec = NewDeployment {
                config_id,
                server_id: server,
                input_values,
                action: Some(action),
                stack_id: String::new(),
                resource_name: String::new(),
                signal_transport: None,
                signal_verb: signal_url.as_ref().map(|_| signal_verb),
                signal_id: signal_url,
                timeout_secs: timeout.map(|t| t.as_secs().max(1)),
                input_key: None,
                input_values_validation: None,
            };
            let created = client.create_deployment(spec).await?;
            if !wait {
                print_deployment(&created, format)?;
                return Ok(ExitCode::SUCCESS);
            }
            let done = client.wait_for_deployment(&created.id, None).await?;
            print_deployment(&done, format)?;
            Ok(finished(&done))
        }
        DeploymentCommand::Show { id } => {
            print_deployment(&client.show_deployment(&id).await?, format)?;
            Ok(ExitCode::SUCCESS)
        }
        DeploymentCommand::List { server } => {
            let deployments = client.list_deployments(server.as_deref()).await?;
            match format {
                Format::Table => {
                    let rows: Vec<Vec<String>> = deployments
                        .iter()
                        .map(|d| {
                            vec![
                                d.id.clone(),
                                d.server_id.clone(),
                                d.action.clone(),
                                paint(&d.status, status_colour(&d.status)),
                                d.status_reason.chars().take(60).collect(),
                            ]
                        })
                        .collect();
                    output::print_table(&["ID", "SERVER", "ACTION", "STATUS", "REASON"], &rows);
                }
                _ => output::print_document(format, &serde_json::to_value(&deployments)?),
            }
            Ok(ExitCode::SUCCESS)
        }
        DeploymentCommand::Delete { id } => {
            client.delete_deployment(&id).await?;
            if format == Format::Table {
                println!("deleted {id}");
            } else {
                output::print_document(format, &json!({ "deleted": id }));
            }
            Ok(ExitCode::SUCCESS)
        }
        DeploymentCommand::Group { config_id, servers, inputs, action, timeout, rollout, wait } => {
            let input_values: Map<String, Value> =
                inputs.iter().map(|s| parse_value(s)).collect::<anyhow::Result<_>>()?;
            let spec = NewDeploymentGroup {
                config_id,
                servers,
                input_values,
                action: Some(action),
                timeout_secs: timeout.map(|t| t.as_secs().max(1)),
                rollout: rollout.rollout(),
                ..NewDeploymentGroup::default()
            };
            let created = client.create_deployment_group(spec).await?;
            if !wait {
                print_group(&created, format)?;
                return Ok(ExitCode::SUCCESS);
            }
            let done = client.wait_for_deployment_group(&created.id, None).await?;
            print_group(&done, format)?;
            Ok(if done.status == status::COMPLETE {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(crate::EXIT_TARGETS_FAILED)
            })
        }
        DeploymentCommand::GroupShow { id } => {
            print_group(&client.show_deployment_group(&id).await?, format)?;
            Ok(ExitCode::SUCCESS)
        }
        DeploymentCommand::GroupWait { id, timeout } => {
            let done = client.wait_for_deployment_group(&id, timeout).await?;
            print_group(&done, format)?;
            Ok(if done.status == status::COMPLETE {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(crate::EXIT_TARGETS_FAILED)
            })
        }
        DeploymentCommand::Wait { id, timeout } => {
            let done = client.wait_for_deployment(&id, timeout).await?;
            print_deployment(&done, format)?;
            Ok(finished(&done))
        }
    }
}
