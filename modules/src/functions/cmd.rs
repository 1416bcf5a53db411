//! `cmd.*`: run commands and scripts.

use std::collections::BTreeMap;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::{Command, Context, ModuleError, Output, Typed};

/// A command as an argv list, or a string.
#[derive(JsonSchema)]
#[schemars(untagged)]
pub(crate) enum CommandLine {
    /// Program and arguments.
    Argv(Vec<String>),
    /// A line, split like a shell would split words (never interpreted) unless shell=true.
    Line(String),
}

/// Read by hand so a wrong value says what is expected (serde's untagged enums only say that
/// nothing matched).
impl<'de> Deserialize<'de> for CommandLine {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Expected;
        impl<'de> serde::de::Visitor<'de> for Expected {
            type Value = CommandLine;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a command line (a string) or a list of words (program, then arguments)")
            }

            fn visit_str<E: serde::de::Error>(self, line: &str) -> Result<CommandLine, E> {
                Ok(CommandLine::Line(line.to_owned()))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<CommandLine, A::Error> {
                let mut argv = Vec::new();
                while let Some(word) = seq.next_element::<String>()? {
                    argv.push(word);
                }
                Ok(CommandLine::Argv(argv))
            }
        }
        deserializer.deserialize_any(Expected)
    }
}

/// Options shared by `cmd.run` and `cmd.script`.
#[derive(Deserialize, JsonSchema, Default)]
pub(crate) struct Options {
    /// Working directory.
    #[serde(default)]
    cwd: Option<PathBuf>,
    /// Extra environment variables.
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Text fed to the command's standard input.
    #[serde(default)]
    stdin: Option<String>,
    /// Run as this user (name or uid).
    #[serde(default)]
    runas: Option<String>,
    /// Run with this primary group (name or gid).
    #[serde(default)]
    group: Option<String>,
    /// File mode creation mask, as an octal string such as "0022".
    #[serde(default)]
    umask: Option<String>,
    /// Seconds, after which the command's whole process group is killed.
    #[serde(default)]
    timeout: Option<f64>,
}

impl Options {
    fn command(&self, argv: Vec<String>) -> Result<Command, ModuleError> {
        let umask = match &self.umask {
            Some(text) => Some(
                u32::from_str_radix(text.trim_start_matches("0o"), 8)
                    .ok()
                    .filter(|m| *m <= 0o777)
                    .ok_or_else(|| ModuleError::BadArguments(format!("umask {text:?} is not an octal mode")))?,
            ),
            None => None,
        };
        let timeout = match self.timeout {
            Some(secs) if secs > 0.0 && secs.is_finite() => Some(Duration::from_secs_f64(secs)),
            Some(_) => return Err(ModuleError::BadArguments("timeout must be a positive number of seconds".into())),
            None => None,
        };
        Ok(Command {
            argv,
            cwd: self.cwd.clone(),
            env: self.env.clone(),
            stdin: self.stdin.as_ref().map(|s| s.clone().into_bytes()),
            user: self.runas.clone(),
            group: self.group.clone(),
            umask,
            timeout,
            output_cap: 0,
        })
    }
}

async fn execute(command: Command, cx: &Context) -> Result<Output, ModuleError> {
    if cx.test {
        return Ok(Output::ok(json!({ "would_run": command.argv })));
    }
    let done = cx.runner.run(&command).await?;
    Ok(Output {
        value: json!({ "retcode": done.retcode, "stdout": done.stdout, "stderr": done.stderr, "pid": done.pid }),
        retcode: done.retcode,
        truncated: done.truncated,
    })
}

pub(crate) struct Run;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunArgs {
    /// The command: an argv list, or a string (split into words without a shell unless
    /// shell=true; a string with shell syntax, such as |, &&, ;, >, $VAR, a glob or a leading
    /// VAR=value, is refused without shell=true rather than run otherwise than a shell would).
    cmd: CommandLine,
    /// Run the string with /bin/sh -c (Salt's python_shell=True says the same).
    #[serde(default)]
    shell: bool,
    #[serde(flatten)]
    options: Options,
}

impl Typed for Run {
    const NAME: &'static str = "cmd.run";
    const DOC: &'static str = "Runs a command and returns {retcode, stdout, stderr, pid}. stdout and stderr are each \
         capped at 1 MiB (truncated is then set). retcode is the exit status, 128+N when killed by signal N; \
         a non-zero retcode makes the job fail.";
    const POSITIONAL: &'static [&'static str] = &["cmd"];
    const SALT_NAMES: &'static [(&'static str, &'static str)] = &[("python_shell", "shell")];
    type Args = RunArgs;
    async fn run(&self, args: RunArgs, cx: &Context) -> Result<Output, ModuleError> {
        let argv = match (args.cmd, args.shell) {
            (CommandLine::Line(line), true) => vec!["/bin/sh".to_owned(), "-c".to_owned(), line],
            (CommandLine::Argv(_), true) => {
                return Err(ModuleError::BadArguments("shell=true needs cmd as a string".into()))
            }
            (CommandLine::Line(line), false) => split_words(&line)?,
            (CommandLine::Argv(argv), false) => argv,
        };
        if argv.is_empty() {
            return Err(ModuleError::BadArguments("cmd is empty".into()));
        }
        execute(args.options.command(argv)?, cx).await
    }
}

pub(crate) struct Script;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ScriptArgs {
    /// The script's text, or `halite://path`: a script the master serves from its file root
    /// (fetched, its SHA-256 checked). Start it with a #! line to choose the interpreter
    /// (default /bin/sh).
    source: String,
    /// For a `halite://` source: the SHA-256 it must have (`sha256:<hex>` or hex); without it,
    /// the digest the master announces is checked.
    #[serde(default)]
    source_hash: Option<String>,
    /// Arguments passed to the script.
    #[serde(default)]
    args: Vec<String>,
    #[serde(flatten)]
    options: Options,
}

impl Typed for Script {
    const NAME: &'static str = "cmd.script";
    const DOC: &'static str =
        "Writes a script from the job (or fetched from the master: source=halite://path, its SHA-256 checked) \
         to a private temporary file (mode 0700 in a 0700 directory), runs it through its #! interpreter \
         (default /bin/sh) with arguments, deletes it, and returns {retcode, stdout, stderr, pid} like cmd.run.";
    const POSITIONAL: &'static [&'static str] = &["source"];
    type Args = ScriptArgs;
    async fn run(&self, args: ScriptArgs, cx: &Context) -> Result<Output, ModuleError> {
        let text = script_text(&args, cx).await?;
        let dir = std::env::temp_dir().join(format!("halite-script-{}-{}", std::process::id(), unique()));
        let fail = |e: std::io::Error| ModuleError::Failed(format!("cannot write the script: {e}"));
        std::fs::DirBuilder::new().mode(0o700).create(&dir).map_err(fail)?;
        let cleanup = RemoveOnDrop(dir.clone());
        let path = dir.join("script");
        {
            use std::io::Write;
            let mut file =
                std::fs::OpenOptions::new().write(true).create_new(true).mode(0o700).open(&path).map_err(fail)?;
            file.write_all(text.as_bytes()).map_err(fail)?;
        }
        if let Some(user) = &args.options.runas {
            // The user must be able to enter the directory and run the file it owns.
            let user = nix::unistd::User::from_name(user).ok().flatten();
            if let Some(user) = user {
                for p in [&dir, &path] {
                    nix::unistd::chown(p.as_path(), Some(user.uid), None)
                        .map_err(|e| ModuleError::Failed(e.to_string()))?;
                }
            }
        }
        // Through its interpreter, never executed itself (no ETXTBSY: see `shebang`).
        let mut argv = crate::shebang::interpreted(&path, &text)
            .unwrap_or_else(|| vec!["/bin/sh".to_owned(), path.display().to_string()]);
        argv.extend(args.args);
        let result = execute(args.options.command(argv)?, cx).await;
        drop(cleanup);
        result
    }
}

/// Most bytes of a script fetched from the master.
const MAX_SCRIPT: u64 = 16 << 20;

/// The script's text: given, or fetched whole from the master and checked against its digest.
async fn script_text(args: &ScriptArgs, cx: &Context) -> Result<String, ModuleError> {
    if !args.source.starts_with("halite://") {
        if args.source_hash.is_some() {
            return Err(ModuleError::BadArguments("source_hash goes with a halite:// source".into()));
        }
        return Ok(args.source.clone());
    }
    let url = &args.source;
    let path = crate::master_files::source_path(url)?;
    let first =
        crate::master_files::first_part_checked(cx, url, args.source_hash.as_deref(), "nothing was run").await?;
    if first.size > MAX_SCRIPT {
        return Err(ModuleError::Failed(format!(
            "{url} is {} bytes: more than a script may be ({MAX_SCRIPT})",
            first.size
        )));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(first.size).unwrap_or(0));
    crate::master_files::copy_to(cx, path, first, &mut bytes).await?;
    String::from_utf8(bytes).map_err(|_| ModuleError::Failed(format!("{url} is not text (UTF-8)")))
}

/// Deletes a directory tree when dropped (also when the call is dropped mid-run).
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Splits a command line into words as a POSIX shell would, refusing shell syntax naming
/// `shell=true` (`halite_protocol::shell_words`, which the master also checks before sending).
pub(crate) fn split_words(line: &str) -> Result<Vec<String>, ModuleError> {
    halite_protocol::shell_words::split(line).map_err(|error| ModuleError::BadArguments(error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Args, Function};

    #[test]
    fn a_command_of_the_wrong_type_says_what_is_expected() {
        let error = call(&Run, json!({"cmd": {"a": 1}})).unwrap_err().to_string();
        assert!(error.contains("a command line (a string) or a list of words"), "{error}");
        assert!(!error.contains("untagged"), "{error}");
    }

    fn call(f: &dyn Function, args: serde_json::Value) -> Result<Output, ModuleError> {
        let serde_json::Value::Object(map) = args else { panic!("object expected") };
        let args = Args::new(vec![], map.into_iter().collect());
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f.call(args, &Context::default()))
    }

    #[test]
    fn runs_argv_without_a_shell_and_reports_status() {
        let out = call(&Run, json!({"cmd": ["sh", "-c", "echo out; echo err >&2; exit 3"]})).unwrap();
        assert_eq!(out.retcode, 3);
        assert_eq!(out.value["stdout"], "out\n");
        assert_eq!(out.value["stderr"], "err\n");
        let out = call(&Run, json!({"cmd": "echo '$HOME' 'a  b'"})).unwrap();
        assert_eq!(out.value["stdout"], "$HOME a  b\n");
        let refused = call(&Run, json!({"cmd": "echo $HOME | wc -c"})).unwrap_err().to_string();
        assert!(refused.contains("add shell=true"), "{refused}");
        let out = call(&Run, json!({"cmd": "echo $((1+2))", "shell": true})).unwrap();
        assert_eq!(out.value["stdout"], "3\n");
    }

    #[test]
    fn options_are_passed_and_checked() {
        let out = call(
            &Run,
            json!({"cmd": ["sh", "-c", "cat; echo $X; pwd; umask"], "stdin": "in\n", "env": {"X": "y"}, "cwd": "/", "umask": "0077"}),
        )
        .unwrap();
        assert_eq!(out.value["stdout"], "in\ny\n/\n0077\n");
        assert!(call(&Run, json!({"cmd": "true", "umask": "999"})).unwrap_err().to_string().contains("umask"));
        assert!(call(&Run, json!({"cmd": "true", "timeout": -1})).is_err());
        assert!(call(&Run, json!({"cmd": "true", "shel": true})).unwrap_err().to_string().contains("shel"));
    }

    #[test]
    fn scripts_run_from_a_private_file_that_is_removed() {
        let out = call(&Script, json!({"source": "#!/bin/sh\necho \"$1-$2\"; ls -ld \"$(dirname \"$0\")\" | cut -c1-10", "args": ["a", "b"]})).unwrap();
        assert_eq!(out.retcode, 0, "{:?}", out.value);
        assert_eq!(out.value["stdout"], "a-b\ndrwx------\n");
        let out = call(&Script, json!({"source": "echo \"$0\""})).unwrap();
        let path = out.value["stdout"].as_str().unwrap().trim().to_owned();
        assert!(!std::path::Path::new(&path).exists(), "script file left behind");
        let out = call(&Script, json!({"source": "id -un", "runas": "nobody"})).unwrap();
        assert_eq!(out.value["stdout"], "nobody\n");
    }
}
