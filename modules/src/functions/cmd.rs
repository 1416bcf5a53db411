//! `cmd.run`: run a command, capture its output.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use serde::Deserialize;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::function::{CallFuture, Function};
use crate::{Args, Context, ModuleError, Output};

/// Bytes of stdout and of stderr kept; the rest is read and dropped, and `truncated` is set.
const OUTPUT_CAP: usize = 1024 * 1024;

pub(crate) struct Run;

#[derive(Deserialize)]
#[serde(untagged)]
enum CommandLine {
    Argv(Vec<String>),
    Line(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RunArgs {
    cmd: CommandLine,
    #[serde(default)]
    shell: bool,
    #[serde(default)]
    cwd: Option<PathBuf>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    stdin: Option<String>,
    #[serde(default)]
    timeout: Option<f64>,
}

impl Function for Run {
    fn name(&self) -> &'static str {
        "cmd.run"
    }
    fn doc(&self) -> &'static str {
        "Runs a command and returns {retcode, stdout, stderr, pid}.\n\n\
         Arguments: cmd (positional): an argv list, or a string split like a shell would split \
         words (quotes and backslashes) but never interpreted by a shell; shell=true runs the string \
         with /bin/sh -c instead. cwd: working directory. env: map of extra environment variables. \
         stdin: text fed to the command. timeout: seconds, after which the command's whole process \
         group is killed. stdout and stderr are each capped at 1 MiB (truncated is then true). \
         retcode is the exit status (128+N when killed by signal N)."
    }
    fn call<'a>(&'a self, args: Args, cx: &'a Context) -> CallFuture<'a> {
        Box::pin(async move {
            let args: RunArgs = args.parse(&["cmd"])?;
            let argv = match (&args.cmd, args.shell) {
                (CommandLine::Line(line), true) => vec!["/bin/sh".to_owned(), "-c".to_owned(), line.clone()],
                (CommandLine::Argv(_), true) => {
                    return Err(ModuleError::BadArguments("shell=true needs cmd as a string".into()))
                }
                (CommandLine::Line(line), false) => split_words(line)?,
                (CommandLine::Argv(argv), false) => argv.clone(),
            };
            if argv.is_empty() {
                return Err(ModuleError::BadArguments("cmd is empty".into()));
            }
            if cx.test {
                return Ok(Output::ok(json!({ "would_run": argv })));
            }
            match args.timeout {
                Some(secs) if secs > 0.0 => tokio::time::timeout(Duration::from_secs_f64(secs), run(&argv, &args))
                    .await
                    .map_err(|_| ModuleError::Failed(format!("command timed out after {secs} s and was killed")))?,
                _ => run(&argv, &args).await,
            }
        })
    }
}

/// Kills a process group when dropped, unless disarmed: dropping a running `cmd.run` (timeout,
/// cancel, minion shutdown) must not leave the command or its children behind.
struct GroupGuard(Option<Pid>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0.take() {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

async fn run(argv: &[String], args: &RunArgs) -> Result<Output, ModuleError> {
    let mut command = Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .envs(&args.env)
        .stdin(if args.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so a timeout can kill everything it started.
        .process_group(0)
        .kill_on_drop(true);
    if let Some(cwd) = &args.cwd {
        command.current_dir(cwd);
    }
    let mut child = command.spawn().map_err(|e| ModuleError::Failed(format!("cannot run {:?}: {e}", argv[0])))?;
    let pid = child.id().unwrap_or(0);
    let mut guard = GroupGuard(i32::try_from(pid).ok().map(Pid::from_raw));

    if let (Some(mut stdin), Some(text)) = (child.stdin.take(), args.stdin.clone()) {
        tokio::spawn(async move {
            let _ = stdin.write_all(text.as_bytes()).await;
        });
    }
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let ((stdout, cut_out), (stderr, cut_err), status) =
        tokio::join!(read_capped(stdout), read_capped(stderr), child.wait());
    let status = status.map_err(|e| ModuleError::Failed(format!("waiting for {:?}: {e}", argv[0])))?;
    guard.0 = None;
    use std::os::unix::process::ExitStatusExt;
    let retcode = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    Ok(Output {
        value: json!({
            "retcode": retcode,
            "stdout": String::from_utf8_lossy(&stdout),
            "stderr": String::from_utf8_lossy(&stderr),
            "pid": pid,
        }),
        retcode,
        truncated: cut_out || cut_err,
    })
}

async fn read_capped(stream: Option<impl AsyncRead + Unpin>) -> (Vec<u8>, bool) {
    let Some(mut stream) = stream else { return (Vec::new(), false) };
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    let mut truncated = false;
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return (kept, truncated),
            Ok(n) => {
                let room = OUTPUT_CAP - kept.len();
                kept.extend_from_slice(&buf[..n.min(room)]);
                truncated |= n > room;
            }
        }
    }
}

/// Splits a command line into words as a POSIX shell would (whitespace, single quotes, double
/// quotes, backslash escapes), without expanding anything.
fn split_words(line: &str) -> Result<Vec<String>, ModuleError> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => words.extend(word.take()),
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => w.push(c),
                        None => return Err(ModuleError::BadArguments("unterminated ' in cmd".into())),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => w.push(c),
                            Some(c) => {
                                w.push('\\');
                                w.push(c);
                            }
                            None => return Err(ModuleError::BadArguments("unterminated \" in cmd".into())),
                        },
                        Some(c) => w.push(c),
                        None => return Err(ModuleError::BadArguments("unterminated \" in cmd".into())),
                    }
                }
            }
            '\\' => {
                let c = chars.next().ok_or_else(|| ModuleError::BadArguments("trailing \\ in cmd".into()))?;
                word.get_or_insert_with(String::new).push(c);
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_like_a_shell_without_expansion() {
        assert_eq!(
            split_words(r#"echo 'a b' "c \"d\"" e\ f $HOME"#).unwrap(),
            ["echo", "a b", "c \"d\"", "e f", "$HOME"]
        );
        assert_eq!(split_words("  ").unwrap(), Vec::<String>::new());
        assert_eq!(split_words("''").unwrap(), [""]);
        assert!(split_words("echo 'open").is_err());
    }

    fn call(args: serde_json::Value) -> Result<Output, ModuleError> {
        let serde_json::Value::Object(map) = args else { panic!("object expected") };
        let args = Args::new(vec![], map.into_iter().collect());
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(Run.call(args, &Context::default()))
    }

    #[test]
    fn runs_argv_without_a_shell_and_reports_status() {
        let out = call(json!({"cmd": ["sh", "-c", "echo out; echo err >&2; exit 3"]})).unwrap();
        assert_eq!(out.retcode, 3);
        assert_eq!(out.value["stdout"], "out\n");
        assert_eq!(out.value["stderr"], "err\n");
        let out = call(json!({"cmd": "echo $HOME 'a  b'"})).unwrap();
        assert_eq!(out.value["stdout"], "$HOME a  b\n");
        let out = call(json!({"cmd": "echo $((1+2))", "shell": true})).unwrap();
        assert_eq!(out.value["stdout"], "3\n");
    }

    #[test]
    fn stdin_env_and_cwd_are_passed() {
        let out =
            call(json!({"cmd": ["sh", "-c", "cat; echo $X; pwd"], "stdin": "in\n", "env": {"X": "y"}, "cwd": "/"}))
                .unwrap();
        assert_eq!(out.value["stdout"], "in\ny\n/\n");
    }

    #[test]
    fn a_timeout_kills_the_whole_process_group() {
        let dir = std::env::temp_dir().join(format!("halite-cmd-timeout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let marker = dir.join("survived");
        let script = format!("(sleep 1; touch {}) & sleep 30", marker.display());
        let err = call(json!({"cmd": script, "shell": true, "timeout": 0.3})).unwrap_err();
        assert!(err.to_string().contains("timed out"), "{err}");
        std::thread::sleep(Duration::from_millis(1500));
        assert!(!marker.exists(), "a child of the timed-out command survived");
    }

    #[test]
    fn output_beyond_the_cap_is_truncated() {
        let out = call(json!({"cmd": ["sh", "-c", "head -c 2000000 /dev/zero"]})).unwrap();
        assert!(out.truncated);
        assert_eq!(out.value["stdout"].as_str().unwrap().len(), OUTPUT_CAP);
    }

    #[test]
    fn a_missing_program_is_a_clear_error() {
        let err = call(json!({"cmd": ["/nonexistent/program"]})).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/program"), "{err}");
    }
}
