//! Sealed ids: what the server hands the client as the id of a server-to-client request (and
//! of an SSE event), so that whichever replica the client's answer reaches can tell, from the
//! id alone, which mailbox (or stream) it belongs to, which node owns it and until when, and
//! can refuse ids that were forged, altered, or minted for another session.
//!
//! AES-256-GCM with a key shared by all replicas; the session id is associated data, so an id
//! only opens in the session it was issued to. Layout (base64url): `nonce(12) | fingerprint(6)
//! | ciphertext(kind, fields) | tag(16)`, where the fingerprint is a keyed MAC of the session id
//! that lets a receiver tell "another session's id" from "an altered id".

use crate::mailbox::{MailboxKey, NodeId};
use crate::protocol::jsonrpc::RequestId;
use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

const PREFIX: &str = "sb1.";
const FINGERPRINT: usize = 6;
const REQUEST: u8 = 1;
const EVENT: u8 = 2;

/// What a server-to-client request id carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedRequest {
    pub key: MailboxKey,
    pub owner: NodeId,
    /// Milliseconds since the Unix epoch after which an answer is late.
    pub deadline_ms: u64,
}

/// What an SSE event id carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealedEvent {
    pub owner: NodeId,
    pub stream: u64,
    pub seq: u64,
}

/// Why an id was refused. `label` names the metric reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("not an id this cluster issued")]
    Foreign,
    #[error("issued to another session")]
    WrongSession,
    #[error("altered or sealed with another key")]
    Tampered,
    #[error("past its deadline")]
    Expired,
}

impl OpenError {
    pub fn label(self) -> &'static str {
        match self {
            OpenError::Foreign => "foreign_id",
            OpenError::WrongSession => "wrong_session",
            OpenError::Tampered => "tampered",
            OpenError::Expired => "expired",
        }
    }
}

/// A 256-bit key could not be read.
#[derive(Debug, thiserror::Error)]
#[error("invalid id-encryption key: {0}")]
pub struct KeyError(String);

pub struct IdSealer {
    cipher: Aes256Gcm,
}

impl IdSealer {
    pub fn new(key: [u8; 32]) -> Self {
        IdSealer { cipher: Aes256Gcm::new(&key.into()) }
    }

    /// A sealer with a fresh random key (a single process; ids die with it).
    pub fn random() -> Self {
        Self::new(rand::random())
    }

    /// Parse a key file's contents: 64 hex digits or base64 of 32 bytes (surrounding space ignored).
    pub fn from_text(text: &str) -> Result<Self, KeyError> {
        let text = text.trim();
        let bytes = if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            (0..32).map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).expect("checked hex")).collect()
        } else {
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|_| KeyError("expected 64 hex digits or base64 of 32 bytes".into()))?
        };
        let key: [u8; 32] = bytes.try_into().map_err(|b: Vec<u8>| KeyError(format!("expected 32 bytes, got {}", b.len())))?;
        Ok(Self::new(key))
    }

    /// A short public fingerprint of the key, so replicas can tell they were given different keys
    /// (every cross-node answer would otherwise be dropped as another session's).
    pub fn key_fingerprint(&self) -> String {
        self.fingerprint("switchboard key check").iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Keyed fingerprint of a session id (a GMAC tag under a fixed nonce; it only ever
    /// authenticates, it never encrypts, so reusing that nonce is safe).
    fn fingerprint(&self, session: &str) -> [u8; FINGERPRINT] {
        let tag = self.cipher.encrypt(&Nonce::default(), Payload { msg: &[], aad: session.as_bytes() }).expect("GMAC");
        tag[..FINGERPRINT].try_into().expect("tag is 16 bytes")
    }

    fn seal(&self, kind: u8, fields: &[u8], session: &str) -> String {
        let nonce: [u8; 12] = rand::random();
        let mut plain = Vec::with_capacity(1 + fields.len());
        plain.push(kind);
        plain.extend_from_slice(fields);
        let sealed = self.cipher.encrypt(&nonce.into(), Payload { msg: &plain, aad: session.as_bytes() }).expect("AES-GCM seals");
        let mut out = Vec::with_capacity(12 + FINGERPRINT + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&self.fingerprint(session));
        out.extend_from_slice(&sealed);
        format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(out))
    }

    fn open(&self, token: &str, kind: u8, session: &str) -> Result<Vec<u8>, OpenError> {
        let raw = token.strip_prefix(PREFIX).and_then(|b| URL_SAFE_NO_PAD.decode(b).ok()).ok_or(OpenError::Foreign)?;
        if raw.len() < 12 + FINGERPRINT + 16 + 1 {
            return Err(OpenError::Foreign);
        }
        let (nonce, rest) = raw.split_at(12);
        let (fingerprint, sealed) = rest.split_at(FINGERPRINT);
        let plain = self
            .cipher
            .decrypt(Nonce::from_slice(nonce), Payload { msg: sealed, aad: session.as_bytes() })
            .map_err(|_| if fingerprint == self.fingerprint(session) { OpenError::Tampered } else { OpenError::WrongSession })?;
        match plain.split_first() {
            Some((k, fields)) if *k == kind => Ok(fields.to_vec()),
            _ => Err(OpenError::Foreign),
        }
    }

    /// The id of a server-to-client request for mailbox `key`.
    pub fn seal_request(&self, request: &SealedRequest, session: &str) -> RequestId {
        let key = request.key.bits();
        let mut fields = Vec::with_capacity(32);
        fields.extend_from_slice(&key.to_be_bytes());
        fields.extend_from_slice(&request.owner.to_be_bytes());
        fields.extend_from_slice(&request.deadline_ms.to_be_bytes());
        RequestId::String(self.seal(REQUEST, &fields, session))
    }

    /// Open the id of a client's answer in `session`; `now_ms` decides lateness.
    pub fn open_request(&self, id: &RequestId, session: &str, now_ms: u64) -> Result<SealedRequest, OpenError> {
        let RequestId::String(token) = id else { return Err(OpenError::Foreign) };
        let fields = self.open(token, REQUEST, session)?;
        let fields: [u8; 32] = fields.try_into().map_err(|_| OpenError::Foreign)?;
        let key = u128::from_be_bytes(fields[..16].try_into().expect("16 bytes"));
        let owner = u64::from_be_bytes(fields[16..24].try_into().expect("8 bytes"));
        let deadline_ms = u64::from_be_bytes(fields[24..].try_into().expect("8 bytes"));
        if now_ms > deadline_ms {
            return Err(OpenError::Expired);
        }
        Ok(SealedRequest { key: MailboxKey::from_bits(key), owner, deadline_ms })
    }

    pub fn seal_event(&self, event: SealedEvent, session: &str) -> String {
        let mut fields = Vec::with_capacity(24);
        for n in [event.owner, event.stream, event.seq] {
            fields.extend_from_slice(&n.to_be_bytes());
        }
        self.seal(EVENT, &fields, session)
    }

    pub fn open_event(&self, token: &str, session: &str) -> Result<SealedEvent, OpenError> {
        let fields = self.open(token, EVENT, session)?;
        let fields: [u8; 24] = fields.try_into().map_err(|_| OpenError::Foreign)?;
        let n = |i: usize| u64::from_be_bytes(fields[8 * i..8 * i + 8].try_into().expect("8 bytes"));
        Ok(SealedEvent { owner: n(0), stream: n(1), seq: n(2) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> SealedRequest {
        SealedRequest { key: MailboxKey::random(), owner: 2, deadline_ms: 10_000 }
    }

    #[test]
    fn a_request_id_opens_in_its_session_only() {
        let sealer = IdSealer::random();
        let r = request();
        let id = sealer.seal_request(&r, "session-a");
        assert_eq!(sealer.open_request(&id, "session-a", 9_999), Ok(r));
        assert_eq!(sealer.open_request(&id, "session-b", 9_999), Err(OpenError::WrongSession));
    }

    #[test]
    fn altered_ids_are_refused() {
        let sealer = IdSealer::random();
        let RequestId::String(token) = sealer.seal_request(&request(), "s") else { panic!() };
        for i in PREFIX.len() + 30..token.len() {
            let mut bytes = token.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let tampered = RequestId::String(String::from_utf8(bytes).unwrap());
            assert!(sealer.open_request(&tampered, "s", 0).is_err(), "flip at {i} accepted");
        }
        let RequestId::String(t) = sealer.seal_request(&request(), "s") else { panic!() };
        let mut bytes = t.into_bytes();
        let inside = bytes.len() - 10;
        bytes[inside] = if bytes[inside] == b'A' { b'B' } else { b'A' };
        assert_eq!(sealer.open_request(&RequestId::String(String::from_utf8(bytes).unwrap()), "s", 0), Err(OpenError::Tampered));
    }

    #[test]
    fn another_key_or_foreign_shapes_are_refused() {
        let id = IdSealer::random().seal_request(&request(), "s");
        assert!(matches!(IdSealer::random().open_request(&id, "s", 0), Err(OpenError::WrongSession | OpenError::Tampered)));
        let sealer = IdSealer::random();
        for foreign in [
            RequestId::Number(1),
            RequestId::String("sb:abc".into()),
            RequestId::String("sb1.!!".into()),
            RequestId::String("sb1.AAAA".into()),
        ] {
            assert_eq!(sealer.open_request(&foreign, "s", 0), Err(OpenError::Foreign));
        }
        // An event id is not a request id.
        let event = sealer.seal_event(SealedEvent { owner: 1, stream: 2, seq: 3 }, "s");
        assert_eq!(sealer.open_request(&RequestId::String(event), "s", 0), Err(OpenError::Foreign));
    }

    #[test]
    fn late_answers_are_expired() {
        let sealer = IdSealer::random();
        let id = sealer.seal_request(&request(), "s");
        assert_eq!(sealer.open_request(&id, "s", 10_001), Err(OpenError::Expired));
    }

    #[test]
    fn event_ids_round_trip() {
        let sealer = IdSealer::random();
        let e = SealedEvent { owner: 7, stream: 99, seq: 3 };
        let token = sealer.seal_event(e, "s");
        assert_eq!(sealer.open_event(&token, "s"), Ok(e));
        assert_eq!(sealer.open_event(&token, "t"), Err(OpenError::WrongSession));
        assert_ne!(sealer.seal_event(e, "s"), token, "fresh nonce every time");
    }

    #[test]
    fn key_fingerprints_tell_keys_apart() {
        let key = [3u8; 32];
        assert_eq!(IdSealer::new(key).key_fingerprint(), IdSealer::new(key).key_fingerprint());
        assert_ne!(IdSealer::new(key).key_fingerprint(), IdSealer::random().key_fingerprint());
    }

    #[test]
    fn keys_parse_from_hex_or_base64() {
        assert!(IdSealer::from_text(&"ab".repeat(32)).is_ok());
        assert!(IdSealer::from_text(&base64::engine::general_purpose::STANDARD.encode([7u8; 32])).is_ok());
        assert!(IdSealer::from_text("short").is_err());
        assert!(IdSealer::from_text(&base64::engine::general_purpose::STANDARD.encode([7u8; 16])).is_err());
    }
}
