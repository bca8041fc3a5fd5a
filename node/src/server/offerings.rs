//! What the server offers: tools, prompts and resources.

use super::definitions::{PromptDef, ResourceDef, ToolDef};
use std::sync::Arc;

/// Offerings behind `Arc`: a running handler holds its definition (schemas included) for as
/// long as it runs, possibly parked for minutes, and must not need a copy of it.
#[derive(Default)]
pub(super) struct Offerings {
    pub(super) tools: Vec<Arc<ToolDef>>,
    pub(super) prompts: Vec<Arc<PromptDef>>,
    pub(super) resources: Vec<Arc<ResourceDef>>,
}
