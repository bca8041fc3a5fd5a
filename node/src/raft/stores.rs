//! The replicated [`Mailbox`] and [`SessionStore`]: the store traits the MCP server correlates
//! through, over a member's write and read paths.

use super::RaftNode;
use super::sm_store::Watch;
use super::state_machine::{Command, JsonText, Millis, Response};
use crate::clock::now_ms;
use crate::mailbox::{CreateOutcome, DeliverOutcome, Mailbox, MailboxError, MailboxKey, NodeId, SessionTag, WaitOutcome, check_ttl};
use crate::protocol::types::LogLevel;
use crate::session::{SessionError, SessionId, SessionRecord, SessionStore};
use async_trait::async_trait;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The replicated mailbox. Clones share one view of the mailboxes created here.
#[derive(Clone)]
pub struct RaftMailbox {
    node: Arc<RaftNode>,
    /// Mailboxes created through this store, with the log index of the create, until their
    /// owner's wait settles: the wait (not the create) catches up with the create's application.
    created_here: Arc<Mutex<HashMap<MailboxKey, u64>>>,
}

impl RaftMailbox {
    pub fn new(node: Arc<RaftNode>) -> Self {
        RaftMailbox { node, created_here: Arc::default() }
    }
}

/// The replicated session store. Clones share the touches in flight.
#[derive(Clone)]
pub struct RaftSessions {
    node: Arc<RaftNode>,
    /// Sessions with a touch in flight, so a burst of requests proposes one.
    touching: Arc<Mutex<HashSet<SessionId>>>,
}

impl RaftSessions {
    pub fn new(node: Arc<RaftNode>) -> Self {
        RaftSessions { node, touching: Arc::default() }
    }

    fn ttl_ms(&self) -> Millis {
        self.node.config().session_ttl.as_millis() as Millis
    }

    /// Push a session's expiry out when half its TTL is used, at most one touch in flight.
    fn maybe_touch(&self, id: &SessionId, expires_at: Millis) {
        if expires_at > now_ms() + self.ttl_ms() / 2 || !self.touching.lock().unwrap().insert(id.clone()) {
            return;
        }
        let (sessions, id) = (self.clone(), id.clone());
        tokio::spawn(async move {
            if let Err(e) = sessions.node.propose(Command::SessionTouch { id: id.clone() }).await {
                tracing::debug!(error = %e, "session touch not committed");
            }
            sessions.touching.lock().unwrap().remove(&id);
        });
    }
}

#[async_trait]
impl Mailbox for RaftMailbox {
    async fn create(&self, key: &MailboxKey, session: SessionTag, owner: NodeId, ttl: Duration) -> Result<CreateOutcome, MailboxError> {
        check_ttl(ttl)?;
        let command = Command::MailboxCreate { key: key.clone(), session, owner, ttl_ms: ttl.as_millis() as Millis };
        let (response, index) = self.node.propose(command).await?;
        // Committed: a delivery anywhere finds it. This replica may apply it a moment later;
        // `wait` catches up first, so the request can go out to the client meanwhile.
        match response {
            Response::Created(outcome) => {
                self.created_here.lock().unwrap().insert(key.clone(), index);
                Ok(outcome)
            }
            other => Err(MailboxError::Unavailable(format!("unexpected reply to create: {other:?}").into())),
        }
    }

    async fn deliver(&self, key: &MailboxKey, session: SessionTag, value: Value) -> Result<DeliverOutcome, MailboxError> {
        let command = Command::MailboxDeliver { key: key.clone(), session, value: JsonText::from(&value) };
        match self.node.propose(command).await?.0 {
            Response::Delivered(outcome) => Ok(outcome),
            other => Err(MailboxError::Unavailable(format!("unexpected reply to deliver: {other:?}").into())),
        }
    }

    async fn wait(&self, key: &MailboxKey, timeout: Duration) -> Result<WaitOutcome, MailboxError> {
        let created = self.created_here.lock().unwrap().get(key).copied();
        if let Some(index) = created
            && !self.node.sm.applied_at_least(index, timeout).await
        {
            return Ok(WaitOutcome::TimedOut);
        }
        let mut rx = match self.node.sm.watch(key) {
            Watch::Settled(outcome) => {
                self.created_here.lock().unwrap().remove(key);
                return Ok(outcome);
            }
            Watch::Parked(rx) => rx,
        };
        let outcome = match tokio::time::timeout(timeout, rx.wait_for(Option::is_some)).await {
            Ok(Ok(outcome)) => outcome.clone().expect("waited for Some"),
            Ok(Err(_)) => WaitOutcome::Deleted,
            Err(_) => WaitOutcome::TimedOut,
        };
        drop(rx);
        self.node.sm.unpark(key);
        if outcome != WaitOutcome::TimedOut {
            self.created_here.lock().unwrap().remove(key);
        }
        Ok(outcome)
    }

    async fn delete(&self, key: &MailboxKey) -> Result<(), MailboxError> {
        self.created_here.lock().unwrap().remove(key);
        self.node.propose(Command::MailboxDelete { key: key.clone() }).await?;
        Ok(())
    }
}

#[async_trait]
impl SessionStore for RaftSessions {
    async fn create(&self, record: SessionRecord) -> Result<(), SessionError> {
        let command = Command::SessionCreate { record, ttl_ms: self.ttl_ms() };
        let (_, index) = self.node.propose(command).await?;
        self.node.wait_applied(index).await?;
        Ok(())
    }

    async fn get(&self, id: &SessionId) -> Result<Option<SessionRecord>, SessionError> {
        let local = |node: &RaftNode| node.sm.read(|sm| sm.session(id).map(|s| (s.record.clone(), s.expires_at)));
        let found = match local(&self.node) {
            Some(found) => Some(found),
            // Unknown here: it may have been created on another node a moment ago.
            None => {
                self.node.linearize().await?;
                local(&self.node)
            }
        };
        Ok(found.map(|(record, expires_at)| {
            self.maybe_touch(id, expires_at);
            record
        }))
    }

    async fn is_live(&self, id: &SessionId) -> Result<bool, SessionError> {
        // This replica's applied state: a session it has seen leaves it only by expiring in log
        // time or by a delete, both applied here as on every replica.
        Ok(self.node.sm.read(|sm| sm.session(id).is_some()))
    }

    async fn set_log_level(&self, id: &SessionId, level: LogLevel) -> Result<bool, SessionError> {
        let (response, _) = self.node.propose(Command::SessionSetLogLevel { id: id.clone(), level }).await?;
        Ok(response == Response::Session(true))
    }

    async fn set_subscription(&self, id: &SessionId, uri: &str, subscribed: bool) -> Result<bool, SessionError> {
        let command = Command::SessionSubscribe { id: id.clone(), uri: uri.to_string(), subscribed };
        let (response, _) = self.node.propose(command).await?;
        Ok(response == Response::Session(true))
    }

    async fn delete(&self, id: &SessionId) -> Result<bool, SessionError> {
        let (response, _) = self.node.propose(Command::SessionDelete { id: id.clone() }).await?;
        Ok(response == Response::Session(true))
    }
}
