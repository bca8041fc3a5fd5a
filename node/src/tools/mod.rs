//! Built-in tool sets of the stock binary (`--tools default|conformance`).

pub mod conformance;
pub mod stock;

use crate::server::ServerBuilder;

/// Which built-in set a node registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ToolSet {
    /// echo, confirm (form elicitation), visit (URL-mode elicitation), ask_llm (sampling),
    /// countdown (progress).
    Default,
    /// Exactly what `@modelcontextprotocol/conformance` expects.
    Conformance,
}

impl ToolSet {
    pub fn register(self, builder: ServerBuilder) -> ServerBuilder {
        match self {
            ToolSet::Default => stock::register(builder),
            ToolSet::Conformance => conformance::register(builder),
        }
    }
}
