//! The docs name files that exist: every repository path the README and `docs/` write in
//! backticks (`controller/tests/lifecycle/runs.rs::some_test`, or short as `adversarial/hijack.rs`)
//! or link to must be a file of this repository, so a moved test or file cannot leave its old
//! path behind (issue #43 item 5). `docs/decisions.md` is left out: it records what was decided
//! when, with the paths of that time. No cluster needed.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Paths the docs write on purpose that are not files here, with why.
const NOT_FILES: &[(&str, &str)] = &[
    // from-kopf.md: files of the seeds' own repositories, quoted as they are there.
    ("bundles/myapp.yaml", "a seed repository's file"),
    ("build/mysql-operator.py", "a seed repository's file"),
    // architecture.md: the files a scratch step added on a throwaway branch.
    ("crd/src/steps/echo.rs", "a throwaway branch's file"),
    (
        "runtime-image/src/steps/echo.rs",
        "a throwaway branch's file",
    ),
    ("examples/steps/echo.yaml", "a throwaway branch's file"),
    // gitops.md: the layout of a user's git repository.
    ("flows/prod/nodelocaldns.yaml", "a user's git repository"),
    ("apps/prod/payments.yaml", "a user's git repository"),
    // architecture.md: the developers' brief, outside the repository.
    (
        "../shared/ARCHITECTURE.md",
        "the brief, beside the repository",
    ),
];

const EXTENSIONS: &[&str] = &["rs", "sh", "yaml", "md", "lua", "py", "toml", "tpl", "json"];

/// `text` as a repository path if it looks like one: no spaces, a `/`, a known extension
/// (a test's `::name` and a link's `#anchor` dropped).
fn as_path(text: &str) -> Option<&str> {
    let text = text.split("::").next()?.split('#').next()?;
    let ext = text.rsplit_once('.')?.1;
    let looks = text.contains('/')
        && !text.contains(char::is_whitespace)
        && !text.contains("://")
        && !text.starts_with('/')
        && !text.starts_with("etc/") // a node's file (/etc/...), written without its slash
        && !text.contains('*')
        && !text.contains(['<', '='])
        && EXTENSIONS.contains(&ext);
    looks.then_some(text)
}

/// Whether `path`, written in `doc`, names a file: from the doc's folder, the repository root,
/// or (the short forms the docs use) a crate's folder, its `src/` or `tests/`, or the controller's
/// `src/reconcile/`.
fn resolves(root: &Path, doc: &Path, path: &str) -> bool {
    if doc.parent().unwrap().join(path).exists() || root.join(path).exists() {
        return true;
    }
    let crates = std::fs::read_dir(root)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("Cargo.toml").exists())
        .map(|e| e.path());
    crates
        .flat_map(|c| [c.clone(), c.join("src"), c.join("tests")])
        .chain([
            root.join("controller/src/reconcile"),
            root.join("charts/pseudoflow-operator"),
        ])
        .any(|base| base.join(path).exists())
}

/// Each backticked span and link target of `text`, with its line number.
fn mentions(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        out.extend(line.split('`').skip(1).step_by(2).map(|s| (n + 1, s)));
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            out.push((n + 1, &rest[..end]));
        }
    }
    out
}

fn docs(root: &Path) -> Vec<PathBuf> {
    let mut docs = vec![root.join("README.md")];
    for dir in ["docs", "testenv", "bench", "charts", "examples"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        docs.extend(
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "md"))
                .filter(|p| !p.ends_with("docs/decisions.md")),
        );
    }
    docs.sort();
    docs
}

#[test]
fn every_path_the_docs_name_is_a_file_here() {
    let root = repo();
    let mut stale = Vec::new();
    let mut checked = 0;
    for doc in docs(&root) {
        let text = std::fs::read_to_string(&doc).unwrap();
        for (line, span) in mentions(&text) {
            let Some(path) = as_path(span) else { continue };
            if NOT_FILES.iter().any(|(p, _)| *p == path) {
                continue;
            }
            checked += 1;
            if !resolves(&root, &doc, path) {
                let shown = doc.strip_prefix(&root).unwrap().display();
                stale.push(format!("{shown}:{line}: {path}"));
            }
        }
    }
    assert!(
        checked > 200,
        "only {checked} paths found: is the scan broken?"
    );
    assert!(
        stale.is_empty(),
        "the docs name {} path(s) that are no file here (moved or renamed?):\n{}",
        stale.len(),
        stale.join("\n")
    );
}

#[test]
fn a_moved_file_is_caught_and_the_short_forms_resolve() {
    let root = repo();
    let doc = root.join("docs/security.md");
    assert!(resolves(&root, &doc, "adversarial/hijack.rs"));
    assert!(resolves(&root, &doc, "walk/src/includes.rs"));
    assert!(resolves(&root, &doc, "schedule.rs"));
    assert!(!resolves(&root, &doc, "runtime/includes.rs"));
    assert_eq!(
        as_path("control_flow/includes.rs::a_pinned_include"),
        Some("control_flow/includes.rs")
    );
    assert_eq!(as_path("docs/gitops.md#1-teach"), Some("docs/gitops.md"));
    assert_eq!(as_path("kubectl get pf"), None);
    assert_eq!(
        as_path("--config-file=/etc/a/b.yaml"),
        None,
        "a flag's value"
    );
    assert_eq!(
        mentions("see `a/b.rs` and [x](docs/c.md#y)"),
        [(1, "a/b.rs"), (1, "docs/c.md#y")]
    );
}

/// Every crate of the workspace has its row in the README's layout table and in
/// docs/architecture.md's crate table (issue #45 item 6), so a new crate cannot go unlisted.
#[test]
fn every_crate_of_the_workspace_has_its_row_in_the_readme_and_the_architecture() {
    let root = repo();
    let cargo = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let line = cargo
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("a members line in Cargo.toml");
    let list = &line[line.find('[').unwrap() + 1..line.rfind(']').unwrap()];
    let members: Vec<&str> = list
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .collect();
    assert!(members.len() >= 10, "members read: {members:?}");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let architecture = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let unlisted: Vec<String> = members
        .iter()
        .flat_map(|m| {
            let in_readme = readme.contains(&format!("| `{m}/` |"));
            let in_architecture = architecture.contains(&format!("| `{m}` "));
            [
                (!in_readme).then(|| format!("README.md layout table: `{m}/`")),
                (!in_architecture).then(|| format!("docs/architecture.md crate table: `{m}`")),
            ]
        })
        .flatten()
        .collect();
    assert!(
        unlisted.is_empty(),
        "crates without their row: {unlisted:?}"
    );
}
