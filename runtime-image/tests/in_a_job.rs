//! The executor in a Job's pod, on a real control plane (testenv): the compiler lowers a node to
//! its ConfigMap and Job, the process kubelet runs `pseudoflow-step` as the pod under the flow's
//! ServiceAccount token, and the result comes back in the termination message — the production
//! path, without the controller.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::wait::await_condition;
use kube::Client;
use pseudoflow_compiler::expr::prepare_payload;
use pseudoflow_compiler::expr::{Engine, Scope};
use pseudoflow_compiler::lower::{lower, FlowRef, LowerOptions, NodeInstance};
use pseudoflow_compiler::{compile, FlowId};
use pseudoflow_crd::protocol::StepResult;
use pseudoflow_testenv::{shared_with, Options, TestEnv};
use serde_json::{json, Value};

const IMAGE: &str = "pseudoflow/runtime:e2e";

fn env() -> &'static TestEnv {
    shared_with(|| {
        let mut o = Options::default();
        o.images
            .insert_runtime(IMAGE, env!("CARGO_BIN_EXE_pseudoflow-step"));
        o
    })
    .unwrap_or_else(|e| panic!("testenv: {e}"))
}

/// A namespace with a ServiceAccount `flow` bound to `rules` (namespaced) and `cluster_rules`.
async fn namespace_with_sa(
    env: &TestEnv,
    prefix: &str,
    rules: Value,
    cluster_rules: Value,
) -> (Client, String) {
    let client = env.client().await.unwrap();
    let ns = env.namespace(prefix).await.unwrap();
    let apply = |v: Value| {
        let client = client.clone();
        async move {
            pseudoflow_testenv::apply::apply_value(&client, v, None)
                .await
                .unwrap()
        }
    };
    apply(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "flow", "namespace": ns}})).await;
    apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "flow", "namespace": ns}, "rules": rules})).await;
    apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "flow", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "flow"},
        "subjects": [{"kind": "ServiceAccount", "name": "flow", "namespace": ns}]})).await;
    apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": format!("flow-{ns}")}, "rules": cluster_rules})).await;
    apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": format!("flow-{ns}")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("flow-{ns}")},
        "subjects": [{"kind": "ServiceAccount", "name": "flow", "namespace": ns}]})).await;
    (client, ns)
}

/// Compiles `steps`, lowers node `node_id` (run `run`), runs its Job and returns the result.
async fn run_node(
    client: &Client,
    ns: &str,
    steps: Value,
    node_id: &str,
    target: Option<&str>,
    run: &str,
) -> StepResult {
    let compiled = compile(
        &FlowId {
            name: "e2e",
            namespace: Some(ns),
        },
        &json!({"steps": steps}),
    )
    .unwrap_or_else(|d| panic!("{d}"));
    let node = compiled.plan.node(node_id).unwrap();
    let scope: Scope = Scope::new();
    let (step, _) = prepare_payload(&Engine::new(), node, &scope, compiled.spec.quoting()).unwrap();
    let flow = FlowRef {
        name: "e2e".into(),
        namespace: ns.into(),
        uid: "00000000-0000-0000-0000-000000000001".into(),
        service_account: "flow".into(),
    };
    let instance: Vec<String> = target
        .map(|t| vec![t.to_string()])
        .into_iter()
        .flatten()
        .take(node.loops.len())
        .collect();
    let inst = NodeInstance {
        flow: &flow,
        run_id: run,
        node,
        instance: &instance,
        attempt: 1,
        step,
        target_node: target,
        artifacts: &[],
        segment: vec![],
        changed_before: false,
        run_secret: None,
    };
    let lowered = lower(
        &inst,
        &LowerOptions {
            image: IMAGE.into(),
            ..Default::default()
        },
    )
    .unwrap();
    // The flow object does not exist here, so drop the owner reference (the controller sets it).
    let mut input = lowered.input;
    input.metadata.owner_references = None;
    let mut job = lowered.job;
    job.metadata.owner_references = None;
    let name = job.metadata.name.clone().unwrap();
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &input)
        .await
        .unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let finished = |j: Option<&Job>| {
        j.and_then(|j| j.status.as_ref()?.conditions.clone())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
            })
    };
    tokio::time::timeout(
        Duration::from_secs(90),
        await_condition(jobs, &name, finished),
    )
    .await
    .expect("job finished in time")
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = pods
        .list(&ListParams::default().labels(&format!("job-name={name}")))
        .await
        .unwrap()
        .items
        .remove(0);
    let term = pod.status.unwrap().container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    let msg = term.message.unwrap_or_default();
    serde_json::from_str(&msg)
        .unwrap_or_else(|e| panic!("termination message is not a StepResult ({e}): {msg}"))
}

#[tokio::test]
async fn apply_creates_then_reports_unchanged_under_the_flow_identity() {
    let env = env();
    let (client, ns) = namespace_with_sa(env, "apply", json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]}]), json!([])).await;
    let steps = json!([{"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "made-by-flow", "namespace": ns}, "data": {"k": "v"}}}]);
    let first = run_node(&client, &ns, steps.clone(), "s0", None, "r1").await;
    assert!(first.ok && first.changed, "{first:?}");
    let cm = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get("made-by-flow")
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["k"], "v");
    assert!(
        cm.metadata
            .managed_fields
            .unwrap()
            .iter()
            .any(|m| m.manager.as_deref() == Some("pseudoflow")),
        "server-side apply with field manager pseudoflow"
    );
    let second = run_node(&client, &ns, steps, "s0", None, "r2").await;
    assert!(
        second.ok && !second.changed,
        "a re-run changes nothing: {second:?}"
    );
}

#[tokio::test]
async fn a_missing_permission_fails_with_forbidden_naming_the_step() {
    let env = env();
    let (client, ns) = namespace_with_sa(env, "forbidden", json!([]), json!([])).await;
    let steps = json!([{"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "nope", "namespace": ns}}}]);
    let r = run_node(&client, &ns, steps, "s0", None, "r1").await;
    assert!(!r.ok, "{r:?}");
    assert!(
        r.message.contains("forbidden")
            && r.message.contains("spec.steps[0]")
            && r.message
                .contains(&format!("system:serviceaccount:{ns}:flow")),
        "{}",
        r.message
    );
    assert!(
        Api::<ConfigMap>::namespaced(client, &ns)
            .get_opt("nope")
            .await
            .unwrap()
            .is_none(),
        "nothing was created"
    );
}

#[tokio::test]
async fn exec_output_becomes_a_variable_and_set_label_labels_a_node() {
    let env = env();
    let (client, ns) = namespace_with_sa(
        env,
        "labels",
        json!([]),
        json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]}]),
    )
    .await;
    let r = run_node(
        &client,
        &ns,
        json!([{"type": "exec", "cmd": "echo worker-1", "var": "who"}]),
        "s0",
        None,
        "r1",
    )
    .await;
    assert!(r.ok, "{r:?}");
    assert_eq!(r.vars["who"], json!("worker-1"));
    let label = format!("e2e-{ns}");
    let steps = json!([{"type": "setLabel", "target": {"kind": "Node", "name": "worker-1"}, "labels": {label.clone(): "yes"}}]);
    let r = run_node(&client, &ns, steps, "s0", None, "r2").await;
    assert!(r.ok && r.changed, "{r:?}");
    let node = Api::<Node>::all(client.clone())
        .get("worker-1")
        .await
        .unwrap();
    assert_eq!(node.metadata.labels.unwrap()[&label], "yes");
}

#[tokio::test]
async fn list_nodes_and_conditions_read_the_real_cluster() {
    let env = env();
    let (client, ns) = namespace_with_sa(
        env,
        "read",
        json!([]),
        json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]),
    )
    .await;
    let steps = json!([{"type": "loopNodes", "selector": "!node-role.kubernetes.io/control-plane", "steps": [{"type": "execNode", "cmd": "true"}]}]);
    let r = run_node(&client, &ns, steps, "s0", None, "r1").await;
    assert_eq!(
        r.nodes,
        Some(vec!["worker-0".to_string(), "worker-1".to_string()]),
        "{r:?}"
    );
    let cond = json!([{"type": "if", "condition": {"resource": {"kind": "Node", "name": "cp-0"}, "jsonPath": "{.status.conditions[?(@.type==\"Ready\")].status}", "op": "equals", "value": "True"}, "then": [{"type": "log", "message": "x"}]}]);
    let r = run_node(&client, &ns, cond, "s0", None, "r2").await;
    assert_eq!(r.condition, Some(true), "{r:?}");
}

#[tokio::test]
async fn node_steps_change_only_their_node_atomically_and_idempotently() {
    let env = env();
    let (client, ns) = namespace_with_sa(env, "node", json!([]), json!([])).await;
    let root = env.node_root("worker-0");
    std::fs::create_dir_all(root.join("var/lib/kubelet")).unwrap();
    std::fs::write(
        root.join("var/lib/kubelet/kubeadm-flags.env"),
        "KUBELET_KUBEADM_ARGS=\"--resolv-conf=/run/systemd/resolve/resolv.conf --v=2\"\n",
    )
    .unwrap();
    let body = json!([
        {"type": "configFile", "path": "/etc/kubelet-resolv.conf", "content": "nameserver 100.64.0.10\n"},
        {"type": "patchFile", "path": "/var/lib/kubelet/kubeadm-flags.env", "pattern": "--resolv-conf=[^\" ]*", "replace": "--resolv-conf=/etc/kubelet-resolv.conf"},
        {"type": "execNode", "cmd": "systemctl restart kubelet"}
    ]);
    let steps = json!([{"type": "loopNodes", "selector": "", "steps": body}]);
    let r = run_node(&client, &ns, steps.clone(), "s0-s0", Some("worker-0"), "r1").await;
    assert!(r.ok && r.changed, "{r:?}");
    let file = root.join("etc/kubelet-resolv.conf");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "nameserver 100.64.0.10\n"
    );
    assert!(
        !env.node_root("worker-1")
            .join("etc/kubelet-resolv.conf")
            .exists(),
        "only the target node"
    );
    let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
    let again = run_node(&client, &ns, steps.clone(), "s0-s0", Some("worker-0"), "r2").await;
    assert!(again.ok && !again.changed, "{again:?}");
    assert_eq!(
        std::fs::metadata(&file).unwrap().modified().unwrap(),
        mtime,
        "an unchanged file is not rewritten"
    );

    let r = run_node(&client, &ns, steps.clone(), "s0-s1", Some("worker-0"), "r1").await;
    assert!(r.ok && r.changed, "{r:?}");
    let flags = std::fs::read_to_string(root.join("var/lib/kubelet/kubeadm-flags.env")).unwrap();
    assert_eq!(
        flags,
        "KUBELET_KUBEADM_ARGS=\"--resolv-conf=/etc/kubelet-resolv.conf --v=2\"\n"
    );
    assert!(
        root.join("var/lib/kubelet/kubeadm-flags.env.pseudoflow.bak")
            .exists(),
        "previous content kept for a reverse patch"
    );

    let before = env.node_calls("worker-0").len();
    let r = run_node(&client, &ns, steps, "s0-s2", Some("worker-0"), "r1").await;
    assert!(r.ok, "{r:?}");
    let calls = env.node_calls("worker-0");
    assert!(
        calls[before..]
            .iter()
            .any(|c| c.ends_with("systemctl restart kubelet")),
        "{calls:?}"
    );
    let leftovers: Vec<_> = std::fs::read_dir(root.join("etc"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains(".tmp") || n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "no temp files left: {leftovers:?}");
}

#[tokio::test]
async fn apply_file_reads_the_default_artifacts_configmap_and_wait_for_sees_the_daemonset_roll_out()
{
    let env = env();
    let client = env.client().await.unwrap();
    let ns = "kube-system";
    let rules = json!([
        {"apiGroups": [""], "resources": ["configmaps", "serviceaccounts", "services"], "verbs": ["get", "list", "watch", "create", "patch"]},
        {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get", "list", "watch", "create", "patch"]}
    ]);
    let sa = json!([
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "flow", "namespace": ns}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "flow", "namespace": ns}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "flow", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "flow"},
            "subjects": [{"kind": "ServiceAccount", "name": "flow", "namespace": ns}]}
    ]);
    for obj in sa.as_array().unwrap() {
        pseudoflow_testenv::apply::apply_value(&client, obj.clone(), None)
            .await
            .unwrap();
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap();
    let manifest =
        std::fs::read_to_string(root.join("examples/artifacts/nodelocaldns.yaml")).unwrap();
    let cm: ConfigMap = serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": pseudoflow_crd::spec::DEFAULT_ARTIFACTS_CONFIGMAP, "namespace": ns},
        "data": {"nodelocaldns.yaml": manifest}}))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    // The seed flow's first two steps, as written in examples/nodelocaldns.yaml.
    let steps = json!([
        {"type": "applyFile", "path": "nodelocaldns.yaml"},
        {"type": "waitFor", "resource": {"kind": "DaemonSet", "name": "nodelocaldns", "namespace": "kube-system"}, "condition": "Available", "timeoutSeconds": 600}
    ]);
    let r = run_node(&client, ns, steps.clone(), "s0", None, "r1").await;
    assert!(r.ok && r.changed, "{r:?}");
    let r = run_node(&client, ns, steps, "s1", None, "r1").await;
    assert!(r.ok, "{r:?}");
    let ds = Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(client.clone(), ns)
        .get("nodelocaldns")
        .await
        .unwrap();
    let st = ds.status.unwrap();
    assert_eq!(
        (st.desired_number_scheduled, st.number_available),
        (3, Some(3)),
        "one pod per node, control plane included"
    );
    let svc = Api::<k8s_openapi::api::core::v1::Service>::namespaced(client, ns)
        .get("nodelocaldns")
        .await
        .unwrap();
    assert_eq!(svc.spec.unwrap().cluster_ip.as_deref(), Some("100.64.0.10"));
}

#[tokio::test]
async fn node_files_follow_the_nodes_own_symlinks_and_keep_its_bytes() {
    let env = env();
    let (client, ns) = namespace_with_sa(env, "nodelinks", json!([]), json!([])).await;
    let root = env.node_root("worker-1");
    // An absolute link, as the node sees it: its target exists in the node's filesystem only,
    // not in the executor's (the pod's own `/run/...`).
    let dir = format!("run/pf-e2e-{ns}");
    std::fs::create_dir_all(root.join(&dir)).unwrap();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    let link = root.join(format!("etc/resolv-{ns}.conf"));
    std::os::unix::fs::symlink(format!("/{dir}/resolv.conf"), &link).unwrap();
    // A file with bytes that are not UTF-8 around the line to patch.
    let env_file = root.join(format!("etc/kubelet-{ns}.env"));
    std::fs::write(&env_file, b"# caf\xe9\nARGS=--v=2\n\xff\xfe\n").unwrap();
    let body = json!([
        {"type": "configFile", "path": format!("/etc/resolv-{ns}.conf"), "content": "nameserver 100.64.0.10\n"},
        {"type": "patchFile", "path": format!("/etc/kubelet-{ns}.env"), "pattern": "--v=\\d", "replace": "--v=4"}
    ]);
    let steps = json!([{"type": "loopNodes", "selector": "", "steps": body}]);

    let r = run_node(&client, &ns, steps.clone(), "s0-s0", Some("worker-1"), "r1").await;
    assert!(r.ok && r.changed, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(root.join(&dir).join("resolv.conf")).unwrap(),
        "nameserver 100.64.0.10\n",
        "the node's file behind the link is written"
    );
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink(),
        "the node's link stays"
    );

    let r = run_node(&client, &ns, steps, "s0-s1", Some("worker-1"), "r1").await;
    assert!(r.ok && r.changed, "{r:?}");
    assert_eq!(
        std::fs::read(&env_file).unwrap(),
        b"# caf\xe9\nARGS=--v=4\n\xff\xfe\n",
        "bytes outside the match are kept exactly"
    );
}
