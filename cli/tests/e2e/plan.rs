//! `plan`: what a run would change, by server-side dry-run as the flow's ServiceAccount, changing
//! nothing; its exit codes; a user who may not impersonate.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams};
use kube::Client;
use pseudoflow_test_support::{apply, flows};
use serde_json::{json, Value};

use crate::support::{env, namespace, pf, pf_as, viewer_kubeconfig};

/// resourceVersion of every ConfigMap, Secret and PseudoFlow of `ns` (not Nodes: the simulated
/// kubelets refresh their status every 10 s).
async fn versions(client: &Client, ns: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for cm in Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        out.push((
            format!("cm/{}", cm.metadata.name.unwrap()),
            cm.metadata.resource_version.unwrap(),
        ));
    }
    for s in Api::<Secret>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        out.push((
            format!("secret/{}", s.metadata.name.unwrap()),
            s.metadata.resource_version.unwrap(),
        ));
    }
    for f in flows(client, ns)
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        out.push((
            format!("pf/{}", f.metadata.name.unwrap()),
            f.metadata.resource_version.unwrap(),
        ));
    }
    out.sort();
    out
}

fn flow_doc(ns: &str, name: &str, steps: Value) -> Value {
    json!({"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow", "metadata": {"name": name, "namespace": ns},
        "spec": {"serviceAccountName": "flow", "vars": {"greeting": "new"}, "steps": steps}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_shows_changes_by_dry_run_and_changes_nothing() {
    let (client, ns) = namespace("pf-plan").await;
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "changed", "namespace": ns}, "data": {"greeting": "old", "kept": "yes"}})).await;
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "doomed", "namespace": ns}, "data": {"x": "1"}})).await;
    apply(&client, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": ns}, "stringData": {"password": "old-hunter2", "user": "admin"}})).await;
    let steps = json!([
        {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "changed", "namespace": ns}, "data": {"greeting": "${greeting}", "kept": "yes"}}},
        {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fresh", "namespace": ns}, "data": {"hello": "world"}}},
        {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": ns}, "stringData": {"password": "new-hunter2", "user": "admin"}}},
        {"type": "delete", "target": {"kind": "ConfigMap", "name": "doomed", "namespace": ns}},
        {"type": "exec", "cmd": "echo computed", "var": "computed"},
        {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "later", "namespace": ns}, "data": {"v": "${computed}"}}},
        {"type": "loopNodes", "selector": "", "steps": [{"type": "configFile", "path": "/etc/x.conf", "content": "x"}]}
    ]);
    // The applied flow (no controller in this namespace: it only sits there).
    apply(&client, flow_doc(&ns, "applied", steps.clone())).await;
    let file = env().dir().join(format!("{ns}-flow.yaml"));
    std::fs::write(
        &file,
        serde_yaml::to_string(&flow_doc(&ns, "unapplied", steps)).unwrap(),
    )
    .unwrap();

    let before = versions(&client, &ns).await;
    let by_file = pf(&["plan", "-f", file.to_str().unwrap()]).await;
    let by_name = pf(&["plan", "applied", "-n", &ns]).await;
    let after = versions(&client, &ns).await;
    println!("{}", by_name.stdout);
    assert_eq!(before, after, "plan changed nothing on the cluster");
    assert!(Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get_opt("fresh")
        .await
        .unwrap()
        .is_none());

    for o in [&by_file, &by_name] {
        let out = &o.stdout;
        assert_eq!(
            o.code, 1,
            "changes: exit 1 as flux diff; {out}\n{}",
            o.stderr
        );
        assert!(
            out.contains(&format!("as system:serviceaccount:{ns}:flow")),
            "{out}"
        );
        // A changed ConfigMap: a unified diff of its data, without managed fields.
        assert!(
            out.contains(&format!(
                "spec.steps[0] (apply) ConfigMap {ns}/changed: changed"
            )),
            "{out}"
        );
        assert!(
            out.contains("-  greeting: old") && out.contains("+  greeting: new"),
            "{out}"
        );
        assert!(
            !out.contains("managedFields") && !out.contains("resourceVersion"),
            "{out}"
        );
        // A new object.
        assert!(
            out.contains(&format!(
                "spec.steps[1] (apply) ConfigMap {ns}/fresh: added"
            )),
            "{out}"
        );
        assert!(out.contains("+  hello: world"), "{out}");
        // Secret data masked, keys kept, the change marked.
        assert!(out.contains(&format!("ConfigMap {ns}/changed")));
        assert!(
            out.contains(&format!("spec.steps[2] (apply) Secret {ns}/creds: changed")),
            "{out}"
        );
        assert!(
            out.contains("+  password: '*** (changed)'")
                || out.contains("+  password: \"*** (changed)\""),
            "{out}"
        );
        for secret in ["hunter2", "b2xkLWh1bnRlcjI", "bmV3LWh1bnRlcjI", "YWRtaW4"] {
            assert!(!out.contains(secret), "secret value {secret} leaked: {out}");
        }
        // A deletion.
        assert!(
            out.contains(&format!(
                "spec.steps[3] (delete) ConfigMap {ns}/doomed: deleted"
            )),
            "{out}"
        );
        assert!(
            out.contains("-  x: '1'") || out.contains("-  x: \"1\""),
            "{out}"
        );
        // A run-time value: undetermined, with the reason.
        assert!(out.contains("spec.steps[5] (apply): undetermined — uses ${computed}, set at run time by spec.steps[4] (exec)"), "{out}");
        // Node steps per target node.
        assert!(
            out.contains("spec.steps[6].steps[0] (configFile) /etc/x.conf: a node step"),
            "{out}"
        );
        for n in env().nodes() {
            assert!(out.contains(&format!("  node {n}\n")), "{n}: {out}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_exits_0_without_changes_and_2_on_errors() {
    let (client, ns) = namespace("pf-plan0").await;
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "same", "namespace": ns}, "data": {"a": "1"}})).await;
    apply(&client, flow_doc(&ns, "noop", json!([
        {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "same", "namespace": ns}, "data": {"a": "1"}}},
        {"type": "delete", "target": {"kind": "ConfigMap", "name": "gone-already", "namespace": ns}}
    ]))).await;
    let o = pf(&["plan", "noop", "-n", &ns]).await;
    assert_eq!(o.code, 0, "no change: {}\n{}", o.stdout, o.stderr);
    assert!(
        o.stdout
            .contains(&format!("ConfigMap {ns}/same: unchanged")),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("absent, nothing to delete"),
        "{}",
        o.stdout
    );

    // The flow's ServiceAccount may not touch Deployments: the dry-run is refused, exit 2.
    apply(&client, flow_doc(&ns, "forbidden", json!([
        {"type": "apply", "manifests": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": ns},
            "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}}}
    ]))).await;
    let o = pf(&["plan", "forbidden", "-n", &ns]).await;
    assert_eq!(o.code, 2, "{}\n{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains("error") && o.stdout.contains("forbidden"),
        "{}",
        o.stdout
    );
    // A file of several flows: each planned, the exit code the worst (2 for the forbidden one).
    let docs = ["noop", "forbidden"];
    let mut text = String::new();
    for n in docs {
        let f = flows(&client, &ns).get(n).await.unwrap();
        let doc = flow_doc(&ns, n, f.data["spec"]["steps"].clone());
        text.push_str("---\n");
        text.push_str(&serde_yaml::to_string(&doc).unwrap());
    }
    let file = env().dir().join(format!("{ns}-two.yaml"));
    std::fs::write(&file, text).unwrap();
    let o = pf(&["plan", "-f", file.to_str().unwrap()]).await;
    assert_eq!(o.code, 2, "{}\n{}", o.stdout, o.stderr);
    assert!(
        o.stdout.contains(&format!("plan for pseudoflow {ns}/noop"))
            && o.stdout
                .contains(&format!("plan for pseudoflow {ns}/forbidden")),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout
            .contains(&format!("ConfigMap {ns}/same: unchanged")),
        "{}",
        o.stdout
    );

    let o = pf(&["plan", "absent", "-n", &ns]).await;
    assert_eq!(o.code, 2, "{}", o.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_refuses_a_user_who_may_not_impersonate() {
    let (client, ns) = namespace("pf-imp").await;
    apply(&client, flow_doc(&ns, "f", json!([{"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": ns}}}]))).await;
    // A user with read access to flows but no impersonate right: ServiceAccount `viewer`.
    let path = viewer_kubeconfig(&client, &ns).await;
    let o = pf_as(path.clone(), &["get", "f", "-n", &ns]).await;
    assert_eq!(o.code, 0, "the viewer may read the flow: {}", o.stderr);
    let started = Instant::now();
    let o = pf_as(path, &["plan", "f", "-n", &ns]).await;
    assert_eq!(o.code, 2, "{}\n{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains(&format!(
            "refused: you may not impersonate ServiceAccount {ns}/flow"
        )),
        "{}",
        o.stderr
    );
    assert!(
        !o.stdout.contains("ConfigMap"),
        "nothing planned: {}",
        o.stdout
    );
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_previews_files_and_labels_and_marks_conditional_steps() {
    let (client, ns) = namespace("pf-plan2").await;
    let app = format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: from-file, namespace: {ns}}}\ndata: {{g: \"${{greeting}}\"}}\n");
    let old =
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: old-file, namespace: {ns}}}\n");
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pseudoflow-artifacts", "namespace": ns}, "data": {"app.yaml": app, "old.yaml": old}})).await;
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "old-file", "namespace": ns}})).await;
    apply(&client, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "src", "namespace": ns}, "stringData": {"password": "copy-me-not", "user": "u"}})).await;
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tagme", "namespace": ns, "labels": {"tier": "x"}}})).await;
    let cm = |name: &str| json!({"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}}});
    let cond = json!({"resource": {"kind": "ConfigMap", "name": "tagme", "namespace": ns}, "jsonPath": "{.metadata.name}", "op": "equals", "value": "tagme"});
    apply(&client, flow_doc(&ns, "files", json!([
        {"type": "applyFile", "path": "app.yaml"},
        {"type": "deleteFile", "path": "old.yaml"},
        {"type": "setLabel", "target": {"kind": "ConfigMap", "namespace": ns, "selector": {"matchLabels": {"tier": "x"}}}, "labels": {"zone": "a"}},
        {"type": "if", "condition": cond, "then": [cm("maybe")]},
        {"type": "when", "condition": cond},
        cm("guarded"),
        {"type": "include", "source": {"configMapRef": {"name": "shared", "key": "steps.yaml"}}, "as": "steps"},
        {"type": "parallel", "steps": [[cm("par-a")], [cm("par-b")]]},
        {"type": "deleteFile", "path": "/etc/legacy.conf", "nodeSelector": "!node-role.kubernetes.io/control-plane"},
        {"type": "copy", "from": {"kind": "Secret", "name": "src"}, "to": [{"namespace": ns, "name": "dst"}], "keys": [{"key": "password", "as": "pw"}]},
        {"type": "removeLabel", "target": {"kind": "ConfigMap", "name": "tagme", "namespace": ns}, "keys": ["tier"]}
    ]))).await;
    let before = versions(&client, &ns).await;
    let o = pf(&["plan", "files", "-n", &ns]).await;
    assert_eq!(versions(&client, &ns).await, before, "plan changed nothing");
    let out = &o.stdout;
    println!("{out}");
    assert_eq!(o.code, 1, "{out}\n{}", o.stderr);
    assert!(
        out.contains(&format!(
            "spec.steps[0] (applyFile) ConfigMap {ns}/from-file: added"
        )) && out.contains("+  g: new"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "spec.steps[1] (deleteFile) ConfigMap {ns}/old-file: deleted"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "spec.steps[2] (setLabel) ConfigMap {ns}/tagme: changed"
        )) && out.contains("     tier: x\n+    zone: a\n")
            && !out.contains("+apiVersion: v1\n+kind: ConfigMap\n metadata:"),
        "{out}"
    );
    assert!(
        !out.contains("pseudoflow-artifacts: changed"),
        "only the selected objects: {out}"
    );
    assert!(out.contains("spec.steps[3].then[0] (apply): undetermined — it runs only if the if at spec.steps[3] takes this branch at run time"), "{out}");
    assert!(out.contains("spec.steps[5] (apply): undetermined — it runs only if the when at spec.steps[4] holds at run time"), "{out}");
    assert!(
        out.contains(
            "spec.steps[6] (include): undetermined — its manifests are fetched at run time"
        ),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "spec.steps[7].steps[0][0] (apply) ConfigMap {ns}/par-a: added"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "spec.steps[7].steps[1][0] (apply) ConfigMap {ns}/par-b: added"
        )),
        "{out}"
    );
    assert!(
        out.contains("spec.steps[8] (deleteFile) /etc/legacy.conf: a node step"),
        "{out}"
    );
    // copy: the target as the executor would write it, its values masked.
    assert!(
        out.contains(&format!("spec.steps[9] (copy) Secret {ns}/dst: added")),
        "{out}"
    );
    assert!(
        out.contains("+  pw: '***'")
            && out.contains(&format!("+    ops.example.com/copied-from: {ns}/src")),
        "{out}"
    );
    assert!(
        !out.contains("copy-me-not")
            && !out.contains("Y29weS1tZS1ub3Q")
            && !out.contains("+  user:"),
        "{out}"
    );
    // removeLabel.
    assert!(
        out.contains(&format!(
            "spec.steps[10] (removeLabel) ConfigMap {ns}/tagme: changed"
        )) && out.contains("-    tier: x"),
        "{out}"
    );
    assert!(
        out.contains("  node worker-0\n") && !out.contains("  node cp-0\n"),
        "the selector's nodes only: {out}"
    );
}
