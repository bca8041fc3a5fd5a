//! Failures of the replicated store, and how the store traits above see them.

use crate::mailbox::MailboxError;
use crate::peer::PeerError;
use crate::session::SessionError;

/// Failures of the replicated store.
#[derive(Debug, thiserror::Error)]
pub enum RaftStoreError {
    #[error("invalid Raft configuration: {0}")]
    Config(String),
    #[error("storage: {0}")]
    Storage(#[from] std::io::Error),
    #[error("raft stopped: {0}")]
    Fatal(String),
    #[error("no quorum: {0}")]
    Unavailable(String),
    #[error("membership change refused: {0}")]
    Membership(String),
    #[error(transparent)]
    Peer(#[from] PeerError),
}

impl From<RaftStoreError> for MailboxError {
    fn from(e: RaftStoreError) -> Self {
        MailboxError::Unavailable(e.to_string())
    }
}

impl From<RaftStoreError> for SessionError {
    fn from(e: RaftStoreError) -> Self {
        SessionError::Unavailable(e.to_string())
    }
}
