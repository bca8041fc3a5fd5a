//! SSE event ids as clients send them back in `Last-Event-ID`: opening arbitrary text never
//! panics, and only ids this sealer issued for this session open.
#![no_main]

use libfuzzer_sys::fuzz_target;
use switchboard_node::server::correlation::{IdSealer, SealedEvent};

fuzz_target!(|data: &[u8]| {
    let sealer = IdSealer::new([7; 32]);
    let text = String::from_utf8_lossy(data);
    assert!(sealer.open_event(&text, "session").is_err() || text.starts_with("sb2."), "only sealed ids open");
    if data.len() >= 24 {
        let n = |i: usize| u64::from_le_bytes(data[8 * i..8 * i + 8].try_into().unwrap());
        let event = SealedEvent { owner: n(0), stream: n(1), seq: n(2) };
        let token = sealer.seal_event(event, "session");
        assert_eq!(sealer.open_event(&token, "session").unwrap(), event);
        assert!(sealer.open_event(&token, "another").is_err());
    }
});
