//! The `switchboard-operator`: reconciles `McpServer` resources (see [`crd`]) into a clustered
//! switchboard deployment.
//!
//! A reconcile ([`reconcile::reconcile`]) is a sequence of steps:
//!
//! 1. validate ([`validate`]): what the CRD schema and its CEL rules cannot say, as clear
//!    messages; an invalid spec stops here;
//! 2. secret: the Secret the pods mount is read for its cluster secret, or its material generated;
//! 3. membership ([`membership`]): the Raft membership steps a scale needs, planned as pure
//!    functions and carried out through the node admin API; it decides how many pods the
//!    StatefulSet may have now;
//! 4. build ([`builders`]): pure functions from an `McpServer` to every child object, made once
//!    as one [`builders::Children`] value (no client);
//! 5. apply: server-side apply of those children with field manager [`FIELD_MANAGER`];
//! 6. status: replicas, leader, members and conditions.
//!
//! Each step publishes the events about what it did or found, as a [`Note`].
//!
//! What the node and the operator agree on (admin API, duration format, environment names) is
//! the `switchboard-contract` crate. [`render`] prints the children without a cluster.

pub mod builders;
pub mod crd;
pub mod lease;
pub mod membership;
pub mod metrics;
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

/// Something worth telling the user, as a Kubernetes event or condition carries it: a
/// machine-readable `reason` (CamelCase, such as `ScaleRefused`) and a sentence for people.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub reason: &'static str,
    pub message: String,
}

impl Note {
    pub fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self { reason, message: message.into() }
    }
}

/// Result with the operator's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
