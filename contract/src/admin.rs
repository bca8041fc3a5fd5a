//! The admin API on the peer port (JSON; every request carries `Authorization: Bearer <cluster
//! secret>`).
//!
//! | call | body | answer |
//! | --- | --- | --- |
//! | `GET` [`STATUS`] | none | [`ClusterStatus`] |
//! | `GET` [`DIGEST`] | none | [`StateDigest`] (the fault campaign compares replicas with it) |
//! | `POST` [`LEARNERS`] | [`MemberRequest`] with `addr` | the node is added as a learner |
//! | `POST` [`PROMOTE`] | [`MemberRequest`] | a learner at most [`PROMOTE_MAX_LAG`] behind becomes a voter |
//! | `POST` [`REMOVE`] | [`MemberRequest`] | the member leaves the Raft group |
//! | `POST` [`JOIN`] | [`MemberRequest`] with `addr` | learner, caught up, then voter |
//! | `POST` [`TRANSFER_LEADERSHIP`] | [`MemberRequest`] | the leader hands leadership to that healthy voter |
//!
//! Membership calls reaching a follower are forwarded to the leader.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// `GET`: the answering node's [`ClusterStatus`].
pub const STATUS: &str = "/admin/status";
/// `POST` [`MemberRequest`] `{id, addr}`: add a learner.
pub const LEARNERS: &str = "/admin/learners";
/// `POST` [`MemberRequest`] `{id}`: make a caught-up learner a voter.
pub const PROMOTE: &str = "/admin/promote";
/// `POST` [`MemberRequest`] `{id}`: remove a member.
pub const REMOVE: &str = "/admin/remove";
/// `POST` [`MemberRequest`] `{id, addr}`: add a learner, wait until it has caught up, promote it.
pub const JOIN: &str = "/admin/join";
/// `POST` [`MemberRequest`] `{id}`: the leader hands leadership to voter `id` (healthy, see
/// [`ClusterStatus::health`]) and answers once `id` leads.
pub const TRANSFER_LEADERSHIP: &str = "/admin/transfer-leadership";

/// `GET`: the answering node's [`StateDigest`].
pub const DIGEST: &str = "/admin/digest";

/// A digest of a replica's replicated state at its last applied index: replicas that applied
/// the same log agree on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateDigest {
    pub node_id: u64,
    pub applied_index: u64,
    /// SHA-256 of the state in a canonical order, hex.
    pub digest: String,
}

/// A learner is promoted only once it is at most this many entries behind the leader: the node
/// refuses a promotion beyond it, and the operator waits for it.
pub const PROMOTE_MAX_LAG: u64 = 100;

/// How long a member may go without acknowledging the leader and still count as healthy, when
/// the status does not say ([`ClusterStatus::silent_after_ms`] is 0: a node from before it did).
pub const DEFAULT_SILENT_AFTER_MS: u64 = 1_000;

/// A replica's view of the cluster, served as JSON by the admin API.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// The node that answered.
    pub node_id: u64,
    /// Its Raft state (`Leader`, `Follower`, `Candidate`, `Learner`, ...).
    pub state: String,
    /// The leader it knows, if any.
    pub leader: Option<u64>,
    pub term: u64,
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    /// Member id → peer address.
    pub members: BTreeMap<u64, String>,
    pub last_log_index: Option<u64>,
    pub committed_index: Option<u64>,
    pub last_applied_index: Option<u64>,
    /// Leader only: entries each member is behind the leader's log.
    pub replication_lag: BTreeMap<u64, u64>,
    /// Leader only: milliseconds since each member last acknowledged the leader (a heartbeat or
    /// an append). An idle cluster keeps a dead member's lag at 0; this tells it apart. Absent
    /// for a member never heard from.
    #[serde(default)]
    pub last_contact_ms: BTreeMap<u64, u64>,
    /// Leader only: a member silent for longer than this counts as down (the leader's election
    /// timeout: the silence after which a follower would call an election itself).
    #[serde(default)]
    pub silent_after_ms: u64,
    /// Members whose pod is not ready, as the operator sees them (nodes leave this empty): not
    /// counted as healthy whatever the leader last heard.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub not_ready: BTreeSet<u64>,
    pub pending_mailboxes: usize,
    pub sessions: usize,
}

impl ClusterStatus {
    /// `id` is a voter or a learner.
    pub fn is_member(&self, id: u64) -> bool {
        self.voters.contains(&id) || self.learners.contains(&id)
    }

    /// `id` leads, or is known (from the leader's lag) to be at most [`PROMOTE_MAX_LAG`] behind.
    pub fn caught_up(&self, id: u64) -> bool {
        self.leader == Some(id) || self.replication_lag.get(&id).is_some_and(|lag| *lag <= PROMOTE_MAX_LAG)
    }

    /// Whether `id` can be counted on to vote, and if not why: the leader is; any other member
    /// must be caught up *and* have acknowledged the leader recently. Lag alone is not enough:
    /// on an idle cluster a crashed follower keeps lag 0.
    pub fn health(&self, id: u64) -> Result<(), String> {
        if self.leader == Some(id) {
            return Ok(());
        }
        if self.not_ready.contains(&id) {
            return Err(format!("member {id}: pod not ready"));
        }
        let silent_after = if self.silent_after_ms == 0 { DEFAULT_SILENT_AFTER_MS } else { self.silent_after_ms };
        match (self.replication_lag.get(&id), self.last_contact_ms.get(&id)) {
            (None, _) => Err(format!("member {id}: no replication progress known")),
            (Some(lag), _) if *lag > PROMOTE_MAX_LAG => Err(format!("member {id}: {lag} entries behind")),
            (Some(_), None) => Err(format!("member {id}: never heard from")),
            (Some(_), Some(ms)) if *ms > silent_after => Err(format!("member {id}: last heard {ms} ms ago")),
            (Some(_), Some(_)) => Ok(()),
        }
    }

    /// Why changing the voters from the current ones to `after` must not happen now, if it must
    /// not. Raft passes through the joint configuration, whose every commit needs a majority of
    /// the old voters and one of the new: refused unless each has that many healthy members
    /// ([`Self::health`]). Used by the operator's planner and by the node's admin API alike.
    pub fn voter_change_refusal(&self, after: &BTreeSet<u64>) -> Option<String> {
        if after.is_empty() {
            return Some("no voter would be left".into());
        }
        let before: BTreeSet<u64> = self.voters.iter().copied().collect();
        for (voters, which) in [(&before, "current"), (after, "new")] {
            let unhealthy: Vec<String> = voters.iter().filter_map(|id| self.health(*id).err()).collect();
            let healthy = voters.len() - unhealthy.len();
            let majority = voters.len() / 2 + 1;
            if healthy < majority {
                return Some(format!(
                    "the {which} voters {voters:?} would have {healthy} healthy, and a majority needs {majority} ({})",
                    unhealthy.join("; ")
                ));
            }
        }
        None
    }
}

/// Body of [`LEARNERS`], [`PROMOTE`], [`REMOVE`] and [`JOIN`]: the member, and for the calls that
/// add one, its peer address (`host:port`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRequest {
    pub id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
}

impl MemberRequest {
    /// A call about an existing member (promote, remove).
    pub fn member(id: u64) -> Self {
        Self { id, addr: None }
    }

    /// A call that adds a member reachable at `addr` (learners, join).
    pub fn new_member(id: u64, addr: impl Into<String>) -> Self {
        Self { id, addr: Some(addr.into()) }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// What a node's `GET /admin/status` answers (a three-node cluster, asked of the leader).
    fn served() -> serde_json::Value {
        json!({
            "node_id": 0, "state": "Leader", "leader": 0, "term": 3,
            "voters": [0, 1, 2], "learners": [3],
            "members": {"0": "a:7070", "1": "b:7070", "2": "c:7070", "3": "d:7070"},
            "last_log_index": 42, "committed_index": 42, "last_applied_index": 41,
            "replication_lag": {"0": 0, "1": 0, "2": 7, "3": 500},
            "last_contact_ms": {"1": 40, "2": 60},
            "silent_after_ms": 1000,
            "pending_mailboxes": 2, "sessions": 5
        })
    }

    #[test]
    fn a_status_from_a_node_without_last_contact_still_reads() {
        let mut older = served();
        older.as_object_mut().unwrap().remove("last_contact_ms");
        let status: ClusterStatus = serde_json::from_value(older).unwrap();
        assert!(status.last_contact_ms.is_empty());
    }

    #[test]
    fn the_status_a_node_serves_round_trips() {
        let status: ClusterStatus = serde_json::from_value(served()).unwrap();
        assert_eq!(status.leader, Some(0));
        assert_eq!(status.members[&3], "d:7070");
        assert_eq!(status.replication_lag[&3], 500);
        assert_eq!(serde_json::to_value(&status).unwrap(), served());
    }

    #[test]
    fn a_follower_knows_no_lag_and_maybe_no_leader() {
        let mut follower = served();
        follower["node_id"] = json!(1);
        follower["leader"] = json!(null);
        follower["replication_lag"] = json!({});
        follower["last_log_index"] = json!(null);
        let status: ClusterStatus = serde_json::from_value(follower).unwrap();
        assert_eq!((status.leader, status.last_log_index), (None, None));
        assert!(!status.caught_up(0) && !status.caught_up(1));
    }

    #[test]
    fn members_and_caught_up() {
        let status: ClusterStatus = serde_json::from_value(served()).unwrap();
        assert!(status.is_member(2) && status.is_member(3) && !status.is_member(4));
        assert!(status.caught_up(0), "the leader");
        assert!(status.caught_up(2), "7 behind");
        assert!(!status.caught_up(3), "500 behind");
        assert!(!status.caught_up(4), "unknown");
        let mut at_limit = status.clone();
        at_limit.replication_lag.insert(3, PROMOTE_MAX_LAG);
        assert!(at_limit.caught_up(3));
        at_limit.replication_lag.insert(3, PROMOTE_MAX_LAG + 1);
        assert!(!at_limit.caught_up(3));
    }

    #[test]
    fn a_member_is_healthy_when_caught_up_and_recently_heard() {
        let status: ClusterStatus = serde_json::from_value(served()).unwrap();
        assert_eq!(status.health(0), Ok(()), "the leader");
        assert_eq!(status.health(1), Ok(()));
        assert_eq!(status.health(3), Err("member 3: 500 entries behind".into()));
        assert_eq!(status.health(4), Err("member 4: no replication progress known".into()));
        // Idle and dead: lag 0, but silent for longer than the leader's election timeout.
        let mut dead = status.clone();
        dead.last_contact_ms.insert(1, 4_200);
        assert_eq!(dead.health(1), Err("member 1: last heard 4200 ms ago".into()));
        dead.last_contact_ms.remove(&1);
        assert_eq!(dead.health(1), Err("member 1: never heard from".into()));
        // A member whose pod is not ready does not count, however recently it was heard.
        let mut unready = status.clone();
        unready.not_ready.insert(1);
        assert_eq!(unready.health(1), Err("member 1: pod not ready".into()));
        // A status without the threshold falls back to the default.
        let mut older = status.clone();
        older.silent_after_ms = 0;
        older.last_contact_ms.insert(1, DEFAULT_SILENT_AFTER_MS + 1);
        assert!(older.health(1).is_err());
        older.last_contact_ms.insert(1, DEFAULT_SILENT_AFTER_MS);
        assert_eq!(older.health(1), Ok(()));
    }

    #[test]
    fn a_voter_change_needs_a_healthy_majority_of_the_old_and_the_new_voters() {
        let mut status: ClusterStatus = serde_json::from_value(served()).unwrap();
        let set = |ids: &[u64]| ids.iter().copied().collect::<BTreeSet<u64>>();
        assert_eq!(status.voter_change_refusal(&set(&[0, 1])), None);
        // The worked case: three idle voters, 1 dead; removing 2 leaves {0, 1} with one healthy.
        status.last_contact_ms.insert(1, 60_000);
        let refusal = status.voter_change_refusal(&set(&[0, 1])).unwrap();
        assert_eq!(refusal, "the new voters {0, 1} would have 1 healthy, and a majority needs 2 (member 1: last heard 60000 ms ago)");
        // Removing the dead member instead is fine: {0, 2} are both healthy.
        assert_eq!(status.voter_change_refusal(&set(&[0, 2])), None);
        // Four voters, two of them down: the current configuration has no healthy majority.
        status.voters = vec![0, 1, 2, 3];
        status.replication_lag.insert(3, 0);
        status.last_contact_ms.insert(3, 9_000);
        let refusal = status.voter_change_refusal(&set(&[0, 2, 3])).unwrap();
        assert!(refusal.starts_with("the current voters {0, 1, 2, 3} would have 2 healthy, and a majority needs 3"), "{refusal}");
        assert_eq!(status.voter_change_refusal(&BTreeSet::new()).as_deref(), Some("no voter would be left"));
    }

    #[test]
    fn member_requests_carry_an_address_only_when_adding() {
        assert_eq!(serde_json::to_value(MemberRequest::member(3)).unwrap(), json!({"id": 3}));
        assert_eq!(serde_json::to_value(MemberRequest::new_member(3, "d:7070")).unwrap(), json!({"id": 3, "addr": "d:7070"}));
        assert_eq!(serde_json::from_value::<MemberRequest>(json!({"id": 4})).unwrap(), MemberRequest::member(4));
        assert_eq!(serde_json::from_value::<MemberRequest>(json!({"id": 4, "addr": "e:1"})).unwrap(), MemberRequest::new_member(4, "e:1"));
    }

    #[test]
    fn paths() {
        for path in [STATUS, DIGEST, LEARNERS, PROMOTE, REMOVE, JOIN, TRANSFER_LEADERSHIP] {
            assert!(path.starts_with("/admin/"), "{path}");
        }
    }
}
