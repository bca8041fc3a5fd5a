//! The nemesis: a seeded schedule of faults ([`schedule`], pure: the same seed gives the same
//! schedule) and their application to a running [`Cluster`].

use super::cluster::Cluster;
use super::history::{Fault, Recorder};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Duration;
use switchboard_contract::admin::{self, MemberRequest};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// SIGKILL the leader, restart it from its data directory.
    KillLeader,
    /// SIGKILL a follower, restart it.
    KillFollower,
    /// SIGKILL the node with the most calls parked on it, restart it.
    KillOwner,
    /// SIGSTOP a node, SIGCONT it.
    Pause,
    /// Cut one node (the leader half of the time) off from the others.
    Isolate,
    /// Cut a minority (two of five) off from the majority.
    SplitMinority,
    /// One node can no longer reach another; the other way still works.
    OneWay,
    /// SIGTERM a node (it drains) and start it again.
    Restart,
    /// Remove a follower from the group, wipe it, add it back as a learner and promote it.
    Membership,
    /// Restart a node with its wall clock 30 s ahead or 20 s behind.
    ClockJump,
}

impl Kind {
    pub const ALL: [Kind; 10] = [
        Kind::KillLeader,
        Kind::KillFollower,
        Kind::KillOwner,
        Kind::Pause,
        Kind::Isolate,
        Kind::SplitMinority,
        Kind::OneWay,
        Kind::Restart,
        Kind::Membership,
        Kind::ClockJump,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::KillLeader => "kill_leader",
            Kind::KillFollower => "kill_follower",
            Kind::KillOwner => "kill_owner",
            Kind::Pause => "pause",
            Kind::Isolate => "isolate",
            Kind::SplitMinority => "split_minority",
            Kind::OneWay => "one_way",
            Kind::Restart => "restart",
            Kind::Membership => "membership",
            Kind::ClockJump => "clock_jump",
        }
    }
}

/// One planned fault: when it starts, how long it lasts, and a random number that picks its
/// target once the cluster's state (who leads) is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    pub at: Duration,
    pub kind: Kind,
    pub lasts: Duration,
    pub pick: u64,
}

/// The faults of a run: `kinds` in a seeded order, each lasting 1.5 to 3 s, with 1.5 to 3 s of
/// calm between them, starting after a warm-up.
pub fn schedule(seed: u64, kinds: &[Kind]) -> Vec<Planned> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut order = kinds.to_vec();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.random_range(0..=i));
    }
    let mut at = Duration::from_millis(2_000);
    order
        .into_iter()
        .map(|kind| {
            let lasts = Duration::from_millis(rng.random_range(1_500..3_000));
            let planned = Planned { at, kind, lasts, pick: rng.random() };
            at += lasts + Duration::from_millis(rng.random_range(1_500..3_000));
            planned
        })
        .collect()
}

/// How long a schedule runs, with room for the last fault's recovery.
pub fn duration(plan: &[Planned]) -> Duration {
    plan.last().map_or(Duration::ZERO, |p| p.at + p.lasts) + Duration::from_secs(3)
}

/// Apply `fault` now and undo it after its time; returns what was done (the checker's view).
/// `busiest` names the node with the most calls parked on it.
pub async fn apply(cluster: &mut Cluster, fault: &Planned, busiest: usize, recorder: &Recorder) -> Option<Fault> {
    let n = cluster.nodes.len();
    let leader = cluster.leader().await.map(|s| s.node_id as usize);
    let pick = |k: u64| (fault.pick.wrapping_add(k) % n as u64) as usize;
    let follower = (0..n as u64).map(pick).find(|i| Some(*i) != leader && cluster.is_up(*i)).unwrap_or(pick(0));
    let start = recorder.now();
    let (nodes, is_leader) = match fault.kind {
        Kind::KillLeader => {
            // Down until a successor leads (a leader back before that would resume its own
            // leadership, and the failover would not be measured), at least `lasts`.
            let target = leader?;
            cluster.kill(target).await;
            let killed = tokio::time::Instant::now();
            while killed.elapsed() < Duration::from_secs(8) && cluster.leader().await.is_none_or(|s| s.node_id as usize == target) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            tokio::time::sleep(fault.lasts.saturating_sub(killed.elapsed())).await;
            cluster.spawn(target, None);
            (vec![target], true)
        }
        Kind::KillFollower | Kind::KillOwner => {
            let target = if fault.kind == Kind::KillOwner { busiest } else { follower };
            cluster.kill(target).await;
            tokio::time::sleep(fault.lasts).await;
            cluster.spawn(target, None);
            (vec![target], Some(target) == leader)
        }
        Kind::Pause => {
            let target = pick(0);
            cluster.pause(target);
            tokio::time::sleep(fault.lasts).await;
            cluster.resume(target);
            (vec![target], Some(target) == leader)
        }
        Kind::Isolate => {
            let target = if fault.pick.is_multiple_of(2) { leader.unwrap_or(pick(0)) } else { follower };
            cluster.split(&[target]);
            tokio::time::sleep(fault.lasts).await;
            cluster.heal();
            (vec![target], Some(target) == leader)
        }
        Kind::SplitMinority => {
            let minority: Vec<usize> = if n >= 5 { vec![pick(0), pick(1)] } else { vec![pick(0)] };
            cluster.split(&minority);
            tokio::time::sleep(fault.lasts).await;
            cluster.heal();
            let led = leader.is_some_and(|l| minority.contains(&l));
            (minority, led)
        }
        Kind::OneWay => {
            let (from, to) = (pick(0), pick(1 + fault.pick % (n as u64 - 1)));
            let to = if to == from { (from + 1) % n } else { to };
            cluster.cut_one_way(from, to);
            tokio::time::sleep(fault.lasts).await;
            cluster.heal();
            (vec![from, to], leader == Some(from) || leader == Some(to))
        }
        Kind::Restart => {
            let target = pick(0);
            cluster.terminate(target).await;
            tokio::time::sleep(fault.lasts / 3).await;
            cluster.spawn(target, None);
            (vec![target], Some(target) == leader)
        }
        Kind::Membership => {
            // Any member but the bootstrapping one (an empty node 0 would join by itself).
            let target = (1..n).map(|k| (pick(k as u64) % (n - 1)) + 1).find(|i| Some(*i) != leader).unwrap_or(1);
            let removed = cluster.admin_post(admin::REMOVE, &MemberRequest::member(target as u64)).await;
            if removed.is_err() {
                return None;
            }
            cluster.kill(target).await;
            cluster.wipe(target);
            cluster.spawn(target, None);
            tokio::time::sleep(fault.lasts).await;
            let addr = cluster.proxy_addr(target);
            let _ = cluster.admin_post(admin::LEARNERS, &MemberRequest::new_member(target as u64, addr)).await;
            for _ in 0..100 {
                if cluster.admin_post(admin::PROMOTE, &MemberRequest::member(target as u64)).await.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            (vec![target], false)
        }
        Kind::ClockJump => {
            let target = follower;
            let skew = if fault.pick.is_multiple_of(2) { 30 } else { -20 };
            cluster.kill(target).await;
            cluster.spawn(target, Some(skew));
            tokio::time::sleep(fault.lasts).await;
            cluster.kill(target).await;
            cluster.spawn(target, None);
            (vec![target], false)
        }
    };
    Some(Fault { kind: fault.kind.name().into(), nodes, start, end: recorder.now(), leader: is_leader })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_the_same_schedule_and_covers_every_kind_asked() {
        let a = schedule(42, &Kind::ALL);
        assert_eq!(a, schedule(42, &Kind::ALL), "replayable from the seed");
        assert_ne!(a, schedule(43, &Kind::ALL));
        let mut kinds: Vec<Kind> = a.iter().map(|p| p.kind).collect();
        kinds.sort();
        assert_eq!(kinds, Kind::ALL.to_vec());
        for pair in a.windows(2) {
            assert!(pair[1].at >= pair[0].at + pair[0].lasts + Duration::from_millis(1_500), "faults do not overlap");
        }
    }
}
