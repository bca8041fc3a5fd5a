//! Sealed request ids and 2026-07-28 request states, as clients hand them back: arbitrary
//! input never opens or panics; what was sealed opens to itself, under the current or the
//! previous key, and an altered byte never opens.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchboard_node::mailbox::MailboxKey;
use switchboard_node::protocol::jsonrpc::RequestId;
use switchboard_node::server::correlation::{IdSealer, SealedRequest, SealedWith};

fuzz_target!(|data: &[u8]| {
    let sealer = IdSealer::new([1; 32]).with_previous(IdSealer::new([2; 32]));
    let text = String::from_utf8_lossy(data).into_owned();
    let _ = sealer.open_request(&RequestId::String(text.clone()), "s");
    let _ = sealer.open_state(&text);
    if data.len() >= 32 {
        let key = MailboxKey::from_bits(u128::from_le_bytes(data[..16].try_into().unwrap()));
        let request = SealedRequest {
            key,
            owner: u64::from_le_bytes(data[16..24].try_into().unwrap()),
            deadline_ms: u64::from_le_bytes(data[24..32].try_into().unwrap()),
            sealed_with: SealedWith::Current,
        };
        let old = IdSealer::new([2; 32]);
        let RequestId::String(token) = old.seal_request(&request, "s") else { unreachable!() };
        let opened = sealer.open_request(&RequestId::String(token.clone()), "s").expect("the previous key opens");
        assert_eq!((opened.key, opened.owner, opened.sealed_with), (request.key, request.owner, SealedWith::Previous));
        // Flip one character of the sealed part: it must not open.
        let at = 4 + (data[0] as usize % (token.len() - 4));
        let mut bytes = token.into_bytes();
        bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(bytes).unwrap();
        assert!(sealer.open_request(&RequestId::String(altered), "s").is_err());
    }
});
