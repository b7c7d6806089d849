//! `cargo bench -p pseudoflow-compiler`: validate + compile + lower a generated flow of N steps
//! (nested ifs, loops and parallels), side by side with the baseline of only parsing the same
//! YAML, with peak heap measured by a counting allocator. Prints a table; no timing asserts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pseudoflow_compiler::emit::emit_node;
use pseudoflow_compiler::limits::PlanLimits;
use pseudoflow_compiler::lower::{task_of, FlowRef, LowerOptions};
use pseudoflow_compiler::{compile_with, Compiled, Expansions, FlowId};

/// The bench measures how compile time and memory grow past the 10,000 steps a flow may have
/// (`MAX_STEPS`), so it lifts that limit explicitly.
fn compile(
    flow: &FlowId,
    spec: &serde_json::Value,
) -> Result<Compiled, pseudoflow_crd::Diagnostics> {
    let unbounded = PlanLimits {
        max_steps: usize::MAX,
    };
    compile_with(flow, spec, &Expansions::new(), unbounded)
}

struct Counting;
static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let now = CURRENT.fetch_add(l.size(), Ordering::Relaxed) + l.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        CURRENT.fetch_sub(l.size(), Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// A flow of about `n` steps: groups of 10 mixing an `if` with both branches, a `loop`, a
/// `parallel` of two branches, a `retry`, node steps in `loopNodes`, and plain API steps.
fn generate(n: usize) -> String {
    let mut s = String::from("apiVersion: ops.example.com/v1alpha1\nkind: PseudoFlow\nmetadata: {name: bench, namespace: default}\nspec:\n  vars: {ns: default, vip: 10.0.0.1}\n  steps:\n");
    let groups = n / 10;
    for g in 0..groups {
        s.push_str(&format!(
            r#"    - type: if
      condition: {{resource: {{kind: ConfigMap, name: c{g}, namespace: default}}, jsonPath: .data.x, op: equals, value: "1"}}
      then:
        - type: apply
          manifests: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: "a{g}", namespace: "${{ns}}"}}}}
      else:
        - type: log
          message: "skip {g}"
    - type: loop
      forEach: [a, b, c]
      steps:
        - type: setLabel
          target: {{kind: Node, name: "${{item}}"}}
          labels: {{group: "g{g}"}}
    - type: parallel
      steps:
        - - type: waitFor
            resource: {{kind: ConfigMap, name: "a{g}", namespace: default}}
            condition: Exist
        - - type: exec
            cmd: "echo {g}"
            var: out{g}
    - type: retry
      attempts: 3
      backoffSeconds: 1
      steps:
        - type: delete
          target: {{kind: ConfigMap, name: "a{g}", namespace: default}}
    - type: loopNodes
      selector: "role=worker"
      steps:
        - type: patchFile
          path: /etc/kubernetes/kubelet.conf
          pattern: "server: https://.*:6443"
          replace: "server: https://${{vip}}:6443"
"#
        ));
    }
    s
}

fn time<T>(iters: u32, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut last = None;
    for _ in 0..iters {
        let t = Instant::now();
        last = Some(f());
        best = best.min(t.elapsed());
    }
    (best, last.unwrap())
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if let Ok(n) = std::env::var("PSEUDOFLOW_BENCH_PROFILE") {
        // One compile of an n-step flow, for profilers (callgrind) to look at.
        let text = generate(n.parse().unwrap());
        let doc = pseudoflow_compiler::source::load(&text).unwrap().remove(0);
        let id = FlowId {
            name: &doc.name,
            namespace: doc.namespace.as_deref(),
        };
        compile(&id, doc.spec()).unwrap();
        return;
    }
    println!("steps | nodes | jobs | parse YAML (baseline) | compile | compile+lower all | ratio (compile+lower / parse) | peak heap compile+lower");
    for n in [1_000usize, 5_000, 10_000, 20_000] {
        let text = generate(n);
        let steps = n / 10 * 10;
        let (parse, doc) = time(10, || {
            pseudoflow_compiler::source::load(&text).unwrap().remove(0)
        });
        let id = FlowId {
            name: &doc.name,
            namespace: doc.namespace.as_deref(),
        };
        let (comp, compiled) = time(10, || compile(&id, doc.spec()).unwrap());
        let flow = FlowRef {
            name: "bench".into(),
            namespace: "default".into(),
            uid: "u".into(),
            service_account: "default".into(),
        };
        let opts = LowerOptions::default();
        let lower_all = || {
            let c = compile(&id, doc.spec()).unwrap();
            let mut jobs = 0;
            for n in c.plan.nodes().filter(|n| task_of(n).is_some()) {
                std::hint::black_box(emit_node(&c, &flow, &n.id, "node-a", &opts).unwrap());
                jobs += 1;
            }
            jobs
        };
        let (full, jobs) = time(5, lower_all);
        CURRENT.store(0, Ordering::Relaxed);
        PEAK.store(0, Ordering::Relaxed);
        lower_all();
        let peak = PEAK.load(Ordering::Relaxed);
        println!(
            "{steps} | {} | {jobs} | {:.1} ms | {:.1} ms | {:.1} ms | {:.2}x | {:.1} MiB",
            compiled.plan.len(),
            parse.as_secs_f64() * 1e3,
            comp.as_secs_f64() * 1e3,
            full.as_secs_f64() * 1e3,
            full.as_secs_f64() / parse.as_secs_f64(),
            peak as f64 / 1048576.0
        );
    }
}
