//! No two types of one crate share a name (issue #45 item 3): three `Shared` structs in one
//! crate read as `shared.ctx.shared`, and a reader who greps `struct Seen` must not land on
//! the wrong one of four. Module-level `struct`s and `enum`s are counted; a type declared inside
//! a function (a serde `Wire` shape) or in a `#[cfg(test)]` module is local to it, and type
//! aliases name no new type.

use std::collections::BTreeMap;

mod common;

use common::{collect_rs, crate_dir, CRATES};

#[test]
fn no_two_types_of_one_crate_share_a_name() {
    let mut clashes = Vec::new();
    for krate in CRATES {
        let src = crate_dir(krate).join("src");
        let mut files = Vec::new();
        collect_rs(&src, &mut files);
        let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            let shown = file.strip_prefix(&src).unwrap().display().to_string();
            for (line, name) in declared_types(&text) {
                seen.entry(name)
                    .or_default()
                    .push(format!("{krate}/src/{shown}:{line}"));
            }
        }
        for (name, at) in seen.into_iter().filter(|(_, at)| at.len() > 1) {
            clashes.push(format!("{krate}: {name} at {}", at.join(", ")));
        }
    }
    assert!(
        clashes.is_empty(),
        "types sharing a name in one crate (rename one so each says what it is):\n{}",
        clashes.join("\n")
    );
}

/// The module-level structs and enums `text` declares: (line number, name). Lines inside a
/// function body or a `#[cfg(test)]` module are skipped, by brace depth: a declaration counts
/// only at the depth of the module it is in.
fn declared_types(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    // Depth of braces opened by modules (items at this depth are module-level), and the
    // depth at which a skipped block (a fn body, a test module) began.
    let mut depth = 0usize;
    let mut module_depths = vec![0usize];
    let mut skip_from: Option<usize> = None;
    let mut test_next = false;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split("//").next().unwrap_or("");
        let mut t = line.trim_start();
        // `pub(crate) struct X` as `pub struct X`.
        if let Some(rest) = t.strip_prefix("pub(") {
            t = rest.split_once(')').map_or(rest, |(_, after)| after);
        }
        if t.starts_with("#[cfg(test)]") {
            test_next = true;
        }
        let at_module_level = skip_from.is_none() && module_depths.last() == Some(&depth);
        if at_module_level {
            let words: Vec<&str> = t
                .split(|c: char| c.is_whitespace() || c == '<' || c == '{' || c == '(' || c == ';')
                .filter(|w| !w.is_empty())
                .collect();
            let keyword = words
                .iter()
                .position(|w| *w == "struct" || *w == "enum" || *w == "mod" || *w == "fn");
            if let Some(k) = keyword {
                let before_ok = words[..k].iter().all(|w| {
                    w.starts_with("pub") || *w == "async" || *w == "const" || *w == "unsafe"
                });
                if before_ok {
                    match words[k] {
                        "struct" | "enum" if !test_next => {
                            if let Some(name) = words.get(k + 1) {
                                out.push((i + 1, name.to_string()));
                            }
                        }
                        "mod" if line.contains('{') => {
                            if test_next {
                                skip_from = Some(depth);
                            } else {
                                module_depths.push(depth + 1);
                            }
                        }
                        "fn" if line.contains('{') || !line.contains(';') => {
                            skip_from = Some(depth);
                        }
                        _ => {}
                    }
                }
            }
        }
        // An attribute applies to the next item only.
        if !t.is_empty() && !t.starts_with("#[") {
            test_next = false;
        }
        for c in line.chars() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if skip_from == Some(depth) {
                        skip_from = None;
                    }
                    if module_depths.len() > 1 && module_depths.last() == Some(&(depth + 1)) {
                        module_depths.pop();
                    }
                }
                _ => {}
            }
        }
    }
    out
}

#[test]
fn a_type_inside_a_function_or_a_test_module_is_not_counted() {
    let text = "pub struct A;\nfn f() {\n    struct Wire { x: u8 }\n}\n#[cfg(test)]\nmod tests {\n    struct A;\n}\nmod inner {\n    pub(crate) enum B { X }\n}\nimpl A {\n    fn g(&self) {}\n}\n";
    let names: Vec<String> = declared_types(text).into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["A", "B"]);
}
