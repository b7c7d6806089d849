//! `exec` with `pod`: a command in another pod's container through pods/exec, under the flow's
//! ServiceAccount, end to end — API server, its WebSocket proxy and the testenv kubelet's
//! streaming endpoint. Modelled on seed 004 (a MySQL backup taken with `mysqldump` inside the
//! database pod and kept by the flow).

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::Api;
use kube::Client;
use pseudoflow_testenv::SHELL_IMAGE;
use serde_json::{json, Value};

use crate::common::api::eventually;
use crate::common::{apply, create_flow, setup, step, wait_done};

/// What the flow's ServiceAccount may do: exec into pods (a WebSocket exec is authorized as both
/// `get` and `create`) and keep ConfigMaps.
fn rules(exec: bool) -> Value {
    let mut rules = vec![
        json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "patch"]}),
    ];
    if exec {
        rules.push(
            json!({"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get", "create"]}),
        );
    }
    json!(rules)
}

/// A "database" pod: its data lives in an emptyDir at /var/lib/mysql, its name in `DB_NAME`.
/// Waits until its process runs.
async fn database_pod(client: &Client, ns: &str) {
    apply(
        client,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "mysql", "namespace": ns},
            "spec": {"serviceAccountName": "flow", "automountServiceAccountToken": false,
                "containers": [{"name": "mysql", "image": SHELL_IMAGE,
                "command": ["sh", "-c", "printf 'INSERT INTO orders VALUES (1);\\nINSERT INTO orders VALUES (2);\\n' > /var/lib/mysql/orders.sql && exec sleep 600"],
                "env": [{"name": "DB_NAME", "value": "shop"}],
                "volumeMounts": [{"name": "data", "mountPath": "/var/lib/mysql"}]}],
                "volumes": [{"name": "data", "emptyDir": {}}]}}),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    eventually(60, "the database pod runs", || async {
        let pod = pods.get("mysql").await.unwrap();
        pod.status.and_then(|s| s.phase).as_deref() == Some("Running")
    })
    .await;
}

async fn cm_data(client: &Client, ns: &str, name: &str, key: &str) -> Option<String> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .unwrap()?;
    cm.data?.get(key).cloned()
}

fn keep(ns: &str, name: &str, value: &str) -> Value {
    json!({"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns}, "data": {"value": value}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_in_a_pod_sees_its_environment_and_volumes_and_its_stdout_becomes_a_variable() {
    let (client, ns, ctl) = setup("exec-pod", rules(true), json!([])).await;
    database_pod(&client, &ns).await;
    create_flow(
        &client,
        &ns,
        "backup",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "exec", "pod": "mysql", "container": "mysql", "var": "dump",
             "cmd": "echo \"-- database $DB_NAME on $HOSTNAME\"; cat /var/lib/mysql/orders.sql"},
            keep(&ns, "backup", "${dump}"),
            // Output far larger than one WebSocket frame or pipe buffer.
            {"type": "exec", "pod": "mysql", "var": "big", "cmd": "head -c 200000 /dev/zero | tr '\\0' x"},
            keep(&ns, "big", "${big}")
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "backup", 90).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert_eq!(
        cm_data(&client, &ns, "backup", "value").await.as_deref(),
        // `$HOSTNAME` is the database pod's name: the command ran there, not in the step's pod.
        Some(
            "-- database shop on mysql\nINSERT INTO orders VALUES (1);\nINSERT INTO orders VALUES (2);"
        ),
        "stdout (one trailing newline trimmed) of the command run in the pod's container"
    );
    let big = cm_data(&client, &ns, "big", "value").await.unwrap();
    assert_eq!(big.len(), 200_000);
    assert!(big.bytes().all(|b| b == b'x'));
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_command_in_a_pod_fails_the_step_with_its_exit_code_and_stderr() {
    let (client, ns, ctl) = setup("exec-fail", rules(true), json!([])).await;
    database_pod(&client, &ns).await;
    create_flow(
        &client,
        &ns,
        "broken",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "exec", "pod": "mysql", "cmd": "echo 'mysqldump: Got error: 1045: Access denied' >&2; exit 2"},
            keep(&ns, "never", "x")
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "broken", 90).await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    let msg = status["message"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with("spec.steps[0]")
            && msg.contains(&format!("command in pod {ns}/mysql failed"))
            && msg.contains("exit status 2")
            && msg.contains("Access denied"),
        "{msg}"
    );
    assert_eq!(
        step(&status, "spec.steps[0]")["phase"],
        "Failed",
        "{status:#}"
    );
    assert!(cm_data(&client, &ns, "never", "value").await.is_none());
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_into_a_pod_needs_the_flows_own_right_to_pods_exec() {
    let (client, ns, ctl) = setup("exec-denied", rules(false), json!([])).await;
    database_pod(&client, &ns).await;
    create_flow(
        &client,
        &ns,
        "no-exec",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "exec", "pod": "mysql", "cmd": "cat /var/lib/mysql/orders.sql"}
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "no-exec", 90).await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    let msg = status["message"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with("spec.steps[0]") && msg.contains("forbidden") && msg.contains("pods/exec"),
        "{msg}"
    );
    assert!(
        !msg.starts_with("spec.steps[0]: spec.steps[0]"),
        "the path is named once: {msg}"
    );
    ctl.abort();
}

/// `exec.image`: the command runs in the step's own pod, but in that image (its tools on PATH),
/// under the flow's identity; the executor comes from the runtime image through an init
/// container. Without `image` the same command is not found: the runtime image lacks it.
#[tokio::test]
async fn exec_with_image_runs_the_command_in_that_image() {
    let (client, ns, _ctl) = setup("exec-image", rules(false), json!([])).await;
    create_flow(
        &client,
        &ns,
        "greets",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "exec", "image": crate::common::GREETER_IMAGE, "cmd": "greet world", "var": "out"},
            {"type": "apply", "manifests": format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: greeting, namespace: {ns}}}\ndata: {{text: '${{out}}'}}\n")},
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "greets", 90).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    let cm = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get("greeting")
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["text"], "hello world");
    let pods = Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&Default::default())
        .await
        .unwrap();
    let pod = pods
        .items
        .iter()
        .find(|p| {
            p.spec.as_ref().unwrap().containers[0].image.as_deref()
                == Some(crate::common::GREETER_IMAGE)
        })
        .expect("the step's pod runs the greeter image");
    let init = pod.spec.as_ref().unwrap().init_containers.clone().unwrap();
    assert_eq!(init[0].image.as_deref(), Some(crate::common::IMAGE));

    create_flow(
        &client,
        &ns,
        "no-image",
        json!({"serviceAccountName": "flow", "steps": [{"type": "exec", "cmd": "greet world"}]}),
    )
    .await;
    let status = wait_done(&client, &ns, "no-image", 90).await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    let message = step(&status, "spec.steps[0]")["message"].to_string();
    assert!(message.contains("not found"), "{message}");
}

/// The seed's form `{cmd, var, container, namespace}` without `pod`: the command runs in the
/// step's own pod under the flow's identity, kubectl's default namespace is `namespace` (the
/// flow's without it), and `container` names the step pod's container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_exec_form_runs_in_the_step_pod_with_kubectl_in_the_given_namespace() {
    let env = crate::common::env();
    let cluster_cm = json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "patch"]}]);
    let (client, ns, ctl) = setup("exec-seed", json!([]), cluster_cm).await;
    let other = env.namespace("exec-seed-other").await.unwrap();
    for (n, v) in [(&ns, "here"), (&other, "there")] {
        apply(
            &client,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe", "namespace": n}, "data": {"v": v}}),
        )
        .await;
    }
    let read = "kubectl get configmap probe -o jsonpath='{.data.v}'";
    create_flow(
        &client,
        &ns,
        "seed-exec",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "exec", "cmd": read, "var": "there", "container": "kubectl", "namespace": other},
            {"type": "exec", "cmd": read, "var": "here"},
            keep(&ns, "seen", "${there} ${here}")
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "seed-exec", 90).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert_eq!(
        cm_data(&client, &ns, "seen", "value").await.as_deref(),
        Some("there here")
    );
    let jobs = crate::common::jobs(&client, &ns).await;
    let names: Vec<(String, String)> = jobs
        .iter()
        .map(|j| {
            let c = &j
                .spec
                .as_ref()
                .unwrap()
                .template
                .spec
                .as_ref()
                .unwrap()
                .containers[0];
            (crate::common::job_node(j), c.name.clone())
        })
        .collect();
    assert!(
        names.contains(&("s0".into(), "kubectl".into())),
        "{names:?}"
    );
    assert!(names.contains(&("s1".into(), "step".into())), "{names:?}");
    ctl.abort();
}

/// testenv gives a runtime-image pod exactly the commands `runtime-image/tools.txt` lists (what
/// the real image installs): kubectl of the supported version is there, the host's other tools
/// (python3 here) are not — so a flow that passes here does not rely on this machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_image_pod_sees_the_images_commands_and_none_of_the_hosts() {
    let (client, ns, ctl) = setup("exec-tools", rules(false), json!([])).await;
    assert!(
        std::path::Path::new("/usr/bin/python3").exists(),
        "this test needs a host tool the image lacks"
    );
    create_flow(
        &client,
        &ns,
        "tools",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "exec", "var": "kubectl", "cmd": "kubectl version --client | head -1"},
            {"type": "exec", "cmd": "command -v python3"},
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "tools", 90).await;
    assert_eq!(status["phase"], "Failed", "{status:#}");
    assert_eq!(
        step(&status, "spec.steps[0]")["phase"],
        "Succeeded",
        "{status:#}"
    );
    let failed = step(&status, "spec.steps[1]");
    assert_eq!(failed["phase"], "Failed", "{status:#}");
    ctl.abort();
}
