//! What the server offers (tools, prompts, resources), and changing the tools at run time.

use super::handle::Server;
use super::{PromptDef, ResourceDef, ToolDef};
use std::sync::Arc;

/// Offerings behind `Arc`: a running handler holds its definition (schemas included) for as
/// long as it runs, possibly parked for minutes, and must not need a copy of it.
#[derive(Default)]
pub(super) struct Offerings {
    pub(super) tools: Vec<Arc<ToolDef>>,
    pub(super) prompts: Vec<Arc<PromptDef>>,
    pub(super) resources: Vec<Arc<ResourceDef>>,
}

impl Server {
    /// Add or replace a tool at run time; sessions hear `notifications/tools/list_changed`.
    pub fn upsert_tool(&self, tool: ToolDef) {
        {
            let mut offerings = self.inner.offerings.write().unwrap();
            offerings.tools.retain(|t| t.name != tool.name);
            offerings.tools.push(Arc::new(tool));
        }
        self.notify_all("notifications/tools/list_changed");
    }

    /// Remove a tool at run time; `true` when it existed.
    pub fn remove_tool(&self, name: &str) -> bool {
        let removed = {
            let mut offerings = self.inner.offerings.write().unwrap();
            let before = offerings.tools.len();
            offerings.tools.retain(|t| t.name != name);
            offerings.tools.len() != before
        };
        if removed {
            self.notify_all("notifications/tools/list_changed");
        }
        removed
    }
}
