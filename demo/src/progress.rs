//! What the demo shows while and after the seed flows run: their progress, and what they did
//! to a node.

use std::time::{Duration, Instant};

use anyhow::Result;
use kube::api::{Api, DynamicObject};
use pseudoflow_controller::flow::flow_resource;
use pseudoflow_testenv::TestEnv;

/// Prints a table of the flows (`names`: namespace, name) whenever it changes, until every
/// flow has finished (or ten minutes passed); returns whether all Succeeded.
pub async fn watch_flows(client: &kube::Client, names: &[(String, String)]) -> Result<bool> {
    let flows_of =
        |ns: &str| Api::<DynamicObject>::namespaced_with(client.clone(), ns, &flow_resource());
    let started = Instant::now();
    let mut last = String::new();
    loop {
        let mut table = format!(
            "{:<22} {:<12} {:<10} {:<9} {}\n",
            "FLOW", "NAMESPACE", "PHASE", "PROGRESS", "STEP / MESSAGE"
        );
        let (mut finished, mut succeeded) = (0, 0);
        for (ns, name) in names {
            let f = flows_of(ns).get(name).await?;
            let st = &f.data["status"];
            let phase = st["phase"].as_str().unwrap_or("Pending");
            if phase == "Succeeded" || phase == "Failed" {
                finished += 1;
            }
            if phase == "Succeeded" {
                succeeded += 1;
            }
            let detail = if phase == "Running" {
                st["currentStep"].as_str().unwrap_or("")
            } else {
                st["message"].as_str().unwrap_or("")
            };
            table.push_str(&format!(
                "{:<22} {:<12} {:<10} {:<9} {}\n",
                name,
                ns,
                phase,
                st["progress"].as_str().unwrap_or("-"),
                detail.chars().take(90).collect::<String>()
            ));
        }
        if table != last {
            println!("[{:>5.1}s]\n{table}", started.elapsed().as_secs_f64());
            last = table;
        }
        if finished == names.len() || started.elapsed() > Duration::from_secs(600) {
            return Ok(succeeded == names.len());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What the flows did to worker-0: its files, and the host commands they ran there.
pub fn show_worker_0(env: &TestEnv) {
    println!("node files after the flows (worker-0):");
    for f in [
        "etc/kubelet-resolv.conf",
        "var/lib/kubelet/kubeadm-flags.env",
        "etc/kubernetes/kubelet.conf",
    ] {
        println!(
            "--- /{f}\n{}",
            std::fs::read_to_string(env.node_root("worker-0").join(f))
                .unwrap_or_else(|_| "(missing)".into())
                .trim_end()
        );
    }
    println!(
        "recorded host commands on worker-0:\n  {}",
        env.node_calls("worker-0").join("\n  ")
    );
}

/// What the flows did to a real node: its files (in the node's own root) and its `systemctl`
/// stand-in's log (each `restart kubelet` started a new kubelet in the node).
pub fn show_real_node(env: &TestEnv, node: &str) {
    let Some(real) = env.real_node(node) else {
        return;
    };
    println!(
        "node files after the flows ({node}, a real node; its root is {}):",
        real.root().display()
    );
    for f in [
        "etc/kubelet-resolv.conf",
        "var/lib/kubelet/kubeadm-flags.env",
    ] {
        println!(
            "--- /{f}\n{}",
            std::fs::read_to_string(real.root().join(f))
                .unwrap_or_else(|_| "(missing)".into())
                .trim_end()
        );
    }
    println!(
        "systemctl calls in {node}:\n  {}",
        real.exec("cat /var/log/systemctl.log")
            .unwrap_or_default()
            .trim_end()
            .replace('\n', "\n  ")
    );
}
