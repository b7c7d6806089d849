//! Everything one execution needs besides the step: the input, the (lazily built) API client,
//! the node's root directory and a note of what the step last saw, which a timeout reports.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use kube::Client;
use pseudoflow_crd::protocol::ExecutorInput;
use tokio::sync::OnceCell;

use crate::error::{describe, Call, StepError};
use crate::kind::Kinds;

/// Default host root inside a node step's pod (the node's `/` is mounted there).
pub const DEFAULT_HOST_ROOT: &str = "/host";

/// The state of one execution.
pub struct ExecCtx {
    /// The document the controller wrote for this node instance.
    pub input: ExecutorInput,
    /// Where the node's root filesystem is mounted (`PSEUDOFLOW_HOST_ROOT`, default `/host`).
    pub host_root: PathBuf,
    /// Program used to enter the host's namespaces; empty runs commands directly (tests).
    pub nsenter: String,
    client: Arc<OnceCell<Client>>,
    pub(crate) kinds: Arc<Kinds>,
    progress: Arc<Mutex<String>>,
    goal: Mutex<String>,
}

impl ExecCtx {
    /// A context with explicit settings (tests, embedding).
    pub fn new(input: ExecutorInput, host_root: PathBuf, nsenter: String) -> Self {
        ExecCtx {
            input,
            host_root,
            nsenter,
            client: Arc::new(OnceCell::new()),
            kinds: Arc::default(),
            progress: Arc::new(Mutex::new(String::new())),
            goal: Mutex::new(String::new()),
        }
    }

    /// Uses `client` instead of building one (tests against a fake API server).
    pub fn with_client(self, client: Client) -> Self {
        let _ = self.client.set(client);
        self
    }

    /// Shares `kinds` (what discovery found) with other contexts: the controller gives every
    /// step it runs the same.
    pub fn with_kinds(mut self, kinds: Arc<Kinds>) -> Self {
        self.kinds = kinds;
        self
    }

    /// A context for one step of a fused segment: `input` is that step's, the API client (and
    /// the identity it carries) and what discovery found are shared with `self`.
    pub fn derive(&self, input: ExecutorInput) -> Self {
        let mut ctx = ExecCtx::new(input, self.host_root.clone(), self.nsenter.clone());
        ctx.client = self.client.clone();
        ctx.kinds = self.kinds.clone();
        ctx
    }

    /// A context configured from the environment, as in the executor pod.
    pub fn from_env(input: ExecutorInput) -> Self {
        let root =
            std::env::var("PSEUDOFLOW_HOST_ROOT").unwrap_or_else(|_| DEFAULT_HOST_ROOT.into());
        let nsenter = std::env::var("PSEUDOFLOW_NSENTER").unwrap_or_else(|_| "nsenter".into());
        ExecCtx::new(input, root.into(), nsenter)
    }

    /// The API client with the pod's identity (KUBECONFIG first, then in-cluster), built on
    /// first use so node file steps run without any cluster access.
    pub async fn client(&self) -> Result<Client, StepError> {
        self.client
            .get_or_try_init(|| async {
                Client::try_default().await.map_err(|e| {
                    StepError::failed(format!("cannot build a Kubernetes client: {e}"))
                })
            })
            .await
            .cloned()
    }

    /// The flow's namespace: the default for namespaced objects.
    pub fn namespace(&self) -> &str {
        &self.input.flow.namespace
    }

    /// Records what the step last saw; a timeout message repeats it.
    pub fn note(&self, seen: impl Into<String>) {
        if let Ok(mut p) = self.progress.lock() {
            *p = seen.into();
        }
    }

    /// Records what the step is waiting for (`ConfigMap/ns/x to be Exist`); a timeout names it.
    pub fn waiting_for(&self, goal: impl Into<String>) {
        if let Ok(mut g) = self.goal.lock() {
            *g = goal.into();
        }
    }

    /// What the step is waiting for (empty when it waits for nothing in particular).
    pub fn goal(&self) -> String {
        self.goal.lock().map(|g| g.clone()).unwrap_or_default()
    }

    /// What the step last saw (empty when nothing was noted).
    pub fn last_seen(&self) -> String {
        self.progress.lock().map(|p| p.clone()).unwrap_or_default()
    }

    /// Turns an API error into a step failure that names the identity and the step path.
    pub fn api_err(&self, e: kube::Error, call: Call) -> StepError {
        let flow = &self.input.flow;
        StepError::Failed(describe(
            &e,
            call,
            (&flow.namespace, &flow.service_account),
            &self.input.path,
        ))
    }
}
