//! Raft membership on scale, through the node admin API on the peer port.
//!
//! [`plan`] is pure: from the desired replicas, the StatefulSet's current replicas and the
//! cluster status the leader reports, it picks how many pods the StatefulSet may have now and
//! at most one membership call:
//!
//! - scale-up: the StatefulSet grows at once; each new ordinal is added as a learner (lowest
//!   first), then promoted to voter once its replication lag is at most
//!   [`PROMOTE_MAX_LAG`](admin::PROMOTE_MAX_LAG);
//! - scale-down: members at or above the new size are removed highest first, and the
//!   StatefulSet shrinks only below ordinals that are no longer members, so a pod never goes
//!   while its node still votes;
//! - a voter change that would leave the old or the new voters without a healthy majority
//!   ([`ClusterStatus::voter_change_refusal`]: caught up *and* recently heard from, so a dead
//!   member of an idle cluster does not count) is refused, with the reason (surfaced as a
//!   condition and a Warning event), and nothing is done until that changes. The node's admin
//!   API refuses such a removal too.
//!
//! [`execute`] carries the chosen call out through an [`AdminApi`]: [`HttpAdmin`] talks to
//! real nodes (`Authorization: Bearer <cluster secret>`), tests use a recorded fake.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;
use switchboard_contract::admin::{self, ClusterStatus, MemberRequest};

use crate::crd::{Member, MemberRole};
use crate::{Error, Note, Result};

/// One membership call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// `POST` [`admin::LEARNERS`] `{id, addr}`.
    AddLearner { id: u64 },
    /// `POST` [`admin::PROMOTE`] `{id}`.
    Promote { id: u64 },
    /// `POST` [`admin::REMOVE`] `{id}`.
    Remove { id: u64 },
}

impl Step {
    /// The step's name in metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Step::AddLearner { .. } => "add_learner",
            Step::Promote { .. } => "promote",
            Step::Remove { .. } => "remove",
        }
    }

    /// The member the step is about.
    pub fn id(&self) -> u64 {
        match self {
            Step::AddLearner { id } | Step::Promote { id } | Step::Remove { id } => *id,
        }
    }
}

/// The next safe step towards `desired` members.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Pods the StatefulSet may have now.
    pub statefulset_replicas: i32,
    /// The membership call to make now, if any.
    pub step: Option<Step>,
    /// Why nothing is done although the cluster is not at `desired` (waiting or refused).
    pub refusal: Option<String>,
    /// Progress note when waiting for something expected (a learner catching up).
    pub waiting: Option<String>,
}

/// Decide the next step. `current` is the StatefulSet's replicas; `status` comes from the leader
/// (or any member when no leader is known, in which case nothing is changed).
pub fn plan(desired: i32, current: i32, status: &ClusterStatus) -> Plan {
    let desired_ids: u64 = desired.max(1) as u64;
    let mut plan = Plan { statefulset_replicas: current, step: None, refusal: None, waiting: None };
    if status.leader.is_none() {
        if desired != current {
            plan.waiting = Some(format!("no Raft leader known; holding {current} pods"));
        }
        return plan;
    }
    let voters: BTreeSet<u64> = status.voters.iter().copied().collect();

    // Members that must go: every ordinal at or above the new size, highest first.
    let mut leaving: Vec<u64> = status.voters.iter().chain(&status.learners).copied().filter(|id| *id >= desired_ids).collect();
    leaving.sort_unstable();
    leaving.dedup();
    if let Some(&highest) = leaving.last() {
        // Pods above the highest remaining member can go already.
        plan.statefulset_replicas = desired.max(highest as i32 + 1).min(current.max(desired));
        if voters.contains(&highest) {
            let after: BTreeSet<u64> = voters.iter().copied().filter(|id| *id != highest).collect();
            if after.is_empty() {
                plan.refusal = Some(format!("member {highest} is the last voter; it cannot be removed"));
            } else if let Some(why) = status.voter_change_refusal(&after) {
                plan.refusal = Some(format!("removing member {highest} is unsafe: {why}"));
            } else {
                plan.step = Some(Step::Remove { id: highest });
            }
        } else {
            plan.step = Some(Step::Remove { id: highest });
        }
        return plan;
    }

    // Nothing to remove: the StatefulSet may have every desired pod.
    plan.statefulset_replicas = desired;
    // New ordinals join as learners, lowest first.
    if let Some(id) = (0..desired_ids).find(|id| !status.is_member(*id)) {
        plan.step = Some(Step::AddLearner { id });
        return plan;
    }
    // Learners become voters once caught up, lowest first.
    if let Some(&id) = status.learners.iter().filter(|id| **id < desired_ids).min() {
        if let Err(why) = status.health(id) {
            plan.waiting = Some(format!("waiting for {why}"));
            return plan;
        }
        let mut after = voters.clone();
        after.insert(id);
        if let Some(why) = status.voter_change_refusal(&after) {
            plan.refusal = Some(format!("promoting member {id} is unsafe: {why}"));
        } else {
            plan.step = Some(Step::Promote { id });
        }
    }
    plan
}

impl Plan {
    /// Nothing more to do or wait for.
    pub fn is_done(&self) -> bool {
        self.step.is_none() && self.refusal.is_none() && self.waiting.is_none()
    }
}

/// The node admin API (port 7070, `Authorization: Bearer <cluster secret>`).
#[async_trait::async_trait]
pub trait AdminApi: Send + Sync {
    /// `GET` [`admin::STATUS`] of the node at `addr`.
    async fn status(&self, addr: &str, secret: &str) -> Result<ClusterStatus>;
    /// `POST` [`admin::LEARNERS`] `{id, addr}` through the node at `addr` (forwarded to the leader).
    async fn add_learner(&self, addr: &str, secret: &str, id: u64, member_addr: &str) -> Result<()>;
    /// `POST` [`admin::PROMOTE`] `{id}`.
    async fn promote(&self, addr: &str, secret: &str, id: u64) -> Result<()>;
    /// `POST` [`admin::REMOVE`] `{id}`.
    async fn remove(&self, addr: &str, secret: &str, id: u64) -> Result<()>;
}

/// The status as the leader sees it (only the leader knows replication lag and who it hears
/// from): every member is asked at once (a dead one costs one timeout, not one per member in
/// turn); the leader's own answer wins, else the leader named by the answers is asked.
pub async fn observe(admin: &dyn AdminApi, addresses: &[(u64, String)], secret: &str) -> Result<ClusterStatus> {
    let answers = futures::future::join_all(addresses.iter().map(|(_, addr)| admin.status(addr, secret))).await;
    let mut last_error = Error::Admin("no member addresses".into());
    let mut views = Vec::new();
    for answer in answers {
        match answer {
            Ok(status) => views.push(status),
            Err(e) => last_error = e,
        }
    }
    if let Some(own) = views.iter().position(|s| s.leader == Some(s.node_id)) {
        return Ok(views.swap_remove(own));
    }
    // Followers only: ask the leader they name (it may not be among the addresses, or it
    // answered late), else keep a follower's view.
    let Some(first) = views.into_iter().max_by_key(|s| (s.leader.is_some(), s.term)) else { return Err(last_error) };
    match first.leader.and_then(|l| first.members.get(&l).cloned()) {
        Some(addr) => Ok(admin.status(&addr, secret).await.unwrap_or(first)),
        None => Ok(first),
    }
}

/// Carry out the plan's step through the leader (or any member, which forwards it). Returns a
/// note of what was done or is waited for.
pub async fn execute(
    admin: &dyn AdminApi,
    plan: &Plan,
    status: &ClusterStatus,
    addresses: &[(u64, String)],
    secret: &str,
) -> Result<Option<Note>> {
    let via = status.leader.and_then(|l| status.members.get(&l).cloned()).or_else(|| addresses.first().map(|(_, a)| a.clone()));
    let Some(via) = via else { return Ok(None) };
    let address_of = |id: u64| addresses.iter().find(|(i, _)| *i == id).map(|(_, a)| a.clone());
    match &plan.step {
        Some(Step::AddLearner { id }) => {
            let member_addr = address_of(*id).ok_or_else(|| Error::Admin(format!("no address for member {id}")))?;
            admin.add_learner(&via, secret, *id, &member_addr).await?;
            Ok(Some(Note::new("MemberAdded", format!("added member {id} as a learner"))))
        }
        Some(Step::Promote { id }) => {
            admin.promote(&via, secret, *id).await?;
            Ok(Some(Note::new("MemberPromoted", format!("member {id} caught up and now votes"))))
        }
        Some(Step::Remove { id }) => {
            admin.remove(&via, secret, *id).await?;
            Ok(Some(Note::new("MemberRemoved", format!("removed member {id} from the Raft group before its pod goes"))))
        }
        None => Ok(plan.waiting.clone().map(|w| Note::new("Waiting", w))),
    }
}

/// Status `members` from the cluster status.
pub fn members(status: &ClusterStatus, name: &str) -> Vec<Member> {
    let mut out: Vec<Member> = status
        .voters
        .iter()
        .map(|id| (*id, MemberRole::Voter))
        .chain(status.learners.iter().map(|id| (*id, MemberRole::Learner)))
        .map(|(id, role)| Member { id, pod: format!("{name}-{id}"), role })
        .collect();
    out.sort_by_key(|m| m.id);
    out.dedup_by_key(|m| m.id);
    out
}

/// [`AdminApi`] over HTTP.
pub struct HttpAdmin {
    client: reqwest::Client,
}

impl HttpAdmin {
    pub fn new(timeout: Duration) -> Result<Self> {
        let client = reqwest::Client::builder().timeout(timeout).build().map_err(|e| Error::Admin(e.to_string()))?;
        Ok(Self { client })
    }

    async fn post(&self, addr: &str, secret: &str, path: &str, body: &impl Serialize) -> Result<()> {
        let url = format!("http://{addr}{path}");
        let response =
            self.client.post(&url).bearer_auth(secret).json(body).send().await.map_err(|e| Error::Admin(format!("{url}: {e}")))?;
        let status = response.status();
        if status.is_success() {
            return Ok(());
        }
        let text = response.text().await.unwrap_or_default();
        Err(Error::Admin(format!("{url}: {status}: {text}")))
    }
}

#[async_trait::async_trait]
impl AdminApi for HttpAdmin {
    async fn status(&self, addr: &str, secret: &str) -> Result<ClusterStatus> {
        let url = format!("http://{addr}{}", admin::STATUS);
        let response = self.client.get(&url).bearer_auth(secret).send().await.map_err(|e| Error::Admin(format!("{url}: {e}")))?;
        if !response.status().is_success() {
            return Err(Error::Admin(format!("{url}: {}", response.status())));
        }
        response.json().await.map_err(|e| Error::Admin(format!("{url}: {e}")))
    }

    async fn add_learner(&self, addr: &str, secret: &str, id: u64, member_addr: &str) -> Result<()> {
        self.post(addr, secret, admin::LEARNERS, &MemberRequest::new_member(id, member_addr)).await
    }

    async fn promote(&self, addr: &str, secret: &str, id: u64) -> Result<()> {
        self.post(addr, secret, admin::PROMOTE, &MemberRequest::member(id)).await
    }

    async fn remove(&self, addr: &str, secret: &str, id: u64) -> Result<()> {
        self.post(addr, secret, admin::REMOVE, &MemberRequest::member(id)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Node 0 leading; every member with a lag was heard from 50 ms ago.
    fn cluster(voters: &[u64], learners: &[u64], lag: &[(u64, u64)]) -> ClusterStatus {
        ClusterStatus {
            node_id: 0,
            leader: Some(0),
            voters: voters.to_vec(),
            learners: learners.to_vec(),
            members: voters.iter().chain(learners).map(|id| (*id, format!("n{id}:7070"))).collect(),
            replication_lag: lag.iter().copied().collect(),
            last_contact_ms: lag.iter().map(|(id, _)| (*id, 50)).collect(),
            silent_after_ms: 1_000,
            ..ClusterStatus::default()
        }
    }

    fn caught_up(ids: &[u64]) -> Vec<(u64, u64)> {
        ids.iter().map(|id| (*id, 0)).collect()
    }

    #[test]
    fn a_cluster_at_its_size_needs_nothing() {
        let plan = plan(3, 3, &cluster(&[0, 1, 2], &[], &caught_up(&[0, 1, 2])));
        assert_eq!(plan, Plan { statefulset_replicas: 3, step: None, refusal: None, waiting: None });
        assert!(plan.is_done());
    }

    #[test]
    fn scale_up_grows_the_statefulset_and_adds_the_lowest_new_ordinal_as_a_learner() {
        let plan = plan(5, 3, &cluster(&[0, 1, 2], &[], &caught_up(&[0, 1, 2])));
        assert_eq!(plan.statefulset_replicas, 5);
        assert_eq!(plan.step, Some(Step::AddLearner { id: 3 }));
    }

    #[test]
    fn caught_up_learners_are_promoted_lowest_first() {
        let plan = plan(5, 5, &cluster(&[0, 1, 2], &[3, 4], &caught_up(&[0, 1, 2, 3, 4])));
        assert_eq!(plan.step, Some(Step::Promote { id: 3 }));
    }

    #[test]
    fn a_lagging_learner_is_waited_for() {
        let plan = plan(4, 4, &cluster(&[0, 1, 2], &[3], &[(0, 0), (1, 0), (2, 0), (3, 5000)]));
        assert_eq!(plan.step, None);
        assert_eq!(plan.waiting.as_deref(), Some("waiting for member 3: 5000 entries behind"));
        assert!(!plan.is_done());
        let unknown = super::plan(4, 4, &cluster(&[0, 1, 2], &[3], &caught_up(&[0, 1, 2])));
        assert_eq!(unknown.waiting.as_deref(), Some("waiting for member 3: no replication progress known"));
    }

    #[test]
    fn scale_down_removes_the_highest_member_before_its_pod_goes() {
        let status = cluster(&[0, 1, 2, 3, 4], &[], &caught_up(&[0, 1, 2, 3, 4]));
        let plan = plan(3, 5, &status);
        assert_eq!(plan.step, Some(Step::Remove { id: 4 }));
        assert_eq!(plan.statefulset_replicas, 5, "pod 4 stays while node 4 is a member");
        // Once 4 is out, pod 4 may go, but pod 3 stays until node 3 is out too.
        let plan = super::plan(3, 5, &cluster(&[0, 1, 2, 3], &[], &caught_up(&[0, 1, 2, 3])));
        assert_eq!(plan.step, Some(Step::Remove { id: 3 }));
        assert_eq!(plan.statefulset_replicas, 4);
        let plan = super::plan(3, 4, &cluster(&[0, 1, 2], &[], &caught_up(&[0, 1, 2])));
        assert_eq!((plan.step, plan.statefulset_replicas), (None, 3));
    }

    #[test]
    fn scale_down_removes_learners_above_the_new_size_too() {
        let plan = plan(3, 4, &cluster(&[0, 1, 2], &[3], &caught_up(&[0, 1, 2])));
        assert_eq!(plan.step, Some(Step::Remove { id: 3 }));
        assert_eq!(plan.statefulset_replicas, 4);
    }

    #[test]
    fn a_removal_that_would_lose_quorum_is_refused() {
        // Voters 0..2; only the leader is known to be caught up. Removing 2 leaves {0, 1} with
        // one caught up: a majority of two needs two.
        let plan = plan(2, 3, &cluster(&[0, 1, 2], &[], &[(0, 0)]));
        assert_eq!(plan.step, None);
        assert_eq!(plan.statefulset_replicas, 3, "the pod is kept");
        assert_eq!(
            plan.refusal.as_deref(),
            Some(
                "removing member 2 is unsafe: the current voters {0, 1, 2} would have 1 healthy, and a majority needs 2 \
                 (member 1: no replication progress known; member 2: no replication progress known)"
            )
        );
    }

    #[test]
    fn an_idle_cluster_with_a_dead_member_refuses_the_removal_that_would_need_it() {
        // The worked case: three idle voters (lag 0 everywhere), node 1 dead for a minute.
        let mut status = cluster(&[0, 1, 2], &[], &caught_up(&[0, 1, 2]));
        status.last_contact_ms.insert(1, 60_000);
        let plan = plan(2, 3, &status);
        assert_eq!((plan.step.clone(), plan.statefulset_replicas), (None, 3), "node 2 and its pod stay");
        assert_eq!(
            plan.refusal.as_deref(),
            Some(
                "removing member 2 is unsafe: the new voters {0, 1} would have 1 healthy, and a majority needs 2 \
                 (member 1: last heard 60000 ms ago)"
            )
        );
        // Once node 1 is back, the same scale proceeds.
        status.last_contact_ms.insert(1, 30);
        assert_eq!(super::plan(2, 3, &status).step, Some(Step::Remove { id: 2 }));
    }

    #[test]
    fn five_voters_shrink_to_one_in_safe_steps() {
        let mut status = cluster(&[0, 1, 2, 3, 4], &[], &caught_up(&[0, 1, 2, 3, 4]));
        let mut current = 5;
        let mut removed = Vec::new();
        while let Some(Step::Remove { id }) = plan(1, current, &status).step {
            let after: BTreeSet<u64> = status.voters.iter().copied().filter(|v| *v != id).collect();
            assert_eq!(status.voter_change_refusal(&after), None);
            removed.push(id);
            status.voters.retain(|v| *v != id);
            current = plan(1, current, &status).statefulset_replicas;
        }
        assert_eq!(removed, vec![4, 3, 2, 1]);
        let done = plan(1, current, &status);
        assert!(done.is_done(), "{done:?}");
        assert_eq!(done.statefulset_replicas, 1);
    }

    #[test]
    fn the_leader_may_be_the_member_removed() {
        let mut status = cluster(&[0, 1, 2], &[], &caught_up(&[0, 1, 2]));
        status.leader = Some(2);
        status.node_id = 2;
        assert_eq!(plan(2, 3, &status).step, Some(Step::Remove { id: 2 }));
    }

    #[test]
    fn a_promotion_that_would_lose_quorum_is_refused() {
        // Voters {0, 1, 2}, 2 lagging; promoting caught-up 3 makes four voters with three healthy: fine.
        let ok = plan(4, 4, &cluster(&[0, 1, 2], &[3], &[(0, 0), (1, 0), (2, 900), (3, 0)]));
        assert_eq!(ok.step, Some(Step::Promote { id: 3 }));
        // Voters {0, 1, 2, 3} with 2 and 3 far behind: promoting 4 makes five voters with three
        // healthy (a majority), but the current four have only two healthy and need three.
        let refused = plan(5, 5, &cluster(&[0, 1, 2, 3], &[4], &[(0, 0), (1, 0), (2, 900), (3, 900), (4, 0)]));
        assert_eq!(refused.step, None);
        let refusal = refused.refusal.unwrap();
        assert!(refusal.starts_with("promoting member 4 is unsafe: the current voters {0, 1, 2, 3} would have 2 healthy"), "{refusal}");
    }

    #[test]
    fn without_a_leader_nothing_changes() {
        let mut status = cluster(&[0, 1, 2], &[], &[]);
        status.leader = None;
        let plan = plan(5, 3, &status);
        assert_eq!((plan.statefulset_replicas, plan.step.clone()), (3, None));
        assert_eq!(plan.waiting.as_deref(), Some("no Raft leader known; holding 3 pods"));
    }

    #[test]
    fn the_last_voter_is_never_removed() {
        let mut status = cluster(&[1], &[], &[(1, 0)]);
        status.leader = Some(1);
        let plan = plan(1, 2, &status);
        assert_eq!(plan.step, None);
        assert_eq!(plan.refusal.as_deref(), Some("member 1 is the last voter; it cannot be removed"));
    }

    #[test]
    fn members_list_voters_and_learners_by_id() {
        let list = members(&cluster(&[2, 0, 1], &[3], &[]), "demo");
        let summary: Vec<(u64, &str, MemberRole)> = list.iter().map(|m| (m.id, m.pod.as_str(), m.role)).collect();
        assert_eq!(
            summary,
            vec![
                (0, "demo-0", MemberRole::Voter),
                (1, "demo-1", MemberRole::Voter),
                (2, "demo-2", MemberRole::Voter),
                (3, "demo-3", MemberRole::Learner)
            ]
        );
    }

    #[tokio::test]
    async fn observe_skips_silent_members_and_asks_the_leader() {
        use crate::fixtures::RecordedAdmin;
        let admin = RecordedAdmin::formed("demo", 3);
        admin.cluster.lock().unwrap().leader = Some(2);
        admin.down.lock().unwrap().push(RecordedAdmin::addr("demo", 0));
        let addresses: Vec<(u64, String)> = (0..3).map(|i| (i, RecordedAdmin::addr("demo", i))).collect();
        let status = observe(admin.as_ref(), &addresses, "s3cret").await.unwrap();
        assert_eq!(status.node_id, 2, "the leader's view, which has the replication lag");
        admin.down.lock().unwrap().extend([RecordedAdmin::addr("demo", 1), RecordedAdmin::addr("demo", 2)]);
        let err = observe(admin.as_ref(), &addresses, "s3cret").await.unwrap_err();
        assert!(err.to_string().contains("connection refused"), "{err}");
    }

    #[tokio::test]
    async fn execute_sends_the_step_through_the_leader() {
        use crate::fixtures::RecordedAdmin;
        let admin = RecordedAdmin::formed("demo", 3);
        let addresses: Vec<(u64, String)> = (0..4).map(|i| (i, RecordedAdmin::addr("demo", i))).collect();
        let status = admin.status(&addresses[0].1, "s").await.unwrap();
        let plan = plan(4, 3, &status);
        let note = execute(admin.as_ref(), &plan, &status, &addresses, "s").await.unwrap();
        assert_eq!(note, Some(Note::new("MemberAdded", "added member 3 as a learner")));
        assert_eq!(admin.calls(), vec![format!("add_learner 3 {} via {}", RecordedAdmin::addr("demo", 3), RecordedAdmin::addr("demo", 0))]);
    }
}
