//! Running a script file the way the kernel's `#!` handling would, without executing the file
//! itself: the interpreter named on its first line is executed with the optional argument and
//! the script's path, exactly the argv the kernel builds.
//!
//! Why: a file that was just written cannot be executed while any process holds it open for
//! writing (`ETXTBSY`), and every process another job forks holds, until it execs, a copy of
//! every descriptor open at that moment, the one of a script being written included. Under
//! concurrency that made about one script in a hundred fail at random. Reading a file has no
//! such rule, so the interpreter, which reads the script, always starts.

use std::path::Path;

/// The argv that runs the script at `path` whose text is `text`: `None` when it does not start
/// with `#!` and an interpreter.
pub(crate) fn interpreted(path: &Path, text: &str) -> Option<Vec<String>> {
    let line = text.strip_prefix("#!")?.split('\n').next().unwrap_or_default();
    let line = line.trim_start_matches([' ', '\t']);
    let (interpreter, rest) = line.split_once([' ', '\t']).unwrap_or((line, ""));
    if interpreter.is_empty() {
        return None;
    }
    let mut argv = vec![interpreter.to_owned()];
    // The kernel passes the rest of the line as one argument, its surrounding blanks cut.
    let argument = rest.trim_matches([' ', '\t']);
    if !argument.is_empty() {
        argv.push(argument.to_owned());
    }
    argv.push(path.display().to_string());
    Some(argv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_argv_is_the_kernels() {
        let path = Path::new("/w/s");
        let argv = |text: &str| interpreted(path, text);
        assert_eq!(argv("#!/bin/sh\necho"), Some(vec!["/bin/sh".into(), "/w/s".into()]));
        assert_eq!(argv("#! /bin/bash -eu \nx"), Some(vec!["/bin/bash".into(), "-eu".into(), "/w/s".into()]));
        assert_eq!(
            argv("#!/usr/bin/env python3 -u -B\n"),
            Some(vec!["/usr/bin/env".into(), "python3 -u -B".into(), "/w/s".into()]),
            "one argument, as the kernel passes it"
        );
        assert_eq!(argv("#!/bin/sh"), Some(vec!["/bin/sh".into(), "/w/s".into()]));
        assert_eq!(argv("echo hi"), None);
        assert_eq!(argv("#!\n"), None);
        assert_eq!(argv("#!   \n"), None);
    }
}
