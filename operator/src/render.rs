//! `switchboard-operator render`: the children of an `McpServer` read from a file, as YAML,
//! without a cluster.

use crate::builders::{Children, Rollout, SecretMaterial, Settings, Target};
use crate::crd::McpServer;
use crate::{Error, Result};

/// An `McpServer` read from YAML, validated, rendered into its children as a multi-document
/// YAML stream. Objects read from a file have no namespace or uid yet: `namespace` fills the
/// first, a fixed placeholder the second.
pub fn render_yaml(yaml: &str, namespace: &str, settings: &Settings) -> Result<String> {
    let mut mcp: McpServer = serde_saphyr::from_str(yaml).map_err(|e| Error::Serialization(format!("not an McpServer: {e}")))?;
    if mcp.metadata.namespace.is_none() {
        mcp.metadata.namespace = Some(namespace.into());
    }
    if mcp.metadata.uid.is_none() {
        mcp.metadata.uid = Some("00000000-0000-0000-0000-000000000000".into());
    }
    crate::validate::validate(&mcp)?;
    let target = Target::new(&mcp)?;
    let objects = Children::build(&target, settings, Rollout::initial(&mcp), Some(&SecretMaterial::generate())).into_json()?;
    let mut out = String::new();
    for object in objects {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&object).map_err(|e| Error::Serialization(e.to_string()))?);
    }
    Ok(out)
}
