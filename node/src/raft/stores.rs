//! The replicated [`Mailbox`], [`SessionStore`] and [`TaskStore`]: the store traits the MCP
//! server correlates through, over a member's write and read paths.

use super::RaftNode;
use super::sm_store::Watch;
use super::state_machine::{Command, JsonText, MAX_RELEASE_BATCH, Millis, Response};
use crate::clock::now_ms;
use crate::mailbox::{
    Addressee, CreateOutcome, DeliverOutcome, Mailbox, MailboxError, MailboxKey, NodeId, SessionTag, WaitOutcome, check_ttl,
};
use crate::mcp_tasks::table::Lookup;
use crate::mcp_tasks::{self, TaskError, TaskEvent, TaskId, TaskOutcome, TaskRefusal, TaskSettings, TaskStore, TaskView};
use crate::protocol::types::LogLevel;
use crate::session::{LimitReached, SessionError, SessionId, SessionRecord, SessionStore, SubscriptionLimits};
use async_trait::async_trait;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// The replicated mailbox. Clones share one view of the mailboxes created here.
#[derive(Clone)]
pub struct RaftMailbox {
    node: Arc<RaftNode>,
    /// Mailboxes created through this store, with the log index of the create, until their
    /// owner's wait settles: the wait (not the create) catches up with the create's application.
    created_here: Arc<Mutex<HashMap<MailboxKey, u64>>>,
    releases: Arc<Mutex<Releases>>,
}

/// Delivered values the owner's wait took, to drop from every replica's state.
#[derive(Default)]
struct Releases {
    /// Keys not proposed yet.
    keys: Vec<MailboxKey>,
    /// A `MailboxRelease` is being gathered or proposed; keys taken meanwhile go in it or the
    /// next one, so one entry releases many values (and at most one such write is in flight).
    proposing: bool,
}

/// How long the keys taken after the first one are gathered before a `MailboxRelease` goes
/// out. A write per elicitation would put another commit on every round trip (on one node, one
/// more fsync); gathered, it is one entry for all the answers taken in the window, and a taken
/// value still leaves every replica within about a second rather than ten minutes.
const RELEASE_WINDOW: Duration = Duration::from_secs(1);

impl RaftMailbox {
    pub fn new(node: Arc<RaftNode>) -> Self {
        RaftMailbox { node, created_here: Arc::default(), releases: Arc::default() }
    }

    /// A wait took the value of `key`: if this node owns the mailbox (its handler is the one
    /// the value was for), have every replica drop the value, keeping the tombstone. In the
    /// background: the handler goes on at once. Not committed (no quorum), the value stays
    /// until the tombstone goes, as before.
    fn release(&self, key: MailboxKey) {
        if !self.node.sm.read(|sm| sm.mailbox(&key).is_some_and(|m| m.owner == self.node.id)) {
            return;
        }
        let mut releases = self.releases.lock().unwrap();
        releases.keys.push(key);
        if std::mem::replace(&mut releases.proposing, true) {
            return;
        }
        drop(releases);
        let store = self.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(RELEASE_WINDOW).await;
                let keys: Vec<MailboxKey> = {
                    let mut releases = store.releases.lock().unwrap();
                    if releases.keys.is_empty() {
                        releases.proposing = false;
                        return;
                    }
                    std::mem::take(&mut releases.keys)
                };
                // All of the window's keys, a bounded entry at a time: one entry a window
                // released at most MAX_RELEASE_BATCH values a second, and an owner taking more
                // fell behind for good (a sustained run's tombstones and RSS grew from minute 4).
                for batch in keys.chunks(MAX_RELEASE_BATCH) {
                    let count = batch.len();
                    if let Err(e) = store.node.propose(Command::MailboxRelease { keys: batch.to_vec() }).await {
                        tracing::debug!(error = %e, count, "release of taken values not committed; they go with their tombstones");
                    }
                }
            }
        });
        self.node.tasks.track(task);
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

    /// Wait until this node and every reachable member have applied `index`. A member that does
    /// not confirm within the election timeout is cut off or down: it learns of the change when
    /// it catches up, and the wait ends without it.
    async fn applied_by_every_member(&self, index: u64, what: &'static str) -> Result<(), SessionError> {
        self.node.wait_applied(index).await?;
        let unconfirmed = self.node.applied_everywhere(index).await;
        if unconfirmed > 0 {
            tracing::warn!(index, unconfirmed, what, "some members did not confirm applying it in time");
        }
        Ok(())
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

    async fn deliver(
        &self,
        key: &MailboxKey,
        session: SessionTag,
        addressee: Option<Addressee>,
        value: Value,
    ) -> Result<DeliverOutcome, MailboxError> {
        let command = Command::MailboxDeliver { key: key.clone(), session, value: JsonText::from(&value), addressee };
        match self.node.propose(command).await?.0 {
            Response::Delivered(outcome) => Ok(outcome),
            other => Err(MailboxError::Unavailable(format!("unexpected reply to deliver: {other:?}").into())),
        }
    }

    async fn wait(&self, key: &MailboxKey, timeout: Duration) -> Result<WaitOutcome, MailboxError> {
        let created = self.created_here.lock().unwrap().get(key).copied();
        // Boxed: a parked call's future makes no room for this catching-up, over by then.
        if let Some(index) = created
            && !self.node.sm.has_applied(index)
            && !Box::pin(self.node.sm.applied_at_least(index, timeout)).await
        {
            return Ok(WaitOutcome::TimedOut);
        }
        let mut rx = match self.node.sm.watch(key) {
            Watch::Settled(outcome) => {
                self.created_here.lock().unwrap().remove(key);
                if matches!(outcome, WaitOutcome::Delivered(_)) {
                    self.release(key.clone());
                }
                return Ok(outcome);
            }
            Watch::Parked(rx) => rx,
        };
        let outcome = match tokio::time::timeout(timeout, &mut rx).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => WaitOutcome::Deleted,
            Err(_) => WaitOutcome::TimedOut,
        };
        drop(rx);
        self.node.sm.unpark(key);
        if outcome != WaitOutcome::TimedOut {
            self.created_here.lock().unwrap().remove(key);
        }
        if matches!(outcome, WaitOutcome::Delivered(_)) {
            self.release(key.clone());
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
    async fn create(&self, record: SessionRecord, max_sessions: usize) -> Result<(), SessionError> {
        // The state machine decides (exactly, in log order); this look at the local replica
        // only spares the log an entry per refused create while the cluster is full. It may be
        // a moment stale: a create it lets through is still refused where it is applied.
        if self.node.sm.read(|sm| sm.sessions.len()) >= max_sessions {
            return Err(LimitReached::Sessions(max_sessions).into());
        }
        let command = Command::SessionCreate { record: Box::new(record), ttl_ms: self.ttl_ms(), max_sessions };
        let (response, index) = self.node.propose(command).await?;
        match response {
            Response::Session(true) => {
                self.node.wait_applied(index).await?;
                Ok(())
            }
            Response::Refused(limit) => Err(limit.into()),
            other => Err(SessionError::Unavailable(format!("unexpected reply to create: {other:?}").into())),
        }
    }

    async fn get(&self, id: &SessionId) -> Result<Option<Arc<SessionRecord>>, SessionError> {
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

    /// Answers once every reachable member has applied the change: the replica that holds the
    /// session's standalone stream checks `resources/updated` against its own state, so an
    /// update published after the answer finds the subscription there.
    async fn set_subscription(
        &self,
        id: &SessionId,
        uri: &str,
        subscribed: bool,
        limits: SubscriptionLimits,
    ) -> Result<bool, SessionError> {
        let command = Command::SessionSubscribe { id: id.clone(), uri: uri.to_string(), subscribed, limits };
        match self.node.propose(command).await? {
            (Response::Session(known), index) => {
                if known {
                    self.applied_by_every_member(index, "subscription changed").await?;
                }
                Ok(known)
            }
            (Response::Refused(limit), _) => Err(limit.into()),
            (other, _) => Err(SessionError::Unavailable(format!("unexpected reply to subscribe: {other:?}").into())),
        }
    }

    /// Answers once every reachable member has applied the delete: a client behind a load
    /// balancer sends its next request to any node, and each must answer 404 by then (`get`
    /// trusts a local hit).
    async fn delete(&self, id: &SessionId) -> Result<bool, SessionError> {
        let (response, index) = self.node.propose(Command::SessionDelete { id: id.clone() }).await?;
        self.applied_by_every_member(index, "session deleted").await?;
        Ok(response == Response::Session(true))
    }
}

/// The replicated task store (Tasks extension): every operation a command through the log, read
/// back on this node before it returns (the next `get` here sees it); `get` linearizable.
#[derive(Clone)]
pub struct RaftTasks {
    node: Arc<RaftNode>,
}

impl RaftTasks {
    pub fn new(node: Arc<RaftNode>) -> Self {
        RaftTasks { node }
    }

    async fn apply(&self, command: Command) -> Result<Vec<String>, TaskError> {
        let (response, index) = self.node.propose(command).await?;
        self.node.wait_applied(index).await?;
        match response {
            Response::Task(outcome) => Ok(outcome?),
            other => Err(TaskError::Unavailable(format!("unexpected reply to a task command: {other:?}").into())),
        }
    }

    /// Fail the live tasks an earlier run of this node owned: their handlers died with it. In
    /// the background, retried until committed (the cluster may still be forming); nothing is
    /// written when the caught-up state has none.
    pub fn fail_earlier_runs(&self) {
        // Held weakly between attempts: a stopped node is not kept alive by this.
        let (node, incarnation) = (Arc::downgrade(&self.node), self.node.incarnation);
        let task = tokio::spawn(async move {
            loop {
                let Some(node) = node.upgrade() else { return };
                // Caught up first: most starts find no such task, and then write nothing.
                if node.linearize().await.is_ok() && node.sm.read(|sm| sm.tasks.live_of_earlier_runs(node.id, incarnation)) == 0 {
                    return;
                }
                let command = Command::TaskOwnerLost { node: node.id, survivor: Some(incarnation) };
                match node.propose(command).await {
                    Ok((Response::TasksFailed(n), _)) => {
                        if n > 0 {
                            tracing::warn!(failed = n, "tasks of this node's earlier run failed: their handlers are gone");
                        }
                        return;
                    }
                    Ok(_) => return,
                    Err(e) => tracing::debug!(error = %e, "failing the tasks of an earlier run not committed yet; retrying"),
                }
                drop(node);
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        self.node.tasks.track(task);
    }
}

#[async_trait]
impl TaskStore for RaftTasks {
    async fn create(&self, id: TaskId, owner: NodeId, settings: TaskSettings) -> Result<(), TaskError> {
        let command = Command::TaskCreate {
            id,
            owner,
            incarnation: self.node.incarnation,
            ttl_ms: mcp_tasks::millis(settings.ttl),
            poll_ms: mcp_tasks::millis(settings.poll_interval),
            max_tasks: settings.max_tasks,
        };
        self.apply(command).await.map(drop)
    }

    async fn ask(&self, id: TaskId, requests: Vec<(String, Value)>) -> Result<(), TaskError> {
        self.apply(Command::TaskAsk { id, requests: mcp_tasks::json_texts(requests) }).await.map(drop)
    }

    async fn answer(&self, id: TaskId, responses: Vec<(String, Value)>) -> Result<Vec<String>, TaskError> {
        self.apply(Command::TaskAnswer { id, responses: mcp_tasks::json_texts(responses) }).await
    }

    async fn cancel(&self, id: TaskId) -> Result<(), TaskError> {
        self.apply(Command::TaskCancel { id }).await.map(drop)
    }

    async fn finish(&self, id: TaskId, outcome: TaskOutcome) -> Result<(), TaskError> {
        self.apply(Command::TaskFinish { id, outcome }).await.map(drop)
    }

    async fn get(&self, id: TaskId) -> Result<TaskView, TaskError> {
        // Every change committed before the call, whichever node made it.
        self.node.linearize().await?;
        self.node.sm.read(|sm| match sm.tasks.get(&id) {
            Lookup::Found(record) => Ok(TaskView { id, record: record.clone() }),
            Lookup::Expired => Err(TaskRefusal::Expired.into()),
            Lookup::NotFound => Err(TaskRefusal::NotFound.into()),
        })
    }

    fn subscribe(&self, id: TaskId) -> mpsc::UnboundedReceiver<TaskEvent> {
        self.node.sm.own_task(id)
    }
}
