//! `kubectl_complete-tether`: kubectl (1.26 on) completes a plugin's arguments by running an
//! executable named `kubectl_complete-<plugin>` with the words typed so far, the last the one
//! being completed, and reading one candidate per line followed by a line `:<directive>` (the
//! protocol of cobra, kubectl's command library). Installed as a link to the tether binary, as
//! `kubectl-tether` is; the candidates come from tether's own command tree: its subcommands,
//! then each one's long flags.

/// cobra's ShellCompDirectiveNoFileComp: no file names offered when no candidate fits.
const NO_FILE_COMPLETION: u8 = 4;

/// The candidates for `words` (the last is the word being completed; it may be empty) in
/// `command`'s tree, in cobra's format.
pub fn candidates(command: &clap::Command, words: &[String]) -> String {
    let (typed, current) = match words.split_last() {
        Some((current, typed)) => (typed, current.as_str()),
        None => (&[][..], ""),
    };
    // Down the tree by the subcommands typed so far; flags and their values are skipped.
    let mut at = command;
    for word in typed {
        if let Some(sub) = at
            .get_subcommands()
            .find(|s| s.get_name() == word || s.get_all_aliases().any(|a| a == word))
        {
            at = sub;
        }
    }
    let mut out: Vec<String> = if current.starts_with('-') {
        at.get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_long())
            .map(|long| format!("--{long}"))
            .chain(["--help".to_string()])
            .filter(|flag| flag.starts_with(current))
            .collect()
    } else {
        at.get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != "help")
            .filter(|s| s.get_name().starts_with(current))
            .map(|s| match s.get_about() {
                // cobra's "candidate<TAB>description".
                Some(about) => format!(
                    "{}\t{}",
                    s.get_name(),
                    about.to_string().lines().next().unwrap_or_default()
                ),
                None => s.get_name().to_string(),
            })
            .collect()
    };
    out.sort();
    out.dedup();
    out.push(format!(":{NO_FILE_COMPLETION}"));
    out.join("\n") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> clap::Command {
        clap::Command::new("tether")
            .subcommand(
                clap::Command::new("explain")
                    .about("Why a pod went where it went")
                    .arg(clap::Arg::new("namespace").long("namespace").short('n'))
                    .arg(clap::Arg::new("output").long("output")),
            )
            .subcommand(clap::Command::new("pending").about("Why pods wait"))
            .subcommand(clap::Command::new("secret").hide(true))
    }

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn subcommands_then_their_flags_in_cobras_format() {
        assert_eq!(
            candidates(&tree(), &words(&["p"])),
            "pending\tWhy pods wait\n:4\n"
        );
        let all = candidates(&tree(), &words(&[""]));
        assert!(all.contains("explain\t") && all.contains("pending\t") && !all.contains("secret"));
        assert_eq!(
            candidates(&tree(), &words(&["explain", "-n", "ml", "--o"])),
            "--output\n:4\n"
        );
        assert_eq!(candidates(&tree(), &words(&["explain", "x"])), ":4\n");
    }
}
