//! `make images` (runtime-image/local/build.sh) builds the image runtime-image/Dockerfile
//! describes: the same package list (runtime-image/tools.txt, read by both with the same
//! expression), the same user, entrypoint and cmd, kubectl and pseudoflow-step at the same
//! paths; the built archives' configs (user, entrypoint, cmd) are checked too. The archives must
//! be built (`make images`; `make test` and CI build them first): a missing one fails the test,
//! naming it, instead of leaving half the check undone.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .into()
}

fn read(p: &str) -> String {
    std::fs::read_to_string(repo().join(p)).unwrap()
}

/// The argument of `flag` in build.sh's runtime `oci-pack.py` call.
fn pack_arg(script: &str, flag: &str) -> String {
    pack_arg_of(script, "runtime", flag)
}

/// The argument of `flag` in build.sh's `oci-pack.py` call for `image`.
fn pack_arg_of(script: &str, image: &str, flag: &str) -> String {
    let marker = format!("oci-pack.py \"$OUT/{image}.oci.tar\"");
    let call = &script[script.find(&marker).unwrap()..];
    let at = call.find(&format!("{flag} ")).unwrap() + flag.len() + 1;
    let rest = &call[at..];
    match rest.chars().next().unwrap() {
        q @ ('\'' | '"') => rest[1..1 + rest[1..].find(q).unwrap()].to_string(),
        _ => rest.split_whitespace().next().unwrap().to_string(),
    }
}

fn dockerfile_json(dockerfile: &str, instr: &str) -> serde_json::Value {
    let line = dockerfile
        .lines()
        .find(|l| l.starts_with(&format!("{instr} ")))
        .unwrap();
    serde_json::from_str(&line[instr.len() + 1..]).unwrap()
}

#[test]
fn the_local_image_build_and_the_dockerfile_agree() {
    let dockerfile = read("runtime-image/Dockerfile");
    let script = read("runtime-image/local/build.sh");
    // The same package list, read the same way.
    let expr = r"sed -n 's/^\([a-z0-9.+-]*\):.*/\1/p'";
    assert!(dockerfile.contains(&format!("$({expr} /tmp/tools.txt)")));
    assert!(script.contains(&format!("$({expr} runtime-image/tools.txt")));
    // debian:bookworm-slim is bookworm's minbase.
    assert!(dockerfile.contains("FROM debian:bookworm-slim"));
    assert!(script.contains("SUITE=bookworm") && script.contains("--variant=minbase"));
    // User, entrypoint, cmd.
    let user = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .unwrap();
    assert_eq!(pack_arg(&script, "--user"), user);
    let entrypoint: serde_json::Value =
        serde_json::from_str(&pack_arg(&script, "--entrypoint")).unwrap();
    assert_eq!(entrypoint, dockerfile_json(&dockerfile, "ENTRYPOINT"));
    let cmd: serde_json::Value = serde_json::from_str(&pack_arg(&script, "--cmd")).unwrap();
    assert_eq!(cmd, dockerfile_json(&dockerfile, "CMD"));
    // The binaries at the Dockerfile's paths.
    for bin in ["kubectl", "pseudoflow-step"] {
        assert!(dockerfile.contains(&format!("/usr/local/bin/{bin}")));
        assert!(script.contains(&format!("\"$top/usr/local/bin/{bin}\"")));
    }
    // The static musl build, as the Dockerfile's build stage.
    assert!(dockerfile.contains("--target x86_64-unknown-linux-musl"));
    assert!(script.contains("--target x86_64-unknown-linux-musl"));

    let config = image_config(&built_archive("runtime"));
    assert_eq!(config["config"]["User"], user, "{config:#}");
    assert_eq!(
        config["config"]["Entrypoint"],
        dockerfile_json(&dockerfile, "ENTRYPOINT")
    );
    assert_eq!(config["config"]["Cmd"], dockerfile_json(&dockerfile, "CMD"));
}

#[test]
fn the_local_controller_image_and_its_dockerfile_agree() {
    let dockerfile = read("controller/Dockerfile");
    let script = read("runtime-image/local/build.sh");
    let user = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .unwrap();
    assert_eq!(pack_arg_of(&script, "controller", "--user"), user);
    let entrypoint: serde_json::Value =
        serde_json::from_str(&pack_arg_of(&script, "controller", "--entrypoint")).unwrap();
    assert_eq!(entrypoint, dockerfile_json(&dockerfile, "ENTRYPOINT"));
    // The distroless static base: CA certificates, nonroot in passwd, and the static binary.
    assert!(dockerfile.contains("FROM gcr.io/distroless/static-debian12:nonroot"));
    assert!(dockerfile.contains("--target x86_64-unknown-linux-musl"));
    assert!(
        script.contains("etc/ssl/certs/ca-certificates.crt") && script.contains("nonroot:x:65532")
    );
    assert!(script.contains("-p pseudoflow-controller --bin pseudoflow-controller"));

    let config = image_config(&built_archive("controller"));
    assert_eq!(config["config"]["User"], user, "{config:#}");
    assert_eq!(
        config["config"]["Entrypoint"],
        dockerfile_json(&dockerfile, "ENTRYPOINT")
    );
}

/// The archive `make images` builds for `image`; a missing one fails the test, naming it and
/// how to build it (a skipped half would pass without checking the image anyone runs).
fn built_archive(image: &str) -> PathBuf {
    let archive = pseudoflow_testenv::real_node::images_dir().join(format!("{image}.oci.tar"));
    assert!(
        archive.is_file(),
        "{} is missing: the {image} image is not built; run `make images` (CI does before the tests)",
        archive.display()
    );
    archive
}

/// The image config of an OCI archive (index → manifest → config), read with `tar`.
fn image_config(archive: &Path) -> serde_json::Value {
    let get = |name: &str| -> Vec<u8> {
        let out = std::process::Command::new("tar")
            .arg("-xOf")
            .arg(archive)
            .arg(name)
            .output()
            .unwrap();
        assert!(out.status.success(), "{name} in {}", archive.display());
        out.stdout
    };
    let blob = |digest: &serde_json::Value| -> serde_json::Value {
        let d = digest.as_str().unwrap().trim_start_matches("sha256:");
        serde_json::from_slice(&get(&format!("blobs/sha256/{d}"))).unwrap()
    };
    let index: serde_json::Value = serde_json::from_slice(&get("index.json")).unwrap();
    let manifest = blob(&index["manifests"][0]["digest"]);
    blob(&manifest["config"]["digest"])
}
