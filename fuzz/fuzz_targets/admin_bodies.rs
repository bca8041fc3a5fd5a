//! Admin API bodies: a membership call's body as the node parses it, and a node's status as the
//! operator reads it and plans a scale from it. No input panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchboard_contract::admin::{ClusterStatus, MemberRequest};

fuzz_target!(|data: &[u8]| {
    let _ = serde_json::from_slice::<MemberRequest>(data);
    if let Ok(status) = serde_json::from_slice::<ClusterStatus>(data) {
        for id in status.voters.iter().chain(&status.learners) {
            let _ = status.health(*id);
        }
        let after = status.voters.iter().copied().skip(1).collect();
        let _ = status.voter_change_refusal(&after);
        let desired = data.first().map_or(3, |b| (*b % 9) as i32);
        let current = data.last().map_or(3, |b| (*b % 9) as i32);
        let _ = switchboard_operator::membership::plan(desired, current, &status);
    }
});
