//! How a command's target expression is read: a glob unless a flag says otherwise, as
//! Salt's `-L`, `-E`, `-G`, `-P`, `-S`, `-C` and `-N` (with `--delimiter`).

use clap::Args;
use halite_protocol::message::{Target, TargetKind};

#[derive(Args, Default)]
pub(crate) struct TargetArgs {
    /// Target is a list of ids, separated by commas or whitespace; `@FILE` reads it from a file
    /// (one id per line is fine), `@-` from standard input.
    #[arg(short = 'L', long, group = "kind")]
    pub(crate) list: bool,
    /// Target is a regular expression that must match the whole id (unlike Salt's, which
    /// matches from the start: write `web.*` for Salt's `web`).
    #[arg(short = 'E', long, group = "kind")]
    pub(crate) regex: bool,
    /// Target is key:glob on a grain (Salt's rules: values compared lower-cased, the longest
    /// key path first).
    #[arg(short = 'G', long, group = "kind")]
    pub(crate) grain: bool,
    /// Target is key:regex on a grain (compared without case; the regex matches the whole value).
    #[arg(short = 'P', long = "grain-pcre", group = "kind")]
    pub(crate) grain_pcre: bool,
    /// Target is a subnet or an address (10.0.0.0/24, fd00::/8), in the minions' ipv4 or ipv6 grain.
    #[arg(short = 'S', long = "ipcidr", group = "kind")]
    pub(crate) ipcidr: bool,
    /// What separates a grain's keys from each other and from the value, for -G and -P (`:`).
    #[arg(long, value_name = "CHAR", value_parser = one_char)]
    pub(crate) delimiter: Option<char>,
    /// Target is a compound expression (G@, L@, E@, N@, S@, and/or/not, parentheses).
    #[arg(short = 'C', long, group = "kind")]
    pub(crate) compound: bool,
    /// Target is a nodegroup from the master config.
    #[arg(short = 'N', long, group = "kind")]
    pub(crate) nodegroup: bool,
}

fn one_char(text: &str) -> Result<char, String> {
    let mut chars = text.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if !c.is_whitespace() && c != '@' => Ok(c),
        _ => Err(format!("{text:?}: a delimiter is one character, not whitespace or '@'")),
    }
}

impl TargetArgs {
    /// The kind the flags choose.
    pub(crate) fn kind(&self) -> TargetKind {
        match (self.list, self.regex, self.grain, self.compound, self.nodegroup) {
            (true, ..) => TargetKind::List,
            (_, true, ..) => TargetKind::Regex,
            (_, _, true, ..) => TargetKind::Grain,
            (_, _, _, true, _) => TargetKind::Compound,
            (_, _, _, _, true) => TargetKind::Nodegroup,
            _ if self.grain_pcre || self.ipcidr => TargetKind::Compound,
            _ => TargetKind::Glob,
        }
    }

    /// The target `expr` names under these flags. `-P`, `-S` and a `--delimiter` are sent as
    /// the one-term compound expression Salt's own `P@`, `S@` and `G|@` would be.
    pub(crate) fn target(&self, expr: &str) -> Result<Target, String> {
        let delimiter = self.delimiter.map(String::from).unwrap_or_default();
        let engine = if self.grain_pcre {
            format!("P{delimiter}@")
        } else if self.ipcidr {
            "S@".to_owned()
        } else if self.grain && self.delimiter.is_some() {
            format!("G{delimiter}@")
        } else if self.delimiter.is_some() {
            return Err("--delimiter goes with -G or -P".into());
        } else {
            return Ok(Target { kind: self.kind(), expr: expr.to_owned() });
        };
        Target::one_term(&engine, expr)
            .ok_or_else(|| format!("{expr:?}: this target cannot hold whitespace (in a regex, write \\s)"))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        target: TargetArgs,
    }

    #[test]
    fn a_flag_chooses_the_kind_and_only_one_may() {
        let kind = |args: &[&str]| Wrap::try_parse_from(args).map(|w| w.target.kind());
        assert_eq!(kind(&["x"]).unwrap(), TargetKind::Glob);
        assert_eq!(kind(&["x", "-G"]).unwrap(), TargetKind::Grain);
        assert_eq!(kind(&["x", "--compound"]).unwrap(), TargetKind::Compound);
        let target = |args: &[&str]| {
            let mut all = vec!["test"];
            all.extend_from_slice(args);
            Wrap::try_parse_from(all).map_err(|e| e.to_string()).and_then(|w| w.target.target("os|Deb.*"))
        };
        assert_eq!(target(&["-P", "--delimiter", "|"]).unwrap().expr, "P|@os|Deb.*");
        assert_eq!(target(&["-G", "--delimiter", "|"]).unwrap().expr, "G|@os|Deb.*");
        assert_eq!(target(&["--ipcidr"]).unwrap().expr, "S@os|Deb.*");
        assert!(target(&["--delimiter", "|"]).unwrap_err().contains("goes with -G or -P"));
        assert!(target(&["-G", "--delimiter", "ab"]).unwrap_err().contains("one character"));
        assert!(kind(&["x", "-L", "-E"]).is_err());
    }
}
