//! testenv's real nodes (kubelet, containerd, runc, CNI, kube-proxy in their own namespaces):
//! a pod of the locally built runtime image runs on one, gets a pod IP from the bridge, writes
//! /tmp and reaches the API server in-cluster (ServiceAccount token, `kubernetes.default`'s
//! Service IP through kube-proxy); its logs come through the kubelet (TLS to the node's IP);
//! the node's files are the node's, never the machine's; `systemctl restart kubelet` restarts
//! that node's kubelet; a declared stand-in runs and an image that is neither imported nor
//! declared fails to pull; and dropping the cluster leaves nothing behind, and a node's veth
//! left after its owner is gone is swept.
//!
//! Never skipped: a real node that cannot start fails the test with the reason (run
//! `make images` first; `make test` does).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, PostParams};
use pseudoflow_testenv::real_node::RUNTIME_IMAGE;
use pseudoflow_testenv::{Options, TestEnv};

async fn wait_pod_done(pods: &Api<Pod>, name: &str, timeout: Duration) -> Pod {
    let deadline = Instant::now() + timeout;
    loop {
        let p = pods.get(name).await.unwrap();
        let phase = p
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        if phase == "Succeeded" || phase == "Failed" {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "pod {name} not done after {timeout:?}: {:?}",
            p.status
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn kubelet_pid(node: &pseudoflow_testenv::real_node::RealNode) -> String {
    node.exec("cat /run/pseudoflow/kubelet.pid")
        .unwrap()
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_node_runs_the_runtime_image_and_leaves_nothing_behind() {
    let env = TestEnv::start(Options::with_real_nodes(1, 1))
        .await
        .unwrap_or_else(|e| panic!("real node cluster did not start: {e:#}"));
    let real = &env.real_nodes()[0];
    eprintln!(
        "cluster with 1 real node usable in {:?} (real node Ready {:?} after its start)",
        env.startup, real.startup
    );
    let client = env.client().await.unwrap();
    let ns = env.namespace("real").await.unwrap();

    // Its own namespaces and root: a file written inside lands in the node's root only.
    let marker = format!("/etc/pseudoflow-real-node-{}", std::process::id());
    real.exec(&format!("echo node > {marker}")).unwrap();
    assert!(real.root().join(marker.trim_start_matches('/')).is_file());
    assert!(
        !std::path::Path::new(&marker).exists(),
        "{marker} reached the machine's /etc"
    );
    assert_eq!(real.exec("hostname").unwrap().trim(), real.name);

    // A pod of the runtime image, as its default user, on the real node.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "probe"},
        "spec": {
            "restartPolicy": "Never",
            "nodeName": real.name,
            "containers": [{
                "name": "probe", "image": RUNTIME_IMAGE, "imagePullPolicy": "Never",
                "command": ["bash", "-c", "id -u; echo written > /tmp/x && cat /tmp/x; kubectl get --raw /version | grep -o '\"gitVersion\": *\"[^\"]*\"'"],
            }],
        },
    }))
    .unwrap();
    let t0 = Instant::now();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let done = wait_pod_done(&pods, "probe", Duration::from_secs(120)).await;
    eprintln!(
        "runtime-image pod created to Succeeded in {:?}",
        t0.elapsed()
    );
    let status = done.status.clone().unwrap();
    let logs = pods
        .logs("probe", &Default::default())
        .await
        .unwrap_or_else(|e| {
            panic!("kubectl logs through the real kubelet failed: {e}; status {status:?}")
        });
    assert_eq!(
        status.phase.as_deref(),
        Some("Succeeded"),
        "{status:?}\n{logs}"
    );
    assert!(logs.starts_with("65532\nwritten\n"), "{logs}");
    assert!(logs.contains("v1.34.4"), "in-cluster kubectl: {logs}");
    let ip = status.pod_ip.unwrap_or_default();
    assert!(
        ip.starts_with("10.") && ip.ends_with(|c: char| c.is_ascii_digit()),
        "pod IP {ip}"
    );

    // A declared stand-in runs (the pause image under the workload's name); an image that is
    // neither imported nor declared fails to pull, as on an offline cluster.
    for (name, image) in [
        ("standin", "nginx:1.27"),
        ("nope", "example.invalid/nope:1"),
    ] {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": real.name, "automountServiceAccountToken": false,
                "containers": [{"name": "c", "image": image}]}}))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let standin = pods
            .get("standin")
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        let nope = pods.get("nope").await.unwrap().status.unwrap_or_default();
        let reason = nope
            .container_statuses
            .as_ref()
            .and_then(|c| c.first()?.state.as_ref()?.waiting.as_ref()?.reason.clone())
            .unwrap_or_default();
        let ready = |s: &k8s_openapi::api::core::v1::PodStatus| {
            s.conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        };
        if standin.phase.as_deref() == Some("Running")
            && ready(&standin)
            && matches!(reason.as_str(), "ErrImagePull" | "ImagePullBackOff")
        {
            assert_eq!(nope.phase.as_deref(), Some("Pending"), "{nope:?}");
            assert!(!ready(&nope), "{nope:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "stand-in: {standin:?}\nunknown image: {nope:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // `systemctl restart kubelet` inside the node restarts that node's kubelet; it comes back.
    let before = kubelet_pid(real);
    real.exec("systemctl restart kubelet").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while kubelet_pid(real) == before {
        assert!(Instant::now() < deadline, "kubelet was not restarted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(real
        .exec("cat /var/log/systemctl.log")
        .unwrap()
        .contains("restart kubelet"));
    let nodes: Api<Node> = Api::all(client.clone());
    let n = nodes.get(&real.name).await.unwrap();
    assert!(pseudoflow_testenv::env::node_ready(&n));

    // Nothing left once the cluster is dropped: processes, the bridge and veths, cgroups.
    let root = real.root();
    let init = real.init_pid().unwrap();
    drop(env);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let links = std::process::Command::new("ip")
            .args(["-br", "link"])
            .output()
            .unwrap();
        let links = String::from_utf8_lossy(&links.stdout).to_string();
        let cgroups = std::fs::read_dir("/sys/fs/cgroup/memory")
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("pseudoflow-"))
            .count();
        let alive = std::path::Path::new(&format!("/proc/{init}")).exists();
        if !links.contains("pfbr") && !links.contains("pfv") && cgroups == 0 && !alive {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left behind: links {links}, {cgroups} cgroups, node init alive: {alive}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        !root.exists(),
        "the node's root directory {} is left",
        root.display()
    );
}

/// A node's veth left on the machine after its cluster is gone (its network namespace outlived
/// the node: an orphaned TCP socket there kept retransmitting its FIN once the bridge was gone)
/// is removed by the sweep of that slot, so the next cluster in the slot can make its own
/// instead of failing `RTNETLINK answers: File exists` (seen on `make demo-real`'s stack).
#[test]
fn the_sweep_removes_a_nodes_veth_left_in_a_slot_whose_owner_is_gone() {
    use std::process::Command;
    // A slot whose owner is gone: a file naming a process that has exited, in a high slot
    // (clusters take the lowest free one).
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let dir = std::path::Path::new("/run/pseudoflow-testenv");
    std::fs::create_dir_all(dir).unwrap();
    let slot = (40..64u8)
        .rev()
        .find(|s| {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(dir.join(format!("slot-{s}.pid")))
                .and_then(|mut f| std::io::Write::write_all(&mut f, dead.to_string().as_bytes()))
                .is_ok()
        })
        .expect("a free slot");
    let veth = format!("pfv{slot}n1");
    let made = Command::new("ip")
        .args(["link", "add", &veth, "type", "veth", "peer", "name"])
        .arg(format!("pfv{slot}x1"))
        .status()
        .unwrap();
    assert!(made.success(), "ip link add {veth}");
    pseudoflow_testenv::real_node::sweep();
    let left = Command::new("ip")
        .args(["link", "show", &veth])
        .output()
        .unwrap();
    let left_over = left.status.success();
    if left_over {
        let _ = Command::new("ip").args(["link", "del", &veth]).status();
    }
    assert!(!left_over, "the sweep left {veth} on the machine");
    assert!(
        !dir.join(format!("slot-{slot}.pid")).exists(),
        "the slot file"
    );
}
