//! `retry`: a failed run restarted at its failed step; what cannot be retried refused.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use pseudoflow_test_support::{create_flow, wait_done};
use serde_json::json;

use crate::support::{namespace, pf, start_controller};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_restarts_at_the_failed_step_and_refuses_what_it_cannot_retry() {
    let (client, ns) = namespace("pf-retry").await;
    let ctl = start_controller(&client, &ns);
    create_flow(&client, &ns, "flaky", json!({"serviceAccountName": "flow", "steps": [
        {"name": "made", "type": "apply", "manifests": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "made", "namespace": ns}}},
        {"name": "gate", "type": "waitFor", "resource": {"kind": "ConfigMap", "name": "gate", "namespace": ns}, "condition": "Exist", "timeoutSeconds": 2}
    ]}))
    .await;
    let failed = wait_done(&client, &ns, "flaky", 120).await;
    assert_eq!(failed["phase"], "Failed", "{failed:#}");
    let failed_run = failed["run"]["id"].as_str().unwrap().to_string();
    let cms = Api::<ConfigMap>::namespaced(client.clone(), &ns);

    // A step that does not exist: refused by the controller, told to the user.
    let o = pf(&["retry", "flaky", "--from", "nope", "-n", &ns]).await;
    assert_eq!(o.code, 1, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("no step \"nope\""), "{}", o.stderr);

    cms.create(
        &Default::default(),
        &serde_json::from_value(json!({"metadata": {"name": "gate"}})).unwrap(),
    )
    .await
    .unwrap();
    let o = pf(&["retry", "flaky", "-n", &ns]).await;
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout
            .contains(&format!("retries run {failed_run} from gate")),
        "{}",
        o.stdout
    );
    let st = wait_done(&client, &ns, "flaky", 120).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    assert_eq!(st["run"]["retryOf"], failed_run.as_str(), "{st:#}");
    // One Job in the retry, for the step that failed: the one that succeeded did not run again.
    let retry_jobs = Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&format!(
            "ops.example.com/run={}",
            st["run"]["id"].as_str().unwrap()
        )))
        .await
        .unwrap()
        .items;
    let nodes: Vec<String> = retry_jobs
        .iter()
        .map(|j| j.metadata.labels.as_ref().unwrap()["ops.example.com/node"].clone())
        .collect();
    assert_eq!(nodes, ["s1"], "{st:#}");
    // Nothing failed now: refused before anything is asked of the controller.
    let o = pf(&["retry", "flaky", "-n", &ns]).await;
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("nothing failed"), "{}", o.stderr);
    ctl.abort();
}
