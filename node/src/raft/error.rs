//! Failures of the replicated store, and how the store traits above see them.

use crate::mailbox::{BoxError, MailboxError};
use crate::mcp_tasks::TaskError;
use crate::peer::PeerError;
use crate::session::SessionError;

/// Failures of the replicated store.
#[derive(Debug, thiserror::Error)]
pub enum RaftStoreError {
    #[error("invalid Raft configuration: {0}")]
    Config(#[from] openraft::ConfigError),
    #[error("invalid Raft configuration: {0}")]
    Limits(String),
    /// Refused before it was proposed: nothing was written.
    #[error("entry too large: {size} bytes, at most {limit} (--max-entry-bytes)")]
    EntryTooLarge { size: usize, limit: usize },
    #[error("storage: {0}")]
    Storage(#[from] std::io::Error),
    /// The data directory was written under another encryption key (see the `data_key` module).
    #[error(
        "data directory {} belongs to encryption key {found}, not this node's {ours}: restore the Secret it was written \
         with (spec.secretRef), or delete the data (the pod's PersistentVolumeClaim) to start a new cluster",
        .dir.display()
    )]
    ForeignData { dir: std::path::PathBuf, found: String, ours: String },
    #[error("raft stopped: {0}")]
    Fatal(#[source] BoxError),
    #[error("no quorum: {0}")]
    Unavailable(String),
    #[error("membership change refused: {0}")]
    Membership(#[source] BoxError),
    #[error(transparent)]
    Peer(#[from] PeerError),
}

impl From<RaftStoreError> for MailboxError {
    fn from(e: RaftStoreError) -> Self {
        match e {
            RaftStoreError::EntryTooLarge { size, limit } => MailboxError::TooLarge { size, limit },
            e => MailboxError::Unavailable(Box::new(e)),
        }
    }
}

impl From<RaftStoreError> for SessionError {
    fn from(e: RaftStoreError) -> Self {
        match e {
            RaftStoreError::EntryTooLarge { size, limit } => SessionError::TooLarge { size, limit },
            e => SessionError::Unavailable(Box::new(e)),
        }
    }
}

impl From<RaftStoreError> for TaskError {
    fn from(e: RaftStoreError) -> Self {
        match e {
            RaftStoreError::EntryTooLarge { size, limit } => TaskError::TooLarge { size, limit },
            e => TaskError::Unavailable(Box::new(e)),
        }
    }
}
