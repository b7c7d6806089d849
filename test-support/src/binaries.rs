//! The binaries the e2e tests run, found beside the test binary and built on demand, so that
//! every test crate runs the same `pseudoflow-step` (the runtime image),
//! `pseudoflow-controller` (the chaos suite's child process) and `kubectl-pf` the same way.

/// `PSEUDOFLOW_STEP_BIN` when set, else `target/<profile>/pseudoflow-step` beside the running test
/// binary (built with the same cargo if it is missing).
pub fn step_binary() -> String {
    beside_the_test(
        "PSEUDOFLOW_STEP_BIN",
        "pseudoflow-runtime",
        "pseudoflow-step",
    )
}

/// `PSEUDOFLOW_CONTROLLER_BIN` when set, else `target/<profile>/pseudoflow-controller` beside the
/// running test binary (cargo builds it for the controller's own tests; built here if missing).
pub fn controller_binary() -> String {
    beside_the_test(
        "PSEUDOFLOW_CONTROLLER_BIN",
        "pseudoflow-controller",
        "pseudoflow-controller",
    )
}

/// `PSEUDOFLOW_CLI_BIN` when set, else `target/<profile>/kubectl-pf` beside the running test
/// binary (built if missing): the e2e tests outside the CLI's crate run `kubectl pf` as a user does.
pub fn cli_binary() -> String {
    beside_the_test("PSEUDOFLOW_CLI_BIN", "pseudoflow-cli", "kubectl-pf")
}

/// The binary `name` of `package`: `var` when set, else beside the test binary's `deps/`
/// folder, built with the same cargo if it is missing.
fn beside_the_test(var: &str, package: &str, name: &str) -> String {
    if let Ok(bin) = std::env::var(var) {
        return bin;
    }
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().parent().unwrap().join(name);
    if !bin.is_file() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let ok = std::process::Command::new(cargo)
            .args(["build", "-q", "-p", package, "--bin", name])
            .status()
            .unwrap();
        assert!(
            ok.success() && bin.is_file(),
            "could not build {name} at {}",
            bin.display()
        );
    }
    bin.display().to_string()
}
