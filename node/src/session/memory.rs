use super::{SessionError, SessionId, SessionRecord, SessionStore};
use crate::protocol::types::LogLevel;
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Sessions in one process's memory, expiring after `ttl` without use.
pub struct InMemorySessionStore {
    ttl: Duration,
    sessions: Mutex<HashMap<SessionId, (SessionRecord, Instant)>>,
}

impl InMemorySessionStore {
    pub fn new(ttl: Duration) -> Self {
        InMemorySessionStore { ttl, sessions: Mutex::default() }
    }

    /// Run `f` on the live record, refreshing its idle timer; expired records are dropped.
    fn with_live<T>(&self, id: &SessionId, f: impl FnOnce(&mut SessionRecord) -> T) -> Option<T> {
        let mut sessions = self.sessions.lock().unwrap();
        let now = Instant::now();
        match sessions.get_mut(id) {
            Some((record, seen)) if now.duration_since(*seen) < self.ttl => {
                *seen = now;
                Some(f(record))
            }
            Some(_) => {
                sessions.remove(id);
                None
            }
            None => None,
        }
    }
}

#[async_trait]
impl SessionStore for InMemorySessionStore {
    async fn create(&self, record: SessionRecord) -> Result<(), SessionError> {
        let mut sessions = self.sessions.lock().unwrap();
        let now = Instant::now();
        // Sweep idle records now and then rather than on every create.
        if sessions.len() % 256 == 255 {
            sessions.retain(|_, (_, seen)| now.duration_since(*seen) < self.ttl);
        }
        sessions.insert(record.id.clone(), (record, now));
        Ok(())
    }

    async fn get(&self, id: &SessionId) -> Result<Option<SessionRecord>, SessionError> {
        Ok(self.with_live(id, |r| r.clone()))
    }

    async fn is_live(&self, id: &SessionId) -> Result<bool, SessionError> {
        let sessions = self.sessions.lock().unwrap();
        Ok(sessions.get(id).is_some_and(|(_, seen)| seen.elapsed() < self.ttl))
    }

    async fn set_log_level(&self, id: &SessionId, level: LogLevel) -> Result<bool, SessionError> {
        Ok(self.with_live(id, |r| r.log_level = level).is_some())
    }

    async fn set_subscription(&self, id: &SessionId, uri: &str, subscribed: bool) -> Result<bool, SessionError> {
        Ok(self
            .with_live(id, |r| {
                if subscribed {
                    r.subscriptions.insert(uri.to_string());
                } else {
                    r.subscriptions.remove(uri);
                }
            })
            .is_some())
    }

    async fn delete(&self, id: &SessionId) -> Result<bool, SessionError> {
        Ok(self.sessions.lock().unwrap().remove(id).is_some())
    }
}
