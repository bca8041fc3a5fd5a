use super::{LimitReached, SessionError, SessionId, SessionRecord, SessionStore, SubscriptionLimits};
use crate::protocol::types::LogLevel;
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Sessions in one process's memory, expiring after `ttl` without use.
pub struct InMemorySessionStore {
    ttl: Duration,
    sessions: Mutex<HashMap<SessionId, (Arc<SessionRecord>, Instant)>>,
}

impl InMemorySessionStore {
    pub fn new(ttl: Duration) -> Self {
        InMemorySessionStore { ttl, sessions: Mutex::default() }
    }

    /// Run `f` on the live record, refreshing its idle timer; expired records are dropped.
    fn with_live<T>(&self, id: &SessionId, f: impl FnOnce(&mut Arc<SessionRecord>) -> T) -> Option<T> {
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
    async fn create(&self, record: SessionRecord, max_sessions: usize) -> Result<(), SessionError> {
        let mut sessions = self.sessions.lock().unwrap();
        let now = Instant::now();
        // Sweep idle records now and then rather than on every create, and before refusing.
        if sessions.len() % 256 == 255 || sessions.len() >= max_sessions {
            sessions.retain(|_, (_, seen)| now.duration_since(*seen) < self.ttl);
        }
        if sessions.len() >= max_sessions {
            return Err(LimitReached::Sessions(max_sessions).into());
        }
        sessions.insert(record.id.clone(), (Arc::new(record), now));
        Ok(())
    }

    async fn get(&self, id: &SessionId) -> Result<Option<Arc<SessionRecord>>, SessionError> {
        Ok(self.with_live(id, |r| r.clone()))
    }

    async fn is_live(&self, id: &SessionId) -> Result<bool, SessionError> {
        let sessions = self.sessions.lock().unwrap();
        Ok(sessions.get(id).is_some_and(|(_, seen)| seen.elapsed() < self.ttl))
    }

    // Changes copy the record when requests still hold the old one (they keep what they read).
    async fn set_log_level(&self, id: &SessionId, level: LogLevel) -> Result<bool, SessionError> {
        Ok(self.with_live(id, |r| Arc::make_mut(r).log_level = level).is_some())
    }

    async fn set_subscription(
        &self,
        id: &SessionId,
        uri: &str,
        subscribed: bool,
        limits: SubscriptionLimits,
    ) -> Result<bool, SessionError> {
        let changed = self.with_live(id, |r| {
            if !subscribed {
                Arc::make_mut(r).subscriptions.remove(uri);
            } else if r.check_subscribe(uri, limits)? {
                Arc::make_mut(r).subscriptions.insert(uri.to_string());
            }
            Ok::<_, SessionError>(())
        });
        changed.transpose().map(|known| known.is_some())
    }

    async fn delete(&self, id: &SessionId) -> Result<bool, SessionError> {
        Ok(self.sessions.lock().unwrap().remove(id).is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::types::{CapabilityFlags, Implementation, ProtocolVersion};

    fn record(id: &str) -> SessionRecord {
        SessionRecord {
            id: SessionId(id.into()),
            protocol_version: ProtocolVersion::V2025_11_25,
            client_info: Implementation { name: "c".into(), version: "1".into(), title: None },
            capabilities: CapabilityFlags::default(),
            log_level: LogLevel::Info,
            subscriptions: Default::default(),
        }
    }

    #[tokio::test]
    async fn reads_share_the_record_and_a_change_leaves_readers_their_copy() {
        let store = InMemorySessionStore::new(Duration::from_secs(60));
        let id = SessionId("s".into());
        store.create(record("s"), 10).await.unwrap();
        let (a, b) = (store.get(&id).await.unwrap().unwrap(), store.get(&id).await.unwrap().unwrap());
        assert!(Arc::ptr_eq(&a, &b), "no copy per read");
        assert!(store.set_log_level(&id, LogLevel::Error).await.unwrap());
        assert_eq!(a.log_level, LogLevel::Info, "a request keeps the record it read");
        assert_eq!(store.get(&id).await.unwrap().unwrap().log_level, LogLevel::Error);
    }

    #[tokio::test]
    async fn creates_stop_at_the_session_limit_until_one_ends() {
        let store = InMemorySessionStore::new(Duration::from_secs(60));
        store.create(record("a"), 2).await.unwrap();
        store.create(record("b"), 2).await.unwrap();
        assert!(matches!(store.create(record("c"), 2).await, Err(SessionError::Limit(LimitReached::Sessions(2)))));
        assert!(store.get(&SessionId("c".into())).await.unwrap().is_none(), "nothing stored");
        store.delete(&SessionId("a".into())).await.unwrap();
        store.create(record("c"), 2).await.unwrap();
    }
}
