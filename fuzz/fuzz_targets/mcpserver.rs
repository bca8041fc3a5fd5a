//! `McpServer` validation and the pure builders behind it: any resource the API server could
//! hand the operator is either refused with reasons or built into children; nothing panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchboard_operator::builders::{self, Rollout, SecretMaterial, Settings, Target};
use switchboard_operator::crd::McpServer;
use switchboard_operator::validate;

fuzz_target!(|data: &[u8]| {
    let Ok(mut mcp) = serde_json::from_slice::<McpServer>(data) else { return };
    // What the API server always sets.
    mcp.metadata.name.get_or_insert_with(|| "fuzz".into());
    mcp.metadata.namespace.get_or_insert_with(|| "fuzz".into());
    mcp.metadata.uid.get_or_insert_with(|| "7d3c8a8e-0000-4000-8000-000000000001".into());
    if validate::validate(&mcp).is_err() {
        return;
    }
    let target = Target::new(&mcp).expect("namespace and uid set");
    let material = SecretMaterial { cluster_secret: "a".repeat(64), encryption_key: "b".repeat(64) };
    builders::children(&target, &Settings::default(), Rollout::initial(&mcp), Some(&material)).expect("a valid spec builds");
});
