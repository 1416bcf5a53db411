//! Completion of what only the master knows: minion ids and the functions minions have, for
//! `halite run` and `halite apply`. `halite completions bash` wraps clap's script with a
//! function that asks `halite __complete minions|functions` (this module) at the target and
//! function positions; everywhere else clap's completion answers.

use std::collections::BTreeSet;

use halite_client::Client;

/// What `__complete` lists.
#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum Completed {
    /// Minion ids.
    Minions,
    /// The functions the minions said they have.
    Functions,
}

/// Prints the candidates starting with `prefix`, one a line; nothing when the master does not
/// answer (a completion must never print an error into the command line).
pub(crate) async fn print(client: &Client, what: Completed, prefix: &str) {
    let Ok(minions) = client.minions("*").await else { return };
    let words: BTreeSet<&str> = match what {
        Completed::Minions => minions.iter().map(|m| m.id.as_str()).collect(),
        Completed::Functions => minions.iter().flat_map(|m| m.functions.iter().map(String::as_str)).collect(),
    };
    for word in words.into_iter().filter(|w| w.starts_with(prefix)) {
        println!("{word}");
    }
}

/// The bash script: clap's, then a function that completes `run`'s and `apply`'s target (and
/// `run`'s function) from the master, and hands every other position to clap's.
pub(crate) fn bash(generated: &str) -> String {
    format!("{generated}\n{BASH_DYNAMIC}")
}

/// Options of `halite`, `run` and `apply` that take a value (the word after them is theirs).
const BASH_DYNAMIC: &str = r#"# Minion ids and function names, from the master (halite __complete), asked with the
# -c/--config, --master, --master-key, --principal and --key the line already gives.
_halite_dynamic() {
    local words cword cur word sub="" positional=0 i
    local -a reach=()
    # Words as typed: `-G os:Debian` is one word, whatever COMP_WORDBREAKS says of ':'.
    if declare -F _get_comp_words_by_ref >/dev/null; then
        _get_comp_words_by_ref -n : -w words -i cword
    else
        words=("${COMP_WORDS[@]}")
        cword=$COMP_CWORD
    fi
    cur="${words[cword]}"
    for ((i = 1; i < cword; i++)); do
        word="${words[i]}"
        case "$word" in
            -c|--config|--master|--master-key|--principal|--key)
                reach+=("$word" "${words[i+1]}"); ((i++)); continue ;;
            --out|-t|--timeout|--job-timeout|--ttl|--top|-b|--batch|--batch-wait|--max-errors|--canary|--abort-on|--delimiter)
                ((i++)); continue ;;
            -*) continue ;;
        esac
        if [[ -z "$sub" ]]; then sub="$word"; else ((positional++)); fi
    done
    if [[ ( "$sub" == run || "$sub" == apply ) && "$cur" != -* ]]; then
        if ((positional == 0)); then
            COMPREPLY=($(compgen -W "$(halite "${reach[@]}" __complete minions "$cur" 2>/dev/null)" -- "$cur"))
            return 0
        elif ((positional == 1)) && [[ "$sub" == run ]]; then
            COMPREPLY=($(compgen -W "$(halite "${reach[@]}" __complete functions "$cur" 2>/dev/null)" -- "$cur"))
            return 0
        fi
    fi
    _halite "$@"
}
complete -F _halite_dynamic -o nosort -o bashdefault -o default halite
"#;
