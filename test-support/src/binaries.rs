//! The executor binary the e2e tests map the runtime image to, found beside the test binary and
//! built on demand, so that every test crate runs the same `pseudoflow-step` the same way.

/// `PSEUDOFLOW_STEP_BIN` when set, else `target/<profile>/pseudoflow-step` beside the running test
/// binary (built with the same cargo if it is missing).
pub fn step_binary() -> String {
    if let Ok(bin) = std::env::var("PSEUDOFLOW_STEP_BIN") {
        return bin;
    }
    let exe = std::env::current_exe().unwrap();
    let bin = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("pseudoflow-step");
    if !bin.is_file() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let ok = std::process::Command::new(cargo)
            .args([
                "build",
                "-q",
                "-p",
                "pseudoflow-runtime",
                "--bin",
                "pseudoflow-step",
            ])
            .status()
            .unwrap();
        assert!(
            ok.success() && bin.is_file(),
            "could not build pseudoflow-step at {}",
            bin.display()
        );
    }
    bin.display().to_string()
}
