//! The envelope of every 2026-07-28 answer: `resultType`, the server's info in `_meta`, cache
//! hints, and the error codes of that era.

use super::handle::Server;
use crate::protocol::era::META_SERVER_INFO;
use crate::protocol::jsonrpc::{ErrorObject, INVALID_PARAMS, RESOURCE_NOT_FOUND};
use serde_json::{Value, json};

/// Results of these methods say how long a client may cache them.
const CACHEABLE: [&str; 6] =
    ["server/discover", "tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read"];

impl Server {
    /// A modern result: `resultType` (`complete` unless the result says otherwise), the
    /// server's info in `_meta`, and cache hints on the results that may be cached (nothing
    /// may be cached for long: tools change at run time; and the result of a retry not at all).
    pub(super) fn envelope(&self, method: &str, mut result: Value, retried: bool) -> Value {
        let Value::Object(fields) = &mut result else { return result };
        fields.entry("resultType").or_insert_with(|| json!("complete"));
        let meta = fields.entry("_meta").or_insert_with(|| json!({}));
        if let Value::Object(meta) = meta {
            meta.insert(META_SERVER_INFO.into(), json!(self.inner.info));
        }
        if CACHEABLE.contains(&method) && fields.get("resultType") == Some(&json!("complete")) {
            fields.insert("ttlMs".into(), json!(0));
            fields.insert("cacheScope".into(), json!(if retried { "private" } else { "public" }));
        }
        result
    }
}

/// An error as the 2026-07-28 era spells it: a missing resource is invalid params (-32002 is
/// reserved there), with the URI in `data`.
pub(super) fn modern_error(mut error: ErrorObject) -> ErrorObject {
    if error.code == RESOURCE_NOT_FOUND {
        error.code = INVALID_PARAMS;
    }
    error
}
