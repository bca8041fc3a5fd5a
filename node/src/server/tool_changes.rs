//! Changing the tools at run time: every session hears `notifications/tools/list_changed`.

use super::definitions::ToolDef;
use super::handle::Server;
use std::sync::Arc;

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
