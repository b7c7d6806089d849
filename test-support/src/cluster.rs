//! The cluster the controller's e2e tests share: testenv with the runtime image mapped to the
//! freshly built `pseudoflow-step`, and the fixture images of `controller/tests/fixtures`.

use pseudoflow_testenv::{shared_with, Options, TestEnv};

/// Image name the tests' Jobs use; the process kubelet runs `pseudoflow-step` for it.
pub const IMAGE: &str = "pseudoflow/runtime:e2e";

/// An image whose only tool is `greet` (`tests/fixtures/greeter`), for `exec.image`.
pub const GREETER_IMAGE: &str = "example/greeter:1";

/// The image `examples/kopf/mysql.yaml` runs.
pub const MYSQL_IMAGE: &str = "mysql:8.0";

/// The shared cluster of this test binary.
pub fn env() -> &'static TestEnv {
    shared_with(options).unwrap_or_else(|e| panic!("testenv: {e}"))
}

/// The options [`env`] starts the cluster with: three nodes, the runtime image mapped to the
/// freshly built `pseudoflow-step`, and the fixture images. A binary that needs more (the chaos
/// suite's extra nodes) starts from these and must start its cluster before anything calls
/// [`env`], as the first start decides.
pub fn options() -> Options {
    let bin = crate::step_binary();
    let mut o = Options::default();
    o.images.insert_runtime(IMAGE, bin);
    // examples/kopf/mysql.yaml's image: a stand-in server and client tools (see its README).
    let mysql = fixtures().join("fake-mysql");
    o.images
        .insert_with_tools(MYSQL_IMAGE, mysql.join("mysqld"), mysql);
    // The real image's OS (its scripts use these).
    o.images.set_commands(
        MYSQL_IMAGE,
        &[
            "sh", "cat", "date", "dirname", "echo", "head", "ls", "mv", "printf", "rm", "sed",
            "sleep", "touch", "tr",
        ],
    );
    let greeter = fixtures().join("greeter");
    o.images
        .insert_with_tools(GREETER_IMAGE, greeter.join("greet"), greeter);
    // A shell and `greet`, nothing else: the executor runs the command with `sh -c`.
    o.images.set_commands(GREETER_IMAGE, &["sh"]);
    o
}

/// Runs testenv's kubectl (blocking: call it off the runtime the controller uses); returns
/// success and stdout followed by stderr.
pub fn kubectl(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(pseudoflow_testenv::binaries::bin_dir().join("kubectl"))
        .arg("--kubeconfig")
        .arg(env().kubeconfig_path())
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The controller's test fixtures (`controller/tests/fixtures`): the stand-in images' tools.
fn fixtures() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../controller/tests/fixtures")
}
