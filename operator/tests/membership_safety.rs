//! Scale-down against real nodes when a member is dead or leads: the operator's planner and the
//! node's admin API both refuse a removal that would leave the group without a healthy
//! majority, and every safe step keeps writes committing. See `common` for how the operator's
//! rendered pods run here.

mod common;

use std::time::Duration;

use common::{Cluster, mcpserver, scale};
use serde_json::json;
use switchboard_contract::admin::{self, MemberRequest};
use switchboard_operator::membership::{self, AdminApi, HttpAdmin, Step};

const WRITE_WITHIN: Duration = Duration::from_secs(5);

fn fast_raft() -> serde_json::Value {
    json!({"image": "switchboard:test", "raft": {"heartbeatInterval": "50ms", "electionTimeout": "300ms"}})
}

async fn formed(replicas: u64) -> (Cluster, HttpAdmin) {
    let mut spec = fast_raft();
    spec["replicas"] = json!(replicas);
    let mut cluster = Cluster::new(&mcpserver(spec), replicas);
    for i in 0..replicas {
        cluster.start(i);
    }
    for i in 0..replicas {
        cluster.wait_ready(i).await;
    }
    let admin = HttpAdmin::new(Duration::from_secs(5)).unwrap();
    cluster
        .wait_status(&admin, "every voter healthy", |s| s.voters.len() as u64 == replicas && s.voters.iter().all(|v| s.health(*v).is_ok()))
        .await;
    (cluster, admin)
}

/// The worked case of the issue: three idle voters, node 1 dead, a scale to 2 replicas. Lag
/// alone would call node 1 caught up (0 behind on an idle cluster) and remove node 2, leaving a
/// joint configuration that needs the dead node for every later write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_member_of_an_idle_cluster_blocks_the_removal_that_would_need_it() {
    let (mut cluster, admin) = formed(3).await;
    if cluster.status(&admin).await.leader == Some(1) {
        cluster.transfer_leadership(0).await;
    }
    cluster.kill(1).await;
    let status = cluster.wait_status(&admin, "node 1 seen as silent", |s| s.health(1).is_err()).await;
    assert_eq!(status.replication_lag.get(&1).copied().unwrap_or(0), 0, "idle: node 1 is not behind, only silent");

    // The operator's plan refuses and keeps the pod.
    let plan = membership::plan(2, 3, &status);
    assert_eq!((plan.step.clone(), plan.statefulset_replicas), (None, 3), "{plan:?}");
    let refusal = plan.refusal.expect("refused");
    assert!(refusal.starts_with("removing member 2 is unsafe: the new voters {0, 1} would have 1 healthy"), "{refusal}");
    assert!(refusal.contains("member 1: last heard"), "{refusal}");

    // The node refuses the same removal asked directly (defence in depth), with the reason.
    let leader_addr = status.members[&status.leader.unwrap()].clone();
    let refused = admin.remove(&leader_addr, &cluster.cluster_secret, 2).await.unwrap_err().to_string();
    assert!(refused.contains("409") && refused.contains("removing node 2 is unsafe"), "{refused}");
    let after = cluster.status(&admin).await;
    assert_eq!(after.voters, vec![0, 1, 2], "nothing changed");
    cluster.write_through(0, WRITE_WITHIN).await.expect("writes still commit with two of three");
    cluster.write_through(2, WRITE_WITHIN).await.expect("through the other live node too");

    // Node 1 comes back: the same scale now goes through, and writes go on.
    cluster.start(1);
    cluster.wait_ready(1).await;
    cluster.wait_status(&admin, "node 1 healthy again", |s| s.health(1).is_ok()).await;
    let steps = scale(&mut cluster, &admin, 2, 3).await;
    assert_eq!(steps.iter().map(|(s, _)| s.clone()).collect::<Vec<_>>(), vec![Step::Remove { id: 2 }]);
    let shrunk = cluster.wait_status(&admin, "voters 0 and 1", |s| s.voters == vec![0, 1]).await;
    assert!(shrunk.learners.is_empty());
    cluster.write_through(1, WRITE_WITHIN).await.expect("the two remaining members commit");
}

/// 5 → 1, one removal at a time, with the leader among the members removed: after each step
/// the group still commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_members_shrink_to_one_in_safe_steps_and_the_leader_may_go() {
    let (mut cluster, admin) = formed(5).await;
    // Node 4 leads, so the first member removed is the leader.
    cluster.transfer_leadership(4).await;
    let mut current = 5;
    let mut removed = Vec::new();
    while current > 1 {
        let steps = scale(&mut cluster, &admin, current - 1, current).await;
        assert_eq!(steps.iter().map(|(s, _)| s.clone()).collect::<Vec<_>>(), vec![Step::Remove { id: current as u64 - 1 }]);
        removed.push(current as u64 - 1);
        current -= 1;
        let expected: Vec<u64> = (0..current as u64).collect();
        // A removed leader steps down once the smaller group is committed, and the members
        // still name it until one of them is elected: awaited, not read at once.
        let remaining = |leader: u64| leader < current as u64;
        cluster
            .wait_status(&admin, "the smaller group led by a remaining member", |s| s.voters == expected && s.leader.is_some_and(remaining))
            .await;
        cluster.write_through(0, WRITE_WITHIN).await.unwrap_or_else(|e| panic!("no write with {current} members: {e}"));
    }
    assert_eq!(removed, vec![4, 3, 2, 1]);
    let last = cluster.status(&admin).await;
    assert_eq!((last.voters.clone(), last.leader), (vec![0], Some(0)));
    // The last voter is never removed, by the plan or by the node.
    let refused = cluster.admin_post(admin::REMOVE, &MemberRequest::member(0)).await.unwrap_err();
    assert!(refused.contains("409") && refused.contains("last voter"), "{refused}");
}

/// A leadership hand-off is refused towards a member that cannot take it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_goes_only_to_a_healthy_voter() {
    let (mut cluster, admin) = formed(3).await;
    let leader = cluster.status(&admin).await.leader.unwrap();
    let other = (leader + 1) % 3;
    let dead = (leader + 2) % 3;
    cluster.kill(dead).await;
    cluster.wait_status(&admin, "the dead member seen as silent", |s| s.health(dead).is_err()).await;
    let refused = cluster.admin_post(admin::TRANSFER_LEADERSHIP, &MemberRequest::member(dead)).await.unwrap_err();
    assert!(refused.contains("409") && refused.contains(&format!("member {dead}: last heard")), "{refused}");
    let refused = cluster.admin_post(admin::TRANSFER_LEADERSHIP, &MemberRequest::member(7)).await.unwrap_err();
    assert!(refused.contains("409") && refused.contains("node 7 is not a voter"), "{refused}");
    cluster.transfer_leadership(other).await;
    cluster.write_through(other, WRITE_WITHIN).await.expect("the new leader commits");
}
