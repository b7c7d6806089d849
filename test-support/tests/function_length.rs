//! The house rule that no product function is longer than [`LIMIT`] lines, checked over every
//! crate's `src/` (tests excluded: `tests.rs`, `tests/` folders and `#[cfg(test)]` modules).
//! A long function is where the next reader loses time; this test names each one with its file,
//! line and length, so it fails the moment one grows past the limit.
//!
//! The scanner is a small lexer, not a parser: it skips comments, string, raw-string and char
//! literals, finds each `fn` item with a body, and counts the lines from `fn` to its closing
//! brace. Its own unit tests below pin the cases that would fool a naive brace count.

use std::path::{Path, PathBuf};

/// The longest a product function may be, in lines from `fn` to its closing brace.
const LIMIT: usize = 80;

/// One function found by the scanner.
#[derive(Debug, PartialEq)]
struct Function {
    name: String,
    line: usize,
    lines: usize,
}

#[test]
fn no_product_function_is_longer_than_the_limit() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for krate in std::fs::read_dir(&workspace).unwrap() {
        let src = krate.unwrap().path().join("src");
        if src.is_dir() {
            collect_product_files(&src, &mut files);
        }
    }
    assert!(
        files.len() > 50,
        "the scan found only {} files: is the workspace layout as expected?",
        files.len()
    );
    let mut too_long = Vec::new();
    let mut scanned = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for f in functions(&text) {
            scanned += 1;
            if f.lines > LIMIT {
                let shown = file.strip_prefix(&workspace).unwrap_or(file).display();
                too_long.push(format!(
                    "{shown}:{} fn {} is {} lines",
                    f.line, f.name, f.lines
                ));
            }
        }
    }
    assert!(scanned > 500, "the scan found only {scanned} functions");
    assert!(
        too_long.is_empty(),
        "product functions longer than {LIMIT} lines (split them into named steps):\n{}",
        too_long.join("\n")
    );
}

/// Every `.rs` file under `dir`, except test files and folders.
fn collect_product_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if name != "tests" {
                collect_product_files(&path, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" && !name.ends_with("_tests.rs") {
            out.push(path);
        }
    }
}

/// One significant token of Rust source: comments and literals are dropped.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Punct(char),
}

/// Tokens with the (1-based) line each starts on.
fn tokens(text: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    // Advances over `chars[from..to]`, counting newlines.
    let count_lines =
        |from: usize, to: usize| chars[from..to].iter().filter(|c| **c == '\n').count();
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        if c == '/' && chars.get(i + 1) == Some(&'/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if let Some(end) = raw_string_end(&chars, i) {
            i = end;
        } else if c == '"' || (c == 'b' && chars.get(i + 1) == Some(&'"')) {
            i += if c == 'b' { 2 } else { 1 };
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '\'' {
            i = char_or_lifetime_end(&chars, i);
        } else if c.is_alphanumeric() || c == '_' {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push((Token::Ident(chars[start..i].iter().collect()), line));
        } else {
            if !c.is_whitespace() {
                out.push((Token::Punct(c), line));
            }
            i += 1;
        }
        line += count_lines(start, i.min(chars.len()));
    }
    out
}

/// Where a raw string (`r"…"`, `r#"…"#`, `br#"…"#`) starting at `i` ends, if one starts there.
fn raw_string_end(chars: &[char], i: usize) -> Option<usize> {
    if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') {
        return None;
    }
    let mut j = i;
    if chars.get(j) == Some(&'b') {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let mut hashes = 0;
    while chars.get(j) == Some(&'#') {
        hashes += 1;
        j += 1;
    }
    if chars.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    loop {
        if j >= chars.len() {
            return Some(j);
        }
        if chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
}

/// Where a char literal (`'a'`, `'\n'`, `'\u{1F600}'`) or a lifetime (`'a`) starting at `i` ends.
fn char_or_lifetime_end(chars: &[char], i: usize) -> usize {
    if chars.get(i + 1) == Some(&'\\') {
        let mut j = i + 2;
        while j < chars.len() && chars[j] != '\'' {
            j += 1;
        }
        return j + 1;
    }
    if chars.get(i + 2) == Some(&'\'') {
        return i + 3;
    }
    // A lifetime or label: the quote alone; the name that follows is an ordinary identifier.
    i + 1
}

/// Every `fn` with a body in `text`, outside `#[cfg(test)]` items; a nested `fn` counts inside its
/// outer one and is not listed again.
fn functions(text: &str) -> Vec<Function> {
    let toks = tokens(text);
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        if is_cfg_test(&toks, i) {
            i = item_end(&toks, i);
            continue;
        }
        if toks[i].0 == Token::Ident("fn".into()) {
            if let Some((Token::Ident(name), _)) = toks.get(i + 1) {
                let open = body_start(&toks, i + 2);
                if let Some(open) = open {
                    let close = matching_brace(&toks, open);
                    out.push(Function {
                        name: name.clone(),
                        line: toks[i].1,
                        lines: toks[close].1 - toks[i].1 + 1,
                    });
                    i = close + 1;
                    continue;
                }
            }
        }
        i += 1;
    }
    out
}

/// Whether `#[cfg(test)]` starts at `i`.
fn is_cfg_test(toks: &[(Token, usize)], i: usize) -> bool {
    let want = [
        Token::Punct('#'),
        Token::Punct('['),
        Token::Ident("cfg".into()),
        Token::Punct('('),
        Token::Ident("test".into()),
        Token::Punct(')'),
        Token::Punct(']'),
    ];
    toks.len() >= i + want.len() && toks[i..i + want.len()].iter().map(|t| &t.0).eq(want.iter())
}

/// The index after the item that the attribute at `i` applies to: its `;` or its `{…}` block.
fn item_end(toks: &[(Token, usize)], i: usize) -> usize {
    let mut j = i;
    while j < toks.len() {
        match toks[j].0 {
            Token::Punct(';') => return j + 1,
            Token::Punct('{') => return matching_brace(toks, j) + 1,
            _ => j += 1,
        }
    }
    j
}

/// The `{` opening the body of the `fn` whose signature starts at `i`, or `None` for a
/// declaration without one (`fn f();` in a trait, or `fn(u8)` as a type).
fn body_start(toks: &[(Token, usize)], i: usize) -> Option<usize> {
    let mut nesting = 0i32;
    for (j, (t, _)) in toks.iter().enumerate().skip(i) {
        match t {
            Token::Punct('(') | Token::Punct('[') => nesting += 1,
            Token::Punct(')') | Token::Punct(']') => nesting -= 1,
            Token::Punct(';') if nesting == 0 => return None,
            Token::Punct('{') if nesting == 0 => return Some(j),
            _ => {}
        }
    }
    None
}

/// The index of the `}` closing the `{` at `open`.
fn matching_brace(toks: &[(Token, usize)], open: usize) -> usize {
    let mut depth = 0;
    for (j, (t, _)) in toks.iter().enumerate().skip(open) {
        match t {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    return j;
                }
            }
            _ => {}
        }
    }
    toks.len() - 1
}

#[test]
fn the_scanner_measures_from_fn_to_its_closing_brace() {
    let src = "fn a() {\n    1\n}\n\nfn b(x: [u8; 2]) -> u8 {\n    x[0]\n}\n";
    let found = functions(src);
    assert_eq!(
        found,
        vec![
            Function {
                name: "a".into(),
                line: 1,
                lines: 3
            },
            Function {
                name: "b".into(),
                line: 5,
                lines: 3
            },
        ]
    );
}

#[test]
fn the_scanner_is_not_fooled_by_braces_in_literals_and_comments() {
    let src = concat!(
        "fn a<'x>(s: &'x str) -> char {\n",
        "    let _ = \"}}}\"; // }\n",
        "    let _ = r#\"\"}\"#; /* } /* } */ */\n",
        "    let _ = b\"\\\"}\";\n",
        "    let _ = '}';\n",
        "    let _ = '\\'';\n",
        "    '{'\n",
        "}\n",
        "fn b() {}\n",
    );
    let found = functions(src);
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0].lines, 8);
    assert_eq!(
        found[1],
        Function {
            name: "b".into(),
            line: 9,
            lines: 1
        }
    );
}

#[test]
fn the_scanner_skips_test_modules_and_bodiless_fns() {
    let src = concat!(
        "trait T { fn f(&self); fn g(&self) {} }\n",
        "type F = fn(u8) -> u8;\n",
        "#[cfg(test)]\n",
        "mod tests {\n",
        "    fn long() {\n",
        "    }\n",
        "}\n",
        "fn after() {}\n",
    );
    let names: Vec<String> = functions(src).into_iter().map(|f| f.name).collect();
    assert_eq!(names, vec!["g", "after"]);
}

#[test]
fn the_scanner_counts_a_nested_fn_inside_its_outer_one() {
    let src = "fn outer() {\n    fn inner() {\n    }\n}\n";
    assert_eq!(
        functions(src),
        vec![Function {
            name: "outer".into(),
            line: 1,
            lines: 4
        }]
    );
}
