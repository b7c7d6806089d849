//! Certificates and keys for a throwaway cluster, made with the `openssl` command: a CA, the
//! API server's serving cert (SANs for loopback and the in-cluster service name), an admin client
//! cert in `system:masters`, the simulated kubelets' serving cert and the API server's client cert
//! for them (so `pods/exec` is authenticated both ways), the API server's client cert for
//! admission webhooks ([`WEBHOOK_CLIENT_CN`]), and the service-account signing key pair.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The Common Name of the client certificate the API server presents to admission webhooks
/// (signed by the cluster CA), as a webhook that checks its caller expects it.
pub const WEBHOOK_CLIENT_CN: &str = "kube-apiserver-webhook-client";

/// Paths of everything generated.
#[derive(Debug, Clone)]
pub struct Certs {
    /// Where the files are.
    pub dir: PathBuf,
    /// The cluster CA, which signs everything else.
    pub ca_crt: PathBuf,
    /// The CA's key.
    pub ca_key: PathBuf,
    /// The API server's serving certificate.
    pub server_crt: PathBuf,
    /// Its key.
    pub server_key: PathBuf,
    /// The cluster-admin client certificate (tests and kubectl).
    pub admin_crt: PathBuf,
    /// Its key.
    pub admin_key: PathBuf,
    /// What the simulated kubelets' streaming server presents (SAN 127.0.0.1).
    pub kubelet_crt: PathBuf,
    /// Its key.
    pub kubelet_key: PathBuf,
    /// What the API server presents to the kubelets.
    pub kubelet_client_crt: PathBuf,
    /// Its key.
    pub kubelet_client_key: PathBuf,
    /// What the API server presents to admission webhooks ([`WEBHOOK_CLIENT_CN`]).
    pub webhook_client_crt: PathBuf,
    /// Its key.
    pub webhook_client_key: PathBuf,
    /// The ServiceAccount token signing key.
    pub sa_key: PathBuf,
    /// Its public half, which the API server verifies tokens with.
    pub sa_pub: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) -> Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .context("running openssl (install the openssl package)")?;
    if !out.status.success() {
        bail!(
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// A key and a certificate for `subj`, `<name>.key` and `<name>.crt` in `dir`, signed by the CA
/// `ca` (certificate and key) with the extensions in file `ext` (in `dir`), valid for `days`.
fn signed_by_ca(
    dir: &Path,
    ca: (&Path, &Path),
    name: &str,
    subj: &str,
    ext: &str,
    days: &str,
) -> Result<()> {
    let (ca_crt, ca_key) = (ca.0.display().to_string(), ca.1.display().to_string());
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            subj,
        ],
    )?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &ca_crt,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &format!("{name}.crt"),
            "-days",
            days,
            "-extfile",
            ext,
        ],
    )
}

/// Generates all certificates into `dir`.
pub fn generate(dir: &Path) -> Result<Certs> {
    generate_with(dir, &[])
}

/// Like [`generate`], with further IP addresses in the API server's certificate (the address
/// real nodes reach it at).
pub fn generate_with(dir: &Path, api_ips: &[std::net::Ipv4Addr]) -> Result<Certs> {
    std::fs::create_dir_all(dir)?;
    let days = "3650";
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            days,
            "-subj",
            "/CN=pseudoflow-testenv-ca",
        ],
    )?;
    let extra: String = api_ips.iter().map(|ip| format!(",IP:{ip}")).collect();
    std::fs::write(
        dir.join("server.ext"),
        format!("subjectAltName=IP:127.0.0.1,IP:100.64.0.1{extra},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\nextendedKeyUsage=serverAuth\n"),
    )?;
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n")?;
    for (name, subj, ext) in [
        ("server", "/CN=kube-apiserver", "server.ext"),
        ("admin", "/O=system:masters/CN=admin", "client.ext"),
        ("kubelet", "/CN=testenv-kubelet", "server.ext"),
        (
            "kubelet-client",
            "/O=system:masters/CN=kube-apiserver-kubelet-client",
            "client.ext",
        ),
        (
            "webhook-client",
            &format!("/CN={WEBHOOK_CLIENT_CN}"),
            "client.ext",
        ),
    ] {
        let ca = (dir.join("ca.crt"), dir.join("ca.key"));
        signed_by_ca(dir, (&ca.0, &ca.1), name, subj, ext, days)?;
    }
    openssl(dir, &["genrsa", "-out", "sa.key", "2048"])?;
    openssl(dir, &["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"])?;
    let p = |f: &str| dir.join(f);
    Ok(Certs {
        dir: dir.to_path_buf(),
        ca_crt: p("ca.crt"),
        ca_key: p("ca.key"),
        server_crt: p("server.crt"),
        server_key: p("server.key"),
        admin_crt: p("admin.crt"),
        admin_key: p("admin.key"),
        kubelet_crt: p("kubelet.crt"),
        kubelet_key: p("kubelet.key"),
        kubelet_client_crt: p("kubelet-client.crt"),
        kubelet_client_key: p("kubelet-client.key"),
        webhook_client_crt: p("webhook-client.crt"),
        webhook_client_key: p("webhook-client.key"),
        sa_key: p("sa.key"),
        sa_pub: p("sa.pub"),
    })
}

/// Issues a certificate signed by the cluster CA in `certs.dir`: `<name>.key` and `<name>.crt`
/// with subject `subj` and the extension lines `ext` (e.g. `subjectAltName=...`).
pub fn issue(certs: &Certs, out: &Path, name: &str, subj: &str, ext: &str) -> Result<()> {
    std::fs::create_dir_all(out)?;
    let ext_file = format!("{name}.ext");
    std::fs::write(out.join(&ext_file), ext)?;
    signed_by_ca(
        out,
        (&certs.ca_crt, &certs.ca_key),
        name,
        subj,
        &ext_file,
        "3650",
    )
}
