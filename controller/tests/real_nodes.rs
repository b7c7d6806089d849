//! Flows on real nodes (testenv's kubelet + containerd nodes, `make images`' runtime image):
//! an `exec` step that writes /tmp and runs kubectl against the in-cluster API (ServiceAccount
//! token, `kubernetes.default` through kube-proxy), `exec` into a named pod, and node steps (configFile, patchFile,
//! execNode `systemctl restart kubelet`) whose files land in the node's own root, never the
//! machine's `/etc`; the controller image itself as a pod with in-cluster config, and as the
//! chart's Deployment (also serving a flow bound to a kind, as its ServiceAccount), its
//! webhooks called by the API server over the pod network (a typo refused at apply, `kubectl pf
//! approve` stamped); and the
//! seed's four example flows as written; and a tenant's shell syntax in a bound `v1beta1` flow's
//! command, echoed as data by the executor pod (issue #32).
//!
//! The cluster has only real nodes (`cp-0`, tainted control plane, and `node-1`), so no Job can
//! land on a simulated kubelet that would pretend to run it. Never skipped: a real node that
//! cannot start fails every test here with the reason.

use std::sync::Arc;
use std::time::Instant;

use pseudoflow_controller::metrics::Metrics;
use pseudoflow_controller::{run_controller, Context};
use pseudoflow_test_support::{create_flow, install_crd, wait_done, FlowNamespace};
use pseudoflow_testenv::real_node::RUNTIME_IMAGE;
use pseudoflow_testenv::{shared_with, Options, TestEnv};
use serde_json::json;

const WORKER: &str = "node-1";

fn env() -> &'static TestEnv {
    shared_with(|| Options::with_real_nodes(0, 2))
        .unwrap_or_else(|e| panic!("real-node cluster did not start: {e}"))
}

fn controller(client: &kube::Client, ns: &str, node_steps: bool) -> tokio::task::JoinHandle<()> {
    let mut ctx = Context::new(
        client.clone(),
        RUNTIME_IMAGE.into(),
        Arc::new(Metrics::default()),
    );
    if node_steps {
        ctx = ctx.with_node_step_namespaces([ns].into_iter().collect());
    }
    tokio::spawn(run_controller(Arc::new(ctx), Some(ns.to_string())))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_step_writes_tmp_and_runs_kubectl_in_cluster() {
    let env = env();
    let client = env.client().await.unwrap();
    install_crd(&client).await;
    let ns = FlowNamespace::new("real-exec")
        .rules(json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]))
        .create(env, &client)
        .await;
    let _c = controller(&client, &ns, false);
    let t0 = Instant::now();
    create_flow(
        &client,
        &ns,
        "exec",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "exec", "var": "out", "cmd": format!(
                "echo scratch > /tmp/probe && cat /tmp/probe && kubectl -n {ns} get configmap kube-root-ca.crt -o name")},
            {"type": "log", "message": "${out}"},
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "exec", 240).await;
    eprintln!("exec flow on a real node done in {:?}", t0.elapsed());
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let out = status.to_string();
    assert!(
        out.contains("scratch") && out.contains("configmap/kube-root-ca.crt"),
        "{status:#}"
    );
}

/// Seed §10: `exec` into a named pod, here a container of the runtime image started by
/// containerd on the worker; the command runs in that container (its hostname, a file it
/// writes there), through the real kubelet's exec stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_step_runs_in_a_named_pod_on_a_real_node() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, PostParams};
    let env = env();
    let client = env.client().await.unwrap();
    install_crd(&client).await;
    let ns = FlowNamespace::new("real-exec-pod")
        .rules(json!([
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get", "create"]},
        ]))
        .create(env, &client)
        .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let target: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "target"},
        "spec": {"nodeName": WORKER, "containers": [{"name": "app", "image": RUNTIME_IMAGE,
            "imagePullPolicy": "Never", "command": ["sleep", "3600"]}]}}))
    .unwrap();
    pods.create(&PostParams::default(), &target).await.unwrap();
    let _c = controller(&client, &ns, false);
    create_flow(
        &client,
        &ns,
        "exec-pod",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "waitFor", "resource": {"kind": "Pod", "name": "target"}, "condition": "Ready",
             "timeoutSeconds": 180},
            {"type": "exec", "pod": "target", "container": "app", "var": "out",
             "cmd": "echo inside > /tmp/mark && cat /etc/hostname /tmp/mark"},
            {"type": "log", "message": "${out}"},
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "exec-pod", 240).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let out = status.to_string();
    // The pod's own hostname (its name) and the file it wrote in its container.
    assert!(
        out.contains("target") && out.contains("inside"),
        "{status:#}"
    );
    let pod = pods.get("target").await.unwrap();
    assert_eq!(
        pod.spec.and_then(|s| s.node_name).as_deref(),
        Some(WORKER),
        "ran on the real worker"
    );
    assert!(
        !std::path::Path::new("/tmp/mark").exists(),
        "the command ran on the machine, not in the pod"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_steps_change_the_nodes_root_and_restart_its_kubelet() {
    let env = env();
    let client = env.client().await.unwrap();
    install_crd(&client).await;
    let ns = FlowNamespace::new("real-node-steps")
        .cluster_rules(
            json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]),
        )
        .create(env, &client)
        .await;
    pseudoflow_test_support::apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns,
            "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}}),
    )
    .await;
    let node = env.real_node(WORKER).expect("real worker");
    let root = node.root();
    let flags = root.join("var/lib/kubelet/kubeadm-flags.env");
    std::fs::write(&flags, pseudoflow_testenv::env::KUBEADM_FLAGS).unwrap();
    let kubelet_before = node.exec("cat /run/pseudoflow/kubelet.pid").unwrap();
    let conf = format!("/etc/pseudoflow-e2e-{}.conf", std::process::id());
    // A user and group only the node has: `owner` must be looked up in the node's /etc, not
    // the machine's (where the name does not exist) and not in the executor image's.
    let user = format!("pfe2e{}", std::process::id() % 10_000);
    for (file, line) in [
        (
            "etc/passwd",
            format!("{user}:x:4321:4322::/nonexistent:/usr/sbin/nologin\n"),
        ),
        ("etc/group", format!("{user}:x:4322:\n")),
    ] {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(root.join(file))
            .unwrap();
        f.write_all(line.as_bytes()).unwrap();
    }

    let _c = controller(&client, &ns, true);
    create_flow(
        &client,
        &ns,
        "node-steps",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "loopNodes", "selector": format!("kubernetes.io/hostname={WORKER}"), "steps": [
                {"type": "configFile", "path": conf, "content": "nameserver 100.64.0.10\n",
                 "mode": "0640", "owner": format!("{user}:{user}")},
                {"type": "patchFile", "path": "/var/lib/kubelet/kubeadm-flags.env",
                 "pattern": "--resolv-conf=[^\" ]*", "replace": "--resolv-conf=/etc/kubelet-resolv.conf",
                 "createIfMissing": false},
                {"type": "execNode", "cmd": "systemctl daemon-reexec\nsystemctl restart kubelet"},
            ]},
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "node-steps", 300).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");

    // In the node's root, not the machine's.
    let written = std::fs::read_to_string(root.join(conf.trim_start_matches('/'))).unwrap();
    assert_eq!(written, "nameserver 100.64.0.10\n");
    let meta = std::fs::metadata(root.join(conf.trim_start_matches('/'))).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(meta.mode() & 0o7777, 0o640, "configFile mode");
    assert_eq!(
        (meta.uid(), meta.gid()),
        (4321, 4322),
        "configFile owner, by the node's names"
    );
    assert!(
        !std::path::Path::new(&conf).exists(),
        "{conf} reached the machine's /etc"
    );
    assert!(std::fs::read_to_string(&flags)
        .unwrap()
        .contains("--resolv-conf=/etc/kubelet-resolv.conf"));
    let calls = node.exec("cat /var/log/systemctl.log").unwrap();
    assert!(calls.contains("restart kubelet"), "{calls}");
    let kubelet_after = node.exec("cat /run/pseudoflow/kubelet.pid").unwrap();
    assert_ne!(
        kubelet_before, kubelet_after,
        "the node's kubelet was restarted"
    );
}

/// The controller image of `make images`, as a pod on a real node: in-cluster config (its
/// ServiceAccount token, `kubernetes.default` through kube-proxy), Jobs of the runtime image.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_image_runs_a_flow_from_a_pod_with_in_cluster_config() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{Api, PostParams};
    let env = env();
    let client = env.client().await.unwrap();
    install_crd(&client).await;
    let ns = FlowNamespace::new("real-controller")
        .rules(json!([{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["get"]}]))
        .create(env, &client)
        .await;
    let apply = |v| pseudoflow_test_support::apply(&client, v);
    apply(json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "controller", "namespace": ns}}))
    .await;
    // The chart's rights are tested elsewhere (demo/tests/chart_rbac.rs); here, in-cluster config.
    apply(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": format!("{ns}-controller")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "controller", "namespace": ns}]}))
    .await;
    let image = pseudoflow_testenv::real_node::images_dir().join("controller.oci.tar");
    assert!(
        image.is_file(),
        "{} missing: run `make images`",
        image.display()
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "controller"},
        "spec": {"serviceAccountName": "controller", "nodeName": WORKER, "containers": [{
            "name": "controller", "image": "docker.io/pseudoflow/controller:local",
            "imagePullPolicy": "Never",
            "args": ["--image", RUNTIME_IMAGE, "--namespace", ns]}]}}))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let t0 = Instant::now();
    create_flow(
        &client,
        &ns,
        "hello",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "exec", "var": "out", "cmd": format!("kubectl -n {ns} get serviceaccount flow -o name")},
            {"type": "log", "message": "${out}"},
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "hello", 240).await;
    let logs = pods
        .logs("controller", &Default::default())
        .await
        .unwrap_or_default();
    eprintln!("flow run by the controller pod done in {:?}", t0.elapsed());
    assert_eq!(
        status["phase"], "Succeeded",
        "{status:#}\ncontroller log:\n{logs}"
    );
    assert!(
        status.to_string().contains("serviceaccount/flow"),
        "{status:#}"
    );
    assert!(logs.contains("launched"), "{logs}");
}

/// `helm install` of the chart on real nodes, as a user would: the controller as a Deployment
/// of two replicas from the local image (leader election on, in-cluster config), running a
/// flow; every controller pod deleted while a step runs, and the flow still completes with one
/// Job per step; then the metrics scraped from the leading pod over the pod network, as
/// Prometheus would. The webhook is off here; the chart's webhooks on real nodes are the next
/// test's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_runs_the_controller_as_a_deployment_that_survives_losing_its_pods_mid_flow() {
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    use kube::api::{Api, DeleteParams, ListParams};
    let env = env();
    let client = env.client().await.unwrap();
    install_crd(&client).await;
    let ns = FlowNamespace::new("real-chart")
        .rules(
            json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "patch"]}]),
        )
        .create(env, &client)
        .await;
    let sets = ["webhook.enabled=false", "replicas=2"];
    helm_install(env, &ns, sets.iter().flat_map(|kv| ["--set", kv])).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let controllers = ListParams::default().labels("app.kubernetes.io/name=pseudoflow-operator");
    wait_controllers_ready(&client, &ns, 2).await;

    // A flow whose first step runs long enough to lose every controller pod under it.
    create_flow(&client, &ns, "survivor", json!({"serviceAccountName": "flow", "steps": [
        {"name": "slow", "type": "exec", "cmd": "sleep 8", "isolate": true},
        {"name": "after", "type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "after", "namespace": ns}}}
    ]}))
    .await;
    pseudoflow_test_support::wait_status(
        &client,
        &ns,
        "survivor",
        120,
        "the slow step running",
        |st| {
            st["steps"].as_array().is_some_and(|s| {
                s.iter()
                    .any(|s| s["path"] == "spec.steps[0]" && s["phase"] == "Running")
            })
        },
    )
    .await;
    let before: Vec<String> = pods
        .list(&controllers)
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(before.len(), 2, "{before:?}");
    pods.delete_collection(&DeleteParams::default(), &controllers)
        .await
        .unwrap();
    let status = wait_done(&client, &ns, "survivor", 240).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let after: Vec<Pod> = pods.list(&controllers).await.unwrap().items;
    assert!(
        after
            .iter()
            .all(|p| !before.contains(p.metadata.name.as_ref().unwrap())),
        "the flow was finished by new controller pods"
    );
    let jobs = Api::<Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels("ops.example.com/flow=survivor"))
        .await
        .unwrap()
        .items;
    let mut nodes: Vec<String> = jobs
        .iter()
        .map(|j| j.metadata.labels.as_ref().unwrap()["ops.example.com/node"].clone())
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["s0", "s1"], "one Job per step, none twice");

    // Metrics, from inside the cluster: a flow's bash script reads the leading controller
    // pod's /metrics (the Lease holder's identity starts with its pod name), as Prometheus would.
    let lease = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), &ns)
        .get("pseudoflow-controller")
        .await
        .unwrap();
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    let leader = pods
        .list(&controllers)
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|p| holder.starts_with(p.metadata.name.as_deref().unwrap_or("-")))
        .unwrap_or_else(|| panic!("no controller pod holds the Lease ({holder})"));
    let ip = leader
        .status
        .and_then(|s| s.pod_ip)
        .expect("the leader's pod IP");
    let scrape = format!(
        "exec 3<>/dev/tcp/{ip}/8080; printf 'GET /metrics HTTP/1.0\\r\\n\\r\\n' >&3; cat <&3 > /tmp/m; kubectl create configmap scraped --from-file=m=/tmp/m"
    );
    create_flow(
        &client,
        &ns,
        "scrape",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "script", "code": scrape}
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "scrape", 120).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let text = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get("scraped")
        .await
        .unwrap()
        .data
        .unwrap()["m"]
        .clone();
    assert!(text.starts_with("HTTP/1.0 200 OK"), "{text}");
    // The new leader finished the run the deleted pods had started, and counted it.
    assert!(
        text.contains(&format!(
            "pseudoflow_runs_total{{flow=\"{ns}/survivor\",status=\"Succeeded\"}} 1"
        )),
        "{text}"
    );
    a_bound_flow_is_served_by_the_charts_controller(&client, &ns).await;
}

/// The chart's validating and mutating webhooks on real nodes, installed as its values document
/// for a cluster whose API server presents a client certificate to admission webhooks
/// (`webhook.clientAuth.caBundle`: the CA of testenv's, whose Common Name is the chart's default
/// `names`): the API server, on the machine, calls the controller pod through the chart's
/// Service over the pod network. A flow with a typo is refused at `kubectl apply`, naming its
/// path, and is not stored; `kubectl pf approve` of a waiting step is stamped by the mutating
/// webhook (which stamps only for a caller with that certificate) and accepted by the
/// controller: the run Succeeded, its status naming the approver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_webhooks_refuse_a_typo_at_apply_and_stamp_kubectl_pf_approve() {
    use pseudoflow_test_support::{approval::gated_spec, flows, step, wait_status};
    let env = env();
    let client = env.client().await.unwrap();
    install_crd(&client).await;
    let ns = FlowNamespace::new("real-webhook")
        .create(env, &client)
        .await;
    let ca = format!(
        "webhook.clientAuth.caBundle={}",
        env.webhook_client_ca().display()
    );
    helm_install(env, &ns, ["--set-file", ca.as_str()]).await;
    wait_controllers_ready(&client, &ns, 1).await;

    // Ready is not yet called: the controller writes its CA into both configurations once it
    // serves. Until the API server reaches it, `kubectl apply` fails calling the webhook.
    let typo = format!(
        r#"{{"apiVersion": "ops.example.com/v1alpha1", "kind": "PseudoFlow",
        "metadata": {{"name": "typo", "namespace": "{ns}"}},
        "spec": {{"steps": [{{"type": "loop", "forEach": ["a"], "steps": [{{"type": "sleep", "seconds": "ten"}}]}}]}}}}"#
    );
    let t0 = Instant::now();
    let out = loop {
        let (ok, out) = kubectl_stdin(env, &["apply", "-f", "-"], &typo).await;
        assert!(!ok, "a flow with a typo was stored: {out}");
        if out.contains("denied the request") || t0.elapsed().as_secs() > 90 {
            break out;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    };
    eprintln!(
        "the webhook refused the typo {:?} after the Deployment was ready",
        t0.elapsed()
    );
    assert!(
        out.contains("denied the request") && out.contains("spec.steps[0].steps[0].seconds"),
        "kubectl apply of a typo, not refused by the webhook naming its path: {out}"
    );
    assert!(
        flows(&client, &ns).get_opt("typo").await.unwrap().is_none(),
        "the refused flow is stored"
    );

    // An approval, given with `kubectl pf approve` and stamped by the chart's mutating webhook.
    create_flow(&client, &ns, "gated", gated_spec(None)).await;
    wait_status(&client, &ns, "gated", 240, "waiting for approval", |st| {
        st["reason"] == "WaitingForApproval"
    })
    .await;
    let pf = pseudoflow_test_support::binaries::cli_binary();
    let kubeconfig = env.kubeconfig_path().display().to_string();
    let args = [
        "--kubeconfig",
        &kubeconfig,
        "approve",
        "gated",
        "gate",
        "-n",
        &ns,
    ];
    let out = std::process::Command::new(pf).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "kubectl pf approve: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = wait_done(&client, &ns, "gated", 240).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let record = &step(&status, "spec.steps[1]")["approval"];
    assert_eq!(record["decision"], "Approved", "{status:#}");
    assert_eq!(record["user"], "admin", "{status:#}");
}

/// The chart's values for the local images (`make images`), the CRD left to [`install_crd`],
/// the controller watching `ns` only, no node steps.
fn local_chart_values(ns: &str) -> Vec<String> {
    vec![
        "crds.install=false".to_string(),
        "image.controller.repository=docker.io/pseudoflow/controller".into(),
        "image.controller.tag=local".into(),
        "image.controller.pullPolicy=Never".into(),
        "image.runtime.repository=docker.io/pseudoflow/runtime".into(),
        "image.runtime.tag=local".into(),
        format!("watchNamespaces={{{ns}}}"),
        "nodeSteps.namespaces=null".into(),
    ]
}

/// `kubectl ARGS` against `env` with `input` on stdin: whether it succeeded, and its output.
async fn kubectl_stdin(env: &TestEnv, args: &[&str], input: &str) -> (bool, String) {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let kubectl = pseudoflow_testenv::binaries::bin_dir().join("kubectl");
    let mut child = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(env.kubeconfig_path())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
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

/// `helm install` of the chart as release `ns` in `ns`, as a user would: the
/// [`local_chart_values`], then `extra` arguments (`--set k=v`, `--set-file k=path`).
async fn helm_install<'a>(env: &TestEnv, ns: &str, extra: impl IntoIterator<Item = &'a str>) {
    let chart =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/pseudoflow-operator");
    let mut args: Vec<String> = vec!["install".into(), ns.into(), chart.display().to_string()];
    args.extend(["--namespace".into(), ns.into()]);
    for kv in local_chart_values(ns) {
        args.extend(["--set".to_string(), kv]);
    }
    args.extend(extra.into_iter().map(String::from));
    helm(env, args).await;
}

/// Runs helm with `args` against `env`; panics with its output if it fails.
async fn helm(env: &TestEnv, args: Vec<String>) {
    let helm = pseudoflow_test_support::helm::binary();
    let kubeconfig = env.kubeconfig_path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(helm)
            .env("KUBECONFIG", kubeconfig)
            .args(&args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "helm: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Waits until the chart's controller Deployment in `ns` has `replicas` ready pods; on a
/// timeout, panics with the pods' status and logs and the namespace's Events.
async fn wait_controllers_ready(client: &kube::Client, ns: &str, replicas: i32) {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{Event, Pod};
    use kube::api::{Api, ListParams};
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let name = format!("{ns}-pseudoflow");
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let controllers = ListParams::default().labels("app.kubernetes.io/name=pseudoflow-operator");
    let t0 = Instant::now();
    loop {
        let status = deployments
            .get(&name)
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        if status.ready_replicas == Some(replicas) {
            break;
        }
        if t0.elapsed().as_secs() > 180 {
            let mut why = String::new();
            for p in pods.list(&controllers).await.unwrap().items {
                let n = p.metadata.name.clone().unwrap_or_default();
                let log = pods.logs(&n, &Default::default()).await.unwrap_or_default();
                why += &format!("{n}: {:?}\n{log}\n", p.status);
            }
            let events = Api::<Event>::namespaced(client.clone(), ns)
                .list(&ListParams::default())
                .await
                .unwrap();
            for e in events.items {
                why += &format!(
                    "event {:?} {:?}: {:?}\n",
                    e.involved_object.name, e.reason, e.message
                );
            }
            panic!("the controller Deployment is not ready after 180 s: {status:?}\n{why}");
        }
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    }
    eprintln!(
        "controller Deployment ready {:?} after helm install",
        t0.elapsed()
    );
}

/// A flow bound to a kind, served by the chart's controller pod: it watches, lists and
/// finalizes the objects and writes their status as the flow's ServiceAccount, impersonated
/// from the pod's in-cluster identity (the chart's ClusterRole, no rights on the kind); each
/// object's `apply` runs in that controller pod, as the flow's ServiceAccount, with no Job
/// (`apiSteps` Auto: docs/decisions.md#api-steps-in-the-controller); a deleted object is let go.
async fn a_bound_flow_is_served_by_the_charts_controller(client: &kube::Client, ns: &str) {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, DeleteParams};
    use pseudoflow_test_support::{apply, eventually};
    const GROUP: &str = "real.bind.example.com";
    let kind = pseudoflow_test_support::TestKind::new(GROUP, "Gizmo");
    let gizmos = kind.install(client, ns).await;
    apply(
        client,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "gizmos", "namespace": ns}, "rules": kind.bound_rules()}),
    )
    .await;
    apply(
        client,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "gizmos", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "gizmos"},
        "subjects": [{"kind": "ServiceAccount", "name": "flow", "namespace": ns}]}),
    )
    .await;
    create_flow(
        client,
        ns,
        "gizmo",
        json!({"serviceAccountName": "flow",
        "bind": {"apiVersion": format!("{GROUP}/v1"), "kind": "Gizmo", "record": "Child"},
        "steps": [{"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "${object.metadata.name}-made", "namespace": ns},
            "data": {"size": "${object.spec.size}"}}}]}),
    )
    .await;
    apply(client, kind.object(ns, "g1", json!({"size": "3Gi"}))).await;
    eventually(
        180,
        "gizmo g1 Running, written by the controller pod",
        || async {
            let g = gizmos.get("g1").await.unwrap();
            g.data["status"]["phase"] == "Running"
        },
    )
    .await;
    let made = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get("g1-made")
        .await
        .unwrap();
    assert_eq!(made.data.unwrap()["size"], "3Gi");
    let jobs = pseudoflow_test_support::jobs(client, ns).await;
    let of_gizmos: Vec<_> = jobs
        .iter()
        .filter_map(|j| j.metadata.name.as_deref())
        .filter(|n| n.starts_with("gizmo"))
        .collect();
    assert!(
        of_gizmos.is_empty(),
        "the object's run made Jobs: {of_gizmos:?}"
    );
    let g1 = gizmos.get("g1").await.unwrap();
    let finalizers = g1.metadata.finalizers.unwrap_or_default();
    assert!(
        finalizers
            .iter()
            .any(|f| f.starts_with("ops.example.com/flow-gizmo")),
        "{finalizers:?}"
    );
    gizmos.delete("g1", &DeleteParams::default()).await.unwrap();
    eventually(120, "gizmo g1 let go", || async {
        gizmos.get_opt("g1").await.unwrap().is_none()
    })
    .await;
}

/// The seed's four example flows, as written (`make demo`'s), on real nodes: NodeLocal DNS (its
/// DaemonSet Available on both nodes through the declared stand-in for its image, then each
/// kubelet re-pointed and restarted, one node at a time), the API-server VIP (the control
/// plane's kubeconfigs patched, every kubelet restarted), labels from `exec` (kubectl in the
/// runtime image, in-cluster) and labels from a JSON map. Every file lands in the nodes' own
/// roots, never the machine's `/etc`, and every kubelet comes back Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_four_flows_succeed_on_real_nodes() {
    use k8s_openapi::api::apps::v1::DaemonSet;
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::api::{Api, ListParams};
    let env = env();
    let client = env.client().await.unwrap();
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap();
    pseudoflow_testenv::seed::prepare(env, &client, repo)
        .await
        .unwrap();
    pseudoflow_test_support::apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system",
            "labels": {"pod-security.kubernetes.io/enforce": "privileged"}}}),
    )
    .await;
    let machine_resolv = std::fs::read("/etc/kubelet-resolv.conf").ok();
    let pids_before: Vec<String> = env
        .real_nodes()
        .iter()
        .map(|n| n.exec("cat /run/pseudoflow/kubelet.pid").unwrap())
        .collect();
    // The seed flows live in kube-system (node steps allowed there) and default.
    let _system = controller(&client, "kube-system", true);
    let _default = controller(&client, "default", false);
    let t0 = Instant::now();
    let names = pseudoflow_testenv::seed::apply_flows(&client, repo)
        .await
        .unwrap();
    assert_eq!(names.len(), 4);
    for (ns, name) in &names {
        let status = wait_done(&client, ns, name, 300).await;
        assert_eq!(status["phase"], "Succeeded", "{ns}/{name}: {status:#}");
    }
    eprintln!(
        "the seed's four flows Succeeded on real nodes in {:?}",
        t0.elapsed()
    );

    // NodeLocal DNS: one stand-in pod per real node, Ready.
    let ds = Api::<DaemonSet>::namespaced(client.clone(), "kube-system")
        .get("nodelocaldns")
        .await
        .unwrap();
    let st = ds.status.unwrap();
    assert_eq!(
        (st.desired_number_scheduled, st.number_available),
        (2, Some(2)),
        "{st:?}"
    );
    let pods = Api::<Pod>::namespaced(client.clone(), "kube-system")
        .list(&ListParams::default().labels("k8s-app=nodelocaldns"))
        .await
        .unwrap()
        .items;
    let mut on: Vec<String> = pods
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    on.sort();
    assert_eq!(on, ["cp-0", WORKER], "{pods:?}");

    for (node, before) in env.real_nodes().iter().zip(&pids_before) {
        let root = node.root();
        let resolv = std::fs::read_to_string(root.join("etc/kubelet-resolv.conf")).unwrap();
        assert!(
            resolv.contains("nameserver 100.64.0.10"),
            "{}: {resolv}",
            node.name
        );
        let flags =
            std::fs::read_to_string(root.join("var/lib/kubelet/kubeadm-flags.env")).unwrap();
        assert!(
            flags.contains("--resolv-conf=/etc/kubelet-resolv.conf"),
            "{}: {flags}",
            node.name
        );
        // NodeLocal DNS and the VIP each restarted this node's kubelet.
        let calls = node.exec("cat /var/log/systemctl.log").unwrap();
        assert!(
            calls.matches("restart kubelet").count() >= 2,
            "{}: {calls}",
            node.name
        );
        let after = node.exec("cat /run/pseudoflow/kubelet.pid").unwrap();
        assert_ne!(&after, before, "{}'s kubelet was restarted", node.name);
    }
    // The VIP flow re-pointed the control plane's kubeconfigs (kubeadm's files on cp-0).
    let cp = env.real_node("cp-0").unwrap().root();
    for f in ["controller-manager.conf", "scheduler.conf"] {
        let text = std::fs::read_to_string(cp.join("etc/kubernetes").join(f)).unwrap();
        assert!(
            text.contains("server: https://100.64.0.2:6443"),
            "{f}: {text}"
        );
    }
    assert_eq!(
        std::fs::read("/etc/kubelet-resolv.conf").ok(),
        machine_resolv,
        "the machine's /etc was changed"
    );

    // Labels from exec: every node without a zone got zone=auto. And every kubelet is back.
    let nodes: Api<Node> = Api::all(client.clone());
    pseudoflow_test_support::eventually(60, "both real nodes Ready again", || {
        let nodes = nodes.clone();
        async move {
            let l = nodes.list(&ListParams::default()).await.unwrap().items;
            l.len() == 2 && l.iter().all(pseudoflow_testenv::env::node_ready)
        }
    })
    .await;
    for n in nodes.list(&ListParams::default()).await.unwrap().items {
        let labels = n.metadata.labels.unwrap_or_default();
        assert_eq!(
            labels.get("zone").map(String::as_str),
            Some("auto"),
            "{labels:?}"
        );
    }
}

/// `spec.options.executor` on real kubelets (issue #34): the control-plane node `cp-0` carries
/// its `NoSchedule` taint (the cluster's own, not added here: the other tests of this binary
/// share the nodes while they run). A step selecting `cp-0` without a toleration is never
/// scheduled; with it, it runs there, and its pod carries the flow's private-registry pull
/// Secret, started by the real kubelet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_lands_on_the_tainted_node_only_with_the_toleration_and_carries_the_pull_secret() {
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::api::{Api, ListParams};
    let env = env();
    let client = env.client().await.unwrap();
    install_crd(&client).await;
    let ns = FlowNamespace::new("real-executor")
        .create(env, &client)
        .await;
    let cp = Api::<Node>::all(client.clone()).get("cp-0").await.unwrap();
    let taints = cp.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(
        taints.iter().any(|t| t.effect == "NoSchedule"),
        "cp-0 is tainted NoSchedule: {taints:?}"
    );
    let tolerations: Vec<_> = taints
        .iter()
        .map(|t| json!({"key": t.key, "operator": "Exists", "effect": t.effect}))
        .collect();
    // A private registry's credentials, as `kubectl create secret docker-registry` makes them.
    let auth =
        r#"{"auths":{"registry.example.com":{"username":"u","password":"p","auth":"dTpw"}}}"#;
    pseudoflow_test_support::apply(
        &client,
        json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
            "metadata": {"name": "regcred", "namespace": ns},
            "stringData": {".dockerconfigjson": auth}}),
    )
    .await;
    let _c = controller(&client, &ns, false);
    let flow = |executor: serde_json::Value| {
        json!({"serviceAccountName": "flow", "options": {"executor": executor}, "steps": [
            {"type": "exec", "var": "out", "cmd": "echo landed"},
            {"type": "log", "message": "${out}"},
        ]})
    };
    let on_cp = json!({"kubernetes.io/hostname": "cp-0"});
    create_flow(
        &client,
        &ns,
        "without",
        flow(json!({"nodeSelector": on_cp})),
    )
    .await;
    create_flow(
        &client,
        &ns,
        "with",
        flow(json!({"nodeSelector": on_cp, "tolerations": tolerations,
            "imagePullSecrets": [{"name": "regcred"}]})),
    )
    .await;
    let status = wait_done(&client, &ns, "with", 240).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert!(status.to_string().contains("landed"), "{status:#}");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let of = |flow: &str| ListParams::default().labels(&format!("ops.example.com/flow={flow}"));
    let with = pods.list(&of("with")).await.unwrap().items;
    assert!(!with.is_empty(), "the step's pod");
    for p in &with {
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(
            spec.node_name.as_deref(),
            Some("cp-0"),
            "on the tainted node"
        );
        let pulls: Vec<_> = spec
            .image_pull_secrets
            .iter()
            .flatten()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(pulls, ["regcred"], "the pull secret is on the pod");
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        assert_eq!(phase, Some("Succeeded"), "started by cp-0's kubelet");
    }
    // Without the toleration: still unscheduled after the other one ran.
    let without = pods.list(&of("without")).await.unwrap().items;
    assert_eq!(without.len(), 1, "{without:#?}");
    let pod = &without[0];
    assert_eq!(pod.spec.as_ref().unwrap().node_name, None, "not scheduled");
    let scheduled = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()));
    assert_eq!(
        scheduled,
        Some(("False".to_string(), "Unschedulable".to_string())),
        "the taint keeps it off cp-0"
    );
    let flows: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &pseudoflow_controller::flow::flow_resource(),
    );
    let still = flows.get("without").await.unwrap().data["status"]["phase"].clone();
    assert_eq!(still, "Running", "the untolerated step waits");
}

/// Issue #32's shell case on real kubelets + containerd: a tenant's object of a kind bound to a
/// `v1beta1` flow carries `users: ["x; id -u"]`, and the flow's loop runs
/// `cmd: "echo hi ${item}"` over them in the runtime image on a real node. Quoted by default,
/// the executor pod prints the literal text and never runs `id` (its output and its pod's log
/// hold `hi x; id -u`, no uid); the flow's `| raw` opt-out is told in its status. As
/// `v1alpha1` (raw) the same flow runs `id` (checked by hand: `said` was `hi x\n65532`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_shell_syntax_is_echoed_as_data_by_the_executor_on_a_real_node() {
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    use kube::api::{Api, ListParams, LogParams};
    use pseudoflow_test_support::{apply, wait_status};
    const GROUP: &str = "real.quote.example.com";
    let env = env();
    let client = env.client().await.unwrap();
    install_crd(&client).await;
    let kind = pseudoflow_test_support::TestKind::new(GROUP, "Tenant");
    let mut rules = kind.bound_rules().as_array().unwrap().clone();
    rules.push(json!({"apiGroups": [""], "resources": ["configmaps"],
        "verbs": ["get", "list", "create", "patch", "delete"]}));
    let ns = FlowNamespace::new("real-quote")
        .rules(json!(rules))
        .create(env, &client)
        .await;
    let tenants = kind.install(&client, &ns).await;
    // A bound flow acts as its ServiceAccount: the controller needs a configuration to
    // impersonate it with (here the admin's).
    let kubeconfig = kube::config::Kubeconfig::read_from(env.kubeconfig_path()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let ctx = Context::new(
        kube::Client::try_from(config.clone()).unwrap(),
        RUNTIME_IMAGE.into(),
        Arc::new(Metrics::default()),
    )
    .with_config(config);
    let _c = tokio::spawn(run_controller(Arc::new(ctx), Some(ns.clone())));
    apply(
        &client,
        json!({"apiVersion": "ops.example.com/v1beta1", "kind": "PseudoFlow",
        "metadata": {"name": "greeter", "namespace": ns},
        "spec": {"serviceAccountName": "flow",
            "bind": {"apiVersion": format!("{GROUP}/v1"), "kind": "Tenant"},
            "steps": [
                {"type": "loop", "forEach": "${object.spec.users}", "steps": [
                    {"type": "exec", "cmd": "echo hi ${item}", "var": "said", "logOutput": true},
                    {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "${object.metadata.name}-said-${index}"},
                        "data": {"said": "${said}"}}}]},
                {"type": "exec", "cmd": "echo ${object.spec.flag | raw}"}]}}),
    )
    .await;
    apply(
        &client,
        kind.object(&ns, "t", json!({"users": ["x; id -u"], "flag": "-n"})),
    )
    .await;
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let written = tokio::time::timeout(std::time::Duration::from_secs(240), async {
        while cms.get_opt("t-said-0").await.unwrap().is_none() {
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
    });
    if written.await.is_err() {
        let flows = pseudoflow_test_support::flows(&client, &ns);
        let all = flows.list(&ListParams::default()).await.unwrap();
        let seen: Vec<_> = all
            .items
            .iter()
            .map(|f| (&f.metadata.name, &f.data["status"]))
            .collect();
        let object = tenants.get("t").await.unwrap().data;
        panic!("the tenant's greeting was never written; flows: {seen:#?}; object: {object:#}");
    }
    let said = cms.get("t-said-0").await.unwrap().data.unwrap()["said"].clone();
    assert_eq!(
        said, "hi x; id -u",
        "echo got one literal word; id did not run"
    );
    // What the executor pod on the real node printed (logOutput), read through its kubelet.
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let mut logs = String::new();
    for p in pods.list(&ListParams::default()).await.unwrap().items {
        let name = p.metadata.name.unwrap();
        let node = p.spec.and_then(|s| s.node_name).unwrap_or_default();
        assert!(
            node == WORKER || node == "cp-0",
            "{name} on a real node: {node}"
        );
        let log = pods
            .logs(&name, &LogParams::default())
            .await
            .unwrap_or_default();
        logs.push_str(&log);
    }
    assert!(
        logs.contains("hi x; id -u"),
        "the pod printed the literal text: {logs}"
    );
    assert!(
        !logs.contains("65532"),
        "id never ran (the runtime image's uid): {logs}"
    );
    let status = wait_status(&client, &ns, "greeter", 120, "the opt-out told", |s| {
        s["warnings"].as_array().is_some_and(|w| !w.is_empty())
    })
    .await;
    let warning = status["warnings"][0].as_str().unwrap();
    assert!(
        warning.starts_with("spec.steps[1].cmd: ${object.spec.flag | raw} opts out of quoting"),
        "{warning}"
    );
    tenants.delete("t", &Default::default()).await.unwrap();
}
