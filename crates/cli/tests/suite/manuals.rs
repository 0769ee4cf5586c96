//! Shell completions and manual pages, generated from the clap definitions (`tarn completion`,
//! `tarn man`): the bash script completes verbs and flags as a shell would ask for them, and
//! every command the parser knows has its page.

use std::process::Command;

use tarn_test_support::{clean_command, Run};

const TARN: &str = env!("CARGO_BIN_EXE_tarn");

/// `tarn ARGS`, which must succeed: its stdout.
fn tarn(args: &[&str]) -> String {
    run(args).success().stdout
}

fn run(args: &[&str]) -> Run {
    Run::of(
        format!("tarn {}", args.join(" ")),
        clean_command(TARN).args(args),
    )
}

/// What bash's completion offers for the words typed so far (the last one being completed),
/// with the completion script in the file `script`.
fn complete(script: &std::path::Path, words: &[&str]) -> Vec<String> {
    let typed = words
        .iter()
        .map(|word| format!("'{word}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let program = format!(
        "source '{}'\nCOMP_WORDS=({typed}); COMP_CWORD={}; COMP_LINE=\"{}\"; COMP_POINT=${{#COMP_LINE}}\n\
         _tarn tarn '{}' '{}'\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        script.display(),
        words.len() - 1,
        words.join(" "),
        words[words.len() - 1],
        words[words.len().saturating_sub(2)],
    );
    let output = Command::new("bash")
        .arg("-c")
        .arg(program)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn bash_completion_offers_verbs_subverbs_and_flags() {
    let text = tarn(&["completion", "bash"]);
    assert!(
        text.starts_with("_tarn()"),
        "{}",
        &text[..80.min(text.len())]
    );
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("tarn.bash");
    std::fs::write(&script, text).unwrap();
    let verbs = complete(&script, &["tarn", "sn"]);
    assert_eq!(verbs, ["snapshot"], "completing 'tarn sn'");
    let pool_verbs = complete(&script, &["tarn", "pool", "im"]);
    assert_eq!(pool_verbs, ["import"], "completing 'tarn pool im'");
    let flags = complete(&script, &["tarn", "send", "-"]);
    for flag in ["-P", "-i", "-I", "-t", "-n", "-v"] {
        assert!(
            flags.iter().any(|offered| offered == flag),
            "{flag} in {flags:?}"
        );
    }
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        assert!(tarn(&["completion", shell]).contains("tarn"), "{shell}");
    }
    run(&["completion", "nushell"]).failure(&["invalid value"]);
}

#[test]
fn every_command_has_a_manual_page() {
    let dir = tempfile::tempdir().unwrap();
    let said = tarn(&["man", &dir.path().display().to_string()]);
    let written = std::fs::read_dir(dir.path()).unwrap().count();
    assert!(
        said.contains(&format!("wrote {written} manual pages")),
        "{said}"
    );
    // Every verb `tarn --help` lists has its page, and so has every `tarn pool` verb.
    let verbs_of = |help: &str| -> Vec<String> {
        help.lines()
            .skip_while(|line| !line.starts_with("Commands:"))
            .skip(1)
            .take_while(|line| line.starts_with("  "))
            .filter_map(|line| line.split_whitespace().next().map(str::to_string))
            .filter(|verb| verb != "help")
            .collect()
    };
    let verbs = verbs_of(&tarn(&["--help"]));
    let pool_verbs = verbs_of(&tarn(&["pool", "--help"]));
    assert!(
        verbs.len() > 20 && pool_verbs.len() > 15,
        "{verbs:?} {pool_verbs:?}"
    );
    let pages = verbs
        .iter()
        .map(|verb| format!("tarn-{verb}.1"))
        .chain(pool_verbs.iter().map(|verb| format!("tarn-pool-{verb}.1")))
        .chain(["tarn.1".to_string()]);
    for page in pages {
        let text = std::fs::read_to_string(dir.path().join(&page))
            .unwrap_or_else(|error| panic!("{page}: {error}"));
        assert!(text.contains(".TH"), "{page} is not a manual page");
    }
    let import = std::fs::read_to_string(dir.path().join("tarn-pool-import.1")).unwrap();
    assert!(import.contains(".TH tarn-pool-import 1"), "{import}");
    assert!(import.contains("\\-f"), "the page names -f: {import}");
}
