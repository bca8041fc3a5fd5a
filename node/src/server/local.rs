//! Session state only this node has: the requests running here (for cancellation), the
//! record they share, the standalone stream attached here, and a log level set here ahead of
//! the replicated copy. A periodic sweep (`Server::spawn_local_sweep`) drops idle entries and
//! ends those whose session ended (by TTL, or deleted through another node).

use super::outbound::Outbound;
use crate::metrics::Metrics;
use crate::protocol::jsonrpc::RequestId;
use crate::protocol::types::LogLevel;
use crate::session::{SessionId, SessionRecord};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// State of one session that only this node has.
#[derive(Default)]
pub(super) struct LocalSession {
    pub(super) running: Mutex<HashMap<RequestId, CancellationToken>>,
    /// The record the requests running here share, so a parked call holds a pointer rather
    /// than its own copy.
    pub(super) record: Mutex<Option<Arc<SessionRecord>>>,
    /// The standalone stream (HTTP GET, or stdout for stdio), when one is attached.
    pub(super) notifier: Mutex<Option<Outbound>>,
    /// Log level set on this node, ahead of the store's copy.
    pub(super) log_level: Mutex<Option<LogLevel>>,
}

impl LocalSession {
    /// The session's log level: set on this node, else the record's.
    pub(super) fn log_level(&self, record: &SessionRecord) -> LogLevel {
        self.log_level.lock().unwrap().unwrap_or(record.log_level)
    }

    /// The shared copy of `record`: the one already held when it is unchanged, else `record`
    /// itself, which becomes the shared copy.
    pub(super) fn share(&self, record: SessionRecord) -> Arc<SessionRecord> {
        let mut shared = self.record.lock().unwrap();
        match &*shared {
            Some(current) if **current == record => current.clone(),
            _ => shared.insert(Arc::new(record)).clone(),
        }
    }
}

/// This node's [`LocalSession`]s by session id.
#[derive(Default)]
pub(super) struct LocalSessions {
    sessions: Mutex<HashMap<SessionId, Arc<LocalSession>>>,
}

impl LocalSessions {
    /// The entry of `id`, created on first use.
    pub(super) fn entry(&self, id: &SessionId, metrics: &Metrics) -> Arc<LocalSession> {
        let mut sessions = self.sessions.lock().unwrap();
        let entry = sessions.entry(id.clone()).or_default().clone();
        metrics.set_local_sessions(sessions.len());
        entry
    }

    /// Drop idle entries. Sessions that ended by TTL leave entries behind; an idle one (held by
    /// no task, nothing running, no stream attached) holds nothing the replicated record doesn't.
    /// Run periodically by the server (see `Server::spawn_local_sweep`).
    pub(super) fn sweep_idle(&self, metrics: &Metrics) -> usize {
        let mut sessions = self.sessions.lock().unwrap();
        let before = sessions.len();
        sessions.retain(|_, l| Arc::strong_count(l) > 1 || !l.running.lock().unwrap().is_empty() || l.notifier.lock().unwrap().is_some());
        metrics.set_local_sessions(sessions.len());
        before - sessions.len()
    }

    /// End the entry of `id`: drop it, cancel its running requests and close its standalone
    /// stream (the stream's producer goes away; its readers end after what it holds).
    pub(super) fn end(&self, id: &SessionId, metrics: &Metrics) -> bool {
        let mut sessions = self.sessions.lock().unwrap();
        let ended = sessions.remove(id);
        metrics.set_local_sessions(sessions.len());
        drop(sessions);
        let Some(local) = ended else { return false };
        for token in local.running.lock().unwrap().values() {
            token.cancel();
        }
        drop(local.notifier.lock().unwrap().take());
        true
    }

    /// The sessions with an entry here.
    pub(super) fn ids(&self) -> Vec<SessionId> {
        self.sessions.lock().unwrap().keys().cloned().collect()
    }

    /// The entry of `id`, if this node has one.
    pub(super) fn get(&self, id: &SessionId) -> Option<Arc<LocalSession>> {
        self.sessions.lock().unwrap().get(id).cloned()
    }

    /// The sessions with a standalone stream attached here.
    pub(super) fn with_notifier(&self) -> Vec<(SessionId, Arc<LocalSession>)> {
        let sessions = self.sessions.lock().unwrap();
        sessions.iter().filter(|(_, l)| l.notifier.lock().unwrap().is_some()).map(|(id, l)| (id.clone(), l.clone())).collect()
    }
}
