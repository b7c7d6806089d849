//! `spec.artifacts` in its url form: a file is read from `<url>/<path>` after the sources
//! listed before it. The server is a plain HTTP server the test starts on 127.0.0.1: testenv's
//! kubelet runs pods as processes on this machine, so the executor reaches it as a pod on a
//! real cluster would reach an in-cluster or external URL (which 127.0.0.1 would not be there).

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use serde_json::json;

use crate::common::api::serve;
use crate::common::{create_flow, setup, step, wait_done};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_file_reads_from_an_artifact_url_after_a_missing_config_map() {
    let cms = json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch"]}]);
    let (client, ns, ctl) = setup("art-url", cms, json!([])).await;
    let served = serve(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-url\ndata:\n  owner: ${who}\n"
            .to_string(),
    )
    .await;
    create_flow(&client, &ns, "url", json!({
        "serviceAccountName": "flow",
        "vars": {"who": "web-team"},
        // Searched in order: the ConfigMap does not exist, so the URL is asked.
        "artifacts": [{"configMap": "no-such-artifacts"}, {"url": format!("{}/base/", served.url)}],
        "steps": [{"type": "applyFile", "path": "dns/app.yaml"}]
    }))
    .await;
    let st = wait_done(&client, &ns, "url", 90).await;
    assert_eq!(st["phase"], "Succeeded", "{st:#}");
    let made = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get("from-url")
        .await
        .expect("the served file was applied");
    assert_eq!(
        made.data.unwrap()["owner"],
        "web-team",
        "the body is substituted"
    );
    let requests = served.requests.lock().unwrap().clone();
    assert_eq!(
        requests,
        vec!["GET /base/dns/app.yaml HTTP/1.1".to_string()],
        "one GET of <url>/<path>"
    );
    assert!(
        step(&st, "spec.steps[0]")["message"]
            .as_str()
            .unwrap()
            .starts_with("dns/app.yaml: applied 1 object"),
        "{st:#}"
    );
    ctl.abort();
}
