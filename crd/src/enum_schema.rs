//! [`plain_enum`], the schema transform the CRD's enums need; a leaf, so the types that use it
//! (in `common`, `spec`, `status` and the step modules) do not import the schema generator that
//! reads them.

use schemars::Schema;
use serde_json::{json, Value};

/// A `#[schemars(transform = ...)]` for enums of unit variants: schemars turns documented
/// variants into a `oneOf` of constants, which the CRD's structural schema cannot keep (the field
/// lost its enum and accepted anything). This makes it `{type: string, enum: [...]}` again, so
/// variants can carry their doc comments and the API server still refuses a wrong value.
pub fn plain_enum(schema: &mut Schema) {
    let Some(branches) = schema.get("oneOf").and_then(Value::as_array) else {
        return;
    };
    let values: Option<Vec<Value>> = branches
        .iter()
        .map(
            |b| match (b.get("const"), b.get("enum").and_then(Value::as_array)) {
                (Some(c), _) => Some(c.clone()),
                (None, Some(e)) if e.len() == 1 => Some(e[0].clone()),
                _ => None,
            },
        )
        .collect();
    let Some(values) = values else { return };
    if let Some(obj) = schema.as_object_mut() {
        obj.remove("oneOf");
        obj.insert("type".into(), json!("string"));
        obj.insert("enum".into(), Value::Array(values));
    }
}

#[cfg(test)]
mod tests {
    use crate::common::RunOn;

    #[test]
    fn documented_unit_variants_keep_an_enum_schema() {
        let schema = schemars::schema_for!(RunOn);
        assert_eq!(
            schema.get("enum"),
            Some(&serde_json::json!(["all", "any", "first"]))
        );
        assert!(schema.get("oneOf").is_none(), "{schema:?}");
    }
}
