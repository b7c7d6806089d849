//! The run state lives in the API — a Secret per flow owned by the flow — so a restarted
//! controller continues exactly where the last one stopped. A Secret, not a ConfigMap: it holds
//! the step outputs and the steps `include` fetched, which may come from Secrets, and `view` may
//! read ConfigMaps. Namespace editors may still write it, so it is sealed ([`super::seal`]): a
//! state the controller did not write is refused, never driven. Controllers before run-state
//! Secrets kept it in a ConfigMap of the same name; that is no longer read (not sealed).

use crate::approval::Key;
use crate::labels::{MANAGED_BY, MANAGED_BY_KEY};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, DynamicObject, PostParams};
use kube::Resource;

use super::seal::{self, Owner};
use crate::flow::finalizer::{holds_state, ON_DELETE};

const KEY: &str = "run.json";
/// The field holding the state's sequence number (decimal).
const SEQ: &str = "seq";
/// The field holding the seal ([`seal::seal`]) over the other two.
const MAC: &str = "mac";
/// The field manager the controller writes run state as, so managedFields tell its writes from
/// others' (a client may name itself anything: this tells, it does not prove).
pub const FIELD_MANAGER: &str = "pseudoflow-controller";

pub use pseudoflow_walk::StoredRun;

/// Type of run-state Secrets, so they are recognisable among a namespace's Secrets.
pub const SECRET_TYPE: &str = "ops.example.com/run-state";

/// Name of a flow's run-state Secret (and of the ConfigMap older controllers used).
pub fn name(flow: &str) -> String {
    pseudoflow_compiler::names::bounded_name(
        &format!("{flow}-run"),
        pseudoflow_compiler::names::stable_hash(&[flow, "run-state"]),
        63,
    )
}

/// What [`load`] found under the flow's run-state name.
#[derive(Debug)]
pub enum Loaded {
    /// Nothing: the first run, or its state was deleted (a new run starts only if it is not the
    /// run status says ran: `select`).
    Nothing,
    /// This flow object's run, sealed by the controller, with the resourceVersion a save must
    /// name and its sequence number.
    Run(Box<StoredRun>, Option<String>, u64),
    /// A Secret this flow object does not own (an earlier flow of the same name, not yet
    /// garbage-collected, or one planted by someone else): its resourceVersion, so the next
    /// save replaces it. Nothing in it is trusted.
    NotOurs(String),
    /// Sealed by the controller but unreadable (written by a newer controller): the run must
    /// fail, not restart from scratch on every reconcile.
    Unreadable(String, String),
    /// Not what the controller stored: no seal, a seal that does not verify, or an older state
    /// put back. Never driven.
    Tampered(Tampered),
}

/// Why a run state is refused, and who last wrote its Secret.
#[derive(Debug, Clone, PartialEq)]
pub struct Tampered {
    /// What is wrong with it.
    pub why: String,
    /// The last writer its managedFields name (manager, operation, time), as its client named
    /// itself.
    pub writer: String,
}

/// Loads this flow object's stored run, trusted only when sealed under `key` for `owner` with a
/// sequence number at least `floor`. Run state older controllers kept in ConfigMaps is not
/// read: anyone who may write ConfigMaps could have written it.
pub async fn load(
    client: &kube::Client,
    key: &Key,
    owner: Owner<'_>,
    floor: u64,
) -> kube::Result<Loaded> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), owner.namespace);
    let Some(secret) = secrets.get_opt(&name(owner.name)).await? else {
        return Ok(Loaded::Nothing);
    };
    let rv = secret.metadata.resource_version.clone().unwrap_or_default();
    let owned = secret.metadata.owner_references.iter().flatten();
    if !owned.into_iter().any(|o| o.uid == owner.uid) {
        return Ok(Loaded::NotOurs(rv));
    }
    Ok(match unseal(&secret, key, owner, floor) {
        Err(why) => Loaded::Tampered(Tampered {
            why,
            writer: last_writer(&secret),
        }),
        Ok((doc, seq)) => match serde_json::from_slice::<StoredRun>(doc) {
            Ok(run) => Loaded::Run(Box::new(run), Some(rv), seq),
            Err(e) => Loaded::Unreadable(rv, e.to_string()),
        },
    })
}

/// The run document and sequence number in `secret` if its seal verifies and the sequence is
/// not below `floor`; else why not.
fn unseal<'s>(
    secret: &'s Secret,
    key: &Key,
    owner: Owner,
    floor: u64,
) -> Result<(&'s [u8], u64), String> {
    let field = |k: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(k))
            .map(|b| b.0.as_slice())
    };
    let text = |k: &str| field(k).and_then(|b| std::str::from_utf8(b).ok());
    let (Some(doc), Some(seq), Some(mac)) = (field(KEY), text(SEQ), text(MAC)) else {
        return Err(format!(
            "it is not sealed (no {KEY}, {SEQ} and {MAC}): the controller did not write it"
        ));
    };
    let seq: u64 = seq
        .parse()
        .map_err(|_| format!("its {SEQ} {seq:?} is not a number"))?;
    if !seal::verify(key, owner, seq, doc, mac) {
        return Err(
            "its seal does not verify: it was changed since the controller wrote it".into(),
        );
    }
    if seq < floor {
        return Err(format!(
            "it is the controller's state number {seq}, but number {floor} was stored since: an \
             older state was put back"
        ));
    }
    Ok((doc, seq))
}

/// Who last wrote `secret`, from its managedFields: the latest entry's manager, operation and
/// time (to the second: of entries as late as the controller's own, another's is named).
pub fn last_writer(secret: &Secret) -> String {
    let entries = secret.metadata.managed_fields.iter().flatten();
    let last = entries.max_by_key(|e| {
        let others = e.manager.as_deref() != Some(FIELD_MANAGER);
        (e.time.as_ref().map(|t| t.0), others)
    });
    match last {
        Some(e) => format!(
            "manager {:?} ({}{})",
            e.manager.as_deref().unwrap_or("unknown"),
            e.operation.as_deref().unwrap_or("unknown operation"),
            e.time
                .as_ref()
                .map(|t| format!(" at {}", t.0))
                .unwrap_or_default(),
        ),
        None => "unknown (no managedFields)".into(),
    }
}

/// Drops the controller's finalizer from flow `flow`'s run-state Secret in `ns` (the flow is
/// being let go: its onDelete steps ran, or none will), so the garbage collector may delete it.
/// Guarded by the resourceVersion, so another finalizer added meanwhile is never lost.
pub async fn release(client: &kube::Client, ns: &str, flow: &str) -> kube::Result<()> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let Some(secret) = api.get_opt(&name(flow)).await? else {
        return Ok(());
    };
    let current = secret.metadata.finalizers.clone().unwrap_or_default();
    let ours = ON_DELETE;
    if !current.iter().any(|f| f == ours) {
        return Ok(());
    }
    // An update (the verb the controller already has on Secrets; no `patch`), guarded by the
    // resourceVersion read.
    let mut released = secret;
    released.metadata.finalizers = Some(current.into_iter().filter(|f| f != ours).collect());
    match api
        .replace(&name(flow), &PostParams::default(), &released)
        .await
    {
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        other => other.map(|_| ()),
    }
}

/// Saves the run as state number `seq`, sealed under `key`, owned by `flow` (so it goes with
/// it); `resource_version` guards against two writers (a conflict makes the reconcile retry
/// from fresh state).
pub async fn save(
    client: &kube::Client,
    key: &Key,
    flow: &DynamicObject,
    run: &StoredRun,
    resource_version: Option<&str>,
    seq: u64,
) -> kube::Result<String> {
    let ns = flow.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let flow_name = flow.metadata.name.clone().unwrap_or_default();
    let name = name(&flow_name);
    let mut owner = flow
        .controller_owner_ref(&crate::flow::flow_resource())
        .expect("flows have uid");
    let doc = serde_json::to_vec(run).expect("run serialises");
    let sealed_for = Owner {
        namespace: &ns,
        name: &flow_name,
        uid: &owner.uid,
    };
    let mac = seal::seal(key, sealed_for, seq, &doc);
    let mut secret = Secret::default();
    secret.metadata.name = Some(name.clone());
    // While onDelete steps are pending, the state outlives a foreground deletion of the flow
    // (Argo CD's prune): the garbage collector deletes the flow's dependents first, and this
    // finalizer keeps the Secret until the controller lets the flow go ([`release`]).
    // It does not block the flow's deletion meanwhile: the garbage collector must finish its
    // foreground pass (see `finalizer::foreground_pending`) while the Secret stays.
    if holds_state(flow) {
        secret.metadata.finalizers = Some(vec![ON_DELETE.to_string()]);
        owner.block_owner_deletion = Some(false);
    }
    secret.metadata.owner_references = Some(vec![owner]);
    secret.metadata.labels = Some([(MANAGED_BY_KEY.to_string(), MANAGED_BY.to_string())].into());
    secret.type_ = Some(SECRET_TYPE.to_string());
    let bytes = |b: Vec<u8>| ByteString(b);
    secret.data = Some(
        [
            (KEY.to_string(), bytes(doc)),
            (SEQ.to_string(), bytes(seq.to_string().into_bytes())),
            (MAC.to_string(), bytes(mac.into_bytes())),
        ]
        .into(),
    );
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let saved = match resource_version {
        Some(rv) => {
            secret.metadata.resource_version = Some(rv.to_string());
            api.replace(&name, &pp, &secret).await?
        }
        None => api.create(&pp, &secret).await?,
    };
    Ok(saved.metadata.resource_version.unwrap_or_default())
}
