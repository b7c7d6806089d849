//! Every README example a user runs on `make demo` works there as printed.
//!
//! The test starts the demo's stack with the same library call as `make demo`
//! (`pseudoflow_demo::start_installed`: the cluster, the controller as installed, the seed flows,
//! the bound `Database` and the approval waiting), then runs each command of README.md's marked
//! console blocks (`readme_blocks`) in README order, exactly as printed, with `bash -c` in the
//! repository root: `kubectl` from the testenv binaries and `kubectl-pf` from this target dir
//! first on PATH, KUBECONFIG the demo's. Each must exit as the README says and print the key
//! lines it shows; every failure is reported with its block, command, exit code and output.
//! The walkthrough's blocks (those holding a command `make demo` prints at its end) are run the
//! same way on `make demo-real`'s stack (`pseudoflow_demo::start_real`: real nodes, `make
//! images`, the chart installed by helm with its webhooks on).

mod readme_blocks;

use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};
use std::time::{Duration, Instant};

use readme_blocks::{runnable_blocks, Command, MARKER};

/// How long a command may run before it counts as hung (a watch: until its lines appear).
const TIMEOUT: Duration = Duration::from_secs(120);

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// The target dir's binaries (`target/debug`), beside this test's `deps/`.
fn target_bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// A workspace binary in the target dir, built if `cargo test` did not build it.
fn binary(package: &str, bin: &str) -> PathBuf {
    let path = target_bin_dir().join(bin);
    if !path.is_file() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let ok = Process::new(cargo)
            .args(["build", "--locked", "-q", "-p", package, "--bin", bin])
            .status()
            .unwrap();
        assert!(ok.success() && path.is_file(), "could not build {bin}");
    }
    path
}

/// What a command did: its exit code (None: stopped by the test) and its output.
struct Ran {
    code: Option<i32>,
    output: String,
    took: Duration,
}

/// Runs `cmd` with `bash -c` in the repository root under `env`, stdout and stderr into one
/// file; a watch is stopped once its expected lines are there, anything else after [`TIMEOUT`].
fn run(cmd: &Command, env: &[(&str, String)], scratch: &Path) -> Ran {
    use std::os::unix::process::CommandExt as _;
    let out_file = scratch.join("output");
    let out = std::fs::File::create(&out_file).unwrap();
    let t0 = Instant::now();
    let mut child = Process::new("bash")
        .args(["-c", &cmd.line])
        .current_dir(repo())
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .process_group(0)
        .spawn()
        .unwrap();
    let read = || std::fs::read_to_string(&out_file).unwrap_or_default();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Ran {
                code: status.code(),
                output: read(),
                took: t0.elapsed(),
            };
        }
        let seen = cmd.watch && cmd.expected.missing_in(&read()).is_none();
        if seen || t0.elapsed() > TIMEOUT {
            // The whole process group: bash and what it started.
            let _ = Process::new("kill")
                .args(["-TERM", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.wait();
            return Ran {
                code: None,
                output: read(),
                took: t0.elapsed(),
            };
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Why `ran` is not what the README says of `cmd`, or None.
fn mismatch(cmd: &Command, ran: &Ran) -> Option<String> {
    let exit_ok = match (cmd.watch, ran.code) {
        (true, _) => true,
        (false, None) => return Some(format!("still running after {TIMEOUT:?}")),
        (false, Some(code)) => code == cmd.exit,
    };
    let missing = cmd.expected.missing_in(&ran.output);
    if exit_ok && missing.is_none() {
        return None;
    }
    let mut why = Vec::new();
    if !exit_ok {
        why.push(format!("exit {:?}, the README says {}", ran.code, cmd.exit));
    }
    if let Some(line) = missing {
        why.push(format!("no line matching {line:?} (in order)"));
    }
    Some(why.join("; "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_runnable_readme_command_works_on_the_demo_as_printed() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let blocks = runnable_blocks(&readme).unwrap_or_else(|e| panic!("README.md: {e}"));
    assert!(
        blocks.len() >= 2,
        "README.md has {} blocks marked {MARKER}; the demo walkthrough and `kubectl pf` are expected",
        blocks.len()
    );
    binary("pseudoflow-cli", "kubectl-pf");
    let step = binary("pseudoflow-runtime", "pseudoflow-step");
    let demo = pseudoflow_demo::start_installed(step).await.unwrap();
    assert!(
        demo.all_succeeded,
        "the demo's seed flows did not all Succeed"
    );
    let (failures, ran_count) = run_blocks(&blocks, demo.env.kubeconfig_path());
    assert!(
        failures.is_empty(),
        "{} of {ran_count} README commands do not work on the demo as printed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// `make demo-real` is the same tour on the installed product: on its stack (the same library
/// call, `pseudoflow_demo::start_real`: real nodes, the chart installed by helm with its webhooks
/// called through their Service over the pod network), the README's walkthrough blocks (each
/// holding a command `make demo` prints at its end) work as printed: the bound Database on its
/// stand-in image, `kubectl pf approve` stamped by the chart's mutating webhook, the typo refused
/// at apply by its validating one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demos_tour_works_on_demo_real_as_printed() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let blocks = runnable_blocks(&readme).unwrap_or_else(|e| panic!("README.md: {e}"));
    let text = pseudoflow_demo::tour::closing_text(Path::new("/k"), &[], "https://127.0.0.1:1");
    let printed = closing_commands(&text);
    let tour: Vec<_> = blocks
        .into_iter()
        .filter(|b| b.commands.iter().any(|c| printed.contains(&line_of(c))))
        .collect();
    assert!(tour.len() >= 4, "the tour's README blocks: {tour:#?}");
    binary("pseudoflow-cli", "kubectl-pf");
    let demo = pseudoflow_demo::start_real(2).await.unwrap();
    assert!(
        demo.all_succeeded,
        "demo-real's seed flows did not all Succeed"
    );
    let (failures, ran_count) = run_blocks(&tour, demo.env.kubeconfig_path());
    assert!(
        failures.is_empty(),
        "{} of {ran_count} tour commands do not work on demo-real as printed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// Runs every command of `blocks` in order against the cluster of `kubeconfig`, as
/// [`run`] does; returns why each that failed did, and how many ran.
fn run_blocks(blocks: &[readme_blocks::Block], kubeconfig: &Path) -> (Vec<String>, usize) {
    let path = format!(
        "{}:{}:{}",
        pseudoflow_testenv::binaries::bin_dir().display(),
        target_bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let env = [
        ("PATH", path),
        ("KUBECONFIG", kubeconfig.display().to_string()),
    ];
    // One per cluster (its directory's name): both tests may run at once.
    let cluster = kubeconfig.parent().and_then(Path::file_name).unwrap();
    let scratch = std::env::temp_dir().join(format!(
        "pf-readme-test-{}-{}",
        std::process::id(),
        cluster.to_string_lossy()
    ));
    std::fs::create_dir_all(&scratch).unwrap();
    let mut failures = Vec::new();
    let mut ran_count = 0;
    for block in blocks {
        for cmd in &block.commands {
            let ran = tokio::task::block_in_place(|| run(cmd, &env, &scratch));
            ran_count += 1;
            println!(
                "[{}] $ {}\n-> exit {:?} in {:.1}s\n{}",
                block.name,
                cmd.line,
                ran.code,
                ran.took.as_secs_f64(),
                ran.output
            );
            if let Some(why) = mismatch(cmd, &ran) {
                failures.push(format!(
                    "{}: `$ {}`: {why}\n--- its output:\n{}",
                    block.name, cmd.line, ran.output
                ));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    (failures, ran_count)
}

/// A README command as the closing text would print it: without its `# ...` comment.
fn line_of(c: &Command) -> String {
    c.line.split(" # ").next().unwrap().trim().to_string()
}

/// The `kubectl` lines of `make demo`'s closing text.
fn closing_commands(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| l.starts_with("kubectl "))
        .map(String::from)
        .collect()
}

/// The commands `make demo` prints at its end are the README's walkthrough: each `kubectl` line
/// of the closing text is a command of a marked block, so the test above runs it too.
#[test]
fn the_demos_closing_commands_are_all_in_a_runnable_readme_block() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let blocks = runnable_blocks(&readme).unwrap_or_else(|e| panic!("README.md: {e}"));
    let in_readme: Vec<String> = blocks
        .iter()
        .flat_map(|b| &b.commands)
        .map(line_of)
        .collect();
    let text = pseudoflow_demo::tour::closing_text(Path::new("/k"), &[], "https://127.0.0.1:1");
    let printed = closing_commands(&text);
    assert!(printed.len() >= 5, "closing text: {text}");
    let missing: Vec<&String> = printed.iter().filter(|p| !in_readme.contains(p)).collect();
    assert!(
        missing.is_empty(),
        "make demo prints commands no runnable README block has: {missing:#?}"
    );
}
