//! `make demo ARGOCD=1` works as it says: the demo's stack started with the same library call
//! (`pseudoflow_demo::start_installed_with(step, true)`: Argo CD syncing the seed flows from a
//! local git repository), every seed flow Succeeded; then the commands its closing text prints
//! to change a flow in git (`sed`, `git commit`, the refresh annotation) are run as printed, and
//! the changed flow runs its new generation to Succeeded, with the Application Synced and the flow
//! Healthy in what the printed `kubectl get applications` commands show. Needs `make argocd`
//! (a dependency of `make test`); without it the test fails naming it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject};
use pseudoflow_controller::flow::flow_resource;
use pseudoflow_demo::gitops;

/// The target dir's binaries (`target/debug`), beside this test's `deps/`.
fn target_bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// `pseudoflow-step` in the target dir, built if `cargo test` did not build it.
fn step_binary() -> PathBuf {
    let path = target_bin_dir().join("pseudoflow-step");
    if !path.is_file() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let ok = Command::new(cargo)
            .args(["build", "--locked", "-q", "-p", "pseudoflow-runtime"])
            .args(["--bin", "pseudoflow-step"])
            .status()
            .unwrap();
        assert!(
            ok.success() && path.is_file(),
            "could not build pseudoflow-step"
        );
    }
    path
}

/// Runs `line` with `bash -c` under `kubeconfig`, testenv's kubectl first on PATH; its output.
fn sh(line: &str, kubeconfig: &Path) -> String {
    let path = format!(
        "{}:{}",
        pseudoflow_testenv::binaries::bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args(["-c", line])
        .env("PATH", path)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "`{line}` failed: {text}");
    text
}

/// The lines of the closing text starting with one of `starts`, as printed.
fn printed<'a>(text: &'a str, starts: &[&str]) -> Vec<&'a str> {
    text.lines()
        .map(str::trim)
        .filter(|l| starts.iter().any(|s| l.starts_with(s)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_to_the_demos_git_repository_re_runs_the_flow_through_argo_cd() {
    let demo = pseudoflow_demo::start_installed_with(step_binary(), true)
        .await
        .unwrap();
    assert!(
        demo.all_succeeded,
        "the seed flows synced by Argo CD all Succeed"
    );
    let repo = &demo.gitops.as_ref().expect("Argo CD started").repo;
    let kubeconfig = demo.env.kubeconfig_path();
    let client = demo.env.client().await.unwrap();
    let flows: Api<DynamicObject> = Api::namespaced_with(client, "default", &flow_resource());
    let before = flows.get("labels-from-map").await.unwrap();
    let generation = before.metadata.generation.unwrap();
    // What the closing text says to do, exactly as printed.
    let text = gitops::closing_text(repo);
    let change = printed(&text, &["sed ", "git ", "kubectl annotate "]);
    assert_eq!(change.len(), 3, "sed, commit, refresh: {text}");
    let t0 = Instant::now();
    for line in &change {
        sh(line, kubeconfig);
    }
    loop {
        let f = flows.get("labels-from-map").await.unwrap();
        let st = &f.data["status"];
        if st["observedGeneration"].as_i64() > Some(generation) && st["phase"] == "Succeeded" {
            assert_eq!(
                f.data["spec"]["vars"]["mapping"]
                    .as_str()
                    .map(|m| m.contains("\"env\":\"dev\"")),
                Some(true)
            );
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "the committed change did not run to Succeeded: {:#}",
            f.data
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!(
        "git commit to flow Succeeded in the Argo CD demo: {:?}",
        t0.elapsed()
    );
    // What the printed kubectl get applications commands show once Argo CD compared again.
    let shows = printed(&text, &["kubectl get applications "]);
    assert_eq!(shows.len(), 2, "{text}");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (app, resources) = (sh(shows[0], kubeconfig), sh(shows[1], kubeconfig));
        let app_ok = app
            .lines()
            .any(|l| l.starts_with(gitops::APP) && l.contains("Synced") && l.contains("Healthy"));
        if app_ok && resources.contains("PseudoFlow labels-from-map Synced Healthy") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Application not Synced and Healthy:\n{app}\n{resources}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
