//! Proof that testenv is a real cluster: real controllers roll out workloads on the simulated
//! nodes, Jobs run as processes and report exit codes like a kubelet, RBAC is enforced against
//! pod identities, the garbage collector works, and nodes stay Ready.
//! All tests share one cluster (per test binary), each in its own namespace.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::Client;
use pseudoflow_testenv::{shared, TestEnv, PROBE_IMAGE, SHELL_IMAGE};
use serde_json::json;

fn env() -> &'static TestEnv {
    shared().unwrap_or_else(|e| panic!("testenv did not start: {e}"))
}

async fn create<K>(client: &Client, ns: &str, v: serde_json::Value) -> K
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let obj: K = serde_json::from_value(v).unwrap();
    Api::<K>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &obj)
        .await
        .unwrap()
}

async fn wait<K, C>(api: Api<K>, name: &str, cond: C, secs: u64) -> Option<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    C: kube::runtime::wait::Condition<K>,
{
    tokio::time::timeout(Duration::from_secs(secs), await_condition(api, name, cond))
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {name}"))
        .unwrap()
}

fn shell_job(name: &str, script: &str) -> serde_json::Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "main", "image": SHELL_IMAGE, "command": ["/bin/sh", "-c", script]}]}}}})
}

async fn job_pod(client: &Client, ns: &str, job: &str) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    pods.list(&ListParams::default().labels(&format!("job-name={job}")))
        .await
        .unwrap()
        .items
        .remove(0)
}

fn terminated(pod: &Pod) -> (i32, String) {
    let t = pod
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .state
        .as_ref()
        .unwrap()
        .terminated
        .clone()
        .unwrap();
    (t.exit_code, t.message.unwrap_or_default())
}

#[tokio::test]
async fn deployment_and_daemonset_become_available_on_the_simulated_nodes() {
    let env = env();
    let client = env.client().await.unwrap();
    let ns = env.namespace("workloads").await.unwrap();
    let labels = json!({"app": "web"});
    let _: Deployment = create(&client, &ns, json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}})).await;
    let ds_labels = json!({"app": "agent"});
    let _: DaemonSet = create(&client, &ns, json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": ds_labels}, "template": {"metadata": {"labels": ds_labels},
            "spec": {"tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [{"name": "agent", "image": "registry.k8s.io/pause:3.10"}]}}}})).await;
    let d = wait(
        Api::<Deployment>::namespaced(client.clone(), &ns),
        "web",
        conditions::is_deployment_completed(),
        60,
    )
    .await
    .unwrap();
    assert_eq!(d.status.unwrap().available_replicas, Some(2));
    let dsa: Api<DaemonSet> = Api::namespaced(client.clone(), &ns);
    let ds = wait(
        dsa,
        "agent",
        |o: Option<&DaemonSet>| {
            o.and_then(|d| d.status.as_ref())
                .is_some_and(|s| s.desired_number_scheduled == 3 && s.number_available == Some(3))
        },
        60,
    )
    .await
    .unwrap();
    assert_eq!(
        ds.status.unwrap().number_available,
        Some(3),
        "one pod per node, control plane included"
    );
}

#[tokio::test]
async fn a_job_that_exits_0_completes() {
    let env = env();
    let client = env.client().await.unwrap();
    let ns = env.namespace("job-ok").await.unwrap();
    let _: Job = create(&client, &ns, shell_job("ok", "echo hello; exit 0")).await;
    wait(
        Api::<Job>::namespaced(client.clone(), &ns),
        "ok",
        conditions::is_job_completed(),
        60,
    )
    .await;
    let job = Api::<Job>::namespaced(client.clone(), &ns)
        .get("ok")
        .await
        .unwrap();
    assert_eq!(job.status.unwrap().succeeded, Some(1));
    let pod = job_pod(&client, &ns, "ok").await;
    assert_eq!(
        pod.status.as_ref().unwrap().phase.as_deref(),
        Some("Succeeded")
    );
    assert_eq!(terminated(&pod).0, 0);
    let node = pod.spec.unwrap().node_name.unwrap();
    assert!(env
        .pod_log(&node, &ns, pod.metadata.name.as_deref().unwrap())
        .contains("hello"));
}

#[tokio::test]
async fn a_job_that_exits_3_fails_with_its_exit_code_and_termination_message() {
    let env = env();
    let client = env.client().await.unwrap();
    let ns = env.namespace("job-fail").await.unwrap();
    let _: Job = create(
        &client,
        &ns,
        shell_job("boom", "echo boom > /dev/termination-log; exit 3"),
    )
    .await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    wait(
        jobs,
        "boom",
        |o: Option<&Job>| {
            o.and_then(|j| j.status.as_ref()?.conditions.clone())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Failed" && c.status == "True"))
        },
        60,
    )
    .await;
    let pod = job_pod(&client, &ns, "boom").await;
    assert_eq!(
        pod.status.as_ref().unwrap().phase.as_deref(),
        Some("Failed")
    );
    assert_eq!(terminated(&pod), (3, "boom\n".to_string()));
}

#[tokio::test]
async fn a_pod_whose_service_account_lacks_a_permission_gets_403_from_the_api_server() {
    let env = env();
    let client = env.client().await.unwrap();
    let ns = env.namespace("rbac").await.unwrap();
    // Allowed: list pods (granted below). Forbidden: list secrets (not granted).
    let _: k8s_openapi::api::core::v1::ServiceAccount = create(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "narrow"}}),
    )
    .await;
    let _: k8s_openapi::api::rbac::v1::Role = create(&client, &ns, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "pods"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]})).await;
    let _: k8s_openapi::api::rbac::v1::RoleBinding = create(&client, &ns, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "pods"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pods"},
        "subjects": [{"kind": "ServiceAccount", "name": "narrow", "namespace": ns}]})).await;
    for (name, resource) in [("allowed", "pods"), ("denied", "secrets")] {
        let _: Pod = create(&client, &ns, json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"serviceAccountName": "narrow", "restartPolicy": "Never",
                "containers": [{"name": "probe", "image": PROBE_IMAGE, "args": ["list", resource]}]}})).await;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let done = |o: Option<&Pod>| {
        o.and_then(|p| p.status.as_ref()?.phase.clone())
            .is_some_and(|p| p == "Succeeded" || p == "Failed")
    };
    let allowed = wait(pods.clone(), "allowed", done, 60).await.unwrap();
    let denied = wait(pods, "denied", done, 60).await.unwrap();
    assert_eq!(
        terminated(&allowed).0,
        0,
        "the granted verb works with the pod's own token"
    );
    let (code, msg) = terminated(&denied);
    assert_eq!(code, 3, "403 from the real API server");
    assert!(
        msg.contains("system:serviceaccount:")
            && msg.contains(":narrow")
            && msg.contains("secrets"),
        "{msg}"
    );
}

#[tokio::test]
async fn host_files_and_host_commands_stay_on_their_own_node() {
    let env = env();
    let client = env.client().await.unwrap();
    let ns = env.namespace("hostfs").await.unwrap();
    let script = "echo written-by-pod > /host/etc/marker && nsenter -t 1 -m -u -i -n -p -- systemctl restart kubelet";
    let _: Pod = create(&client, &ns, json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "writer"},
        "spec": {"nodeName": "worker-1", "restartPolicy": "Never", "hostPID": true,
            "volumes": [{"name": "host", "hostPath": {"path": "/", "type": "Directory"}}],
            "containers": [{"name": "w", "image": SHELL_IMAGE, "command": ["/bin/sh", "-c", script],
                "securityContext": {"privileged": true}, "volumeMounts": [{"name": "host", "mountPath": "/host"}]}]}})).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod = wait(
        pods,
        "writer",
        |o: Option<&Pod>| {
            o.and_then(|p| p.status.as_ref()?.phase.clone())
                .is_some_and(|p| p == "Succeeded" || p == "Failed")
        },
        60,
    )
    .await
    .unwrap();
    assert_eq!(
        terminated(&pod).0,
        0,
        "{}",
        env.pod_log("worker-1", &ns, "writer")
    );
    assert_eq!(
        std::fs::read_to_string(env.node_root("worker-1").join("etc/marker")).unwrap(),
        "written-by-pod\n"
    );
    assert!(
        !env.node_root("worker-0").join("etc/marker").exists(),
        "other nodes are untouched"
    );
    assert!(
        !std::path::Path::new("/host/etc/marker").exists(),
        "the machine's own /host is untouched"
    );
    let calls = env.node_calls("worker-1");
    assert!(
        calls
            .iter()
            .any(|c| c.contains(" nsenter -t 1 -m -u -i -n -p -- systemctl restart kubelet")),
        "{calls:?}"
    );
    assert!(
        calls
            .iter()
            .any(|c| c.ends_with(" systemctl restart kubelet")),
        "{calls:?}"
    );
}

#[tokio::test]
async fn owned_objects_are_garbage_collected_with_their_owner() {
    let env = env();
    let client = env.client().await.unwrap();
    let ns = env.namespace("gc").await.unwrap();
    let owner: ConfigMap = create(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}}),
    )
    .await;
    let owned: ConfigMap = create(&client, &ns, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owned",
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}]}})).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    cms.delete("owner", &DeleteParams::default()).await.unwrap();
    wait(
        cms.clone(),
        "owned",
        conditions::is_deleted(owned.metadata.uid.as_deref().unwrap()),
        60,
    )
    .await;
    assert!(cms.get_opt("owned").await.unwrap().is_none());
}

#[tokio::test]
async fn nodes_stay_ready_for_more_than_90_seconds() {
    let env = env();
    let client = env.client().await.unwrap();
    tokio::time::sleep(Duration::from_secs(95)).await;
    let nodes = Api::<Node>::all(client)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(nodes.items.len(), 3);
    for n in &nodes.items {
        assert!(
            pseudoflow_testenv::env::node_ready(n),
            "{:?} not Ready",
            n.metadata.name
        );
        let taints = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        assert!(
            taints
                .iter()
                .all(|t| !t.key.starts_with("node.kubernetes.io/")),
            "{:?} tainted: {taints:?}",
            n.metadata.name
        );
    }
}

fn shell_pod(name: &str, script: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "automountServiceAccountToken": false,
            "containers": [{"name": "main", "image": SHELL_IMAGE, "command": ["/bin/sh", "-c", script]}]}})
}

fn is_running(pod: Option<&Pod>) -> bool {
    pod.and_then(|p| p.status.as_ref())
        .and_then(|s| s.phase.as_deref())
        == Some("Running")
}

#[tokio::test]
async fn logs_and_exec_with_stdin_reach_the_pods_process_through_the_api_server() {
    use futures::{AsyncBufReadExt, TryStreamExt};
    use kube::api::{AttachParams, LogParams};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let env = env();
    let client = env.client().await.unwrap();
    let ns = env.namespace("streams").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let _: Pod = create(
        &client,
        &ns,
        shell_pod("talker", "echo one; echo two >&2; exec sleep 600"),
    )
    .await;
    wait(pods.clone(), "talker", is_running, 60).await;

    // pods/log: stdout and stderr as written; tailLines as kubectl --tail sends it.
    let all = pods.logs("talker", &LogParams::default()).await.unwrap();
    assert_eq!(all, "one\ntwo\n");
    let tail = LogParams {
        tail_lines: Some(1),
        ..Default::default()
    };
    assert_eq!(pods.logs("talker", &tail).await.unwrap(), "two\n");

    // pods/exec with stdin: what is written reaches the command; closing stdin ends it.
    let params = AttachParams::default()
        .stdin(true)
        .stdout(true)
        .stderr(false);
    let mut cat = pods.exec("talker", ["cat"], &params).await.unwrap();
    let mut stdin = cat.stdin().unwrap();
    stdin.write_all(b"through stdin\n").await.unwrap();
    // Shut down, not just dropped: kube's stdin is one half of an in-memory pipe.
    stdin.shutdown().await.unwrap();
    let mut out = String::new();
    cat.stdout()
        .unwrap()
        .read_to_string(&mut out)
        .await
        .unwrap();
    let status = cat.take_status().unwrap().await.unwrap();
    assert_eq!(status.status.as_deref(), Some("Success"), "{status:?}");
    assert_eq!(out, "through stdin\n");

    // follow: lines arrive as the process writes them, and the stream ends with the process.
    let _: Pod = create(
        &client,
        &ns,
        shell_pod("ticker", "echo a; sleep 2; echo b; sleep 2; echo c"),
    )
    .await;
    wait(pods.clone(), "ticker", is_running, 60).await;
    let follow = LogParams {
        follow: true,
        ..Default::default()
    };
    let lines: Vec<String> = tokio::time::timeout(
        Duration::from_secs(30),
        pods.log_stream("ticker", &follow)
            .await
            .unwrap()
            .lines()
            .try_collect(),
    )
    .await
    .expect("the followed log ends when the process does")
    .unwrap();
    assert_eq!(lines, ["a", "b", "c"]);
}

/// The container's `state.waiting.reason`, if it waits.
fn waiting_reason(pod: Option<&Pod>) -> Option<String> {
    pod?.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .clone()
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[tokio::test]
async fn an_image_that_is_neither_mapped_nor_a_stand_in_fails_to_pull_and_is_never_ready() {
    let env = env();
    let client = env.client().await.unwrap();
    let ns = env.namespace("nopull").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let _: Pod = create(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nope"},
        "spec": {"containers": [{"name": "app", "image": "example.invalid/nope:1"}]}}),
    )
    .await;
    let p = wait(
        pods.clone(),
        "nope",
        |p: Option<&Pod>| waiting_reason(p).as_deref() == Some("ErrImagePull"),
        30,
    )
    .await
    .unwrap();
    let message = p
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .state
        .as_ref()
        .unwrap()
        .waiting
        .as_ref()
        .unwrap()
        .message
        .clone()
        .unwrap_or_default();
    assert!(message.contains("example.invalid/nope:1"), "{message}");
    wait(
        pods.clone(),
        "nope",
        |p: Option<&Pod>| waiting_reason(p).as_deref() == Some("ImagePullBackOff"),
        30,
    )
    .await;
    // And it stays so: Pending, never Ready, nothing started.
    for _ in 0..6 {
        let p = pods.get("nope").await.unwrap();
        let status = p.status.clone().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Pending"), "{status:?}");
        assert!(!is_ready(&p), "{status:?}");
        assert_eq!(
            waiting_reason(Some(&p)).as_deref(),
            Some("ImagePullBackOff"),
            "{status:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
async fn a_declared_stand_in_runs_as_a_process_until_its_pod_is_deleted() {
    let env = env();
    let client = env.client().await.unwrap();
    let ns = env.namespace("standin").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    // The seed's NodeLocal DNS image, with its real arguments (the stand-in ignores them).
    let image = "registry.k8s.io/dns/k8s-dns-node-cache:1.22.28";
    assert!(pseudoflow_testenv::standins::stand_in(image).is_some());
    let _: Pod = create(
        &client,
        &ns,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cache"},
        "spec": {"nodeName": "worker-0", "containers": [{"name": "node-cache", "image": image,
            "args": ["-localip=100.64.0.10", "-conf=/etc/Corefile"]}]}}),
    )
    .await;
    let p = wait(pods.clone(), "cache", is_running, 30).await.unwrap();
    assert!(is_ready(&p), "{:?}", p.status);
    // Its process runs, and stays: still Running a little later.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let p = pods.get("cache").await.unwrap();
    assert!(is_running(Some(&p)) && is_ready(&p), "{:?}", p.status);
    let log = env.pod_log("worker-0", &ns, "cache");
    assert!(
        log.contains("stand-in for registry.k8s.io/dns/k8s-dns-node-cache"),
        "{log}"
    );
    pods.delete("cache", &DeleteParams::default())
        .await
        .unwrap();
    wait(
        pods.clone(),
        "cache",
        conditions::is_deleted(&p.metadata.uid.clone().unwrap()),
        30,
    )
    .await;
}
