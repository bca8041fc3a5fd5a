//! The checker: reads a run's whole history and the replicas' final state and lists every
//! anomaly. Pure, so each rule has a test with a history that breaks it.
//!
//! Rules:
//! - `foreign_value`: a handler received a value sent for another request;
//! - `duplicate_value`: a value reached two handlers, or one operation ended twice;
//! - `late_accepted`: an answer sent after its request's deadline still reached the handler;
//! - `lost_answer`: an answer acknowledged (202, or a 2026 retry whose answers were
//!   delivered) before the deadline did not reach its handler although no fault touched the
//!   node running the call;
//! - `unexplained_unknown`: a call's outcome is unknown (its stream broke or went silent, a
//!   retry's reply never came) with no fault on a node it went through;
//! - `session_lost`: a session that was opened is unknown to the cluster before its TTL;
//! - `divergent_state` / `no_convergence`: after healing, replicas at the same applied index
//!   hold different states, or never reach the same index;
//! - `membership`: the final voters are not the ones asked for.

use super::history::{Event, Fault};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anomaly {
    pub kind: &'static str,
    pub detail: String,
}

/// What the replicas hold at the end of a run, after healing.
#[derive(Debug, Clone, Default)]
pub struct Final {
    /// `(node, applied index, digest)` of each replica, read once they stopped moving.
    pub digests: Vec<(usize, u64, String)>,
    /// Sessions opened during the run that the cluster no longer knows.
    pub lost_sessions: Vec<String>,
    pub voters: Vec<u64>,
    pub expected_voters: Vec<u64>,
}

/// How long a handler waits for an answer, and the slack an acknowledged answer is given to be
/// "in time" (an answer acknowledged within the slack of the deadline may lose the race).
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub answer_timeout_ms: u64,
    pub slack_ms: u64,
}

struct Op<'a> {
    kind: &'a str,
    node: usize,
    value: &'a str,
    late: bool,
    invoked: u64,
    asked: Option<u64>,
    /// The last answer's time and status.
    answered: Option<(u64, u16)>,
    /// The nodes its answers were posted to.
    answerers: Vec<usize>,
    ends: Vec<&'a Event>,
}

/// Whether a fault touched `node` between `from` and `to`.
fn disturbed(faults: &[Fault], node: usize, from: u64, to: u64) -> bool {
    faults.iter().any(|f| f.nodes.contains(&node) && f.start <= to && f.end >= from)
}

pub fn check(events: &[Event], faults: &[Fault], last: &Final, timing: Timing) -> Vec<Anomaly> {
    let mut out = Vec::new();
    let mut ops: BTreeMap<u64, Op> = BTreeMap::new();
    for event in events {
        match event {
            Event::Invoke { op, t, kind, node, value, late, .. } => {
                ops.insert(
                    *op,
                    Op {
                        kind,
                        node: *node,
                        value,
                        late: *late,
                        invoked: *t,
                        asked: None,
                        answered: None,
                        answerers: Vec::new(),
                        ends: Vec::new(),
                    },
                );
            }
            Event::Asked { op, t } => {
                if let Some(o) = ops.get_mut(op) {
                    o.asked = Some(*t);
                }
            }
            Event::Answered { op, t, node, status } => {
                if let Some(o) = ops.get_mut(op) {
                    o.answered = Some((*t, *status));
                    o.answerers.extend(node);
                }
            }
            Event::Ok { op, .. } | Event::Fail { op, .. } | Event::Unknown { op, .. } => {
                if let Some(o) = ops.get_mut(op) {
                    o.ends.push(event);
                }
            }
            Event::Committed { .. } => {}
        }
    }
    let mut received: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (id, op) in &ops {
        if op.ends.len() > 1 {
            out.push(Anomaly { kind: "duplicate_value", detail: format!("op {id} ended {} times", op.ends.len()) });
        }
        let Some(end) = op.ends.first() else { continue };
        let ended = end.t();
        if let Event::Ok { echo: Some(echo), .. } = end {
            received.entry(echo.as_str()).or_default().push(*id);
            if echo != op.value {
                out.push(Anomaly {
                    kind: "foreign_value",
                    detail: format!("op {id} ({}) on node {} received {echo:?}, sent {:?}", op.kind, op.node, op.value),
                });
            }
        }
        // An acknowledged answer must reach a live owner whatever happened to the node that took
        // it; an unknown outcome is explained by a fault on any node the call went through.
        let owner_touched = disturbed(faults, op.node, op.invoked, ended);
        let any_touched = owner_touched || op.answerers.iter().any(|&n| disturbed(faults, n, op.invoked, ended));
        if op.late && matches!(end, Event::Ok { .. }) {
            out.push(Anomaly { kind: "late_accepted", detail: format!("op {id}: answered after its deadline, yet the handler took it") });
        }
        if let (false, Some(asked), Some((at, 202))) = (op.late, op.asked, op.answered)
            && at + timing.slack_ms < asked + timing.answer_timeout_ms
            && !matches!(end, Event::Ok { .. })
            && !owner_touched
        {
            out.push(Anomaly {
                kind: "lost_answer",
                detail: format!(
                    "op {id} on node {}: answer acknowledged at {at} ms, call ended {end:?} with no fault on its node",
                    op.node
                ),
            });
        }
        if let Event::Unknown { error, .. } = end
            && !any_touched
        {
            out.push(Anomaly { kind: "unexplained_unknown", detail: format!("op {id} on node {}: {error}", op.node) });
        }
    }
    for (value, ids) in received {
        if ids.len() > 1 {
            out.push(Anomaly { kind: "duplicate_value", detail: format!("{value:?} reached ops {ids:?}") });
        }
    }
    for session in &last.lost_sessions {
        out.push(Anomaly { kind: "session_lost", detail: format!("session {session} is unknown before its TTL") });
    }
    let indexes: BTreeSet<u64> = last.digests.iter().map(|(_, index, _)| *index).collect();
    if indexes.len() > 1 {
        out.push(Anomaly { kind: "no_convergence", detail: format!("applied indexes differ: {:?}", last.digests) });
    } else {
        let digests: BTreeSet<&String> = last.digests.iter().map(|(_, _, d)| d).collect();
        if digests.len() > 1 {
            out.push(Anomaly { kind: "divergent_state", detail: format!("same applied index, different states: {:?}", last.digests) });
        }
    }
    if last.voters != last.expected_voters {
        out.push(Anomaly { kind: "membership", detail: format!("voters {:?}, asked for {:?}", last.voters, last.expected_voters) });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Era;

    const TIMING: Timing = Timing { answer_timeout_ms: 4_000, slack_ms: 500 };

    fn invoke(op: u64, node: usize, value: &str, late: bool) -> Event {
        let (kind, era, session) = ("elicitation".into(), Era::Sse2025, format!("s{op}"));
        Event::Invoke { op, t: 100, kind, era, balanced: false, node, session, value: value.into(), late }
    }

    fn round_trip(op: u64, node: usize, value: &str, echo: &str) -> Vec<Event> {
        vec![
            invoke(op, node, value, false),
            Event::Asked { op, t: 150 },
            Event::Answered { op, t: 200, node: Some(1), status: 202 },
            Event::Ok { op, t: 250, echo: Some(echo.into()) },
        ]
    }

    fn converged() -> Final {
        Final {
            digests: vec![(0, 9, "d".into()), (1, 9, "d".into())],
            lost_sessions: vec![],
            voters: vec![0, 1, 2],
            expected_voters: vec![0, 1, 2],
        }
    }

    fn kinds(events: &[Event], faults: &[Fault], last: &Final) -> Vec<&'static str> {
        check(events, faults, last, TIMING).into_iter().map(|a| a.kind).collect()
    }

    #[test]
    fn a_clean_history_has_no_anomaly() {
        let events: Vec<Event> = [round_trip(1, 0, "a", "a"), round_trip(2, 1, "b", "b")].concat();
        assert_eq!(kinds(&events, &[], &converged()), Vec::<&str>::new());
    }

    #[test]
    fn another_requests_value_is_caught() {
        assert_eq!(kinds(&round_trip(1, 0, "a", "b"), &[], &converged()), vec!["foreign_value"]);
    }

    #[test]
    fn a_value_delivered_twice_is_caught() {
        let events: Vec<Event> = [round_trip(1, 0, "a", "a"), round_trip(2, 0, "b", "a")].concat();
        assert_eq!(kinds(&events, &[], &converged()), vec!["foreign_value", "duplicate_value"]);
        let mut twice = round_trip(3, 0, "c", "c");
        twice.push(Event::Fail { op: 3, t: 300, error: "again".into() });
        assert_eq!(kinds(&twice, &[], &converged()), vec!["duplicate_value"]);
    }

    #[test]
    fn a_late_answer_that_reached_the_handler_is_caught() {
        let events = vec![invoke(1, 0, "a", true), Event::Asked { op: 1, t: 150 }, Event::Ok { op: 1, t: 9_000, echo: Some("a".into()) }];
        assert_eq!(kinds(&events, &[], &converged()), vec!["late_accepted"]);
    }

    #[test]
    fn an_acknowledged_answer_lost_without_a_fault_is_caught_and_excused_with_one() {
        let events = vec![
            invoke(1, 2, "a", false),
            Event::Asked { op: 1, t: 150 },
            Event::Answered { op: 1, t: 200, node: Some(0), status: 202 },
            Event::Fail { op: 1, t: 4_200, error: "timed out".into() },
        ];
        assert_eq!(kinds(&events, &[], &converged()), vec!["lost_answer"]);
        let killed = Fault { kind: "kill".into(), nodes: vec![2], start: 1_000, end: 3_000, leader: false };
        assert_eq!(kinds(&events, &[killed], &converged()), Vec::<&str>::new(), "its node was killed");
        let elsewhere = Fault { kind: "kill".into(), nodes: vec![1], start: 1_000, end: 3_000, leader: false };
        assert_eq!(kinds(&events, &[elsewhere], &converged()), vec!["lost_answer"], "a fault on another node is no excuse");
        // Acknowledged within the slack of the deadline: the race may be lost.
        let mut close = events.clone();
        close[2] = Event::Answered { op: 1, t: 3_700, node: Some(0), status: 202 };
        assert_eq!(kinds(&close, &[], &converged()), Vec::<&str>::new());
    }

    #[test]
    fn a_broken_stream_needs_a_fault() {
        let events = vec![invoke(1, 0, "a", false), Event::Unknown { op: 1, t: 500, error: "stream closed".into() }];
        assert_eq!(kinds(&events, &[], &converged()), vec!["unexplained_unknown"]);
        let paused = Fault { kind: "pause".into(), nodes: vec![0], start: 400, end: 2_000, leader: false };
        assert_eq!(kinds(&events, &[paused], &converged()), Vec::<&str>::new());
    }

    #[test]
    fn an_unknown_retry_is_explained_by_a_fault_on_the_node_it_went_to_only() {
        // A 2026 retry to node 1 got no reply; sent again to node 2, its state was spent.
        let events = vec![
            invoke(1, 0, "a", false),
            Event::Asked { op: 1, t: 150 },
            Event::Answered { op: 1, t: 3_000, node: Some(1), status: 0 },
            Event::Answered { op: 1, t: 3_100, node: Some(2), status: 409 },
            Event::Unknown { op: 1, t: 3_100, error: "spent by an attempt whose reply was lost".into() },
        ];
        let paused = |node| Fault { kind: "pause".into(), nodes: vec![node], start: 400, end: 2_000, leader: false };
        assert_eq!(kinds(&events, &[paused(1)], &converged()), Vec::<&str>::new());
        assert_eq!(kinds(&events, &[paused(3)], &converged()), vec!["unexplained_unknown"]);
    }

    #[test]
    fn lost_sessions_divergence_and_membership_are_caught() {
        let mut last = converged();
        last.lost_sessions = vec!["s1".into()];
        last.digests[1].2 = "other".into();
        last.voters = vec![0, 1];
        assert_eq!(kinds(&[], &[], &last), vec!["session_lost", "divergent_state", "membership"]);
        let mut behind = converged();
        behind.digests[1].1 = 8;
        assert_eq!(kinds(&[], &[], &behind), vec!["no_convergence"]);
    }
}
