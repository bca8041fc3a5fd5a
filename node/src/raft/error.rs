//! Failures of the replicated store, and how the store traits above see them.

use crate::mailbox::{BoxError, MailboxError};
use crate::peer::PeerError;
use crate::session::SessionError;

/// Failures of the replicated store.
#[derive(Debug, thiserror::Error)]
pub enum RaftStoreError {
    #[error("invalid Raft configuration: {0}")]
    Config(#[from] openraft::ConfigError),
    #[error("storage: {0}")]
    Storage(#[from] std::io::Error),
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
        MailboxError::Unavailable(Box::new(e))
    }
}

impl From<RaftStoreError> for SessionError {
    fn from(e: RaftStoreError) -> Self {
        SessionError::Unavailable(Box::new(e))
    }
}
