//! Node steps on the three simulated nodes (`cp-0`, `worker-0`, `worker-1`); every file this
//! module writes is named after the test's namespace, so tests sharing the nodes do not meet.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::Client;
use serde_json::{json, Value};

use crate::common::{create_flow, env, prepare, start_node_controller, wait_done};

const NODES: [&str; 3] = ["cp-0", "worker-0", "worker-1"];

/// A namespace whose flow identity may manage ConfigMaps there and list nodes, with a
/// controller allowed to run node steps in it.
async fn node_setup(prefix: &str) -> (Client, String, tokio::task::JoinHandle<()>) {
    let cms = json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch", "delete"]}]);
    let nodes =
        json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]);
    let (client, ns) = prepare(prefix, cms, nodes).await;
    let ctl = start_node_controller(&client, &ns).await;
    (client, ns, ctl)
}

/// The node's file at absolute `path`, if any.
fn read(node: &str, path: &str) -> Option<String> {
    std::fs::read_to_string(env().node_root(node).join(path.trim_start_matches('/'))).ok()
}

/// The status entry of the node work at `path`: a node step fanned out by `nodeSelector` has
/// two entries with its path, the node listing that opens it and then the work on the nodes.
fn work<'a>(status: &'a Value, path: &str) -> &'a Value {
    status["steps"]
        .as_array()
        .and_then(|s| s.iter().rev().find(|e| e["path"] == path))
        .unwrap_or_else(|| panic!("no status entry for {path}: {status:#}"))
}

fn on(node: &str) -> Value {
    json!(format!("kubernetes.io/hostname={node}"))
}

async fn cm_data(client: &Client, ns: &str, name: &str) -> Value {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap();
    json!(cm.data.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn template_renders_into_a_node_file_and_into_a_variable() {
    let (client, ns, ctl) = node_setup("tpl").await;
    let file = format!("/etc/pseudoflow/{ns}-resolv.conf");
    let copy = format!("/etc/pseudoflow/{ns}-copy");
    create_flow(&client, &ns, "tpl", json!({
        "serviceAccountName": "flow",
        "vars": {"servers": "10.0.0.1,10.0.0.2", "who": "ops"},
        "steps": [
            {"type": "template", "output": file, "nodeSelector": on("worker-0"), "mode": "0600",
             "template": "{% for s in servers.split(',') %}nameserver {{ s }}\n{% endfor %}options ndots:{{ 2 + 3 }}\n"},
            {"type": "template", "output": "greeting", "template": "hello {{ who }}\n"},
            {"type": "configFile", "path": copy, "nodeSelector": on("worker-1"), "content": "${greeting}"},
        ]
    }))
    .await;
    let st = wait_done(&client, &ns, "tpl", 120).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    assert_eq!(
        read("worker-0", &file).as_deref(),
        Some("nameserver 10.0.0.1\nnameserver 10.0.0.2\noptions ndots:5\n"),
        "rendered on the selected node, trailing newline kept"
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(
            env()
                .node_root("worker-0")
                .join(file.trim_start_matches('/')),
        )
        .unwrap()
        .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    for node in ["cp-0", "worker-1"] {
        assert_eq!(read(node, &file), None, "{node} is not selected");
    }
    assert_eq!(work(&st, "spec.steps[1]")["phase"], "Succeeded", "{st:#}");
    assert_eq!(
        read("worker-1", &copy).as_deref(),
        Some("hello ops\n"),
        "the variable holds the rendered text, trailing newline included"
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_file_create_if_missing_appends_once() {
    let (client, ns, ctl) = node_setup("patch-create").await;
    let missing = format!("/etc/pseudoflow/{ns}-new.conf");
    let existing = format!("/etc/pseudoflow/{ns}-old.conf");
    let patch = |path: &str| {
        json!({"type": "patchFile", "path": path, "nodeSelector": on("worker-1"),
               "pattern": "(?m)^key=.*$", "replace": "key=value", "createIfMissing": true})
    };
    create_flow(&client, &ns, "patch", json!({
        "serviceAccountName": "flow",
        "steps": [
            {"type": "configFile", "path": existing, "nodeSelector": on("worker-1"), "content": "other=1"},
            patch(&missing),
            patch(&existing),
            // Matches now: nothing to change.
            patch(&existing),
        ]
    }))
    .await;
    let st = wait_done(&client, &ns, "patch", 120).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    assert_eq!(
        read("worker-1", &missing).as_deref(),
        Some("key=value\n"),
        "a missing file is created with the line"
    );
    assert_eq!(
        read("worker-1", &existing).as_deref(),
        Some("other=1\nkey=value\n"),
        "appended as a new line after content without a final newline"
    );
    assert_eq!(work(&st, "spec.steps[1]")["changed"], true, "{st:#}");
    assert_eq!(work(&st, "spec.steps[2]")["changed"], true, "{st:#}");
    assert_eq!(
        work(&st, "spec.steps[3]")["changed"],
        false,
        "the line is there: {st:#}"
    );
    assert_eq!(read("worker-0", &missing), None, "only the selected node");
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_node_run_on_any_and_first_and_var_per_node() {
    let (client, ns, ctl) = node_setup("execnode").await;
    create_flow(&client, &ns, "exec", json!({
        "serviceAccountName": "flow",
        "steps": [
            {"type": "execNode", "nodeSelector": "", "runOn": "first", "cmd": "echo first-${node}", "varPerNode": "first"},
            {"type": "execNode", "nodeSelector": "", "cmd": "echo hi-${node}", "varPerNode": "per"},
            // Fails on two nodes of three: `any` needs one success.
            {"type": "execNode", "nodeSelector": "", "runOn": "any", "cmd": "test ${node} = worker-1"},
            {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "outputs"},
             "data": {"first": "${first | tojson}", "per": "${per | tojson}"}}},
        ]
    }))
    .await;
    let st = wait_done(&client, &ns, "exec", 120).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    let any = work(&st, "spec.steps[2]");
    assert_eq!(any["phase"], "Succeeded", "{any:#}");
    assert_eq!(any["instances"]["succeeded"], 1, "{any:#}");
    assert_eq!(any["instances"]["failed"], 2, "{any:#}");
    let first = work(&st, "spec.steps[0]");
    assert_eq!(first["phase"], "Succeeded", "{first:#}");
    let data = cm_data(&client, &ns, "outputs").await;
    let parse = |k: &str| -> Value { serde_json::from_str(data[k].as_str().unwrap()).unwrap() };
    assert_eq!(
        parse("first"),
        json!({"cp-0": "first-cp-0"}),
        "runOn first: only the first node by name"
    );
    let per: serde_json::Map<String, Value> = NODES
        .iter()
        .map(|n| (n.to_string(), json!(format!("hi-{n}"))))
        .collect();
    assert_eq!(parse("per"), Value::Object(per), "one entry per node");
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_file_on_a_node_removes_only_that_nodes_file() {
    let (client, ns, ctl) = node_setup("delfile").await;
    let file = format!("/etc/pseudoflow/{ns}-doomed");
    create_flow(
        &client,
        &ns,
        "del",
        json!({
            "serviceAccountName": "flow",
            "steps": [
                {"type": "configFile", "path": file, "nodeSelector": "", "content": "x\n"},
                {"type": "deleteFile", "path": file, "nodeSelector": on("worker-0")},
                // Deleting what is gone changes nothing.
                {"type": "deleteFile", "path": file, "nodeSelector": on("worker-0")},
            ]
        }),
    )
    .await;
    let st = wait_done(&client, &ns, "del", 120).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    assert_eq!(read("worker-0", &file), None, "deleted on worker-0");
    for node in ["cp-0", "worker-1"] {
        assert_eq!(
            read(node, &file).as_deref(),
            Some("x\n"),
            "{node} untouched"
        );
    }
    assert_eq!(work(&st, "spec.steps[1]")["changed"], true, "{st:#}");
    assert_eq!(work(&st, "spec.steps[2]")["changed"], false, "{st:#}");
    ctl.abort();
}

/// `${ x | oneline }` in a node file's content (what the compiler asks for on a bound object's
/// data there): a one-line value is written, a value with a line break fails the step naming
/// the field, without printing the value, and the file is not written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oneline_writes_one_line_and_fails_the_step_on_a_line_break() {
    let (client, ns, ctl) = node_setup("oneline").await;
    let good = format!("/etc/pseudoflow/{ns}-good.conf");
    let bad = format!("/etc/pseudoflow/{ns}-bad.conf");
    create_flow(&client, &ns, "lines", json!({
        "serviceAccountName": "flow",
        "vars": {"user": "alice", "evil": "alice\nroot ALL=(ALL) NOPASSWD: ALL"},
        "steps": [
            {"type": "configFile", "path": good, "nodeSelector": on("worker-0"), "content": "user=${ user | oneline }\n"},
            {"type": "configFile", "path": bad, "nodeSelector": on("worker-0"), "content": "user=${ evil | oneline }\n"},
        ]
    }))
    .await;
    let st = wait_done(&client, &ns, "lines", 120).await;
    assert_eq!(st["phase"], "Failed", "{st:#}");
    assert_eq!(read("worker-0", &good).as_deref(), Some("user=alice\n"));
    assert_eq!(read("worker-0", &bad), None, "nothing written: {st:#}");
    let text = st.to_string();
    assert!(text.contains("line break"), "{st:#}");
    assert!(!text.contains("NOPASSWD"), "the value is not shown: {st:#}");
    ctl.abort();
}
