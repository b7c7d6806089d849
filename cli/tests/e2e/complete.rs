//! `--help` on every verb, `completion SHELL`, and kubectl's plugin completion
//! (`kubectl pf <TAB>`): verbs, flows, namespaces, files and flags.

use pseudoflow_test_support::create_flow;
use serde_json::json;

use crate::support::{complete, env, namespace, pf};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_on_every_verb_and_shell_completion() {
    for verb in [
        "list",
        "get",
        "logs",
        "plan",
        "retry",
        "run",
        "stop",
        "suspend",
        "resume",
        "approve",
        "reject",
        "rollout",
        "completion",
    ] {
        let o = pf(&[verb, "--help"]).await;
        assert_eq!(o.code, 0, "{verb} --help: {}", o.stderr);
        assert!(
            o.stdout.contains("Usage: kubectl pf"),
            "{verb}: {}",
            o.stdout
        );
        assert!(o.stdout.contains("--namespace"), "{verb}: -n on every verb");
    }
    for shell in ["bash", "zsh", "fish"] {
        let o = pf(&["completion", shell]).await;
        assert_eq!(o.code, 0, "{}", o.stderr);
        assert!(
            o.stdout.contains("plan") && o.stdout.contains("suspend"),
            "{shell}"
        );
    }
    let o = pf(&["get"]).await;
    assert_eq!(o.code, 2, "a usage error: {}", o.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_plugin_completion_names_verbs_flows_and_files() {
    let (client, ns) = namespace("pf-complete").await;
    create_flow(
        &client,
        &ns,
        "alpha",
        json!({"serviceAccountName": "flow", "steps": [{"type": "log", "message": "a"}]}),
    )
    .await;
    create_flow(
        &client,
        &ns,
        "beta",
        json!({"serviceAccountName": "flow", "steps": [{"type": "log", "message": "b"}]}),
    )
    .await;
    let kc = env().kubeconfig_path().display().to_string();
    let c = |args: Vec<&str>| {
        tokio::task::spawn_blocking({
            let args: Vec<String> = args.into_iter().map(String::from).collect();
            move || complete(&args.iter().map(String::as_str).collect::<Vec<_>>())
        })
    };
    assert_eq!(
        c(vec![""]).await.unwrap(),
        [
            "approve",
            "completion",
            "get",
            "list",
            "logs",
            "plan",
            "reject",
            "resume",
            "retry",
            "rollout",
            "run",
            "stop",
            "suspend",
            ":4"
        ]
    );
    assert_eq!(
        c(vec!["--kubeconfig", &kc, "-n", &ns, "get", ""])
            .await
            .unwrap(),
        ["alpha", "beta", ":4"]
    );
    assert_eq!(
        c(vec!["--kubeconfig", &kc, "suspend", "-n", &ns, "b"])
            .await
            .unwrap(),
        ["beta", ":4"]
    );
    assert!(c(vec!["--kubeconfig", &kc, "-n", ""])
        .await
        .unwrap()
        .contains(&ns));
    assert_eq!(
        c(vec!["plan", "-f", ""]).await.unwrap(),
        [":0"],
        "file names for -f"
    );
    assert_eq!(
        c(vec!["rollout", "p"]).await.unwrap(),
        ["pause", "promote", ":4"]
    );
    assert_eq!(
        c(vec!["--kubeconfig", &kc, "-n", &ns, "rollout", "undo", "a"])
            .await
            .unwrap(),
        ["alpha", ":4"]
    );
    assert!(c(vec!["rollout", "status", "--t"])
        .await
        .unwrap()
        .contains(&"--timeout".to_string()));
    assert!(c(vec!["get", "--w"])
        .await
        .unwrap()
        .contains(&"--watch".to_string()));
}
