//! JSON Schema as MCP uses it: tool input and output schemas, elicitation schemas (2020-12).

use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

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

/// Compiled elicitation schemas, shared by the calls that ask with the same schema. A tool asks
/// with the same few schemas over and over, and compiling one (checked against its meta-schema
/// first) cost more CPU than the rest of a round trip. A parked call holds its validator through
/// the shared `Arc`, so parking keeps no schema of its own. Bounded: past [`Self::CAPACITY`]
/// distinct schemas (a tool that builds them per call) it starts over.
#[derive(Default)]
pub(crate) struct SchemaCache {
    /// Keyed by the schema itself (`Value` is `Hash + Eq`, objects compare by their sorted
    /// keys): a lookup costs a hash of the tree, not its serialization.
    compiled: Mutex<HashMap<Value, Arc<jsonschema::Validator>>>,
}

impl SchemaCache {
    pub(crate) const CAPACITY: usize = 128;

    /// The validator of `schema`, compiled on first use; a schema that does not compile is
    /// refused (each time: it is not kept).
    pub(crate) fn validator(&self, schema: &Value) -> Result<Arc<jsonschema::Validator>, String> {
        if let Some(validator) = self.compiled.lock().unwrap().get(schema) {
            return Ok(validator.clone());
        }
        let validator = Arc::new(jsonschema::validator_for(schema).map_err(|e| e.to_string())?);
        let mut compiled = self.compiled.lock().unwrap();
        if compiled.len() >= Self::CAPACITY {
            compiled.clear();
        }
        Ok(compiled.entry(schema.clone()).or_insert(validator).clone())
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.compiled.lock().unwrap().len()
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn confirm(title: &str) -> Value {
        json!({"type": "object", "properties": {"confirm": {"type": "boolean", "title": title}}, "required": ["confirm"]})
    }

    #[test]
    fn equal_schemas_share_one_validator() {
        let cache = SchemaCache::default();
        let first = cache.validator(&confirm("Confirm")).unwrap();
        // The same schema built with its keys in another order.
        let reordered: Value = serde_json::from_str(
            r#"{"required": ["confirm"], "properties": {"confirm": {"title": "Confirm", "type": "boolean"}}, "type": "object"}"#,
        )
        .unwrap();
        let second = cache.validator(&reordered).unwrap();
        assert!(Arc::ptr_eq(&first, &second));
        let other = cache.validator(&confirm("Sure?")).unwrap();
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(cache.len(), 2);
        assert!(first.is_valid(&json!({"confirm": true})));
        assert!(!first.is_valid(&json!({"confirm": "yes"})));
    }

    #[test]
    fn a_schema_that_does_not_compile_is_refused_and_not_kept() {
        let cache = SchemaCache::default();
        let bad = json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": "zero"}}});
        assert!(cache.validator(&bad).is_err());
        assert!(cache.validator(&bad).is_err());
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn the_cache_is_bounded() {
        let cache = SchemaCache::default();
        let held = cache.validator(&confirm("0")).unwrap();
        for i in 1..=SchemaCache::CAPACITY + 10 {
            cache.validator(&confirm(&i.to_string())).unwrap();
            assert!(cache.len() <= SchemaCache::CAPACITY);
        }
        // A validator handed out before the cache started over still works.
        assert!(held.is_valid(&json!({"confirm": false})));
    }
}
