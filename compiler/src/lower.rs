//! Lowering of one node instance into what the cluster runs: an input Secret and an executor
//! Job. Pure: the controller decides *when*; this decides *what*, identically every time.
//!
//! The input is a Secret, not a ConfigMap: it holds the substituted step, which may carry
//! variables or steps that came from a Secret (`include` from a `secretRef`), and `view` may read
//! ConfigMaps. The Job carries the input's SHA-256 ([`INPUT_DIGEST_ANNOTATION`] and the
//! executor's [`INPUT_DIGEST_ENV`]), so an input planted or changed under the Job's predictable
//! name is refused by the controller (on adoption) and by the executor (before it acts).

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use pseudoflow_crd::executor::ExecutorOptions;
use pseudoflow_crd::steps::Placement;
use serde_json::{json, Value};

pub use pseudoflow_crd::protocol::{
    ExecutorInput, FlowRef, SegmentStep, Task, ATTEMPT_ANNOTATION, EXECUTOR_DIR,
    INPUT_DIGEST_ANNOTATION, INPUT_DIGEST_ENV, INPUT_DIR, INPUT_KEY, INPUT_SECRET_TYPE,
    INSTANCE_ANNOTATION, JOB_NAME_ENV, LABEL_APP_NAME, LABEL_FLOW, LABEL_MANAGED_BY, LABEL_NODE,
    LABEL_RUN, MANAGED_BY, NODE_ID_ANNOTATION, STEP_PATH_ANNOTATION,
};

use crate::names::{content_digest, job_name, label_value};
use crate::plan::{NodeKind, PlanNode};

/// Grace added to a step's timeout for the Job's activeDeadlineSeconds: the executor enforces
/// the step timeout itself and reports it; the deadline only stops a stuck pod.
pub const DEADLINE_GRACE_SECONDS: u32 = 30;

/// How often a segment's pod may be replaced after it died without a result (see [`lower`]).
pub const SEGMENT_POD_RETRIES: u32 = 3;

/// How often a single step's pod whose container never started may be replaced.
pub const START_RETRIES: u32 = 2;

/// The exit code a container runtime reports for a container whose process never ran
/// (`StartError`: containerd could not create or start the task). The executor never exits
/// with it (0, 1, 2; killed by a signal is 128 + n).
pub const START_ERROR_EXIT_CODE: i32 = 128;

/// Cluster-wide lowering settings (from the operator's configuration).
#[derive(Debug, Clone, PartialEq)]
pub struct LowerOptions {
    /// The runtime image holding `pseudoflow-step`.
    pub image: String,
    /// The executor pods' settings: the cluster's defaults with the flow's
    /// `spec.options.executor` over them ([`ExecutorOptions::under`]).
    pub executor: ExecutorOptions,
}

impl Default for LowerOptions {
    fn default() -> Self {
        LowerOptions {
            image: format!(
                "ghcr.io/example/pseudoflow-runtime:{}",
                env!("CARGO_PKG_VERSION")
            ),
            executor: ExecutorOptions::default(),
        }
    }
}

/// One execution of one node: which loop item, which attempt, with which substituted step.
#[derive(Debug, Clone)]
pub struct NodeInstance<'a> {
    /// The flow whose identity and namespace the Job gets.
    pub flow: &'a FlowRef,
    /// The run: part of the Job's name and labels, so runs never share Jobs.
    pub run_id: &'a str,
    /// The DAG node to run.
    pub node: &'a PlanNode,
    /// One key per enclosing loop (item index, or node name for node loops).
    pub instance: &'a [String],
    /// The `retry` attempt (1-based): each attempt is a Job of its own.
    pub attempt: u32,
    /// The node's step with `${...}` substituted (see [`crate::subst`]).
    pub step: Value,
    /// The node a node step is pinned to.
    pub target_node: Option<&'a str>,
    /// Where `applyFile`/`deleteFile` find their files (`spec.artifacts`).
    pub artifacts: &'a [pseudoflow_crd::ArtifactSource],
    /// For a fused segment: every step the Job runs, `node` first (empty: one step).
    pub segment: Vec<SegmentStep>,
    /// For a segment: whether an earlier step changed this instance's node (`onlyIfChanged`).
    pub changed_before: bool,
    /// The run's secret, from which a segment's journal key and every Job's result key are
    /// derived (None: no journal and an unsealed result, e.g. `--emit`).
    pub run_secret: Option<&'a str>,
}

/// The timeout the executor enforces for `node`: its own, else its type's default.
pub fn timeout_of(node: &PlanNode) -> Option<u32> {
    node.timeout_seconds
        .or_else(|| node.step_kind()?.params().default_timeout_seconds())
}

/// A segment's time bound: the sum of its steps' (None when one of them has none).
fn segment_timeout(segment: &[SegmentStep]) -> Option<u32> {
    segment
        .iter()
        .try_fold(0u32, |sum, s| Some(sum.saturating_add(s.timeout_seconds?)))
}

/// The objects one node instance needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Lowered {
    /// The input document (`stringData[INPUT_KEY]`), named like the Job.
    pub input: Secret,
    /// The executor Job, carrying the input's digest.
    pub job: Job,
    /// The input document as stored, to compare with an input that already exists.
    pub input_document: String,
    /// SHA-256 of [`Lowered::input_document`].
    pub input_digest: String,
}

/// Why a node cannot be lowered to a Job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LowerError {
    /// The node is controller-local (log, eval, sleep...): it has no Job.
    #[error("node {0} runs in the controller, not in a Job")]
    NotAJob(String),
    /// A node step needs the node it runs on.
    #[error("node {0} is a node step but no target node was given")]
    NoTargetNode(String),
}

/// The executor task for a node, or None when the node needs no Job.
pub fn task_of(node: &PlanNode) -> Option<Task> {
    match (&node.kind, node.placement) {
        (NodeKind::Condition, _) => Some(Task::Condition),
        (
            NodeKind::LoopStart {
                over: crate::plan::LoopOver::Nodes { .. },
                ..
            },
            _,
        ) => Some(Task::ListNodes),
        (NodeKind::Include { .. } | NodeKind::IncludeFlow { .. }, _) => Some(Task::FetchInclude),
        (NodeKind::Action, Placement::Api | Placement::Node) => Some(Task::Run),
        _ => None,
    }
}

/// Whether running `plan` may launch an executor Job (a node with a task the controller does
/// not run itself). A run whose plan launches none needs its secret (the root of its Jobs'
/// journal keys) stored only with the rest of its state, not in a write of its own before.
pub fn launches_jobs(plan: &crate::plan::Plan) -> bool {
    plan.nodes()
        .any(|n| task_of(n).is_some() && n.in_controller.is_none())
}

/// The part of a node's step its work needs, before substitution: the step with nested step
/// lists emptied (a loop's start needs its selector, not its body). The controller substitutes
/// `${...}` in this and passes the result as [`NodeInstance::step`].
pub fn payload(node: &PlanNode) -> serde_json::Value {
    let full = serde_json::to_value(&node.step).unwrap_or_default();
    pseudoflow_crd::validate::without_nested_steps(&full)
}

/// Lowers one node instance into its input Secret and executor Job.
pub fn lower(inst: &NodeInstance, opts: &LowerOptions) -> Result<Lowered, LowerError> {
    let node = inst.node;
    let task = task_of(node).ok_or_else(|| LowerError::NotAJob(node.id.clone()))?;
    let on_node = task == Task::Run && node.placement == Placement::Node;
    if on_node && inst.target_node.is_none() {
        return Err(LowerError::NoTargetNode(node.id.clone()));
    }
    let name = job_name(
        &inst.flow.name,
        inst.run_id,
        &node.id,
        inst.instance,
        inst.attempt,
    );
    let input = executor_input(inst, task, on_node, &name);
    let input_json = serde_json::to_string_pretty(&input).expect("input serialises");
    let digest = content_digest(input_json.as_bytes());
    let labels = json!({
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_APP_NAME: "pseudoflow-step",
        LABEL_FLOW: label_value(&inst.flow.name),
        LABEL_RUN: inst.run_id,
        LABEL_NODE: label_value(&node.id),
    });
    let metadata = object_metadata(inst, &name, &labels, &digest);
    let secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": INPUT_SECRET_TYPE,
        "stringData": { INPUT_KEY: input_json },
    });
    let (backoff, failure_policy) = pod_failure_handling(inst);
    let deadline = if inst.segment.is_empty() {
        timeout_of(node)
    } else {
        segment_timeout(&inst.segment)
    };
    let job = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "backoffLimit": backoff,
            "podFailurePolicy": failure_policy,
            // Widened: validation bounds timeouts, but a plan built without it must not wrap.
            "activeDeadlineSeconds": deadline.map(|t| u64::from(t) + u64::from(DEADLINE_GRACE_SECONDS)),
            "template": crate::pod_settings::apply(
                pod_template(inst, &name, &opts.image, on_node, &labels, &digest),
                &opts.executor,
                on_node,
            ),
        },
    });
    Ok(Lowered {
        input: serde_json::from_value(secret).expect("valid Secret"),
        job: serde_json::from_value(strip_nulls(job)).expect("valid Job"),
        input_document: input_json,
        input_digest: digest,
    })
}

/// The input of a step the controller runs itself (`PlanNode::in_controller`): what an
/// executor Job would read for it, so the same executor code does the same work.
pub fn in_controller_input(inst: &NodeInstance) -> ExecutorInput {
    let name = job_name(
        &inst.flow.name,
        inst.run_id,
        &inst.node.id,
        inst.instance,
        inst.attempt,
    );
    executor_input(inst, Task::Run, false, &name)
}

/// What the executor reads: the substituted step and where it runs; for a segment, every
/// member and its journal's key. A segment's members keep their own timeouts (the Job's
/// deadline bounds their sum).
fn executor_input(inst: &NodeInstance, task: Task, on_node: bool, name: &str) -> ExecutorInput {
    let node = inst.node;
    let fused = !inst.segment.is_empty();
    ExecutorInput {
        flow: inst.flow.clone(),
        run_id: inst.run_id.to_string(),
        node_id: node.id.clone(),
        path: node.path.clone(),
        instance: inst.instance.to_vec(),
        attempt: inst.attempt,
        task,
        step: inst.step.clone(),
        target_node: inst.target_node.map(str::to_string).filter(|_| on_node),
        timeout_seconds: if fused { None } else { timeout_of(node) },
        artifacts: inst.artifacts.to_vec(),
        segment: inst.segment.clone(),
        changed_before: inst.changed_before && fused,
        journal_key: inst
            .run_secret
            .filter(|_| fused)
            .map(|secret| pseudoflow_crd::protocol::journal_key(secret, name)),
        result_key: inst
            .run_secret
            .map(|secret| pseudoflow_crd::protocol::sealed::result_key(secret, name)),
    }
}

/// The metadata the input Secret and the Job share: the name, the labels, the input's digest
/// and where in the flow the step is, owned by the flow (so deleting it collects them). The
/// onDelete run's (id `d...`) do not block the owner's deletion: under a foreground deletion
/// (Argo CD's prune) the garbage collector deletes the owner's blocking dependents while it
/// waits, which would kill the onDelete steps the flow's finalizer is waiting for.
fn object_metadata(inst: &NodeInstance, name: &str, labels: &Value, digest: &str) -> Value {
    let node = inst.node;
    let annotations = json!({
        INPUT_DIGEST_ANNOTATION: digest,
        NODE_ID_ANNOTATION: node.id,
        STEP_PATH_ANNOTATION: node.path,
        INSTANCE_ANNOTATION: inst.instance.join("/"),
        ATTEMPT_ANNOTATION: inst.attempt.to_string(),
    });
    let owner = json!([{
        "apiVersion": "ops.example.com/v1alpha1",
        "kind": "PseudoFlow",
        "name": inst.flow.name,
        "uid": inst.flow.uid,
        "controller": true,
        "blockOwnerDeletion": !inst.run_id.starts_with('d'),
    }]);
    json!({
        "name": name,
        "namespace": inst.flow.namespace,
        "labels": labels,
        "annotations": annotations,
        "ownerReferences": owner,
    })
}

/// The Job's `backoffLimit` and `podFailurePolicy`. A segment's pod that dies (killed,
/// evicted, its node lost) is replaced by the Job controller, and the replacement resumes after
/// the steps its journal records. A step that failed (exit 1) or bad input (exit 2) ends the
/// Job at once. A single step's Job is never retried once its process ran: only a pod whose
/// container never started (`StartError`, exit 128 — e.g. the node's kubelet restarted while it
/// created the container, found on testenv's real nodes when a flow restarts kubelets beside
/// another flow's starting pods) or that failed without its container ending or being disrupted
/// (the kubelet refused it) is replaced, at most [`START_RETRIES`] times.
fn pod_failure_handling(inst: &NodeInstance) -> (u32, Value) {
    let container = own_container_name(inst).unwrap_or("step");
    if inst.segment.is_empty() {
        let policy = json!({"rules": [
            {"action": "Count", "onExitCodes": {
                "containerName": container, "operator": "In", "values": [START_ERROR_EXIT_CODE]}},
            {"action": "FailJob", "onExitCodes": {
                "containerName": container, "operator": "NotIn", "values": [START_ERROR_EXIT_CODE]}},
            {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        ]});
        return (START_RETRIES, policy);
    }
    let policy = json!({"rules": [{
        "action": "FailJob",
        "onExitCodes": {
            "containerName": container,
            "operator": "In",
            "values": [1, 2],
        },
    }]});
    (SEGMENT_POD_RETRIES, policy)
}

fn pod_template(
    inst: &NodeInstance,
    name: &str,
    image: &str,
    on_node: bool,
    labels: &Value,
    digest: &str,
) -> Value {
    let mut volumes = vec![json!({"name": "input", "secret": {"secretName": name}})];
    let mut mounts = vec![json!({"name": "input", "mountPath": INPUT_DIR, "readOnly": true})];
    let security = if on_node {
        volumes.push(json!({"name": "host-root", "hostPath": {"path": "/", "type": "Directory"}}));
        mounts.push(json!({"name": "host-root", "mountPath": "/host"}));
        json!({"privileged": true, "runAsUser": 0})
    } else {
        // The root filesystem is read-only: /tmp is a small emptyDir, so an `exec`/`script`
        // that writes a scratch file works (found on testenv's real nodes: it failed with
        // "Read-only file system").
        volumes.push(json!({"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}));
        mounts.push(json!({"name": "tmp", "mountPath": "/tmp"}));
        json!({
            "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": true,
            "runAsNonRoot": true,
            "runAsUser": 65532,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        })
    };
    let mut spec = json!({
        "serviceAccountName": inst.flow.service_account,
        "restartPolicy": "Never",
        "enableServiceLinks": false,
        "containers": [{
            "name": own_container_name(inst).unwrap_or("step"),
            "image": image,
            "args": ["run", "--input", format!("{INPUT_DIR}/{INPUT_KEY}")],
            "env": [
                {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                // The executor refuses an input whose digest differs (planted or changed).
                {"name": INPUT_DIGEST_ENV, "value": digest},
                // Names the result ConfigMap of a large result, so it can be owned and cleaned up.
                {"name": JOB_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['job-name']"}}},
            ],
            "securityContext": security,
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "resources": crate::pod_settings::default_resources(),
            "volumeMounts": mounts,
        }],
        "volumes": volumes,
    });
    if let Some(other) = own_image(inst).filter(|_| !on_node) {
        run_in_image(&mut spec, other, image, &security);
    }
    if on_node {
        let s = spec.as_object_mut().unwrap();
        s.insert("nodeName".into(), json!(inst.target_node));
        s.insert("hostPID".into(), json!(true));
        s.insert("tolerations".into(), json!([{"operator": "Exists"}]));
    }
    json!({"metadata": {"labels": labels}, "spec": spec})
}

/// The image an `exec` step without `pod` asks its own pod to run (`exec.image`).
fn own_image<'a>(inst: &'a NodeInstance) -> Option<&'a str> {
    let step = &inst.step;
    (step["type"] == "exec" && step.get("pod").is_none_or(Value::is_null))
        .then(|| step["image"].as_str())
        .flatten()
        .filter(|i| !i.is_empty())
}

/// The container name an `exec` step without `pod` gives its own pod (`exec.container`).
fn own_container_name<'a>(inst: &'a NodeInstance) -> Option<&'a str> {
    let step = &inst.step;
    (step["type"] == "exec" && step.get("pod").is_none_or(Value::is_null))
        .then(|| step["container"].as_str())
        .flatten()
        .filter(|c| !c.is_empty())
}

/// Runs the step's container in `other` (e.g. an image with kubectl) instead of the runtime
/// image: an init container of the runtime image copies the (static) executor into an emptyDir,
/// and the container runs that copy, with `other`'s tools on its PATH. The pod keeps the
/// runtime image's `restricted` security context.
fn run_in_image(spec: &mut Value, other: &str, runtime_image: &str, security: &Value) {
    let executor = format!("{EXECUTOR_DIR}/pseudoflow-step");
    let mount = json!({"name": "executor", "mountPath": EXECUTOR_DIR});
    spec["volumes"]
        .as_array_mut()
        .expect("volumes")
        .push(json!({"name": "executor", "emptyDir": {}}));
    let step = &mut spec["containers"][0];
    step["image"] = json!(other);
    step["command"] = json!([executor]);
    step["volumeMounts"]
        .as_array_mut()
        .expect("mounts")
        .push(mount.clone());
    spec["initContainers"] = json!([{
        "name": "install-executor",
        "image": runtime_image,
        "args": ["install", executor],
        "securityContext": security,
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
        "volumeMounts": [mount],
    }]);
}

fn strip_nulls(v: Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, strip_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(strip_nulls).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{compile, FlowId};

    /// The Job and input Secret of a main run block their flow's deletion; an onDelete run's
    /// (id `d...`) do not, so a foreground deletion's garbage collector leaves them running.
    #[test]
    fn only_on_delete_runs_objects_do_not_block_the_flows_deletion() {
        let id = FlowId {
            name: "f",
            namespace: Some("default"),
        };
        let spec = json!({"steps": [{"type": "exec", "cmd": "true"}]});
        let compiled = compile(&id, &spec).unwrap();
        let node = &compiled.plan.graph[compiled.plan.index("s0").unwrap()];
        let flow = FlowRef {
            name: "f".into(),
            namespace: "default".into(),
            uid: "u".into(),
            service_account: "default".into(),
        };
        let blocks = |run_id: &str| {
            let inst = NodeInstance {
                flow: &flow,
                run_id,
                node,
                instance: &[],
                attempt: 1,
                step: serde_json::to_value(node.step.as_ref().unwrap()).unwrap(),
                target_node: None,
                artifacts: &[],
                segment: vec![],
                changed_before: false,
                run_secret: None,
            };
            let lowered = lower(&inst, &LowerOptions::default()).unwrap();
            let of = |refs: Option<
                Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
            >| { refs.unwrap()[0].block_owner_deletion.unwrap() };
            let job = of(lowered.job.metadata.owner_references);
            assert_eq!(job, of(lowered.input.metadata.owner_references));
            job
        };
        assert!(blocks("r0123"), "a main run's Job blocks");
        assert!(!blocks("dr0123"), "an onDelete run's Job does not");
    }
}
