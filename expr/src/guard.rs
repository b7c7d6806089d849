//! Compiling expressions and templates so that nothing in them can allocate past the
//! [`budget`]: the instructions minijinja generates are rewritten so that every operation that
//! can make a large value (`*`, `+`, `~`, slices, filters, methods) calls a guard that
//! estimates its result first ([`cost`]), and all output — also output captured by
//! `{% set %}` blocks and macros — goes through a formatter that charges it. Constant
//! subexpressions, which minijinja folds while compiling, are estimated before compiling.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use minijinja::machinery::ast::{self, Expr, Stmt};
use minijinja::machinery::{parse, parse_expr, CodeGenerator, Instruction, Instructions};
use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Object, Value};
use minijinja::{Environment, Error, ErrorKind, State, UndefinedBehavior};

use crate::budget::{self, MAX_WORK_BYTES};
use crate::cost::{self, NODE};

/// Builtin filters and the shell-quoting filter, each guarded.
const FILTERS: &[&str] = &[
    "safe",
    "escape",
    "e",
    "lower",
    "upper",
    "title",
    "capitalize",
    "replace",
    "length",
    "count",
    "dictsort",
    "items",
    "reverse",
    "trim",
    "join",
    "split",
    "lines",
    "default",
    "d",
    "round",
    "abs",
    "int",
    "float",
    "attr",
    "first",
    "last",
    "min",
    "max",
    "sort",
    "list",
    "string",
    "bool",
    "batch",
    "slice",
    "sum",
    "indent",
    "select",
    "reject",
    "selectattr",
    "rejectattr",
    "map",
    "groupby",
    "unique",
    "chain",
    "zip",
    "pprint",
    "format",
    "tojson",
    "urlencode",
    "shq",
    "raw",
    "oneline",
];

/// Methods of strings, maps and lists (minijinja's own and the Python-like ones), guarded.
const METHODS: &[&str] = &[
    "upper",
    "lower",
    "islower",
    "isupper",
    "isspace",
    "isdigit",
    "isnumeric",
    "isalnum",
    "isalpha",
    "isascii",
    "strip",
    "lstrip",
    "rstrip",
    "replace",
    "title",
    "split",
    "splitlines",
    "capitalize",
    "count",
    "find",
    "format",
    "rfind",
    "startswith",
    "endswith",
    "join",
    "keys",
    "values",
    "items",
    "get",
];

const OPS: &[(&str, &str)] = &[("*", "__pf_op:*"), ("+", "__pf_op:+"), ("~", "__pf_op:~")];
const SLICE: &str = "__pf_slice";

/// `(name, global)` pairs: the global that guards filter or method `name`.
fn names(kind: &str, list: &'static [&'static str]) -> Vec<(&'static str, &'static str)> {
    list.iter()
        .map(|n| {
            let global: &'static str = Box::leak(format!("__pf_{kind}:{n}").into_boxed_str());
            (*n, global)
        })
        .collect()
}

fn filter_globals() -> &'static [(&'static str, &'static str)] {
    static G: OnceLock<Vec<(&str, &str)>> = OnceLock::new();
    G.get_or_init(|| names("filter", FILTERS))
}

fn method_globals() -> &'static [(&'static str, &'static str)] {
    static G: OnceLock<Vec<(&str, &str)>> = OnceLock::new();
    G.get_or_init(|| names("method", METHODS))
}

fn lookup(table: &[(&'static str, &'static str)], name: &str) -> Option<&'static str> {
    table.iter().find(|(n, _)| *n == name).map(|(_, g)| *g)
}

/// One guarded operation, registered as a global function the rewritten code calls.
#[derive(Debug)]
enum Guard {
    Op(&'static str),
    Slice,
    Filter(&'static str),
    Method(&'static str),
}

impl Object for Guard {
    fn call(self: &Arc<Self>, state: &mut State, args: &[Value]) -> Result<Value, Error> {
        let cap = budget::remaining().saturating_add(1);
        match **self {
            Guard::Op(op) => {
                let [a, b] = args else { return Err(arity(op)) };
                let what = format!("operator {op}");
                budget::ensure_room(&what, cost::binop(op, a, b, cap))?;
                let v = raw(op, &[a, b])?;
                budget::charge(&what, cost::cost(&v, cap))?;
                Ok(v)
            }
            Guard::Slice => {
                let [v, start, stop, step] = args else {
                    return Err(arity("slice"));
                };
                budget::ensure_room("slice", cost::cost(v, cap))?;
                let out = raw("slice", &[v, start, stop, step])?;
                budget::charge("slice", cost::cost(&out, cap))?;
                Ok(out)
            }
            Guard::Filter(name) => {
                let what = format!("filter {name}");
                budget::ensure_room(&what, cost::filter(name, args, cap))?;
                let v = state.apply_filter(name, args)?;
                let made = if cost::SELECTING.contains(&name) {
                    NODE
                } else {
                    cost::cost(&v, cap)
                };
                budget::charge(&what, made)?;
                Ok(v)
            }
            Guard::Method(name) => {
                let Some((receiver, rest)) = args.split_first() else {
                    return Err(arity(name));
                };
                let what = format!("method {name}()");
                budget::ensure_room(&what, cost::method(receiver, name, rest, cap))?;
                let v = receiver.call_method(state, name, rest)?;
                let made = if name == "get" || receiver.as_str().is_none() && name != "items" {
                    NODE
                } else {
                    cost::cost(&v, cap)
                };
                budget::charge(&what, made)?;
                Ok(v)
            }
        }
    }
}

fn arity(what: &str) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("{what}: wrong arguments"),
    )
}

/// The operation itself, by minijinja's own rules, once the guard has allowed it: a tiny
/// expression in a plain environment, so that semantics stay exactly minijinja's.
fn raw(op: &str, args: &[&Value]) -> Result<Value, Error> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    let env = ENV.get_or_init(|| {
        let mut env = Environment::empty();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        env
    });
    let source = match op {
        "*" => "a * b",
        "+" => "a + b",
        "~" => "a ~ b",
        _ => "a[b:c:d]",
    };
    let ctx: BTreeMap<&str, Value> = ["a", "b", "c", "d"]
        .into_iter()
        .zip(args.iter().map(|v| (*v).clone()))
        .collect();
    env.compile_expression(source)?.eval(Value::from(ctx))
}

/// Registers the guards and the charging formatter on `env`.
pub(crate) fn install(env: &mut Environment<'_>) {
    for (op, global) in OPS {
        env.add_global(*global, Value::from_object(Guard::Op(op)));
    }
    env.add_global(SLICE, Value::from_object(Guard::Slice));
    for (name, global) in filter_globals() {
        env.add_global(*global, Value::from_object(Guard::Filter(name)));
    }
    for (name, global) in method_globals() {
        env.add_global(*global, Value::from_object(Guard::Method(name)));
    }
    env.set_formatter(|out, state, value| {
        let n = cost::display(value, budget::remaining().saturating_add(1));
        budget::ensure_room("output", n)?;
        budget::charge("output", n)?;
        minijinja::escape_formatter(out, state, value)
    });
}

/// Compiles an expression into guarded instructions.
pub(crate) fn compile_expr(source: &str) -> Result<Instructions<'_>, Error> {
    let ast = parse_expr(source)?;
    check_constants(&ast)?;
    let mut g = CodeGenerator::new("<expression>", source);
    g.compile_expr(&ast);
    Ok(rewrite(g.finish().0))
}

/// Guarded instructions of a template and of its blocks.
pub(crate) type CompiledTemplate<'s> = (Instructions<'s>, BTreeMap<&'s str, Instructions<'s>>);

/// Compiles a template into guarded instructions.
pub(crate) fn compile_template(source: &str) -> Result<CompiledTemplate<'_>, Error> {
    let ast = parse(source, "<template>", template_syntax())?;
    let mut failed = Ok(());
    visit_stmt(&ast, &mut |e| {
        if failed.is_ok() {
            failed = check_constants(e);
        }
    });
    failed?;
    let mut g = CodeGenerator::new("<template>", source);
    g.compile_stmt(&ast);
    let (main, blocks) = g.finish();
    let blocks = blocks.into_iter().map(|(k, v)| (k, rewrite(v))).collect();
    Ok((rewrite(main), blocks))
}

/// Refuses constant subexpressions that compiling would fold into a value past the budget
/// (`'x' * 99999999` is evaluated by the code generator, not at run time).
pub(crate) fn check_constants(e: &Expr<'_>) -> Result<(), Error> {
    let mut failed = Ok(());
    visit_expr(e, &mut |e| {
        if failed.is_ok() && const_size(e).is_some_and(|c| c.size > MAX_WORK_BYTES) {
            failed = Err(Error::new(
                ErrorKind::InvalidOperation,
                format!(
                    "constant expression: result would exceed the expression's work limit of \
                     {MAX_WORK_BYTES} bytes"
                ),
            ));
        }
    });
    failed
}

/// Template syntax: minijinja's, except that a template's trailing newline is kept — a
/// `template` step writes files (`resolv.conf`, flags files) that must end as the template does.
fn template_syntax() -> SyntaxConfig {
    SyntaxConfig::builder()
        .keep_trailing_newline(true)
        .build()
        .expect("the default syntax with one whitespace option is valid")
}

/// Checks the constants of every expression in a parsed template.
pub(crate) fn check_template_constants(source: &str) -> Result<(), Error> {
    let ast = parse(source, "<template>", template_syntax())?;
    let mut failed = Ok(());
    visit_stmt(&ast, &mut |e| {
        if failed.is_ok() {
            failed = check_constants(e);
        }
    });
    failed
}

/// Checks the constants of an expression.
pub(crate) fn check_expr_constants(source: &str) -> Result<(), Error> {
    check_constants(&parse_expr(source)?)
}

#[derive(Clone, Copy)]
struct ConstSize {
    size: usize,
    int: Option<i64>,
}

/// Estimated size of what the code generator folds `e` into, if `e` is constant.
fn const_size(e: &Expr<'_>) -> Option<ConstSize> {
    let sum = |items: &[Expr<'_>]| -> Option<ConstSize> {
        let mut size = NODE;
        for i in items {
            size = size.saturating_add(const_size(i)?.size);
        }
        Some(ConstSize { size, int: None })
    };
    match e {
        Expr::Const(c) => Some(ConstSize {
            size: cost::cost(&c.value, MAX_WORK_BYTES.saturating_add(1)),
            int: i64::try_from(c.value.clone())
                .ok()
                .filter(|_| c.value.is_integer()),
        }),
        Expr::List(l) => sum(&l.items),
        Expr::Tuple(t) => sum(&t.items),
        Expr::Map(m) => {
            let k = sum(&m.keys)?;
            let v = sum(&m.values)?;
            Some(ConstSize {
                size: k.size.saturating_add(v.size),
                int: None,
            })
        }
        Expr::UnaryOp(u) => const_size(&u.expr),
        Expr::Compare(c) => {
            let mut size = const_size(&c.expr)?.size;
            for op in &c.ops {
                size = size.saturating_add(const_size(&op.expr)?.size);
            }
            Some(ConstSize { size, int: None })
        }
        Expr::BinOp(b) => {
            let (l, r) = (const_size(&b.left)?, const_size(&b.right)?);
            Some(match b.op {
                ast::BinOpKind::Mul => match (l.int, r.int) {
                    (Some(x), Some(y)) => ConstSize {
                        size: NODE,
                        int: x.checked_mul(y),
                    },
                    (Some(n), None) | (None, Some(n)) => {
                        let other = if l.int.is_some() { r } else { l };
                        let n = usize::try_from(n).unwrap_or(0);
                        ConstSize {
                            size: other.size.saturating_mul(n),
                            int: None,
                        }
                    }
                    (None, None) => ConstSize {
                        size: NODE,
                        int: None,
                    },
                },
                ast::BinOpKind::Add | ast::BinOpKind::Concat => ConstSize {
                    size: l.size.saturating_add(r.size).saturating_add(NODE),
                    int: l.int.zip(r.int).and_then(|(x, y)| x.checked_add(y)),
                },
                _ => ConstSize {
                    size: l.size.saturating_add(r.size),
                    int: None,
                },
            })
        }
        _ => None,
    }
}

fn visit_args<'a>(args: &[ast::CallArg<'a>], f: &mut dyn FnMut(&Expr<'a>)) {
    for a in args {
        match a {
            ast::CallArg::Pos(e)
            | ast::CallArg::Kwarg(_, e)
            | ast::CallArg::PosSplat(e)
            | ast::CallArg::KwargSplat(e) => visit_expr(e, f),
        }
    }
}

/// Calls `f` on `e` and on every expression inside it.
fn visit_expr<'a>(e: &Expr<'a>, f: &mut dyn FnMut(&Expr<'a>)) {
    f(e);
    match e {
        Expr::Var(_) | Expr::Const(_) => {}
        Expr::Slice(s) => {
            visit_expr(&s.expr, f);
            for x in [&s.start, &s.stop, &s.step].into_iter().flatten() {
                visit_expr(x, f);
            }
        }
        Expr::UnaryOp(u) => visit_expr(&u.expr, f),
        Expr::BinOp(b) => {
            visit_expr(&b.left, f);
            visit_expr(&b.right, f);
        }
        Expr::Compare(c) => {
            visit_expr(&c.expr, f);
            for op in &c.ops {
                visit_expr(&op.expr, f);
            }
        }
        Expr::IfExpr(i) => {
            visit_expr(&i.test_expr, f);
            visit_expr(&i.true_expr, f);
            if let Some(x) = &i.false_expr {
                visit_expr(x, f);
            }
        }
        Expr::Filter(x) => {
            if let Some(e) = &x.expr {
                visit_expr(e, f);
            }
            visit_args(&x.args, f);
        }
        Expr::Test(t) => {
            visit_expr(&t.expr, f);
            visit_args(&t.args, f);
        }
        Expr::GetAttr(g) => visit_expr(&g.expr, f),
        Expr::GetItem(g) => {
            visit_expr(&g.expr, f);
            visit_expr(&g.subscript_expr, f);
        }
        Expr::Call(c) => {
            visit_expr(&c.expr, f);
            visit_args(&c.args, f);
        }
        Expr::List(l) => l.items.iter().for_each(|x| visit_expr(x, f)),
        Expr::Tuple(t) => t.items.iter().for_each(|x| visit_expr(x, f)),
        Expr::Map(m) => m
            .keys
            .iter()
            .chain(&m.values)
            .for_each(|x| visit_expr(x, f)),
    }
}

/// Calls `f` on every expression in a template.
fn visit_stmt<'a>(s: &Stmt<'a>, f: &mut dyn FnMut(&Expr<'a>)) {
    let body = |stmts: &[Stmt<'a>], f: &mut dyn FnMut(&Expr<'a>)| {
        stmts.iter().for_each(|s| visit_stmt(s, f))
    };
    match s {
        Stmt::Template(t) => body(&t.children, f),
        Stmt::EmitExpr(e) => visit_expr(&e.expr, f),
        Stmt::EmitRaw(_) => {}
        Stmt::ForLoop(l) => {
            visit_expr(&l.iter, f);
            if let Some(x) = &l.filter_expr {
                visit_expr(x, f);
            }
            body(&l.body, f);
            body(&l.else_body, f);
        }
        Stmt::IfCond(i) => {
            visit_expr(&i.expr, f);
            body(&i.true_body, f);
            body(&i.false_body, f);
        }
        Stmt::WithBlock(w) => {
            w.assignments.iter().for_each(|(_, e)| visit_expr(e, f));
            body(&w.body, f);
        }
        Stmt::Set(x) => visit_expr(&x.expr, f),
        Stmt::SetBlock(x) => {
            if let Some(e) = &x.filter {
                visit_expr(e, f);
            }
            body(&x.body, f);
        }
        Stmt::AutoEscape(a) => {
            visit_expr(&a.enabled, f);
            body(&a.body, f);
        }
        Stmt::FilterBlock(x) => {
            visit_expr(&x.filter, f);
            body(&x.body, f);
        }
        Stmt::Block(b) => body(&b.body, f),
        Stmt::Import(_) | Stmt::FromImport(_) | Stmt::Extends(_) | Stmt::Include(_) => {}
        Stmt::Macro(m) => {
            m.defaults.iter().for_each(|e| visit_expr(e, f));
            body(&m.body, f);
        }
        Stmt::CallBlock(c) => {
            visit_expr(&c.call.expr, f);
            visit_args(&c.call.args, f);
            c.macro_decl.defaults.iter().for_each(|e| visit_expr(e, f));
            body(&c.macro_decl.body, f);
        }
        Stmt::Do(d) => {
            visit_expr(&d.call.expr, f);
            visit_args(&d.call.args, f);
        }
    }
}

/// The same program with every operation that can make a large value replaced by a call to
/// its guard, and raw template text emitted through the charging formatter. Jump targets are
/// moved to match (raw text takes two instructions instead of one).
fn rewrite(old: Instructions<'_>) -> Instructions<'_> {
    let len = (0u32..).take_while(|i| old.get(*i).is_some()).count() as u32;
    let mut at = Vec::with_capacity(len as usize + 1);
    let mut next = 0u32;
    for i in 0..len {
        at.push(next);
        next += if matches!(old.get(i), Some(Instruction::EmitRaw(_))) {
            2
        } else {
            1
        };
    }
    at.push(next);
    let to = |t: &u32| at[*t as usize];
    let mut new = Instructions::new(old.name(), old.source());
    for i in 0..len {
        let ins = old.get(i).expect("in range").clone();
        let replaced: Vec<Instruction<'_>> = match ins {
            Instruction::Mul => vec![Instruction::CallFunction(OPS[0].1, Some(2))],
            Instruction::Add => vec![Instruction::CallFunction(OPS[1].1, Some(2))],
            Instruction::StringConcat => vec![Instruction::CallFunction(OPS[2].1, Some(2))],
            Instruction::Slice => vec![Instruction::CallFunction(SLICE, Some(4))],
            Instruction::ApplyFilter(name, n, local) => match lookup(filter_globals(), name) {
                Some(g) => vec![Instruction::CallFunction(g, n)],
                None => vec![Instruction::ApplyFilter(name, n, local)],
            },
            Instruction::CallMethod(name, n) => match lookup(method_globals(), name) {
                Some(g) => vec![Instruction::CallFunction(g, n)],
                None => vec![Instruction::CallMethod(name, n)],
            },
            Instruction::EmitRaw(text) => {
                vec![Instruction::LoadConst(Value::from(text)), Instruction::Emit]
            }
            Instruction::Iterate(t) => vec![Instruction::Iterate(to(&t))],
            Instruction::Jump(t) => vec![Instruction::Jump(to(&t))],
            Instruction::JumpIfFalse(t) => vec![Instruction::JumpIfFalse(to(&t))],
            Instruction::JumpIfFalseOrPop(t) => vec![Instruction::JumpIfFalseOrPop(to(&t))],
            Instruction::JumpIfTrueOrPop(t) => vec![Instruction::JumpIfTrueOrPop(to(&t))],
            Instruction::BuildMacro(name, t, flags) => {
                vec![Instruction::BuildMacro(name, to(&t), flags)]
            }
            other => vec![other],
        };
        for ins in replaced {
            match (old.get_span(i), old.get_line(i)) {
                (Some(span), _) => new.add_with_span(ins, span),
                (None, Some(line)) => new.add_with_line(ins, line as u16),
                (None, None) => new.add(ins),
            };
        }
    }
    new
}
