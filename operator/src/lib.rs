//! The `switchboard-operator`: reconciles `McpServer` resources (see [`crd`]) into a clustered
//! switchboard deployment.
//!
//! A reconcile runs in four stages, each in its own module:
//!
//! 1. [`validate`]: what the CRD schema and its CEL rules cannot say, as clear messages;
//! 2. [`builders`]: pure functions from an `McpServer` to every child object (no client);
//! 3. [`reconcile`]: server-side apply of those children with field manager
//!    [`FIELD_MANAGER`], then status, conditions and events.
//! 4. [`membership`]: the Raft membership steps a scale needs, planned as pure functions and
//!    carried out through the node admin API.
//!
//! [`render`] prints the children of an `McpServer` read from a file, without a cluster.

pub mod builders;
pub mod crd;
pub mod membership;
pub mod reconcile;
pub mod render;
pub mod run;
pub mod validate;

#[cfg(test)]
pub mod fixtures;

/// Field manager of every server-side apply the operator does.
pub const FIELD_MANAGER: &str = "switchboard-operator";

/// Everything that can fail in a reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec breaks a rule the schema cannot express; the user has to change it.
    #[error("invalid McpServer spec: {0}")]
    InvalidSpec(String),
    /// A call to the Kubernetes API failed.
    #[error("Kubernetes API call failed: {0}")]
    Kube(#[from] kube::Error),
    /// An object could not be turned into JSON or YAML.
    #[error("serialization failed: {0}")]
    Serialization(String),
    /// The object lacks something the API server always sets (namespace, uid, ...).
    #[error("McpServer is missing {0}")]
    MissingObjectKey(&'static str),
    /// The node admin API refused or failed a membership call.
    #[error("node admin API: {0}")]
    Admin(String),
    /// The operator cannot start.
    #[error("{0}")]
    Startup(String),
}

impl Error {
    /// A short label for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            Error::InvalidSpec(_) => "invalid_spec",
            Error::Kube(_) => "kube",
            Error::Serialization(_) => "serialization",
            Error::MissingObjectKey(_) => "missing_object_key",
            Error::Admin(_) => "admin",
            Error::Startup(_) => "startup",
        }
    }
}

/// Result with the operator's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
