//! Who is in the cluster: bootstrapping or joining on start, the replica's view of the group,
//! and the membership changes the admin API and the operator drive (learner, promote, remove).

use super::RaftNode;
use super::config::Membership;
use super::error::RaftStoreError;
use crate::mailbox::NodeId;
use crate::peer::routes::{JOIN, STATUS};
use openraft::Instant as _;
use openraft::async_runtime::WatchReceiver;
use openraft::errors::RaftError;
use openraft::{BasicNode, ChangeMembers, ServerState};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
pub use switchboard_contract::admin::ClusterStatus;
use switchboard_contract::admin::MemberRequest;

impl RaftNode {
    /// Bootstrap or join, according to the configured membership. Idempotent across restarts.
    pub async fn join_cluster(self: &Arc<Self>) -> Result<(), RaftStoreError> {
        if self.raft.is_initialized().await.map_err(|e| RaftStoreError::Fatal(Box::new(e)))? {
            return Ok(());
        }
        let me = (self.id, self.config.advertise.clone());
        match &self.config.membership {
            Membership::Single => self.initialize(BTreeMap::from([me])).await,
            Membership::Peers(peers) => {
                if !peers.contains_key(&self.id) {
                    tracing::info!("not a founding member: waiting to be added as a learner");
                    return Ok(());
                }
                if peers.keys().next() != Some(&self.id) {
                    return Ok(()); // the lowest id bootstraps; the others are contacted by it
                }
                // A replaced first node (empty disk) must not found a second cluster.
                for (id, addr) in peers.iter().filter(|(id, _)| **id != self.id) {
                    if let Ok(status) = self.client.admin::<ClusterStatus>(addr, STATUS, None).await
                        && !status.voters.is_empty()
                    {
                        tracing::info!(peer = id, "cluster already formed; joining it");
                        return self.join_via(addr).await;
                    }
                }
                self.initialize(peers.clone()).await
            }
            Membership::Join(addr) => self.join_via(addr).await,
        }
    }

    async fn initialize(&self, members: BTreeMap<NodeId, String>) -> Result<(), RaftStoreError> {
        let nodes: BTreeMap<NodeId, BasicNode> = members.into_iter().map(|(id, addr)| (id, BasicNode::new(addr))).collect();
        tracing::info!(members = ?nodes.keys().collect::<Vec<_>>(), "bootstrapping the cluster");
        match self.raft.initialize(nodes).await {
            Ok(()) => Ok(()),
            // Someone initialized it first (or we did before a restart): fine.
            Err(RaftError::APIError(openraft::errors::InitializeError::NotAllowed(_))) => Ok(()),
            Err(e) => Err(RaftStoreError::Membership(Box::new(e))),
        }
    }

    /// Ask a member to add this node (as a learner, then a voter once caught up). Retries until
    /// the cluster answers.
    async fn join_via(&self, addr: &str) -> Result<(), RaftStoreError> {
        let body = serde_json::to_value(MemberRequest::new_member(self.id, self.config.advertise.clone())).expect("serializes");
        let mut backoff = Duration::from_millis(100);
        loop {
            match self.client.admin::<Value>(addr, JOIN, Some(&body)).await {
                Ok(_) => return Ok(()),
                Err(e) => {
                    tracing::warn!(error = %e, "join through {addr} failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        }
    }

    pub fn status(&self) -> ClusterStatus {
        let m = self.raft.metrics().borrow_watched().clone();
        let membership = m.membership_config.membership();
        let voters: Vec<NodeId> = membership.voter_ids().collect();
        let learners: Vec<NodeId> = membership.learner_ids().collect();
        let members = membership.nodes().map(|(id, n)| (*id, n.addr.clone())).collect();
        let last = m.last_log_index.unwrap_or(0);
        let replication_lag = m
            .replication
            .as_ref()
            .map(|r| r.iter().map(|(id, matched)| (*id, last.saturating_sub(matched.map(|l| l.index).unwrap_or(0)))).collect())
            .unwrap_or_default();
        let last_contact_ms = m
            .heartbeat
            .as_ref()
            .map(|acked| acked.iter().filter_map(|(id, at)| Some((*id, at.as_ref()?.into_inner().elapsed().as_millis() as u64))).collect())
            .unwrap_or_default();
        let (pending_mailboxes, sessions) = self.sm.read(|sm| (sm.pending_mailboxes(), sm.sessions.len()));
        ClusterStatus {
            node_id: self.id,
            state: format!("{:?}", m.state),
            leader: m.current_leader,
            term: m.current_term,
            voters,
            learners,
            members,
            last_log_index: m.last_log_index,
            committed_index: m.local_committed.map(|id| id.index),
            last_applied_index: m.last_applied.map(|id| id.index),
            replication_lag,
            last_contact_ms,
            silent_after_ms: self.config.election_timeout.as_millis() as u64,
            // The operator's to fill from pod readiness.
            not_ready: BTreeSet::new(),
            pending_mailboxes,
            sessions,
        }
    }

    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow_watched().state == ServerState::Leader
    }

    /// Add a learner (leader only; followers are told who leads).
    pub async fn add_learner(&self, id: NodeId, addr: String, blocking: bool) -> Result<(), RaftStoreError> {
        self.raft.add_learner(id, BasicNode::new(addr), blocking).await.map(|_| ()).map_err(|e| RaftStoreError::Membership(Box::new(e)))
    }

    /// Make a caught-up learner a voter. Refused while it lags more than `max_lag` entries.
    pub async fn promote(&self, id: NodeId, max_lag: u64) -> Result<(), RaftStoreError> {
        let status = self.status();
        if !status.learners.contains(&id) && !status.voters.contains(&id) {
            return Err(RaftStoreError::Membership(format!("node {id} is not a member; add it as a learner first").into()));
        }
        if status.voters.contains(&id) {
            return Ok(());
        }
        match status.replication_lag.get(&id) {
            Some(lag) if *lag <= max_lag => {}
            Some(lag) => return Err(RaftStoreError::Membership(format!("node {id} is not caught up: {lag} entries behind").into())),
            None => return Err(RaftStoreError::Membership(format!("node {id} has no replication progress yet").into())),
        }
        self.raft
            .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
            .await
            .map(|_| ())
            .map_err(|e| RaftStoreError::Membership(Box::new(e)))
    }

    /// Hand leadership to voter `to` and return once it leads. Refused unless `to` is a healthy
    /// voter; [`RaftStoreError::Unavailable`] when it has not taken over within three election
    /// timeouts (it starts its election at once; the wait covers a slow vote).
    pub async fn transfer_leadership(&self, to: NodeId) -> Result<(), RaftStoreError> {
        let within = 3 * self.config.election_timeout;
        let status = self.status();
        if status.leader == Some(to) {
            return Ok(());
        }
        if !status.voters.contains(&to) {
            return Err(RaftStoreError::Membership(format!("node {to} is not a voter").into()));
        }
        if let Err(why) = status.health(to) {
            return Err(RaftStoreError::Membership(format!("cannot hand leadership over: {why}").into()));
        }
        tracing::info!(to, "handing Raft leadership over");
        self.raft.trigger().transfer_leader(to).await.map_err(|e| RaftStoreError::Fatal(Box::new(e)))?;
        self.raft
            .wait(Some(within))
            .current_leader(to, "leadership hand-off")
            .await
            .map(|_| ())
            .map_err(|_| RaftStoreError::Unavailable(format!("node {to} did not take over leadership within {within:?}")))
    }

    /// The voter this leader would hand over to when it stops: healthy, least behind, lowest id
    /// on a tie. `None` when this node does not lead or no other voter is healthy.
    pub fn successor(&self) -> Option<NodeId> {
        let status = self.status();
        if status.leader != Some(self.id) {
            return None;
        }
        status
            .voters
            .iter()
            .copied()
            .filter(|v| *v != self.id && status.health(*v).is_ok())
            .min_by_key(|v| (status.replication_lag.get(v).copied().unwrap_or(u64::MAX), *v))
    }

    /// Remove a member (voter or learner). Never removes the last voter, nor a voter whose
    /// removal would leave the old or the new voters without a healthy majority (the joint
    /// configuration would block every later write: one tolerated failure turned into an outage).
    pub async fn remove(&self, id: NodeId) -> Result<(), RaftStoreError> {
        let status = self.status();
        let change = if status.voters.contains(&id) {
            if status.voters.len() == 1 {
                return Err(RaftStoreError::Membership(format!("node {id} is the last voter").into()));
            }
            let after: BTreeSet<NodeId> = status.voters.iter().copied().filter(|v| *v != id).collect();
            if let Some(why) = status.voter_change_refusal(&after) {
                return Err(RaftStoreError::Membership(format!("removing node {id} is unsafe: {why}").into()));
            }
            ChangeMembers::RemoveVoters(BTreeSet::from([id]))
        } else if status.learners.contains(&id) {
            ChangeMembers::RemoveNodes(BTreeSet::from([id]))
        } else {
            return Ok(());
        };
        self.raft.change_membership(change, false).await.map(|_| ()).map_err(|e| RaftStoreError::Membership(Box::new(e)))
    }
}
