//! `if`, `when` and `loop` end to end on testenv: only the selected branch runs, `when` guards
//! only the step after it, and a loop runs its steps for each item of an evaluated list.

use serde_json::json;

use crate::common::shorthand::{cm, cm_rules, flow_jobs, mark, mode_is, nodes_of};
use crate::common::{apply, create_flow, created, setup, step, wait_done, work_ended};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_runs_only_the_branch_its_condition_selects() {
    let (client, ns, ctl) = setup("if", cm_rules(), json!([])).await;
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "switch", "namespace": ns}, "data": {"mode": "on"}})).await;
    for (flow, value) in [("yes", "on"), ("no", "off")] {
        create_flow(
            &client,
            &ns,
            flow,
            json!({"serviceAccountName": "flow", "steps": [
                {"type": "if", "condition": mode_is(&ns, value),
                 "then": [mark(&ns, &format!("{flow}-then"))],
                 "else": [mark(&ns, &format!("{flow}-else"))]}
            ]}),
        )
        .await;
    }
    for (flow, ran, skipped) in [("yes", "then", "else"), ("no", "else", "then")] {
        let status = wait_done(&client, &ns, flow, 120).await;
        assert_eq!(status["phase"], "Succeeded", "{flow}: {status:#}");
        assert_eq!(
            nodes_of(&flow_jobs(&client, &ns, flow).await),
            ["s0".to_string(), format!("s0-{ran}-s0")],
            "{flow}: the condition's Job, then only the {ran} branch"
        );
        assert!(cm(&client, &ns, &format!("{flow}-{ran}")).await.is_some());
        assert!(cm(&client, &ns, &format!("{flow}-{skipped}"))
            .await
            .is_none());
        assert_eq!(
            step(&status, &format!("spec.steps[0].{ran}[0]"))["phase"],
            "Succeeded"
        );
        assert_eq!(
            step(&status, &format!("spec.steps[0].{skipped}[0]"))["phase"],
            "Skipped",
            "{flow}: {status:#}"
        );
    }
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_guards_only_the_step_after_it() {
    let (client, ns, ctl) = setup("when", cm_rules(), json!([])).await;
    apply(&client, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "switch", "namespace": ns}, "data": {"mode": "on"}})).await;
    create_flow(
        &client,
        &ns,
        "guarded",
        json!({"serviceAccountName": "flow", "steps": [
            {"type": "when", "condition": mode_is(&ns, "on")},
            mark(&ns, "allowed"),
            {"type": "when", "condition": mode_is(&ns, "off")},
            mark(&ns, "refused"),
            mark(&ns, "after")
        ]}),
    )
    .await;
    let status = wait_done(&client, &ns, "guarded", 120).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    assert_eq!(step(&status, "spec.steps[1]")["phase"], "Succeeded");
    assert_eq!(
        step(&status, "spec.steps[3]")["phase"],
        "Skipped",
        "{status:#}"
    );
    assert_eq!(step(&status, "spec.steps[4]")["phase"], "Succeeded");
    assert!(cm(&client, &ns, "allowed").await.is_some());
    assert!(cm(&client, &ns, "refused").await.is_none());
    assert!(cm(&client, &ns, "after").await.is_some());
    assert_eq!(
        nodes_of(&flow_jobs(&client, &ns, "guarded").await),
        ["s0", "s1", "s2", "s4"],
        "two condition Jobs and the two steps that ran"
    );
    ctl.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loop_runs_its_steps_for_each_item_of_an_evaluated_list() {
    let (client, ns, ctl) = setup("loop", cm_rules(), json!([])).await;
    create_flow(&client, &ns, "colours", json!({"serviceAccountName": "flow", "vars": {"csv": "red,green,blue"}, "steps": [
        {"type": "eval", "expression": "${csv}.split(',')", "var": "colours"},
        {"type": "loop", "forEach": "${colours}", "steps": [
            {"type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap",
             "metadata": {"name": "colour-${item}", "namespace": ns}, "data": {"index": "${index | string}"}}}
        ]}
    ]}))
    .await;
    let status = wait_done(&client, &ns, "colours", 120).await;
    assert_eq!(status["phase"], "Succeeded", "{status:#}");
    for (i, colour) in ["red", "green", "blue"].iter().enumerate() {
        let made = cm(&client, &ns, &format!("colour-{colour}"))
            .await
            .unwrap_or_else(|| panic!("colour-{colour} missing"));
        assert_eq!(made.data.unwrap()["index"], i.to_string());
    }
    let jobs = flow_jobs(&client, &ns, "colours").await;
    let instances: Vec<String> = jobs
        .iter()
        .map(|j| crate::common::annotation(j, "ops.example.com/instance"))
        .collect();
    assert_eq!(instances, ["0", "1", "2"], "one Job per item, in order");
    for pair in jobs.windows(2) {
        assert!(
            created(&pair[1]) >= work_ended(&client, &pair[0]).await.unwrap(),
            "items run one after another"
        );
    }
    let body = step(&status, "spec.steps[1].steps[0]");
    assert_eq!(body["instances"]["succeeded"], 3, "{status:#}");
    ctl.abort();
}
