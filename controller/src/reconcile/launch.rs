//! Creating a step's input Secret and Job. Their names are deterministic, so that a restarted
//! controller finds what it already created instead of creating it twice — and so anyone who
//! can create Secrets or Jobs in the namespace can create them first. An object that already
//! exists is adopted only if this flow object owns it and it holds exactly what this launch
//! would have written; anything else fails the step, loudly, instead of running what was
//! planted (for a node step: as root on a node).

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use pseudoflow_compiler::lower::{Lowered, INPUT_DIGEST_ANNOTATION, INPUT_KEY};

use super::observe::controlled_by;
use crate::flow::Error;

/// What launching one step did.
#[derive(Debug, PartialEq, Eq)]
pub enum Launched {
    /// Both objects were created now.
    Created,
    /// They existed already, made by this flow for this very step (an earlier reconcile).
    Adopted,
    /// An object of that name exists that this flow did not make for this step: the reason.
    Refused(String),
}

/// Creates (or adopts, see the module doc) the input Secret, then the Job.
pub async fn launch(
    client: &kube::Client,
    flow_uid: &str,
    lowered: &Lowered,
) -> Result<Launched, Error> {
    let ns = lowered
        .job
        .metadata
        .namespace
        .as_deref()
        .unwrap_or_default();
    let name = lowered.job.metadata.name.as_deref().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let mut created = false;
    match secrets.create(&PostParams::default(), &lowered.input).await {
        Ok(_) => created = true,
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let existing = secrets.get_opt(name).await?;
            if let Some(why) = existing.and_then(|s| input_mismatch(&s, flow_uid, lowered)) {
                return Ok(Launched::Refused(refusal("Secret", name, &why)));
            }
        }
        Err(e) => return Err(e.into()),
    }
    let job = super::history::with_backstop_ttl(&lowered.job);
    match jobs.create(&PostParams::default(), &job).await {
        Ok(_) => created = true,
        // The API server found the Job invalid: retrying cannot help, the step fails saying
        // why (rather than the flow waiting, without a status, on a reconcile that keeps failing).
        Err(kube::Error::Api(e)) if e.code == 400 || e.code == 422 => {
            return Ok(Launched::Refused(format!(
                "the API server refused the step's Job {name}: {}",
                e.message
            )));
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {
            if let Some(job) = jobs.get_opt(name).await? {
                if let Some(why) = job_mismatch(&job, flow_uid, &lowered.input_digest) {
                    return Ok(Launched::Refused(refusal("Job", name, &why)));
                }
            }
        }
        Err(e) => return Err(e.into()),
    }
    Ok(if created {
        Launched::Created
    } else {
        Launched::Adopted
    })
}

fn refusal(kind: &str, name: &str, why: &str) -> String {
    format!(
        "a {kind} named {name} already exists and {why}: refusing to run the step with it \
         (someone who may create {kind}s in this namespace made it; delete it and run again)"
    )
}

/// Why an existing input Secret is not this launch's, or None when it is.
fn input_mismatch(existing: &Secret, flow_uid: &str, lowered: &Lowered) -> Option<String> {
    if !controlled_by(&existing.metadata.owner_references, flow_uid) {
        return Some("is not owned by this flow".into());
    }
    let stored = existing.data.as_ref().and_then(|d| d.get(INPUT_KEY));
    if stored.map(|b| b.0.as_slice()) != Some(lowered.input_document.as_bytes()) {
        return Some("does not hold this step's input".into());
    }
    None
}

/// Why an existing Job is not this launch's, or None when it is.
fn job_mismatch(existing: &Job, flow_uid: &str, digest: &str) -> Option<String> {
    if !controlled_by(&existing.metadata.owner_references, flow_uid) {
        return Some("is not owned by this flow".into());
    }
    let carried = existing
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(INPUT_DIGEST_ANNOTATION));
    if carried.map(String::as_str) != Some(digest) {
        return Some("was made for another input".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use k8s_openapi::ByteString;

    fn owner(uid: &str) -> Option<Vec<OwnerReference>> {
        Some(vec![OwnerReference {
            api_version: "ops.example.com/v1alpha1".into(),
            kind: "PseudoFlow".into(),
            name: "f".into(),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }])
    }

    fn lowered(doc: &str) -> Lowered {
        Lowered {
            input: Secret::default(),
            job: Job::default(),
            input_document: doc.into(),
            input_digest: pseudoflow_compiler::names::content_digest(doc.as_bytes()),
        }
    }

    fn secret(uid: &str, doc: &str) -> Secret {
        let mut s = Secret::default();
        s.metadata.owner_references = owner(uid);
        s.data = Some([(INPUT_KEY.to_string(), ByteString(doc.as_bytes().to_vec()))].into());
        s
    }

    #[test]
    fn only_an_input_this_flow_made_for_this_step_is_adopted() {
        let l = lowered("{\"step\":1}");
        assert_eq!(
            input_mismatch(&secret("u1", "{\"step\":1}"), "u1", &l),
            None
        );
        let planted = input_mismatch(&secret("u1", "{\"step\":2}"), "u1", &l).unwrap();
        assert!(planted.contains("does not hold"), "{planted}");
        let foreign = input_mismatch(&secret("u2", "{\"step\":1}"), "u1", &l).unwrap();
        assert!(foreign.contains("not owned"), "{foreign}");
        let mut unowned = secret("u1", "{\"step\":1}");
        unowned.metadata.owner_references = None;
        assert!(input_mismatch(&unowned, "u1", &l).is_some());
    }

    #[test]
    fn only_a_job_this_flow_made_for_this_input_is_adopted() {
        let mut job = Job::default();
        job.metadata.owner_references = owner("u1");
        job.metadata.annotations =
            Some([(INPUT_DIGEST_ANNOTATION.to_string(), "d1".to_string())].into());
        assert_eq!(job_mismatch(&job, "u1", "d1"), None);
        assert!(job_mismatch(&job, "u1", "d2")
            .unwrap()
            .contains("another input"));
        assert!(job_mismatch(&job, "u2", "d1")
            .unwrap()
            .contains("not owned"));
    }
}
