//! JSON Schema as MCP uses it: tool input and output schemas, elicitation schemas (2020-12).

use serde_json::Value;

/// A schema the tool author wrote is not a valid JSON Schema.
#[derive(Debug, thiserror::Error)]
#[error("invalid schema for {name}: {reason}")]
pub struct SchemaError {
    pub name: String,
    pub reason: String,
}

pub(super) fn compile_schema(name: &str, schema: &Value) -> Result<jsonschema::Validator, SchemaError> {
    // Schemas without `$schema` are JSON Schema 2020-12 (MCP 2025-11-25 default).
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .build(schema)
        .map_err(|e| SchemaError { name: name.into(), reason: e.to_string() })
}

/// Collect validation errors as one readable line.
pub(crate) fn validation_errors(validator: &jsonschema::Validator, value: &Value) -> Option<String> {
    let errors: Vec<String> = validator.iter_errors(value).map(|e| format!("{}: {}", e.instance_path(), e)).collect();
    (!errors.is_empty()).then(|| errors.join("; "))
}

/// The JSON Schema of `T` as MCP wants it (an object schema, `$schema` dropped).
pub fn schema_for<T: schemars::JsonSchema>() -> Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(T)).expect("schemas serialize");
    if let Some(obj) = schema.as_object_mut() {
        obj.remove("$schema");
        obj.remove("title");
    }
    schema
}
