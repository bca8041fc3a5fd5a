//! What arrives on the peer port, decoded as the receivers decode it (MessagePack): forwarded
//! writes, Raft RPCs, and log entries, which are then applied to a state machine. No input
//! panics the decoder or the state machine.
#![no_main]

use libfuzzer_sys::fuzz_target;
use openraft::raft::{AppendEntriesRequest, VoteRequest};
use switchboard_node::peer::codec::decode;
use switchboard_node::raft::messages::ForwardedWrite;
use switchboard_node::raft::state_machine::{Request, StateMachine};
use switchboard_node::raft::types::TypeConfig;

fuzz_target!(|data: &[u8]| {
    let _ = decode::<ForwardedWrite>(data);
    let _ = decode::<VoteRequest<TypeConfig>>(data);
    let _ = decode::<AppendEntriesRequest<TypeConfig>>(data);
    if let Ok(request) = decode::<Request>(data) {
        let mut sm = StateMachine::default();
        let _ = sm.apply(&request);
        let _ = sm.apply(&request);
        let _ = sm.digest();
    }
    if let Ok(requests) = decode::<Vec<Request>>(data) {
        let mut sm = StateMachine::default();
        for request in &requests {
            let _ = sm.apply(request);
        }
    }
});
