//! The `pseudoflow-compile` command as a user runs it: formats, `--emit`, and exit codes
//! 0 (valid), 1 (invalid flow, diagnostics on stderr), 2 (usage).

mod common;

use std::process::Command;

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pseudoflow-compile"))
        .args(args)
        .current_dir(common::repo())
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn valid_flow_prints_the_tree_and_exits_0() {
    let (code, out, err) = run(&["examples/nodelocaldns.yaml"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("setup-nodelocaldns\n"), "{out}");
    assert!(
        out.contains("s3-s0") && out.contains("configFile") && out.contains("job@node"),
        "{out}"
    );
}

#[test]
fn a_scheduled_flow_shows_its_schedule_and_its_copy_step() {
    let flow = std::env::temp_dir().join(format!("scheduled-{}.yaml", std::process::id()));
    std::fs::write(
        &flow,
        "apiVersion: ops.example.com/v1alpha1\nkind: PseudoFlow\nmetadata: {name: nightly-copy}\n\
         spec:\n  schedule: \"*/5 * * * *\"\n  options: {concurrencyPolicy: Forbid}\n  steps:\n\
         \x20   - {type: copy, from: {kind: Secret, name: creds}, to: [{namespace: team-a}]}\n",
    )
    .unwrap();
    let (code, out, err) = run(&[flow.to_str().unwrap()]);
    let _ = std::fs::remove_file(&flow);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with(
            "nightly-copy (schedule \"*/5 * * * *\" in UTC, concurrencyPolicy Forbid)\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("s0") && out.contains("copy") && out.contains("job"),
        "{out}"
    );
}

#[test]
fn a_bound_flow_says_which_kind_it_serves() {
    let (code, out, err) = run(&["examples/kopf/secret-sync.yaml"]);
    assert_eq!(code, 0, "{err}");
    let first = out.lines().next().unwrap_or_default();
    assert!(first.contains("bound to"), "{out}");
    assert!(first.contains("SecSynch: one run per object"), "{out}");
}

#[test]
fn a_flow_recorded_in_its_objects_says_so_and_one_with_a_pod_step_is_refused() {
    let flow = std::env::temp_dir().join(format!("record-{}.yaml", std::process::id()));
    let write = |steps: &str| {
        std::fs::write(
            &flow,
            format!(
                "apiVersion: ops.example.com/v1alpha1\nkind: PseudoFlow\nmetadata: {{name: gadgets}}\n\
                 spec:\n  bind: {{apiVersion: example.com/v1, kind: Gadget, record: Object}}\n  \
                 steps:\n{steps}"
            ),
        )
        .unwrap();
    };
    let cm =
        "    - {type: apply, manifests: {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}}\n";
    write(cm);
    let (code, out, err) = run(&[flow.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let first = out.lines().next().unwrap_or_default();
    assert!(
        first.contains("record=object (every step runs in the controller"),
        "{out}"
    );
    assert!(out.contains("inController=(bound flow)"), "{out}");
    write(&format!("{cm}    - {{type: exec, cmd: \"true\"}}\n"));
    let (code, _, err) = run(&[flow.to_str().unwrap()]);
    let _ = std::fs::remove_file(&flow);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("spec.steps[1]: (exec): bind.record: Object needs every step to run in the controller; this one runs in a pod"),
        "{err}"
    );
}

#[test]
fn json_format_has_nodes_with_id_and_type_and_edges_with_from_to_kind() {
    let (code, out, _) = run(&["examples/apiserver-vip.yaml", "--format", "json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let nodes = v["nodes"].as_array().unwrap();
    let edges = v["edges"].as_array().unwrap();
    assert!(nodes
        .iter()
        .all(|n| n["id"].is_string() && n["type"].is_string()));
    assert!(edges
        .iter()
        .all(|e| e["from"].is_string() && e["to"].is_string() && e["kind"].is_string()));
    let has_edge = |from: &str, to: &str, kind: &str| {
        edges
            .iter()
            .any(|e| e["from"] == from && e["to"] == to && e["kind"] == kind)
    };
    assert!(has_edge("s4", "s4-b0-s0", "branch") && has_edge("s4", "s4-b1-s0", "branch"));
    assert!(
        has_edge("s4-b0-s0-end", "s4-end", "next") && has_edge("s4-b1-s0-end", "s4-end", "next")
    );
}

#[test]
fn dot_and_mermaid_formats_render_every_edge() {
    for (fmt, needle) in [("dot", "\"s0\" -> \"s1\""), ("mermaid", "s0 -->|next| s1")] {
        let (code, out, _) = run(&["examples/nodelocaldns.yaml", "-f", fmt]);
        assert_eq!(code, 0);
        assert!(out.contains(needle), "{fmt}: {out}");
    }
}

#[test]
fn emit_prints_the_input_secret_and_job_of_one_node() {
    let (code, out, err) = run(&[
        "examples/nodelocaldns.yaml",
        "--emit",
        "s3-s0",
        "--node",
        "worker-1",
    ]);
    assert_eq!(code, 0, "{err}");
    let docs: Vec<serde_json::Value> = serde_yaml::Deserializer::from_str(&out)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    assert_eq!(docs[0]["kind"], "Secret");
    assert_eq!(docs[1]["kind"], "Job");
    // The Job names the digest of exactly this input, for the executor to check.
    let input = docs[0]["stringData"]["input.json"].as_str().unwrap();
    let digest = pseudoflow_compiler::names::content_digest(input.as_bytes());
    let env = &docs[1]["spec"]["template"]["spec"]["containers"][0]["env"];
    let carried = env
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "PSEUDOFLOW_INPUT_SHA256")
        .unwrap();
    assert_eq!(carried["value"], digest.as_str());
    assert_eq!(
        docs[1]["metadata"]["annotations"]["ops.example.com/input-sha256"],
        digest.as_str()
    );
    assert_eq!(docs[1]["spec"]["template"]["spec"]["nodeName"], "worker-1");
    // s3-s0 heads the node's segment (configFile, patchFile, execNode): one Job runs all three,
    // and a pod that dies is replaced (its replacement resumes from the journal).
    let input: serde_json::Value = serde_json::from_str(input).unwrap();
    let members: Vec<&str> = input["segment"]
        .as_array()
        .expect("a segment input")
        .iter()
        .map(|m| m["nodeId"].as_str().unwrap())
        .collect();
    assert_eq!(members, ["s3-s0", "s3-s1", "s3-s2"]);
    assert_eq!(docs[1]["spec"]["backoffLimit"], 3);
    assert_eq!(
        docs[1]["spec"]["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"],
        serde_json::json!([1, 2])
    );
}

#[test]
fn emit_of_a_fused_step_prints_its_segments_job() {
    let (code, out, err) = run(&[
        "examples/nodelocaldns.yaml",
        "--emit",
        "s3-s2",
        "--node",
        "worker-1",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("ops.example.com/node-id: s3-s0"),
        "the Job of the segment's head: {out}"
    );
}

#[test]
fn the_tree_shows_which_steps_share_a_job() {
    let (code, out, err) = run(&["examples/nodelocaldns.yaml"]);
    assert_eq!(code, 0, "{err}");
    let line = |id: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(&format!("{id} ")))
            .unwrap_or_default()
            .to_string()
    };
    assert!(line("s3-s1").contains("sharedJob=s3-s0"), "{out}");
    assert!(line("s0").contains("sharedJob=s0"), "{out}");
    assert!(
        !line("s3").contains("sharedJob"),
        "a loop is a branch point: {out}"
    );
}

#[test]
fn emit_of_a_controller_node_is_an_error() {
    let (code, _, err) = run(&["examples/steps/sleep.yaml", "--emit", "s1"]);
    assert_eq!(code, 1);
    assert!(err.contains("runs in the controller"), "{err}");
}

#[test]
fn invalid_flow_exits_1_with_paths_and_lines_on_stderr() {
    let (code, out, err) = run(&["compiler/tests/invalid/typos.yaml"]);
    assert_eq!(code, 1);
    assert!(out.is_empty());
    assert!(
        err.contains("line 20: spec.steps[3].then[0].seconds: expected integer, got \"ten\""),
        "{err}"
    );
    assert!(
        err.contains("unknown step type \"aply\" (did you mean \"apply\"?)"),
        "{err}"
    );
}

#[test]
fn an_include_flow_cycle_among_several_files_is_reported_at_each_step_with_its_line() {
    let dir = "compiler/tests/cycles";
    let (a, b, c) = (
        format!("{dir}/backup.yaml"),
        format!("{dir}/restore.yaml"),
        format!("{dir}/nightly.yaml"),
    );
    // Each file alone is valid: the other flow may exist on the cluster.
    for f in [&a, &b, &c] {
        let (code, _, err) = run(&[f]);
        assert_eq!(code, 0, "{f}: {err}");
    }
    let (code, out, err) = run(&[&c, &a, &b]);
    assert_eq!(code, 1, "{err}");
    assert!(
        out.contains("nightly\n") && out.contains("backup\n") && out.contains("restore\n"),
        "every flow's DAG is still shown: {out}"
    );
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines,
        [
            format!("{a}: error: line 11: spec.steps[1].name: includeFlow cycle ops/backup → ops/restore → ops/backup: a run of any of these flows would include the next forever"),
            format!("{b}: error: line 11: spec.steps[0].steps[0].name: includeFlow cycle ops/restore → ops/backup → ops/restore: a run of any of these flows would include the next forever"),
        ],
        "{err}"
    );
}

#[test]
fn several_files_without_a_cycle_compile_each() {
    let (code, out, err) = run(&[
        "examples/nodelocaldns.yaml",
        "examples/labels-from-exec.yaml",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("setup-nodelocaldns\n"), "{out}");
    assert!(out.contains("\nlabels-from-exec\n"), "{out}");
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(run(&[]).0, 2);
    assert_eq!(run(&["examples/nodelocaldns.yaml", "--format", "svg"]).0, 2);
    assert_eq!(run(&["examples/nodelocaldns.yaml", "--bogus"]).0, 2);
    assert_eq!(run(&["no/such/file.yaml"]).0, 2);
}

#[test]
fn emit_shows_the_executor_pod_settings_the_flow_chose() {
    let flow = std::env::temp_dir().join(format!("executor-{}.yaml", std::process::id()));
    std::fs::write(
        &flow,
        "apiVersion: ops.example.com/v1alpha1\nkind: PseudoFlow\nmetadata: {name: tuned}\n\
         spec:\n  options:\n    executor:\n      resources: {limits: {memory: 1Gi}}\n\
         \x20     tolerations: [{key: dedicated, operator: Exists}]\n\
         \x20     nodeSelector: {pool: ops}\n      priorityClassName: ops-high\n\
         \x20     imagePullSecrets: [{name: regcred}]\n      labels: {team: db}\n\
         \x20 steps:\n    - {type: apply, manifests: \"apiVersion: v1\\nkind: ConfigMap\\nmetadata: {name: x}\\n\"}\n",
    )
    .unwrap();
    let (code, out, err) = run(&[flow.to_str().unwrap(), "--emit", "s0"]);
    std::fs::remove_file(&flow).ok();
    assert_eq!(code, 0, "{err}");
    let job: serde_json::Value = serde_yaml::Deserializer::from_str(&out)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .nth(1)
        .unwrap();
    let template = &job["spec"]["template"];
    let pod = &template["spec"];
    assert_eq!(pod["tolerations"][0]["key"], "dedicated", "{out}");
    assert_eq!(pod["nodeSelector"]["pool"], "ops");
    assert_eq!(pod["priorityClassName"], "ops-high");
    assert_eq!(pod["imagePullSecrets"][0]["name"], "regcred");
    assert_eq!(pod["containers"][0]["resources"]["limits"]["memory"], "1Gi");
    assert_eq!(template["metadata"]["labels"]["team"], "db");
}

/// The README's "See what it compiles to" block is the command's output, as printed: every
/// `$ cargo run ... pseudoflow-compile -- FILE` block of README.md gives exactly what follows it.
#[test]
fn the_readmes_compile_example_is_the_commands_output() {
    let readme = std::fs::read_to_string(common::repo().join("README.md")).unwrap();
    let prompt = "$ cargo run -q -p pseudoflow-compiler --bin pseudoflow-compile -- ";
    let mut checked = 0;
    for block in readme.split("```console\n").skip(1) {
        let block = block.split("```").next().unwrap();
        let Some(rest) = block.strip_prefix(prompt) else {
            continue;
        };
        let (args, expected) = rest.split_once('\n').unwrap();
        let args: Vec<&str> = args.split_whitespace().collect();
        let (code, out, err) = run(&args);
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            out, expected,
            "README.md's output of pseudoflow-compile {args:?}"
        );
        checked += 1;
    }
    assert!(checked >= 1, "no pseudoflow-compile example in README.md");
}
