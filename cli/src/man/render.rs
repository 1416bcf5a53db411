//! Man pages from a program's clap definition: one page for the program and one for each of its
//! commands, recursively (`halite-key-token-create.1`), each with clap_mangen's NAME, SYNOPSIS,
//! DESCRIPTION, OPTIONS and SUBCOMMANDS, then EXIT STATUS, ENVIRONMENT, FILES, EXAMPLES and SEE
//! ALSO from the program's [`Manual`].
//!
//! One file for the three programs: `halite` (`cli/src/man.rs`), `halite-master` and
//! `halite-minion` (their `src/bin/*/man.rs`) include it by path with their own [`Manual`]. It
//! needs nothing but clap and clap_mangen, which each of them has.
//!
//! ENVIRONMENT lists every `env = ...` of the page's command and the commands under it, read
//! from the clap definition itself, then the variables the program reads otherwise
//! ([`Manual::environment`]). SEE ALSO names the parent page, the pages of the subcommands and
//! [`Manual::see_also`]; `check` (tests) holds every page to the sections and every example to
//! the program's arguments.

use std::io;
use std::path::Path;

use clap::Command;
use clap_mangen::roff::{bold, italic, roman, Inline, Roff};
use clap_mangen::Man;

/// Which commands an entry is about, each named by its words after the program's name
/// (`"key token create"`); an entry about a command is about the commands under it too.
#[derive(Clone, Copy)]
pub(crate) enum Scope {
    /// Every command.
    All,
    /// These commands. On the page of a command above them the entry is shown with their
    /// names.
    Only(&'static [&'static str]),
    /// Every command but these.
    Except(&'static [&'static str]),
}

/// An item of EXIT STATUS (`name` the status), ENVIRONMENT (a variable) or FILES (a path).
/// Consecutive entries with the same name are shown under it together.
// The daemons' shared words (the CLI's pages say these in their own, so it leaves them unused).
/// Exit status 2, as both daemons say it (clap's usage errors).
#[allow(dead_code)]
pub(crate) const USAGE_ERROR: &str =
    "Invalid command-line usage: an unknown command or option, a missing or malformed argument.";
/// `RUST_LOG`, as the daemons read it.
#[allow(dead_code)]
pub(crate) const RUST_LOG: &str =
    "A log filter (a level, or target=level pairs) that wins over the config's log and --log-level.";
/// `NO_COLOR`, as the daemons read it.
#[allow(dead_code)]
pub(crate) const NO_COLOR: &str = "When set, log lines are never coloured (text logs are coloured only on a terminal).";

pub(crate) struct Entry {
    pub(crate) name: &'static str,
    pub(crate) scope: Scope,
    pub(crate) text: &'static str,
}

/// A command line on the page of `command` (its words after the program's name; `""` for the
/// program's own page), after a sentence saying what it does. The line is what a shell is
/// given (`\` ends a line continued on the next): `check` parses it with the program's
/// arguments and holds it to `command` (or a command under it).
pub(crate) struct Example {
    pub(crate) command: &'static str,
    pub(crate) text: &'static str,
    pub(crate) line: &'static str,
}

/// What a program's pages say beyond its clap definition.
pub(crate) struct Manual {
    /// `"1"` or `"8"`.
    pub(crate) section: &'static str,
    pub(crate) exit_status: &'static [Entry],
    /// Variables the program reads other than through clap's `env`.
    pub(crate) environment: &'static [Entry],
    pub(crate) files: &'static [Entry],
    /// A command's page shows its own examples, else those of the commands under it.
    pub(crate) examples: &'static [Example],
    /// Pages named under SEE ALSO besides the parent's and the subcommands': `(command,
    /// ["halite-jobs-show(1)", ...])`.
    pub(crate) see_also: &'static [(&'static str, &'static [&'static str])],
}

/// One rendered page.
pub(crate) struct Page {
    /// `halite-key-accept`.
    pub(crate) name: String,
    /// The command's words after the program's name (empty for the program).
    pub(crate) words: Vec<String>,
    pub(crate) roff: String,
    /// The pages SEE ALSO names, as `name(section)`.
    pub(crate) see_also: Vec<String>,
}

impl Page {
    /// The page's file name: `halite-key-accept.1`.
    pub(crate) fn file_name(&self, section: &str) -> String {
        format!("{}.{section}", self.name)
    }
}

impl Manual {
    /// The program's page and one for each command under it, the program's first. Hidden
    /// commands (`man`) get none, and there is no `help` command to list.
    pub(crate) fn pages(&self, program: Command) -> Vec<Page> {
        let mut program = program.disable_help_subcommand(true);
        program.build();
        let source = format!("{} {}", program.get_name(), program.get_version().unwrap_or_default());
        let mut pages = Vec::new();
        self.walk(&program, &program, &source, Vec::new(), None, &mut pages);
        pages
    }

    /// The program's own page alone (what a bare `man` subcommand prints).
    pub(crate) fn top_page(&self, program: Command) -> String {
        self.pages(program).swap_remove(0).roff
    }

    /// What each program's `man` does: its own page on standard output (a reader that goes
    /// away, as `| head` does, ends it quietly), or with `dir` every page written there.
    pub(crate) fn print_or_write(&self, program: Command, dir: Option<&Path>) -> io::Result<()> {
        use std::io::Write as _;
        let Some(dir) = dir else {
            let mut out = io::stdout().lock();
            return match out.write_all(self.top_page(program).as_bytes()).and_then(|()| out.flush()) {
                Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Ok(()),
                other => other,
            };
        };
        self.write_to(program, dir)
    }

    /// Writes every page into `dir` (created if missing). Each page is a new file renamed into
    /// place, so a link planted under a page's name (in a directory others may write) is
    /// replaced, never followed to overwrite what it points at.
    pub(crate) fn write_to(&self, program: Command, dir: &Path) -> io::Result<()> {
        use std::io::Write as _;
        std::fs::create_dir_all(dir)?;
        for page in self.pages(program) {
            let name = page.file_name(self.section);
            let fresh = dir.join(format!(".{name}.{}.new", std::process::id()));
            let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(&fresh)?;
            file.write_all(page.roff.as_bytes())?;
            drop(file);
            std::fs::rename(&fresh, dir.join(&name))?;
        }
        Ok(())
    }

    fn walk(
        &self,
        program: &Command,
        command: &Command,
        source: &str,
        words: Vec<String>,
        parent: Option<&str>,
        pages: &mut Vec<Page>,
    ) {
        let name = command.get_display_name().unwrap_or_else(|| command.get_name()).to_owned();
        let subcommands: Vec<&Command> = command.get_subcommands().filter(|c| !c.is_hide_set()).collect();
        let mut see_also: Vec<String> = parent.map(|p| format!("{p}({})", self.section)).into_iter().collect();
        for sub in &subcommands {
            see_also.push(format!("{name}-{}({})", sub.get_name(), self.section));
        }
        for (_, more) in self.see_also.iter().filter(|(command, _)| *command == words.join(" ")) {
            see_also.extend(more.iter().map(|page| (*page).to_owned()));
        }
        let mut page = Page { name: name.clone(), words: words.clone(), roff: String::new(), see_also };
        page.roff = self.render(program, command, source, &page);
        pages.push(page);
        for sub in subcommands {
            let mut below = words.clone();
            below.push(sub.get_name().to_owned());
            self.walk(program, sub, source, below, Some(&name), pages);
        }
    }

    fn render(&self, program: &Command, command: &Command, source: &str, page: &Page) -> String {
        let path = &page.words.join(" ");
        let man = Man::new(command.clone()).section(self.section).source(source);
        // The apostrophe string that clap_mangen's text uses, defined once at the top.
        let mut out = Roff::new().render();
        out += &clap_part(|w| man.render_title(w));
        out += &clap_part(|w| man.render_name_section(w));
        out += &clap_part(|w| man.render_synopsis_section(w));
        out += &clap_part(|w| man.render_description_section(w));
        if command.get_arguments().any(|a| !a.is_hide_set()) {
            out += &clap_part(|w| man.render_options_section(w));
        }
        if command.get_subcommands().any(|c| !c.is_hide_set()) {
            out += &clap_part(|w| man.render_subcommands_section(w));
        }
        let mut roff = Roff::new();
        self.exit_status_section(&mut roff, program.get_name(), path);
        self.environment_section(&mut roff, program.get_name(), command, path);
        self.files_section(&mut roff, program.get_name(), path);
        out += strip_preamble(&roff.render());
        if command.get_version().is_some() {
            out += &clap_part(|w| man.render_version_section(w));
        }
        let mut roff = Roff::new();
        self.examples_section(&mut roff, path);
        roff.control("SH", ["SEE ALSO"]);
        let mut names = Vec::new();
        for named in &page.see_also {
            let (name, section) = named.trim_end_matches(')').split_once('(').unwrap_or((named, ""));
            if !names.is_empty() {
                names.push(roman(", "));
            }
            names.push(bold(name));
            names.push(roman(format!("({section})")));
        }
        roff.text(names);
        out += strip_preamble(&roff.render());
        out
    }

    fn exit_status_section(&self, roff: &mut Roff, program: &str, path: &str) {
        roff.control("SH", ["EXIT STATUS"]);
        entries(roff, self.exit_status, program, path, bold);
    }

    fn environment_section(&self, roff: &mut Roff, program: &str, command: &Command, path: &str) {
        roff.control("SH", ["ENVIRONMENT"]);
        let mut shown = Vec::new();
        for (variable, option, help) in environment(command) {
            if shown.contains(&variable) {
                continue;
            }
            roff.control("TP", []);
            roff.text([bold(variable.clone())]);
            roff.text([bold(option), roman(format!(" when it is not given: {}.", sentence_case(&help)))]);
            shown.push(variable);
        }
        let rest: Vec<&Entry> = self.environment.iter().filter(|e| !shown.iter().any(|v| v == e.name)).collect();
        if shown.is_empty() && !rest.iter().any(|e| applies(e.scope, path).is_some()) {
            roff.text([roman("None: no environment variable changes what this command does.")]);
        }
        entries(roff, rest, program, path, bold);
    }

    fn files_section(&self, roff: &mut Roff, program: &str, path: &str) {
        roff.control("SH", ["FILES"]);
        entries(roff, self.files, program, path, italic);
    }

    fn examples_section(&self, roff: &mut Roff, path: &str) {
        roff.control("SH", ["EXAMPLES"]);
        for example in self.examples_of(path) {
            roff.control("PP", []);
            roff.text([roman(example.text)]);
            roff.control("PP", []);
            roff.control("RS", ["4"]);
            roff.control("EX", []);
            roff.text([roman(example.line)]);
            roff.control("EE", []);
            roff.control("RE", []);
        }
    }

    /// The command's own examples, else those of the commands under it.
    fn examples_of(&self, path: &str) -> Vec<&Example> {
        let own: Vec<&Example> = self.examples.iter().filter(|e| e.command == path).collect();
        if !own.is_empty() {
            return own;
        }
        self.examples.iter().filter(|e| under(e.command, path)).collect()
    }
}

/// Whether `command` is `page`'s command or one under it.
fn within(page: &str, command: &str) -> bool {
    page == command || page.starts_with(&format!("{command} "))
}

/// Whether `command` is under `page`'s command (every command is under the program's page).
fn under(command: &str, page: &str) -> bool {
    page.is_empty() || command.starts_with(&format!("{page} "))
}

/// Whether an entry of `scope` belongs on `page`, and the commands to name with it (those it
/// is about, when the page is above them).
fn applies(scope: Scope, page: &str) -> Option<Vec<&'static str>> {
    match scope {
        Scope::All => Some(Vec::new()),
        Scope::Except(commands) => (!commands.iter().any(|c| within(page, c))).then(Vec::new),
        Scope::Only(commands) if commands.iter().any(|c| within(page, c)) => Some(Vec::new()),
        Scope::Only(commands) => {
            let below: Vec<&'static str> = commands.iter().copied().filter(|c| under(c, page)).collect();
            (!below.is_empty()).then_some(below)
        }
    }
}

/// Tagged paragraphs: each name once, with the texts of its consecutive entries that apply.
fn entries<'a>(
    roff: &mut Roff,
    list: impl IntoIterator<Item = &'a Entry>,
    program: &str,
    page: &str,
    style: fn(String) -> Inline,
) {
    let mut last = None;
    for entry in list {
        let Some(named) = applies(entry.scope, page) else { continue };
        if last == Some(entry.name) {
            // Another paragraph under the same tag.
            roff.control("IP", []);
        } else {
            roff.control("TP", []);
            roff.text([style(entry.name.to_owned())]);
        }
        let mut line = Vec::new();
        for (i, command) in named.iter().enumerate() {
            line.push(roman(if i == 0 { "" } else { ", " }));
            line.push(bold(format!("{program} {command}")));
        }
        if named.is_empty() {
            line.push(roman(entry.text));
        } else {
            line.push(roman(": "));
            line.push(roman(sentence_case(entry.text)));
        }
        roff.text(line);
        last = Some(entry.name);
    }
}

/// Every variable clap reads for `command` and the commands under it: (variable, the option
/// it stands for, the option's help).
fn environment(command: &Command) -> Vec<(String, String, String)> {
    let mut found = Vec::new();
    for arg in command.get_arguments() {
        if let Some(variable) = arg.get_env() {
            let option = match (arg.get_long(), arg.get_short()) {
                (Some(long), _) => format!("--{long}"),
                (None, Some(short)) => format!("-{short}"),
                (None, None) => arg.get_id().as_str().to_uppercase(),
            };
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            found.push((variable.to_string_lossy().into_owned(), option, help));
        }
    }
    for sub in command.get_subcommands() {
        found.extend(environment(sub));
    }
    found
}

/// `help` to follow a colon: its first letter in lower case, unless the word is an acronym.
fn sentence_case(help: &str) -> String {
    let mut chars = help.chars();
    match (chars.next(), chars.next()) {
        (Some(first), Some(second)) if second.is_lowercase() => {
            format!("{}{}", first.to_lowercase(), &help[first.len_utf8()..])
        }
        _ => help.to_owned(),
    }
}

/// One part of clap_mangen's page, without the preamble each part starts with. Writing into
/// memory fails only on a bug in the renderer; the part is then missing, which `check` finds.
fn clap_part(render: impl Fn(&mut dyn io::Write) -> io::Result<()>) -> String {
    let mut buf = Vec::new();
    match render(&mut buf) {
        Ok(()) => strip_preamble(&String::from_utf8_lossy(&buf)).to_owned(),
        Err(_) => String::new(),
    }
}

/// `text` without roff's apostrophe preamble, which each rendered document starts with.
fn strip_preamble(text: &str) -> &str {
    let preamble = Roff::new().render();
    text.strip_prefix(preamble.as_str()).unwrap_or(text)
}

/// What is wrong with a program's pages (tests): a command without a page, a page without
/// EXIT STATUS, ENVIRONMENT, FILES, EXAMPLES or SEE ALSO, a SEE ALSO naming a page that is
/// neither generated nor in `elsewhere`, an example that does not parse as the command it is
/// shown for, a variable clap reads that a page leaves out, data about a command that does not
/// exist.
#[cfg(test)]
pub(crate) fn check(manual: &Manual, program: Command, elsewhere: &[&str]) -> Vec<String> {
    let mut problems = Vec::new();
    let pages = manual.pages(program.clone());
    let generated: Vec<String> = pages.iter().map(|p| format!("{}({})", p.name, manual.section)).collect();
    let mut built = program.clone().disable_help_subcommand(true);
    built.build();
    let mut commands = Vec::new();
    every_command(&built, Vec::new(), &mut commands);
    let paths: Vec<String> = pages.iter().map(|p| p.words.join(" ")).collect();
    for command in &commands {
        if !paths.contains(command) {
            problems.push(format!("{command:?} has no page"));
        }
    }
    for page in &pages {
        let path = page.words.join(" ");
        for name in ["NAME", "SYNOPSIS", "DESCRIPTION", "EXIT STATUS", "ENVIRONMENT", "FILES", "EXAMPLES", "SEE ALSO"] {
            match section(&page.roff, name) {
                None => problems.push(format!("{}: no {name}", page.name)),
                Some(body) if !body.lines().any(|l| !l.starts_with('.')) => {
                    problems.push(format!("{}: {name} is empty", page.name));
                }
                Some(_) => {}
            }
        }
        for named in &page.see_also {
            if !generated.contains(named) && !elsewhere.contains(&named.as_str()) {
                problems.push(format!("{}: SEE ALSO names {named}, which is not a page", page.name));
            }
        }
        let leaf = !commands.iter().any(|c| under(c, &path) && *c != path);
        if leaf && !manual.examples.iter().any(|e| e.command == path) {
            problems.push(format!("{}: no example of its own", page.name));
        }
        let command = find(&built, &page.words);
        for (variable, _, _) in command.map(environment).unwrap_or_default() {
            if !page.roff.contains(&format!("\\fB{variable}\\fR")) {
                problems.push(format!("{}: ENVIRONMENT leaves out {variable}", page.name));
            }
        }
    }
    for example in manual.examples {
        // The page indents an example by 11 columns: a longer line is wrapped by a terminal of 80.
        if let Some(long) = example.line.lines().find(|l| l.chars().count() > 69) {
            problems.push(format!("example line {long:?}: longer than 69 columns (continue it with \\)"));
        }
        match parse_example(&built, example.line) {
            Ok(words) if words.join(" ") == example.command || under(&words.join(" "), example.command) => {}
            Ok(words) => problems.push(format!(
                "example {:?} runs {:?}, but is shown for {:?}",
                example.line,
                words.join(" "),
                example.command
            )),
            Err(error) => problems.push(format!("example {:?}: {error}", example.line)),
        }
    }
    let named = manual.exit_status.iter().chain(manual.environment).chain(manual.files).flat_map(|e| match e.scope {
        Scope::All => &[][..],
        Scope::Only(commands) | Scope::Except(commands) => commands,
    });
    let named = named.copied().chain(manual.see_also.iter().map(|(c, _)| *c));
    for command in named {
        if !command.is_empty() && !commands.iter().any(|c| c == command) {
            problems.push(format!("the manual speaks of {command:?}, which is not a command"));
        }
    }
    problems
}

/// The body of a page's section `name`: from its heading to the next.
#[cfg(test)]
pub(crate) fn section<'a>(roff: &'a str, name: &str) -> Option<&'a str> {
    let heading = Roff::new().control("SH", [name]).to_roff();
    let body = &roff[roff.find(&heading)? + heading.len()..];
    let end = body.match_indices(".SH ").map(|(at, _)| at).find(|at| *at == 0 || body[..*at].ends_with('\n'));
    Some(&body[..end.unwrap_or(body.len())])
}

#[cfg(test)]
fn every_command(command: &Command, words: Vec<String>, out: &mut Vec<String>) {
    out.push(words.join(" "));
    for sub in command.get_subcommands().filter(|c| !c.is_hide_set()) {
        let mut below = words.clone();
        below.push(sub.get_name().to_owned());
        every_command(sub, below, out);
    }
}

#[cfg(test)]
fn find<'a>(command: &'a Command, words: &[String]) -> Option<&'a Command> {
    match words.split_first() {
        None => Some(command),
        Some((first, rest)) => find(command.find_subcommand(first)?, rest),
    }
}

/// The command words an example's line runs, as the program parses it: the line is split as a
/// shell would (quotes and backslashes; leading `NAME=value` assignments, a pipe or a
/// redirection end nothing but the program's own arguments), and anything a shell would
/// expand is refused, so the check sees what the program sees.
#[cfg(test)]
fn parse_example(program: &Command, line: &str) -> Result<Vec<String>, String> {
    let mut words: Vec<String> = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => w.push(c),
                        None => return Err("an unclosed quote".into()),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('$' | '`') => return Err("an expansion in double quotes".into()),
                        // A backslash escapes only these in double quotes.
                        Some('\\') => match chars.next() {
                            Some('\n') => {}
                            Some(c @ ('"' | '\\' | '$' | '`')) => w.push(c),
                            Some(c) => w.extend(['\\', c]),
                            None => return Err("an unclosed quote".into()),
                        },
                        Some(c) => w.push(c),
                        None => return Err("an unclosed quote".into()),
                    }
                }
            }
            '\\' => match chars.next() {
                // A line continued.
                Some('\n') => {}
                next => word.get_or_insert_with(String::new).extend(next),
            },
            '$' | '`' | '*' | '?' | '[' | '~' | '(' | ')' | '{' | ';' | '&' => {
                return Err(format!("{c:?} unquoted: the shell would change it"));
            }
            '|' | '<' | '>' => break,
            c if c.is_whitespace() => words.extend(word.take()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word.take());
    let start = words.iter().position(|w| !w.contains('=') || w.starts_with('-')).unwrap_or(words.len());
    let argv = &words[start..];
    if argv.first().map(String::as_str) != Some(program.get_name()) {
        return Err(format!("it does not run {}", program.get_name()));
    }
    let matches = program.clone().try_get_matches_from(argv).map_err(|e| e.to_string())?;
    let mut path = Vec::new();
    let mut at = &matches;
    while let Some((name, sub)) = at.subcommand() {
        path.push(name.to_owned());
        at = sub;
    }
    Ok(path)
}
