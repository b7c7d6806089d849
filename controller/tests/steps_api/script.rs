//! An API-context `script` end to end on testenv: bash in the step's pod, with strict flags.

use serde_json::{json, Value};

use crate::common::{create_flow, setup, step, wait_done};

fn cm_rules() -> Value {
    json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "patch"]}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_script_runs_with_bash_strict_flags_in_the_steps_pod() {
    let (client, ns, ctl) = setup("script", cm_rules(), json!([])).await;
    create_flow(&client, &ns, "scripted", json!({"serviceAccountName": "flow", "steps": [
        // bash arrays and [[ ]] (not in sh); its stdout becomes the variable.
        // (`$${` is a literal `${`.)
        {"type": "script", "var": "joined", "code": "parts=(a b c)\n[[ $${#parts[@]} -eq 3 ]]\nIFS=-; echo \"$${parts[*]}\""},
        {"type": "exec", "cmd": "kubectl create configmap got-${ joined | shq }"},
        // -e -o pipefail: a failing command inside a pipeline fails the step.
        {"type": "script", "code": "false | cat\necho not reached"}
    ]}))
    .await;
    let st = wait_done(&client, &ns, "scripted", 90).await;
    assert_eq!(st["phase"], "Failed", "{st:#}");
    assert_eq!(step(&st, "spec.steps[0]")["phase"], "Succeeded", "{st:#}");
    assert!(
        crate::common::harness::config_map(&client, &ns, "got-a-b-c")
            .await
            .is_some(),
        "{st:#}"
    );
    let failed = step(&st, "spec.steps[2]");
    assert_eq!(failed["phase"], "Failed", "{st:#}");
    assert!(!failed.to_string().contains("not reached"), "{st:#}");
    ctl.abort();
}
