//! The webhook's serving certificate. By default the controller makes its own: a CA and a
//! serving certificate signed by it (rcgen, ECDSA P-256), stored in a Secret in its namespace so
//! that a restart or another replica reuses them, renewed when less than a third of their
//! validity is left, and the CA written into the ValidatingWebhookConfiguration's `caBundle`
//! (the new CA beside the old one, before the new certificate is served, so no call fails in
//! between). With cert-manager, the certificate is read from files instead ([`watch_files`]) and
//! cert-manager's CA injector writes the `caBundle`.
//!
//! The private keys never appear in logs, Events or status: only the Secret holds them.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// Annotation on the Secret: when the serving certificate expires (unix seconds).
pub const NOT_AFTER: &str = "ops.example.com/not-after";
/// Annotation on the Secret: the names the certificate is for, comma-separated.
pub const NAMES: &str = "ops.example.com/names";

/// How long a made certificate is valid.
pub const VALIDITY_SECONDS: i64 = 365 * 24 * 3600;

/// A CA and a serving certificate with its key, as PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct Bundle {
    /// The CA certificate: what the API server trusts.
    pub ca_pem: String,
    /// The serving certificate.
    pub cert_pem: String,
    /// The serving certificate's private key.
    key_pem: String,
    /// When both expire (unix seconds).
    pub not_after: i64,
    /// The names (DNS or IP) the serving certificate is for.
    pub names: Vec<String>,
}

impl std::fmt::Debug for Bundle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Bundle")
            .field("not_after", &self.not_after)
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

/// Making or loading a certificate failed.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// rcgen refused the parameters.
    #[error("making the certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// The PEM did not parse or the key is unusable.
    #[error("loading the certificate: {0}")]
    Load(String),
    /// The API refused reading or writing the Secret or the webhook configuration.
    #[error("{0}")]
    Kube(#[from] kube::Error),
}

impl Bundle {
    /// A new CA and serving certificate for `names`, valid from `now` (unix seconds) for
    /// `validity` seconds.
    pub fn generate(names: &[String], now: i64, validity: i64) -> Result<Bundle, TlsError> {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, KeyUsagePurpose,
        };
        let at = |t: i64| {
            time::OffsetDateTime::from_unix_timestamp(t)
                .map_err(|e| TlsError::Load(format!("time {t}: {e}")))
        };
        let (not_before, not_after) = (at(now - 300)?, at(now + validity)?);
        let ca_key = KeyPair::generate()?;
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        ca.distinguished_name
            .push(DnType::CommonName, "pseudoflow-webhook-ca");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        (ca.not_before, ca.not_after) = (not_before, not_after);
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate()?;
        let mut leaf = CertificateParams::new(names.to_vec())?;
        leaf.distinguished_name.push(
            DnType::CommonName,
            names.first().map_or("pseudoflow", |n| n.as_str()),
        );
        leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        (leaf.not_before, leaf.not_after) = (not_before, not_after);
        let cert = leaf.signed_by(&key, &issuer)?;
        Ok(Bundle {
            ca_pem: ca_cert.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            not_after: now + validity,
            names: names.to_vec(),
        })
    }

    /// The bundle a Secret holds, if it holds a whole one.
    pub fn from_secret(secret: &Secret) -> Option<Bundle> {
        let data = secret.data.as_ref()?;
        let text = |k: &str| {
            data.get(k)
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
        };
        let ann = secret.metadata.annotations.as_ref()?;
        Some(Bundle {
            ca_pem: text("ca.crt")?,
            cert_pem: text("tls.crt")?,
            key_pem: text("tls.key")?,
            not_after: ann.get(NOT_AFTER)?.parse().ok()?,
            names: ann
                .get(NAMES)?
                .split(',')
                .filter(|n| !n.is_empty())
                .map(str::to_string)
                .collect(),
        })
    }

    /// The Secret `name` in `namespace` holding this bundle (`kubernetes.io/tls`).
    pub fn to_secret(&self, namespace: &str, name: &str) -> Secret {
        let data = [
            ("ca.crt", &self.ca_pem),
            ("tls.crt", &self.cert_pem),
            ("tls.key", &self.key_pem),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
        .collect();
        let annotations = BTreeMap::from([
            (NOT_AFTER.to_string(), self.not_after.to_string()),
            (NAMES.to_string(), self.names.join(",")),
        ]);
        Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                annotations: Some(annotations),
                labels: Some(BTreeMap::from([(
                    "app.kubernetes.io/managed-by".to_string(),
                    "pseudoflow-controller".to_string(),
                )])),
                ..Default::default()
            },
            type_: Some("kubernetes.io/tls".into()),
            data: Some(data),
            ..Default::default()
        }
    }

    /// Whether it should be replaced at `now`: less than a third of its validity left, or made
    /// for other names.
    pub fn needs_renewal(&self, now: i64, names: &[String], validity: i64) -> bool {
        self.not_after - now < validity / 3 || self.names != names
    }

    /// The serving certificate and key, for rustls.
    pub fn certified_key(&self) -> Result<CertifiedKey, TlsError> {
        let certs = CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::Load(format!("certificate: {e}")))?;
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())
            .map_err(|e| TlsError::Load(format!("key: {e}")))?;
        let key = rustls::crypto::ring::sign::any_supported_type(&key)
            .map_err(|e| TlsError::Load(format!("key: {e}")))?;
        Ok(CertifiedKey::new(certs, key))
    }
}

/// The certificate served now; replaced in place when it rotates.
#[derive(Debug)]
pub struct Current(RwLock<Arc<CertifiedKey>>);

impl Current {
    /// Serving `key`.
    pub fn new(key: CertifiedKey) -> Arc<Current> {
        Arc::new(Current(RwLock::new(Arc::new(key))))
    }

    /// Serve `key` from the next handshake on.
    pub fn set(&self, key: CertifiedKey) {
        *self.0.write().unwrap() = Arc::new(key);
    }
}

impl ResolvesServerCert for Current {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().unwrap().clone())
    }
}

/// Where the controller keeps its certificate and whom it tells the CA.
#[derive(Debug, Clone)]
pub struct SelfSigned {
    /// The controller's namespace.
    pub namespace: String,
    /// The Secret holding the bundle.
    pub secret: String,
    /// The ValidatingWebhookConfiguration whose `caBundle`s it writes, if any.
    pub webhook_configuration: Option<String>,
    /// DNS names or IPs the serving certificate is for (the Service's names).
    pub names: Vec<String>,
    /// How long a made certificate is valid (seconds).
    pub validity: i64,
}

impl SelfSigned {
    /// The bundle to serve at `now`: the Secret's, unless missing, broken or due for renewal,
    /// in which case a new one is made and stored (a replica that lost the race to store its
    /// own uses the winner's). The CA ends up in the webhook configuration either way.
    pub async fn ensure(&self, client: &Client, now: i64) -> Result<Bundle, TlsError> {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &self.namespace);
        let existing = secrets.get_opt(&self.secret).await?;
        let old = existing.as_ref().and_then(Bundle::from_secret);
        let bundle = match &old {
            Some(b)
                if !b.needs_renewal(now, &self.names, self.validity)
                    && b.certified_key().is_ok() =>
            {
                b.clone()
            }
            _ => {
                let fresh = Bundle::generate(&self.names, now, self.validity)?;
                // The new CA is trusted (beside the old one) before the new certificate is
                // served or stored.
                let cas: Vec<&str> = [
                    Some(fresh.ca_pem.as_str()),
                    old.as_ref().map(|b| b.ca_pem.as_str()),
                ]
                .into_iter()
                .flatten()
                .collect();
                self.patch_ca_bundle(client, &cas.concat()).await?;
                let mut secret = fresh.to_secret(&self.namespace, &self.secret);
                let stored = match &existing {
                    None => secrets.create(&PostParams::default(), &secret).await,
                    Some(e) => {
                        secret.metadata.resource_version = e.metadata.resource_version.clone();
                        secrets
                            .replace(&self.secret, &PostParams::default(), &secret)
                            .await
                    }
                };
                match stored {
                    Ok(_) => {
                        tracing::info!(
                            secret = %self.secret,
                            not_after = fresh.not_after,
                            "made a new webhook serving certificate"
                        );
                        fresh
                    }
                    // Another replica stored one first: use that one.
                    Err(kube::Error::Api(e)) if e.code == 409 => secrets
                        .get(&self.secret)
                        .await
                        .ok()
                        .as_ref()
                        .and_then(Bundle::from_secret)
                        .ok_or_else(|| TlsError::Load("the Secret another replica wrote".into()))?,
                    Err(e) => return Err(e.into()),
                }
            }
        };
        // Without a rotation here, a bundle that already trusts this CA is left as it is: it may
        // still list the previous CA for replicas that have not loaded the new certificate.
        self.patch_ca_bundle(client, &bundle.ca_pem).await?;
        Ok(bundle)
    }

    /// Writes `ca` (one or more PEM certificates, the first being the current CA) into every
    /// webhook of the configuration (if one is configured) and of the mutating configuration of
    /// the same name (if there is one), unless each already trusts the current CA.
    async fn patch_ca_bundle(&self, client: &Client, ca: &str) -> Result<(), TlsError> {
        let Some(name) = &self.webhook_configuration else {
            return Ok(());
        };
        let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        let vwc = api.get(name).await?;
        let webhooks = vwc.webhooks.unwrap_or_default();
        let current = |w: &k8s_openapi::api::admissionregistration::v1::ValidatingWebhook| {
            w.client_config.ca_bundle.as_ref().map(|b| b.0.clone())
        };
        let first = ca
            .split_inclusive("-----END CERTIFICATE-----")
            .next()
            .unwrap_or(ca)
            .trim();
        if webhooks
            .iter()
            .all(|w| current(w).is_some_and(|b| String::from_utf8_lossy(&b).contains(first)))
        {
            return self.patch_mutating_ca_bundle(client, name, ca, first).await;
        }
        let patch = ca_bundle_patch(webhooks.iter().map(|w| w.name.as_str()), ca);
        api.patch(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await?;
        tracing::info!(configuration = %name, "wrote the webhook CA bundle");
        self.patch_mutating_ca_bundle(client, name, ca, first).await
    }

    /// The same for the MutatingWebhookConfiguration of the same name (the approval stamp,
    /// `/mutate`), if there is one.
    async fn patch_mutating_ca_bundle(
        &self,
        client: &Client,
        name: &str,
        ca: &str,
        first: &str,
    ) -> Result<(), TlsError> {
        let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        let Some(mwc) = api.get_opt(name).await? else {
            return Ok(());
        };
        let webhooks = mwc.webhooks.unwrap_or_default();
        let trusted = |w: &k8s_openapi::api::admissionregistration::v1::MutatingWebhook| {
            w.client_config
                .ca_bundle
                .as_ref()
                .is_some_and(|b| String::from_utf8_lossy(&b.0).contains(first))
        };
        if webhooks.iter().all(trusted) {
            return Ok(());
        }
        let patch = ca_bundle_patch(webhooks.iter().map(|w| w.name.as_str()), ca);
        api.patch(name, &PatchParams::default(), &Patch::Strategic(patch))
            .await?;
        tracing::info!(configuration = %name, "wrote the mutating webhook CA bundle");
        Ok(())
    }

    /// Keeps `current` serving a valid certificate: checks every `every`, renewing as
    /// [`SelfSigned::ensure`] says and loading what another replica renewed.
    pub async fn keep(
        self,
        client: Client,
        current: Arc<Current>,
        mut served: Bundle,
        every: std::time::Duration,
    ) {
        loop {
            tokio::time::sleep(every).await;
            match self.ensure(&client, unix_now()).await {
                Ok(b) if b != served => match b.certified_key() {
                    Ok(k) => {
                        current.set(k);
                        served = b;
                    }
                    Err(e) => tracing::warn!("webhook certificate: {e}"),
                },
                Ok(_) => {}
                Err(e) => tracing::warn!("webhook certificate: {e}"),
            }
        }
    }
}

/// A strategic-merge patch setting `ca` as the caBundle of each named webhook of a
/// (validating or mutating) webhook configuration.
fn ca_bundle_patch<'a>(names: impl Iterator<Item = &'a str>, ca: &str) -> serde_json::Value {
    serde_json::json!({
        "webhooks": names.map(|name| serde_json::json!({
            "name": name,
            "clientConfig": {"caBundle": ByteString(ca.as_bytes().to_vec())},
        })).collect::<Vec<_>>()
    })
}

/// Loads `tls.crt` and `tls.key` from `dir` (a mounted cert-manager Secret).
pub fn load_files(dir: &std::path::Path) -> Result<CertifiedKey, TlsError> {
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f))
            .map_err(|e| TlsError::Load(format!("{}: {e}", dir.join(f).display())))
    };
    Bundle {
        ca_pem: String::new(),
        cert_pem: read("tls.crt")?,
        key_pem: read("tls.key")?,
        not_after: 0,
        names: Vec::new(),
    }
    .certified_key()
}

/// Reloads the files in `dir` every `every` (cert-manager renews them in place).
pub async fn watch_files(
    dir: std::path::PathBuf,
    current: Arc<Current>,
    every: std::time::Duration,
) {
    loop {
        tokio::time::sleep(every).await;
        match load_files(&dir) {
            Ok(k) => current.set(k),
            Err(e) => tracing::warn!("webhook certificate: {e}"),
        }
    }
}

/// Now, in unix seconds.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["pseudoflow.ops.svc".into(), "127.0.0.1".into()]
    }

    #[test]
    fn a_made_bundle_round_trips_through_its_secret_and_loads_into_rustls() {
        let b = Bundle::generate(&names(), 1_800_000_000, VALIDITY_SECONDS).unwrap();
        let s = b.to_secret("ops", "webhook-tls");
        assert_eq!(s.type_.as_deref(), Some("kubernetes.io/tls"));
        assert_eq!(Bundle::from_secret(&s), Some(b.clone()));
        b.certified_key().unwrap();
        assert!(b.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        // Debug never shows the key.
        assert!(!format!("{b:?}").contains("PRIVATE"), "{b:?}");
    }

    #[test]
    fn renewal_when_a_third_of_the_validity_is_left_or_the_names_changed() {
        let v = VALIDITY_SECONDS;
        let b = Bundle::generate(&names(), 0, v).unwrap();
        assert!(!b.needs_renewal(0, &names(), v));
        assert!(!b.needs_renewal(v / 2, &names(), v));
        assert!(b.needs_renewal(v - v / 3 + 1, &names(), v));
        assert!(b.needs_renewal(0, &["other.svc".to_string()], v));
    }

    #[test]
    fn a_secret_missing_a_part_is_not_a_bundle() {
        let b = Bundle::generate(&names(), 0, VALIDITY_SECONDS).unwrap();
        let mut s = b.to_secret("ops", "t");
        s.data.as_mut().unwrap().remove("tls.key");
        assert_eq!(Bundle::from_secret(&s), None);
    }
}
