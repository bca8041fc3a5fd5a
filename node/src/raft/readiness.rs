//! Whether a member should take client traffic: not merely "a leader is known", but "this
//! member has heard from a quorum recently". A leader cut off from its followers keeps calling
//! itself leader (openraft does not step down on silence), and a follower cut off from the
//! leader keeps naming it; both would accept requests whose writes cannot commit.
//!
//! The decision is a pure function of one member's view ([`RaftView`]), so its rules are
//! tested without a cluster; [`super::RaftNode::readiness`] gathers the view.

use crate::mailbox::NodeId;
use std::time::Duration;

/// One member's view of Raft at one instant, as far as readiness needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaftView {
    pub id: NodeId,
    /// Raft stopped (shut down or failed).
    pub stopped: bool,
    /// The leader this member knows of.
    pub leader: Option<NodeId>,
    /// This member is the only voter: it is a quorum on its own.
    pub sole_voter: bool,
    /// As leader: how long ago a quorum last acknowledged this leader (`None`: never).
    pub since_quorum_ack: Option<Duration>,
    /// As follower or learner: how long ago the leader last reached this member with a message
    /// it accepted (`None`: never).
    pub since_leader_contact: Option<Duration>,
}

/// Why a member is not ready.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    #[error("Raft is stopped")]
    Stopped,
    #[error("no Raft leader known")]
    NoLeader,
    #[error("leader without a quorum: {}", silence(.0))]
    NoQuorum(Option<Duration>),
    #[error("no contact with the Raft leader {leader}: {}", silence(.since))]
    LeaderSilent { leader: NodeId, since: Option<Duration> },
    #[error("catching up with the leader: {0}")]
    CatchingUp(String),
}

fn silence(since: &Option<Duration>) -> String {
    match since {
        Some(d) => format!("last heard {} ms ago", d.as_millis()),
        None => "never heard".into(),
    }
}

/// Ready when this member has heard from a quorum within `within`: as leader, a quorum
/// acknowledged it (or it is the only voter); as follower, the leader reached it.
pub fn decide(view: &RaftView, within: Duration) -> Result<(), NotReady> {
    if view.stopped {
        return Err(NotReady::Stopped);
    }
    let recent = |since: Option<Duration>| since.is_some_and(|d| d <= within);
    match view.leader {
        None => Err(NotReady::NoLeader),
        Some(leader) if leader == view.id => {
            if view.sole_voter || recent(view.since_quorum_ack) {
                Ok(())
            } else {
                Err(NotReady::NoQuorum(view.since_quorum_ack))
            }
        }
        Some(leader) => {
            if recent(view.since_leader_contact) {
                Ok(())
            } else {
                Err(NotReady::LeaderSilent { leader, since: view.since_leader_contact })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WITHIN: Duration = Duration::from_secs(3);

    fn view(leader: Option<NodeId>) -> RaftView {
        RaftView { id: 1, stopped: false, leader, sole_voter: false, since_quorum_ack: None, since_leader_contact: None }
    }

    fn ms(n: u64) -> Option<Duration> {
        Some(Duration::from_millis(n))
    }

    #[test]
    fn no_leader_is_not_ready() {
        assert_eq!(decide(&view(None), WITHIN), Err(NotReady::NoLeader));
    }

    #[test]
    fn a_stopped_member_is_not_ready_whatever_it_last_saw() {
        let v = RaftView { stopped: true, since_quorum_ack: ms(0), ..view(Some(1)) };
        assert_eq!(decide(&v, WITHIN), Err(NotReady::Stopped));
    }

    #[test]
    fn a_leader_is_ready_only_with_a_recent_quorum_acknowledgement() {
        assert_eq!(decide(&RaftView { since_quorum_ack: ms(200), ..view(Some(1)) }, WITHIN), Ok(()));
        assert_eq!(decide(&RaftView { since_quorum_ack: ms(3000), ..view(Some(1)) }, WITHIN), Ok(()), "the bound is inclusive");
        assert_eq!(decide(&RaftView { since_quorum_ack: ms(3001), ..view(Some(1)) }, WITHIN), Err(NotReady::NoQuorum(ms(3001))));
        assert_eq!(decide(&view(Some(1)), WITHIN), Err(NotReady::NoQuorum(None)), "never acknowledged");
        // Contact with a leader means nothing to a leader.
        let v = RaftView { since_leader_contact: ms(0), ..view(Some(1)) };
        assert_eq!(decide(&v, WITHIN), Err(NotReady::NoQuorum(None)));
    }

    #[test]
    fn a_sole_voter_is_its_own_quorum() {
        assert_eq!(decide(&RaftView { sole_voter: true, ..view(Some(1)) }, WITHIN), Ok(()));
    }

    #[test]
    fn a_follower_is_ready_only_while_the_leader_reaches_it() {
        assert_eq!(decide(&RaftView { since_leader_contact: ms(100), ..view(Some(2)) }, WITHIN), Ok(()));
        let silent = RaftView { since_leader_contact: ms(5000), ..view(Some(2)) };
        assert_eq!(decide(&silent, WITHIN), Err(NotReady::LeaderSilent { leader: 2, since: ms(5000) }));
        assert_eq!(decide(&view(Some(2)), WITHIN), Err(NotReady::LeaderSilent { leader: 2, since: None }));
        // A quorum acknowledgement is the leader's business, not the follower's.
        let v = RaftView { since_quorum_ack: ms(0), sole_voter: true, ..view(Some(2)) };
        assert!(decide(&v, WITHIN).is_err());
    }

    #[test]
    fn the_reason_says_how_long_it_has_been() {
        assert_eq!(NotReady::NoQuorum(ms(4200)).to_string(), "leader without a quorum: last heard 4200 ms ago");
        assert_eq!(NotReady::LeaderSilent { leader: 2, since: None }.to_string(), "no contact with the Raft leader 2: never heard");
    }
}
