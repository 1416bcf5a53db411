//! How a command's target expression is read: a glob unless a flag says otherwise, as
//! Salt's `-L`, `-E`, `-G`, `-C` and `-N`.

use clap::Args;
use halite_protocol::message::TargetKind;

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
    /// Target is key:glob on a grain.
    #[arg(short = 'G', long, group = "kind")]
    pub(crate) grain: bool,
    /// Target is a compound expression (G@, L@, E@, N@, S@, and/or/not, parentheses).
    #[arg(short = 'C', long, group = "kind")]
    pub(crate) compound: bool,
    /// Target is a nodegroup from the master config.
    #[arg(short = 'N', long, group = "kind")]
    pub(crate) nodegroup: bool,
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
            _ => TargetKind::Glob,
        }
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
        assert!(kind(&["x", "-L", "-E"]).is_err());
    }
}
