//! Command lines split into words as a POSIX shell would (whitespace, single quotes, double
//! quotes, backslash escapes), without expanding anything: how the minion's `cmd.run` reads a
//! string without `shell=true`, and what the master checks before it sends one, so a line every
//! minion would refuse is refused once.

/// Why a line is not words without a shell.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShellWordsError {
    /// A quote opened and not closed.
    #[error("unterminated {0} in cmd")]
    Unterminated(&'static str),
    /// A backslash with nothing after it.
    #[error("trailing \\ in cmd")]
    TrailingBackslash,
    /// Shell syntax (named) that only a shell runs as meant.
    #[error(
        "cmd has shell syntax ({0}) that runs only in a shell: add shell=true to run it with /bin/sh -c, \
         or quote it ('...') to pass it as it is"
    )]
    ShellSyntax(String),
}

/// Splits a command line into words as a POSIX shell would (whitespace, single quotes, double
/// quotes, backslash escapes), without expanding anything. A line that a shell would read
/// otherwise (a pipe, a redirection, `&&`, `;`, a variable, a glob, a leading `VAR=value`) is
/// refused, naming `shell=true`: run without a shell, it would silently do something else.
pub fn split(line: &str) -> Result<Vec<String>, ShellWordsError> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    // The first piece of shell syntax met outside single quotes (or escaped), if any.
    let mut syntax: Option<String> = None;
    let mut note = |what: String| {
        if syntax.is_none() {
            syntax = Some(what);
        }
    };
    let mut chars = line.chars();
    let unterminated = ShellWordsError::Unterminated;
    while let Some(c) = chars.next() {
        match c {
            '\n' | '\r' => {
                // A shell runs each line as a command of its own; as words, the lines would run
                // as one command's arguments.
                note("a line break".into());
                words.extend(word.take());
            }
            c if c.is_whitespace() => words.extend(word.take()),
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => w.push(c),
                        None => return Err(unterminated("'")),
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
                            None => return Err(unterminated("\"")),
                        },
                        Some(c @ ('$' | '`')) => {
                            note(format!("`{c}` inside double quotes"));
                            w.push(c);
                        }
                        Some(c) => w.push(c),
                        None => return Err(unterminated("\"")),
                    }
                }
            }
            '\\' => {
                let c = chars.next().ok_or(ShellWordsError::TrailingBackslash)?;
                word.get_or_insert_with(String::new).push(c);
            }
            '|' | '&' | ';' | '<' | '>' | '(' | ')' | '$' | '`' | '*' | '?' | '[' => {
                note(format!("`{c}`"));
                word.get_or_insert_with(String::new).push(c);
            }
            '#' | '~' if word.is_none() => {
                note(format!("`{c}` at the start of a word"));
                word.get_or_insert_with(String::new).push(c);
            }
            '=' if words.is_empty() && word.as_deref().is_some_and(crate::message::is_identifier) => {
                note("a leading VAR=value".into());
                word.get_or_insert_with(String::new).push(c);
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    match syntax {
        Some(what) => Err(ShellWordsError::ShellSyntax(what)),
        None => Ok(words),
    }
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn words_split_like_a_shell_without_expansion() {
        assert_eq!(
            split(r#"echo 'a b' "c \"d\"" e\ f '$HOME' \$PATH a=b"#).unwrap(),
            ["echo", "a b", "c \"d\"", "e f", "$HOME", "$PATH", "a=b"]
        );
        assert_eq!(split("  ").unwrap(), Vec::<String>::new());
        assert_eq!(split("''").unwrap(), [""]);
        assert!(split("echo 'open").is_err());
    }

    #[test]
    fn shell_syntax_without_a_shell_is_refused_naming_shell_true() {
        for line in [
            "echo $HOME | wc -c",
            "rm -rf /tmp/x && touch /tmp/y",
            "echo hi > /tmp/out",
            "ls /tmp/*",
            "LANG=C date",
            "echo \"$HOME\"",
            "echo `id`",
            "true; false",
            "cat ~/.profile",
            "touch /tmp/a\nrm -f /tmp/b",
        ] {
            let error = split(line).unwrap_err().to_string();
            assert!(error.contains("add shell=true"), "{line}: {error}");
        }
        let error = split("echo a | wc").unwrap_err().to_string();
        assert!(error.contains("(`|`)"), "names what it found: {error}");
    }
}
