//! Hostile expressions and templates are refused before they allocate: a counting global
//! allocator measures the peak heap growth while each one is checked and evaluated, and every
//! one must fail with a clear message and stay under 16 MiB (the result limit is 1 MiB).
//!
//! Its own test binary because the allocator is process-wide; the cases run one after another
//! in a single test so that no other test's allocations are counted.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use pseudoflow_compiler::expr::{Engine, Scope};
use serde_json::json;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), SeqCst) + layout.size();
            PEAK.fetch_max(now, SeqCst);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), SeqCst);
        System.dealloc(p, layout)
    }
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Count the old and the new block as both alive, as a moving realloc has them.
        let now = LIVE.fetch_add(new_size, SeqCst) + new_size;
        PEAK.fetch_max(now, SeqCst);
        let q = System.realloc(p, layout, new_size);
        LIVE.fetch_sub(if q.is_null() { new_size } else { layout.size() }, SeqCst);
        q
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const LIMIT: usize = 16 << 20;

/// Peak bytes above the level at the start while `f` runs.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.load(SeqCst);
    PEAK.store(base, SeqCst);
    let out = f();
    (out, PEAK.load(SeqCst).saturating_sub(base))
}

/// A 1 MiB variable, as a command's output may be.
fn scope() -> Scope {
    let mut s = Scope::new();
    s.insert("big".into(), json!("y".repeat(1 << 20)));
    s.insert("small".into(), json!("ab"));
    s
}

const EXPRESSIONS: &[&str] = &[
    // The reproduced one: five 100 MB strings concatenated.
    "('x'*99999999) ~ ('x'*99999999) ~ ('x'*99999999) ~ ('x'*99999999) ~ ('x'*99999999)",
    "'x' * 99999999",
    "('x' * 9999999) * 10",
    "'x' * 1000000 + 'x' * 1000000 + 'x' * 1000000 + 'x' * 1000000 + 'x' * 1000000 + 'x' * 1000000 + 'x' * 1000000 + 'x' * 1000000 + 'x' * 1000000 + 'x' * 1000000",
    "big ~ big ~ big ~ big ~ big ~ big ~ big ~ big ~ big ~ big ~ big ~ big ~ big ~ big ~ big ~ big",
    "[big, big, big, big, big, big, big, big, big, big, big, big, big, big, big, big, big, big] | join('')",
    "[big, big, big, big, big, big, big, big, big, big, big, big, big, big, big, big, big, big] | string",
    "([big] * 100) | join(',')",
    "range(100000) | join(big)",
    "big.replace('y', 'yyyyyyyyyy')",
    "big | replace('y', big)",
    "'%99999999d' | format(1)",
    "'%.99999999f' | format(1.5)",
    "'{:>99999999}'.format(1)",
    "big | indent(1000)",
    "[1] * 99999999",
    "([small] * 9999999) | list",
    "range(100000) | map('string') | map('center', 100) | list",
    "[big, big, big, big, big, big, big, big, big, big, big, big, big, big, big, big, big] | map('upper') | list",
    "big | list",
    "[big[1:], big[2:], big[3:], big[4:], big[5:], big[6:], big[7:], big[8:], big[9:], big[10:], big[11:], big[12:], big[13:], big[14:], big[15:], big[16:], big[17:]]",
    "[big.upper(), big.upper(), big.upper(), big.upper(), big.upper(), big.upper(), big.upper(), big.upper(), big.upper(), big.upper(), big.upper(), big.upper(), big.upper(), big.upper(), big.upper(), big.upper(), big.upper()]",
    "[big|upper, big|upper, big|upper, big|upper, big|upper, big|upper, big|upper, big|upper, big|upper, big|upper, big|upper, big|upper, big|upper, big|upper, big|upper, big|upper, big|upper]",
    "big | tojson(indent=99999)",
    "[[[[[[1]]]]]] * 1000000",
    "json('[' ~ ('1,' * 900000) ~ '1]')",
    "',' .join([big] * 50)",
    "big.split('')",
    "(big ~ big ~ big).split('y')",
];

const TEMPLATES: &[&str] = &[
    "{% for i in range(100000) %}{{ big }}{% endfor %}",
    "{% for i in range(20000) %}xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx{% endfor %}",
    "{% for i in range(1000) %}{% for j in range(1000) %}{{ small }}{% endfor %}{% endfor %}",
    "{% set x %}{% for i in range(30000) %}{{ big }}{% endfor %}{% endset %}{{ x|length }}",
    "{% macro m() %}{{ big }}{{ big }}{% endmacro %}{% set l = [m(), m(), m(), m(), m(), m(), m(), m(), m(), m()] %}{{ l|length }}",
    "{% set ns = namespace(s='') %}{% for i in range(100) %}{% set ns.s = ns.s ~ big %}{% endfor %}{{ ns.s|length }}",
    "{{ 'x' * 99999999 }}",
    "{% set l = [] %}{% for i in range(40) %}{% set l = l + [big ~ i] %}{% endfor %}{{ l|length }}",
    "{{ big | replace('y', 'yyyy') }}",
];

#[test]
fn hostile_expressions_fail_early_and_stay_small() {
    ordinary_expressions_still_work();
    let engine = Engine::new();
    let sc = scope();
    let mut failures = Vec::new();
    for src in EXPRESSIONS {
        let field = format!("${{ {src} }}");
        let (res, peak) = peak_of(|| {
            engine
                .check(&field, "spec.steps[0].message")
                .map_err(|e| e.to_string())
                .and_then(|_| {
                    engine
                        .substitute_str(&field, &sc, "spec.steps[0].message")
                        .map_err(|e| e.to_string())
                })
        });
        report(&mut failures, src, res.map(|(v, _)| v.to_string()), peak);
    }
    for src in TEMPLATES {
        let (res, peak) = peak_of(|| {
            engine
                .check_template(src, "spec.steps[0].template")
                .map_err(|e| e.to_string())
                .and_then(|_| {
                    engine
                        .render_template(src, &sc, "spec.steps[0].template")
                        .map_err(|e| e.to_string())
                })
        });
        report(&mut failures, src, res, peak);
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

fn report(failures: &mut Vec<String>, src: &str, res: Result<String, String>, peak: usize) {
    let short: String = src.chars().take(70).collect();
    eprintln!("{:>6} KiB  {short}  →  {res:.90?}", peak >> 10);
    match res {
        Ok(v) => failures.push(format!(
            "{short}: evaluated (to {} bytes), peak {} KiB",
            v.len(),
            peak >> 10
        )),
        Err(e) if peak >= LIMIT => {
            failures.push(format!("{short}: peak {} KiB, then: {e}", peak >> 10))
        }
        Err(e) => {
            let clear = e.starts_with("spec.steps[0].")
                && (e.contains("bytes") || e.contains("too much work") || e.contains("too many"));
            if !clear {
                failures.push(format!("{short}: unclear error: {e}"));
            }
        }
    }
}

/// Ordinary use is not refused by the bounds.
fn ordinary_expressions_still_work() {
    let engine = Engine::new();
    let sc = scope();
    let (v, _) = engine
        .substitute_str("${ (small * 3) ~ '-' ~ range(3)|join(',') }", &sc, "p")
        .unwrap();
    assert_eq!(v, json!("ababab-0,1,2"));
    let out = engine
        .render_template(
            "{% for i in range(3) %}{{ i }}:{{ small|upper }};{% endfor %}",
            &sc,
            "p",
        )
        .unwrap();
    assert_eq!(out, "0:AB;1:AB;2:AB;");
    assert_eq!(
        engine
            .substitute_str("${ big|length }", &sc, "p")
            .unwrap()
            .0,
        json!(1 << 20)
    );
}
