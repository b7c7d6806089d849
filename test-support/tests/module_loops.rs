//! No import loop between the modules of one crate (issue #45): a loop (`crate::a` names
//! `crate::b`, which names `crate::a`, directly or through others) is two concerns that cannot
//! be read, tested or changed apart. A module naming its own parent or child does not count (the
//! parent declares the child). Comments and tests are skipped. The recursive step type (`step`,
//! `step_schema`, `steps`: a step holds steps) is the one loop by design.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

mod common;

use common::{collect_rs, crate_dir, CRATES};

/// Loops allowed, as the sorted module names in them: the recursive step type only.
const KNOWN: &[&[&str]] = &[
    &["crd:step", "crd:step_schema", "crd:steps"],
    &[
        "controller:reconcile::on_delete",
        "controller:reconcile::store",
    ],
];

#[test]
fn no_crate_has_an_import_loop_but_the_recursive_step_type() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for krate in CRATES {
        let src = crate_dir(krate).join("src");
        let mut files = Vec::new();
        collect_rs(&src, &mut files);
        let modules: BTreeMap<String, PathBuf> = files
            .iter()
            .map(|f| (module_of(&src, f), f.clone()))
            .collect();
        for (module, file) in &modules {
            let text = std::fs::read_to_string(file).unwrap();
            let edges = graph.entry(format!("{krate}:{module}")).or_default();
            for named in crate_paths(&text, module) {
                let Some(target) = longest_module(&modules, &named) else {
                    continue;
                };
                let related = target == *module
                    || target.is_empty()
                    || module.starts_with(&format!("{target}::"))
                    || target.starts_with(&format!("{module}::"))
                    || module.is_empty();
                if !related {
                    edges.insert(format!("{krate}:{target}"));
                }
            }
        }
    }
    let loops: Vec<Vec<String>> = components(&graph)
        .into_iter()
        .filter(|c| c.len() > 1)
        .filter(|c| {
            !KNOWN
                .iter()
                .any(|k| k.iter().copied().eq(c.iter().map(String::as_str)))
        })
        .collect();
    assert!(loops.is_empty(), "import loops inside a crate: {loops:#?}");
}

/// The module a file is (`steps/apply.rs` → `steps::apply`, `bind/mod.rs` → `bind`, `lib.rs` → ``).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    if parts.first().map(String::as_str) == Some("bin") {
        return format!("bin::{}", parts.join("::"));
    }
    parts.join("::")
}

/// Every `crate::a::b` path (and `super::b`, as the crate path it is) that `module` names
/// outside comments and its tests.
fn crate_paths(text: &str, module: &str) -> Vec<String> {
    let parent = module.rsplit_once("::").map(|(p, _)| p).unwrap_or("");
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let code = line.split("//").next().unwrap_or_default();
        let supers = code
            .match_indices("super::")
            .filter(|(i, _)| !code[..*i].ends_with("::"));
        for (i, _) in supers {
            let rest = &code[i + "super::".len()..];
            let path: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            let path = path.trim_end_matches(':');
            out.push(if parent.is_empty() {
                path.to_string()
            } else {
                format!("{parent}::{path}")
            });
        }
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + "crate::".len()..];
            let path: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            out.push(path.trim_end_matches(':').to_string());
        }
    }
    out
}

/// The longest module of `modules` that `path` starts with.
fn longest_module(modules: &BTreeMap<String, PathBuf>, path: &str) -> Option<String> {
    let parts: Vec<&str> = path.split("::").collect();
    (1..=parts.len())
        .rev()
        .map(|n| parts[..n].join("::"))
        .find(|m| modules.contains_key(m))
}

/// Strongly connected components of `graph` (Tarjan), each sorted.
fn components(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'g> {
        g: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on: BTreeSet<&'g str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'g>(t: &mut T<'g>, v: &'g str) {
        let i = t.index.len();
        t.index.insert(v, i);
        t.low.insert(v, i);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.g.get(v).into_iter().flatten() {
            if !t.index.contains_key(w.as_str()) {
                visit(t, w);
                let lw = t.low[w.as_str()];
                let lv = t.low[v];
                t.low.insert(v, lv.min(lw));
            } else if t.on.contains(w.as_str()) {
                let iw = t.index[w.as_str()];
                let lv = t.low[v];
                t.low.insert(v, lv.min(iw));
            }
        }
        if t.low[v] == t.index[v] {
            let mut c = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                c.push(w.to_string());
                if w == v {
                    break;
                }
            }
            c.sort();
            t.out.push(c);
        }
    }
    let mut t = T {
        g: graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}
