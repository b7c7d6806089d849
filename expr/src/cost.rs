//! Size estimates made *before* an operation runs, so that the [`crate::budget`] can refuse it
//! without allocating: roughly the heap bytes of a value (a fixed cost per value plus the bytes
//! of its strings, every element counted even when shared) and, per operator, filter and
//! method, an upper bound of what the call will make from its arguments.

use minijinja::value::{ObjectRepr, Value, ValueKind};

/// Bytes counted for one value besides its string bytes (a `Value` and its container slot).
pub(crate) const NODE: usize = 32;

/// Heap bytes of `v`, counting at most a little past `cap` (walking stops there).
pub(crate) fn cost(v: &Value, cap: usize) -> usize {
    let mut acc = 0;
    walk(v, cap, &mut acc);
    acc
}

fn walk(v: &Value, cap: usize, acc: &mut usize) {
    *acc = acc.saturating_add(NODE);
    if *acc > cap {
        return;
    }
    match v.kind() {
        ValueKind::String => *acc = acc.saturating_add(v.as_str().map_or(0, str::len)),
        ValueKind::Bytes => *acc = acc.saturating_add(v.as_bytes().map_or(0, <[u8]>::len)),
        ValueKind::Seq | ValueKind::Map | ValueKind::Iterable => {
            // A one-shot iterator has no length and must not be consumed here; what it yields
            // is charged when something collects it.
            let known = v
                .as_object()
                .is_none_or(|o| o.repr() != ObjectRepr::Iterable || o.enumerator_len().is_some());
            if !known {
                return;
            }
            let Ok(iter) = v.try_iter() else { return };
            let is_map = v.kind() == ValueKind::Map;
            for item in iter {
                walk(&item, cap, acc);
                if is_map {
                    if let Ok(value) = v.get_item(&item) {
                        walk(&value, cap, acc);
                    }
                }
                if *acc > cap {
                    return;
                }
            }
        }
        _ => {}
    }
}

/// Like [`cost`], but a string counts as the list of its characters (for filters that iterate
/// their input: `'abc'|list` makes three values).
pub(crate) fn cost_as_items(v: &Value, cap: usize) -> usize {
    match v.as_str() {
        Some(s) => NODE
            .saturating_add(s.len())
            .saturating_add(s.chars().count().saturating_mul(NODE)),
        None => cost(v, cap),
    }
}

/// Number of elements `v` iterates over (characters of a string).
pub(crate) fn items(v: &Value) -> usize {
    match v.as_str() {
        Some(s) => s.chars().count(),
        None => v.len().unwrap_or(0),
    }
}

/// Bytes of `v` when rendered as text (strings as they are, anything else as its repr, where
/// quotes and escapes at most double a string).
pub(crate) fn display(v: &Value, cap: usize) -> usize {
    match v.as_str() {
        Some(s) => s.len(),
        None => cost(v, cap / 2).saturating_mul(2),
    }
}

/// Nodes and nesting depth of `v` (for indented renderings).
fn shape(v: &Value, cap: usize) -> (usize, usize) {
    fn go(v: &Value, depth: usize, nodes: &mut usize, max: &mut usize, cap: usize) {
        *nodes += 1;
        *max = (*max).max(depth);
        if *nodes > cap || depth > 256 || !matches!(v.kind(), ValueKind::Seq | ValueKind::Map) {
            return;
        }
        if let Ok(iter) = v.try_iter() {
            for item in iter {
                let child = if v.kind() == ValueKind::Map {
                    v.get_item(&item).unwrap_or_default()
                } else {
                    item
                };
                go(&child, depth + 1, nodes, max, cap);
            }
        }
    }
    let (mut nodes, mut max) = (0, 0);
    go(v, 1, &mut nodes, &mut max, cap);
    (nodes, max)
}

fn int(v: Option<&Value>) -> usize {
    v.and_then(|v| i64::try_from(v.clone()).ok())
        .map_or(0, |n| usize::try_from(n).unwrap_or(0))
}

fn text(v: Option<&Value>) -> &str {
    v.and_then(Value::as_str).unwrap_or("")
}

/// A keyword argument passed to a filter or method (the trailing kwargs value), if any.
fn kwarg(args: &[Value], name: &str) -> Option<Value> {
    args.last()
        .filter(|v| v.is_kwargs())
        .and_then(|k| k.get_item(&Value::from(name)).ok())
        .filter(|v| !v.is_undefined())
}

/// Positional argument `i`, or the keyword argument `name`.
fn arg(args: &[Value], i: usize, name: &str) -> Option<Value> {
    args.get(i)
        .filter(|v| !v.is_kwargs())
        .cloned()
        .or_else(|| kwarg(args, name))
}

/// `s.replace(old, new)`: the string plus one `new` per occurrence of `old`.
pub(crate) fn replace(s: &str, old: &str, new: &str) -> usize {
    let occurrences = if old.is_empty() {
        s.chars().count() + 1
    } else {
        s.matches(old).count()
    };
    s.len()
        .saturating_add(occurrences.saturating_mul(new.len()))
        .saturating_add(NODE)
}

/// A format string's output: its text, its arguments (rendered), and every width and
/// precision it asks for (`%99999999d`, `{:>99999999}`), including widths taken from the
/// arguments (`%*d`).
pub(crate) fn format(fmt: &str, args: &[Value], cap: usize) -> usize {
    let rendered: usize = args
        .iter()
        .map(|a| display(a, cap))
        .fold(0, usize::saturating_add);
    let from_args: usize = args
        .iter()
        .filter_map(|a| i64::try_from(a.clone()).ok())
        .map(|n| usize::try_from(n.unsigned_abs()).unwrap_or(usize::MAX))
        .fold(0, usize::saturating_add);
    let mut widths = 0usize;
    let bytes = fmt.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let spec_end = match bytes[i] {
            b'%' => bytes[i + 1..]
                .iter()
                .position(|c| c.is_ascii_alphabetic() || *c == b'%')
                .map(|p| i + 1 + p),
            b'{' => bytes[i + 1..]
                .iter()
                .position(|c| *c == b'}')
                .map(|p| i + 1 + p),
            _ => None,
        };
        if let Some(end) = spec_end {
            let spec = &fmt[i + 1..end];
            if spec.contains('*') || spec.contains('{') {
                widths = widths.saturating_add(from_args);
            }
            for run in spec.split(|c: char| !c.is_ascii_digit()) {
                if !run.is_empty() {
                    widths = widths.saturating_add(run.parse().unwrap_or(usize::MAX));
                }
            }
            i = end + 1;
        } else {
            i += 1;
        }
    }
    fmt.len()
        .saturating_add(rendered)
        .saturating_add(widths)
        .saturating_add(NODE)
}

/// Filters that iterate their input (a string becomes its characters).
const ITERATING: &[&str] = &[
    "list",
    "batch",
    "slice",
    "map",
    "select",
    "reject",
    "selectattr",
    "rejectattr",
    "sort",
    "unique",
    "join",
    "chain",
    "zip",
    "groupby",
    "sum",
    "min",
    "max",
    "dictsort",
    "items",
];

/// Filters whose result is (a reference to) part of their input, or a number or boolean.
pub(crate) const SELECTING: &[&str] = &[
    "default",
    "d",
    "first",
    "last",
    "attr",
    "min",
    "max",
    "length",
    "count",
    "int",
    "float",
    "bool",
    "abs",
    "round",
    "safe",
    "select",
    "reject",
    "selectattr",
    "rejectattr",
];

/// Upper bound of what filter `name` makes from `args` (the filtered value first).
pub(crate) fn filter(name: &str, args: &[Value], cap: usize) -> usize {
    let Some(input) = args.first() else {
        return NODE;
    };
    let input_cost = if ITERATING.contains(&name) {
        cost_as_items(input, cap)
    } else {
        cost(input, cap)
    };
    let base = args[1..]
        .iter()
        .map(|a| cost(a, cap))
        .fold(input_cost, usize::saturating_add);
    match name {
        "replace" => replace(text(Some(input)), text(args.get(1)), text(args.get(2))),
        "join" => {
            let sep = arg(args, 1, "d");
            base.saturating_add(items(input).saturating_mul(text(sep.as_ref()).len()))
                .saturating_mul(2)
        }
        "indent" => {
            let width = arg(args, 1, "width");
            let per_line = match &width {
                Some(w) if w.as_str().is_some() => text(Some(w)).len(),
                w => int(w.as_ref()),
            };
            let lines = text(Some(input)).matches('\n').count() + 1;
            base.saturating_add(lines.saturating_mul(per_line))
        }
        "format" => format(text(Some(input)), &args[1..], cap),
        "tojson" | "pprint" => {
            let indent = match arg(args, 1, "indent") {
                Some(i) => int(Some(&i)),
                None => 4,
            };
            let (nodes, depth) = shape(input, cap / NODE + 1);
            base.saturating_mul(6).saturating_add(
                nodes
                    .saturating_mul(depth.saturating_add(1))
                    .saturating_mul(indent.saturating_add(1)),
            )
        }
        "batch" | "slice" => {
            let n = int(args.get(1));
            let fill = args.get(2).map_or(0, |f| cost(f, cap));
            base.saturating_add(n.saturating_mul(NODE.saturating_mul(2).saturating_add(fill)))
        }
        "map" => match args.get(1).and_then(Value::as_str) {
            Some(inner) if !args.get(1).is_some_and(Value::is_kwargs) => {
                let Ok(iter) = input.try_iter() else {
                    return base;
                };
                let mut total = base;
                let mut call = args.to_vec();
                call.remove(1);
                for item in iter {
                    call[0] = item;
                    total = total.saturating_add(filter(inner, &call, cap));
                    if total > cap {
                        break;
                    }
                }
                total
            }
            _ => base.saturating_mul(2),
        },
        "escape" | "e" | "urlencode" | "string" => base.saturating_mul(6),
        _ => base.saturating_mul(2),
    }
}

/// Upper bound of what method `name` called on `receiver` makes.
pub(crate) fn method(receiver: &Value, name: &str, args: &[Value], cap: usize) -> usize {
    let args_cost = args
        .iter()
        .map(|a| cost(a, cap))
        .fold(NODE, usize::saturating_add);
    match receiver.as_str() {
        Some(s) => match name {
            "replace" => replace(s, text(args.first()), text(args.get(1))),
            "format" => format(s, args, cap),
            "join" => {
                let list = args.first().cloned().unwrap_or_default();
                cost_as_items(&list, cap)
                    .saturating_add(items(&list).saturating_mul(s.len()))
                    .saturating_mul(2)
            }
            "split" | "splitlines" => {
                let pieces = match args.first().and_then(Value::as_str) {
                    Some("") | None => s.len() + 1,
                    Some(sep) => s.matches(sep).count() + 1,
                };
                s.len()
                    .saturating_add(pieces.saturating_mul(NODE))
                    .saturating_add(args_cost)
            }
            _ => s.len().saturating_mul(3).saturating_add(args_cost),
        },
        None => cost(receiver, cap)
            .saturating_mul(3)
            .saturating_add(args_cost),
    }
}

/// Upper bound of the binary operator `op` (`*`, `+`, `~`) on `a` and `b`.
pub(crate) fn binop(op: &str, a: &Value, b: &Value, cap: usize) -> usize {
    let repeat = |seq: &Value, n: &Value| -> Option<usize> {
        let n = i64::try_from(n.clone()).ok().filter(|_| n.is_integer())?;
        let n = usize::try_from(n).unwrap_or(0);
        match seq.kind() {
            ValueKind::String => Some(seq.as_str().map_or(0, str::len).saturating_mul(n)),
            ValueKind::Seq | ValueKind::Iterable => Some(cost(seq, cap).saturating_mul(n)),
            _ => None,
        }
    };
    let estimate = match op {
        "*" => repeat(a, b).or_else(|| repeat(b, a)).unwrap_or(0),
        "~" => display(a, cap).saturating_add(display(b, cap)),
        _ if a.is_number() && b.is_number() => 0,
        _ => cost(a, cap).saturating_add(cost(b, cap)),
    };
    estimate.saturating_add(NODE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_counts_every_element_and_stops_at_the_cap() {
        let s = Value::from("x".repeat(1000));
        let list = Value::from(vec![s.clone(); 10]);
        assert_eq!(cost(&s, usize::MAX), NODE + 1000);
        assert_eq!(cost(&list, usize::MAX), NODE + 10 * (NODE + 1000));
        assert!(cost(&list, 2000) < 4 * (NODE + 1000));
    }

    #[test]
    fn widths_in_format_strings_count() {
        assert!(format("%99999999d", &[Value::from(1)], usize::MAX) >= 99_999_999);
        assert!(format("%.5000000f", &[Value::from(1.5)], usize::MAX) >= 5_000_000);
        assert!(format("{:>7000000}", &[Value::from(1)], usize::MAX) >= 7_000_000);
        assert!(format("%*d", &[Value::from(9_000_000), Value::from(1)], usize::MAX) >= 9_000_000);
        assert!(format("port %d", &[Value::from(80)], usize::MAX) < 200);
    }

    #[test]
    fn repetition_is_length_times_count() {
        let est = binop("*", &Value::from("ab"), &Value::from(1000), usize::MAX);
        assert_eq!(est, 2000 + NODE);
        let est = binop(
            "*",
            &Value::from(3),
            &Value::from(vec![Value::from(1)]),
            usize::MAX,
        );
        assert_eq!(est, 3 * 2 * NODE + NODE);
        assert_eq!(
            binop("*", &Value::from(3), &Value::from(4), usize::MAX),
            NODE
        );
    }

    #[test]
    fn join_and_map_look_at_their_arguments() {
        let list = Value::from(vec![Value::from("a"); 1000]);
        let est = filter(
            "join",
            &[list.clone(), Value::from("x".repeat(1000))],
            usize::MAX,
        );
        assert!(est >= 1000 * 1000, "{est}");
        let est = filter(
            "map",
            &[
                list,
                Value::from("replace"),
                Value::from("a"),
                Value::from("b".repeat(1000)),
            ],
            usize::MAX,
        );
        assert!(est >= 1000 * 1000, "{est}");
    }
}
