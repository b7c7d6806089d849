//! The README's runnable blocks, found by construction: a ```` ```console ```` fence right after
//! the line [`MARKER`]. In a block, `$ ` starts a command (a trailing `\` continues it on the
//! next line); the lines up to the next `$ ` are the output the README shows, of which the test
//! checks the key lines (see [`Expected`]). The command's own `#` comment says what else to
//! expect: `(exit N` an exit code other than 0, `Ctrl-C` a command that runs until stopped
//! (`-w`, `-f`), checked on what it printed so far. docs/readme-tests.md is the user's guide.

/// The line that marks the next console block as run against `make demo` by
/// `demo/tests/readme.rs`.
pub const MARKER: &str = "<!-- readme-test: demo -->";

/// One marked block.
#[derive(Debug, PartialEq)]
pub struct Block {
    /// How a failure names it: its line and the heading it is under.
    pub name: String,
    pub commands: Vec<Command>,
}

/// One `$ ` command of a block and what the README shows it prints.
#[derive(Debug, PartialEq)]
pub struct Command {
    /// Exactly as printed, after the `$ ` (continuation lines joined with their `\`).
    pub line: String,
    /// The exit code the README says, 0 unless its comment says `(exit N`.
    pub exit: i32,
    /// Runs until stopped (its comment says `Ctrl-C`): checked on its output so far.
    pub watch: bool,
    pub expected: Expected,
}

/// The output lines the README shows for a command. Each must appear, in this order, in the
/// command's stdout and stderr together, compared with runs of spaces collapsed; inside a line
/// `...` stands for anything (an age, a generated name), and a line that is only `...` for
/// lines the README leaves out.
#[derive(Debug, PartialEq, Default)]
pub struct Expected(pub Vec<String>);

impl Expected {
    /// The first expected line that `output` lacks (in order), or None when all are there.
    pub fn missing_in(&self, output: &str) -> Option<&str> {
        let lines: Vec<String> = output.lines().map(squeeze).collect();
        let mut from = 0;
        for want in &self.0 {
            let pieces: Vec<&str> = want.split("...").map(str::trim).collect();
            match lines[from..].iter().position(|l| has_in_order(l, &pieces)) {
                Some(i) => from += i + 1,
                None => return Some(want),
            }
        }
        None
    }
}

/// Whether `line` holds every piece, left to right.
fn has_in_order(line: &str, pieces: &[&str]) -> bool {
    let mut rest = line;
    for p in pieces {
        match rest.find(p) {
            Some(i) => rest = &rest[i + p.len()..],
            None => return false,
        }
    }
    true
}

/// Runs of whitespace collapsed to one space, ends trimmed.
fn squeeze(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Every marked block of `readme`, in order; a marker not followed by a console fence is an
/// error naming its line.
pub fn runnable_blocks(readme: &str) -> Result<Vec<Block>, String> {
    let lines: Vec<&str> = readme.lines().collect();
    let mut heading = "(top)";
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].starts_with('#') {
            heading = lines[i];
        }
        if lines[i].trim() == MARKER {
            if lines.get(i + 1).map(|l| l.trim()) != Some("```console") {
                return Err(format!(
                    "line {}: {MARKER} must be followed by a ```console fence",
                    i + 1
                ));
            }
            let body: Vec<&str> = lines[i + 2..]
                .iter()
                .take_while(|l| l.trim() != "```")
                .copied()
                .collect();
            let name = format!("README.md block at line {} under {heading:?}", i + 2);
            blocks.push(Block {
                commands: commands(&body).map_err(|e| format!("{name}: {e}"))?,
                name,
            });
            i += body.len() + 2;
        }
        i += 1;
    }
    Ok(blocks)
}

/// The commands of one block's lines.
fn commands(body: &[&str]) -> Result<Vec<Command>, String> {
    let mut out: Vec<Command> = Vec::new();
    let mut lines = body.iter();
    while let Some(l) = lines.next() {
        if let Some(cmd) = l.strip_prefix("$ ") {
            let mut line = cmd.to_string();
            while line.ends_with('\\') {
                let next = lines
                    .next()
                    .ok_or("a `\\` continues past the block's end")?;
                line.push('\n');
                line.push_str(next);
            }
            out.push(command(line));
        } else if let Some(last) = out.last_mut() {
            let want = squeeze(l);
            if !want.is_empty() && want != "..." {
                last.expected.0.push(want);
            }
        } else if !l.trim().is_empty() {
            return Err(format!("output {l:?} before any `$ ` command"));
        }
    }
    if out.is_empty() {
        return Err("no `$ ` command".into());
    }
    Ok(out)
}

/// A command line with what its comment says.
fn command(line: String) -> Command {
    let comment = line.split_once(" # ").map(|(_, c)| c).unwrap_or("");
    let exit = comment
        .split_once("(exit ")
        .and_then(|(_, rest)| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .unwrap_or(0);
    let watch = comment.contains("Ctrl-C");
    Command {
        line,
        exit,
        watch,
        expected: Expected::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const README: &str = "# Title\n## Try\n<!-- readme-test: demo -->\n```console\n$ kubectl get x   # (exit 1: none)\nNAME   AGE\nfoo    ...s\n...\n$ kubectl pf get y -w   # Ctrl-C to stop\n```\n\n```console\n$ not marked\n```\n";

    #[test]
    fn only_marked_blocks_are_found_with_their_commands_exit_codes_and_output() {
        let blocks = runnable_blocks(README).unwrap();
        assert_eq!(blocks.len(), 1);
        assert_eq!(blocks[0].name, "README.md block at line 4 under \"## Try\"");
        let c = &blocks[0].commands;
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].line, "kubectl get x   # (exit 1: none)");
        assert_eq!((c[0].exit, c[0].watch), (1, false));
        assert_eq!(c[0].expected.0, ["NAME AGE", "foo ...s"]);
        assert_eq!((c[1].exit, c[1].watch), (0, true));
    }

    #[test]
    fn a_marker_without_a_console_fence_is_an_error_naming_its_line() {
        let err =
            runnable_blocks("text\n<!-- readme-test: demo -->\n```sh\nls\n```\n").unwrap_err();
        assert!(err.starts_with("line 2:"), "{err}");
    }

    #[test]
    fn expected_lines_match_in_order_with_wildcards_and_collapsed_spaces() {
        let want = Expected(vec!["NAME AGE".into(), "foo ... Running".into()]);
        assert_eq!(want.missing_in("NAME    AGE\nfoo  3s   Running\n"), None);
        assert_eq!(
            want.missing_in("foo 3s Running\nNAME AGE\n"),
            Some("foo ... Running")
        );
        assert_eq!(
            want.missing_in("NAME AGE\nfoo Pending\n"),
            Some("foo ... Running")
        );
    }
}
