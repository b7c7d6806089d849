//! Who may call the webhook: with a client CA configured (`--webhook-client-ca`), the TLS
//! listener requires a client certificate signed by it — the one the API server presents to
//! admission webhooks when its `--admission-control-config-file` gives it a kubeconfig for them
//! (docs/operations.md, "The API server authenticates to the webhook") — and, with
//! `--webhook-client-names`, one whose Common Name or a DNS name is listed (a cluster CA also
//! signs users' and kubelets' certificates). A pod on the network cannot finish the handshake,
//! so it can neither ask `/mutate` for an approval stamp nor use the server's time.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;

/// The callers the webhook accepts.
#[derive(Debug, Clone)]
pub struct ClientAuth {
    /// The PEM file of the CA (one or more certificates) that signs the API server's client
    /// certificate.
    pub ca_file: PathBuf,
    /// Accepted Common Names or DNS names of the client certificate; empty: any the CA signed.
    pub names: Vec<String>,
}

/// The client CA could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ClientAuthError {
    /// The file could not be read or holds no certificate.
    #[error("webhook client CA {path}: {reason}")]
    Ca {
        /// The file.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl ClientAuth {
    /// The rustls verifier requiring a client certificate signed by the CA.
    pub fn verifier(&self) -> Result<Arc<dyn ClientCertVerifier>, ClientAuthError> {
        let err = |reason: String| ClientAuthError::Ca {
            path: self.ca_file.display().to_string(),
            reason,
        };
        let certs = read_certs(&self.ca_file).map_err(err)?;
        let mut roots = rustls::RootCertStore::empty();
        for c in certs {
            roots.add(c).map_err(|e| err(e.to_string()))?;
        }
        WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .map_err(|e| err(e.to_string()))
    }

    /// Whether the verified client certificate `cert` carries an accepted name.
    pub fn accepts(&self, cert: &CertificateDer<'_>) -> bool {
        if self.names.is_empty() {
            return true;
        }
        cert_names(cert)
            .iter()
            .any(|n| self.names.iter().any(|a| a == n))
    }
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = std::fs::read(path).map_err(|e| e.to_string())?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no certificate in the file".into());
    }
    Ok(certs)
}

/// The Common Names and DNS names of `cert` (none if it does not parse).
pub fn cert_names(cert: &CertificateDer<'_>) -> Vec<String> {
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(cert.as_ref()) else {
        return Vec::new();
    };
    let mut names: Vec<String> = parsed
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_string))
        .collect();
    if let Ok(Some(san)) = parsed.subject_alternative_name() {
        for n in &san.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(d) = n {
                names.push(d.to_string());
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(cn: &str, dns: &[&str]) -> CertificateDer<'static> {
        let mut p =
            rcgen::CertificateParams::new(dns.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        let key = rcgen::KeyPair::generate().unwrap();
        p.self_signed(&key).unwrap().der().clone()
    }

    #[test]
    fn a_listed_common_name_or_dns_name_is_accepted_and_no_list_accepts_any() {
        let auth = |names: &[&str]| ClientAuth {
            ca_file: "ca.crt".into(),
            names: names.iter().map(|s| s.to_string()).collect(),
        };
        let apiserver = cert("kube-apiserver-webhook-client", &[]);
        let other = cert("admin", &["apiserver.example"]);
        assert!(auth(&["kube-apiserver-webhook-client"]).accepts(&apiserver));
        assert!(!auth(&["kube-apiserver-webhook-client"]).accepts(&other));
        assert!(auth(&["apiserver.example"]).accepts(&other));
        assert!(auth(&[]).accepts(&other));
    }

    #[test]
    fn a_missing_or_empty_ca_file_is_an_error_naming_it() {
        let dir = std::env::temp_dir().join(format!("pf-client-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.join("empty.crt");
        std::fs::write(&empty, "").unwrap();
        for path in [dir.join("missing.crt"), empty] {
            let auth = ClientAuth {
                ca_file: path.clone(),
                names: vec![],
            };
            let err = auth.verifier().err().unwrap().to_string();
            assert!(err.contains(&path.display().to_string()), "{err}");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
