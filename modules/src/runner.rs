//! The process runner: the one place functions start processes.
//!
//! Every command runs in its own process group, which is killed when the call is dropped
//! (timeout, cancel, minion shutdown), so nothing it started outlives it unless it completed.
//! If the minion itself dies without dropping the call (`kill -9`, the OOM killer), the group
//! leader gets SIGKILL from the kernel (`PR_SET_PDEATHSIG`); processes it started that left its
//! process group on purpose (daemons) are not followed.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::{Group, Pid, User};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::ModuleError;

/// Default cap on stdout and on stderr.
pub const OUTPUT_CAP: usize = 1024 * 1024;

/// A command to run.
#[derive(Debug, Clone, Default)]
pub struct Command {
    /// Program and arguments (never interpreted by a shell).
    pub argv: Vec<String>,
    /// Working directory.
    pub cwd: Option<PathBuf>,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
    /// Bytes fed to stdin (stdin is /dev/null otherwise).
    pub stdin: Option<Vec<u8>>,
    /// Run as this user (name or uid); needs root.
    pub user: Option<String>,
    /// Run with this primary group (name or gid); defaults to the user's.
    pub group: Option<String>,
    /// File mode creation mask, e.g. 0o022.
    pub umask: Option<u32>,
    /// Kill the process group after this long.
    pub timeout: Option<Duration>,
    /// Bytes of stdout and of stderr kept; 0 means [`OUTPUT_CAP`].
    pub output_cap: usize,
}

impl Command {
    /// A command from its argv.
    pub fn new<S: AsRef<str>>(argv: &[S]) -> Self {
        Command { argv: argv.iter().map(|a| a.as_ref().to_owned()).collect(), ..Command::default() }
    }
}

/// What a finished command did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// Exit status, or 128 + signal number.
    pub retcode: i32,
    /// The signal that killed the process, if one did.
    pub signal: Option<i32>,
    /// Standard output (lossy UTF-8).
    pub stdout: String,
    /// Standard error (lossy UTF-8).
    pub stderr: String,
    /// Process id.
    pub pid: u32,
    /// stdout or stderr was cut at the cap.
    pub truncated: bool,
}

/// Starts processes. Stateless today; a field of every [`crate::Context`] so tests and future
/// sandboxes have one seam.
#[derive(Debug, Clone, Default)]
pub struct Runner;

/// Kills a process group when dropped, unless disarmed.
struct GroupGuard(Option<Pid>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0.take() {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

/// A user by name or uid.
pub(crate) fn lookup_user(user: &str) -> Result<User, ModuleError> {
    let found = match user.parse::<u32>() {
        Ok(uid) => User::from_uid(uid.into()),
        Err(_) => User::from_name(user),
    };
    found.ok().flatten().ok_or_else(|| ModuleError::Failed(format!("no such user {user:?}")))
}

/// A gid by group name or number.
pub(crate) fn lookup_group(group: &str) -> Result<u32, ModuleError> {
    if let Ok(gid) = group.parse::<u32>() {
        return Ok(gid);
    }
    Group::from_name(group)
        .ok()
        .flatten()
        .map(|g| g.gid.as_raw())
        .ok_or_else(|| ModuleError::Failed(format!("no such group {group:?}")))
}

impl Runner {
    /// Runs a command to completion (or its timeout, which is an error).
    pub async fn run(&self, command: &Command) -> Result<Finished, ModuleError> {
        let Some(program) = command.argv.first() else {
            return Err(ModuleError::BadArguments("empty command".into()));
        };
        let mut argv = command.argv.clone();
        if let Some(mask) = command.umask {
            // A umask can only be set in the child before exec; a shell does that safely.
            let mut wrapped: Vec<String> = vec![
                "/bin/sh".into(),
                "-c".into(),
                "umask \"$1\" && shift && exec \"$@\"".into(),
                "halite-umask".into(),
            ];
            wrapped.push(format!("{mask:04o}"));
            wrapped.append(&mut argv);
            argv = wrapped;
        }
        let mut process = tokio::process::Command::new(&argv[0]);
        process
            .args(&argv[1..])
            .envs(&command.env)
            .stdin(if command.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        // The group leader dies with the minion, even a minion killed with SIGKILL or by the
        // OOM killer, instead of running on unsupervised with no timeout and no report.
        #[allow(unsafe_code)]
        // SAFETY: the closure runs in the child between fork and exec and only calls prctl(2),
        // which is async-signal-safe; it touches no memory shared with the parent.
        unsafe {
            process.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).map_err(std::io::Error::from)
            });
        }
        if let Some(cwd) = &command.cwd {
            process.current_dir(cwd);
        }
        if let Some(user) = &command.user {
            let user = lookup_user(user)?;
            process.uid(user.uid.as_raw()).gid(user.gid.as_raw());
            process.env("HOME", &user.dir).env("USER", &user.name).env("LOGNAME", &user.name);
        }
        if let Some(group) = &command.group {
            process.gid(lookup_group(group)?);
        }
        let mut child = process.spawn().map_err(|e| ModuleError::Failed(format!("cannot run {program:?}: {e}")))?;
        let pid = child.id().unwrap_or(0);
        let mut guard = GroupGuard(i32::try_from(pid).ok().map(Pid::from_raw));
        if let (Some(mut stdin), Some(bytes)) = (child.stdin.take(), command.stdin.clone()) {
            tokio::spawn(async move {
                let _ = stdin.write_all(&bytes).await;
            });
        }
        let cap = if command.output_cap == 0 { OUTPUT_CAP } else { command.output_cap };
        let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
        let finish = async {
            let ((out, cut_out), (err, cut_err), status) =
                tokio::join!(read_capped(stdout, cap), read_capped(stderr, cap), child.wait());
            (out, err, cut_out || cut_err, status)
        };
        let (out, err, truncated, status) = match command.timeout {
            Some(limit) => tokio::time::timeout(limit, finish).await.map_err(|_| {
                ModuleError::Failed(format!("{program:?} timed out after {} s and was killed", limit.as_secs_f64()))
            })?,
            None => finish.await,
        };
        let status = status.map_err(|e| ModuleError::Failed(format!("waiting for {program:?}: {e}")))?;
        guard.0 = None;
        Ok(Finished {
            retcode: status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0)),
            signal: status.signal(),
            stdout: String::from_utf8_lossy(&out).into_owned(),
            stderr: String::from_utf8_lossy(&err).into_owned(),
            pid,
            truncated,
        })
    }

    /// Runs a command that must succeed; its stdout, or an error quoting its stderr.
    pub async fn check<S: AsRef<str>>(&self, argv: &[S]) -> Result<String, ModuleError> {
        self.check_env(&Command::new(argv)).await
    }

    /// [`Runner::check`] for a fully specified command.
    pub async fn check_env(&self, command: &Command) -> Result<String, ModuleError> {
        let done = self.run(command).await?;
        if done.retcode == 0 {
            Ok(done.stdout)
        } else {
            let detail = if done.stderr.trim().is_empty() { done.stdout.trim() } else { done.stderr.trim() };
            Err(ModuleError::Failed(format!("{} exited {}: {}", command.argv.join(" "), done.retcode, detail)))
        }
    }

    /// Whether a program is on PATH.
    pub fn exists(&self, program: &str) -> bool {
        if program.contains('/') {
            return std::path::Path::new(program).exists();
        }
        std::env::var_os("PATH")
            .map(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
            .unwrap_or(false)
    }
}

async fn read_capped(stream: Option<impl AsRead>, cap: usize) -> (Vec<u8>, bool) {
    let Some(mut stream) = stream else { return (Vec::new(), false) };
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    let mut truncated = false;
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return (kept, truncated),
            Ok(n) => {
                let room = cap - kept.len();
                kept.extend_from_slice(&buf[..n.min(room)]);
                truncated |= n > room;
            }
        }
    }
}

/// Readable child pipes.
trait AsRead: AsyncRead + Unpin {}
impl<T: AsyncRead + Unpin> AsRead for T {}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(command: Command) -> Result<Finished, ModuleError> {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(Runner.run(&command))
    }

    #[test]
    fn umask_and_user_are_applied() {
        let mut c = Command::new(&["sh", "-c", "umask; id -un"]);
        c.umask = Some(0o027);
        c.user = Some("nobody".into());
        let done = run(c).unwrap();
        assert_eq!(done.stdout, "0027\nnobody\n");
    }

    #[test]
    fn a_timeout_kills_the_whole_process_group() {
        let dir = std::env::temp_dir().join(format!("halite-runner-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let marker = dir.join("survived");
        let mut c = Command::new(&["sh", "-c", &format!("(sleep 1; touch {}) & sleep 30", marker.display())]);
        c.timeout = Some(Duration::from_millis(300));
        let err = run(c).unwrap_err();
        assert!(err.to_string().contains("timed out"), "{err}");
        std::thread::sleep(Duration::from_millis(1500));
        assert!(!marker.exists(), "a child of the timed-out command survived");
    }

    #[test]
    fn output_beyond_the_cap_is_truncated() {
        let mut c = Command::new(&["sh", "-c", "head -c 5000 /dev/zero"]);
        c.output_cap = 1000;
        let done = run(c).unwrap();
        assert!(done.truncated);
        assert_eq!(done.stdout.len(), 1000);
    }

    #[test]
    fn unknown_users_and_programs_are_named() {
        let mut c = Command::new(&["true"]);
        c.user = Some("no-such-user-x".into());
        assert!(run(c).unwrap_err().to_string().contains("no-such-user-x"));
        assert!(run(Command::new(&["/nonexistent/prog"])).unwrap_err().to_string().contains("/nonexistent/prog"));
    }
}
