//! Sealed ids: what the server hands the client as the id of a server-to-client request (and
//! of an SSE event), so that whichever replica the client's answer reaches can tell, from the
//! id alone, which mailbox (or stream) it belongs to, which node owns it and until when, and
//! can refuse ids that were forged, altered, or minted for another session.
//!
//! Keys: the configured key is never used directly. HKDF-SHA256 derives one subkey per use
//! (sealing, session fingerprints, mailbox session tags, the public key check), so what one use
//! reveals says nothing about another's key. (An earlier construction computed fingerprints as
//! AES-GCM tags under a fixed nonce with the sealing key itself, which leaks GHASH's key to
//! anyone who sees a few fingerprints and lets them re-seal a leaked id for another session.)
//!
//! Ids are AES-256-GCM under the sealing subkey, with a fresh random 96-bit nonce each (2^-32
//! collision odds only after ~2^32 ids under one key) and the session id as associated data, so
//! an id only opens in the session it was issued to. Layout (base64url):
//! `nonce(12) | fingerprint(6) | ciphertext(kind, fields) | tag(16)`, where the fingerprint is an
//! HMAC-SHA256 of the session id under its own subkey, letting a receiver tell "another
//! session's id" from "an altered id".
//!
//! Rotation: a sealer may hold a previous key beside its current one. It seals with the current
//! key and opens with either; what it opened says which key sealed it ([`SealedWith`]), and a
//! mailbox tag is computed with that same key, the one its owner used. See the rotation
//! procedure in the README.

use crate::mailbox::SessionTag;
use crate::mailbox::{MailboxKey, NodeId};
use crate::protocol::jsonrpc::RequestId;
use crate::protocol::types::RequestKind;
use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// `sb2`: sealed under HKDF subkeys (`sb1` ids, sealed with the configured key itself, are foreign).
const PREFIX: &str = "sb2.";
/// HKDF salt: names the scheme, so a future one derives unrelated subkeys from the same key.
const HKDF_SALT: &[u8] = b"switchboard id keys v2";
const FINGERPRINT: usize = 6;
const REQUEST: u8 = 1;
const EVENT: u8 = 2;
/// Prefix of a sealed `requestState` (2026-07-28 multi-round-trip requests).
const STATE_PREFIX: &str = "sbs1.";
/// Associated data of every sealed `requestState`: names the scheme.
const STATE_AAD: &[u8] = b"switchboard mrtr v1";

/// Which of a sealer's keys sealed what it opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SealedWith {
    #[default]
    Current,
    Previous,
}

/// What a server-to-client request id carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedRequest {
    pub key: MailboxKey,
    pub owner: NodeId,
    /// Milliseconds since the Unix epoch after which an answer is late.
    pub deadline_ms: u64,
    /// Not sealed: which key opened it ([`SealedWith::Current`] when sealing).
    pub sealed_with: SealedWith,
}

/// What an SSE event id carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealedEvent {
    pub owner: NodeId,
    pub stream: u64,
    pub seq: u64,
}

/// What a 2026-07-28 `requestState` carries: where the call runs, the mailbox of the round it
/// answers, when the round ends, which call it belongs to, and what was asked in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedState {
    /// The node whose handler is parked on the call.
    pub owner: NodeId,
    /// The call's id (random; names the call to its owner and binds its mailboxes).
    pub call: u128,
    pub round: u32,
    /// Where the retry delivers the client's answers.
    pub answers: MailboxKey,
    /// Milliseconds since the Unix epoch after which the round is over.
    pub deadline_ms: u64,
    /// SHA-256 of the method, the name or URI and the arguments of the call: a retry must
    /// repeat the call it continues.
    pub digest: [u8; 32],
    /// The keys asked in the round and what kind of answer each takes.
    pub asks: Vec<(String, RequestKind)>,
    /// Not sealed: which key opened it ([`SealedWith::Current`] when sealing).
    pub sealed_with: SealedWith,
}

/// Why a `requestState` was refused. `label` names the metric reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("requestState is invalid (altered or not issued by this cluster)")]
    Tampered,
}

impl StateError {
    pub fn label(self) -> &'static str {
        match self {
            StateError::Tampered => "tampered",
        }
    }
}

fn kind_byte(kind: RequestKind) -> u8 {
    match kind {
        RequestKind::Elicitation => 0,
        RequestKind::Sampling => 1,
        RequestKind::Roots => 2,
    }
}

fn kind_of(byte: u8) -> Option<RequestKind> {
    [RequestKind::Elicitation, RequestKind::Sampling, RequestKind::Roots].into_iter().find(|k| kind_byte(*k) == byte)
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
}

impl OpenError {
    pub fn label(self) -> &'static str {
        match self {
            OpenError::Foreign => "foreign_id",
            OpenError::WrongSession => "wrong_session",
            OpenError::Tampered => "tampered",
        }
    }
}

/// A 256-bit key could not be read.
#[derive(Debug, thiserror::Error)]
#[error("invalid id-encryption key: {0}")]
pub struct KeyError(String);

/// Seals with the current key, opens with it or the previous one.
pub struct IdSealer {
    current: Keys,
    previous: Option<Keys>,
}

/// The subkeys of one configured key.
struct Keys {
    /// Seals request and event ids.
    cipher: Aes256Gcm,
    /// Seals `requestState`s: a key of its own, so a state can never pass for an id.
    state_cipher: Aes256Gcm,
    /// HMAC key of session fingerprints inside ids.
    fingerprint_key: [u8; 32],
    /// HMAC key of the session tags mailboxes are bound to.
    session_tag_key: [u8; 32],
    /// HMAC key of the public key check replicas compare.
    key_check_key: [u8; 32],
}

/// The subkey for `purpose`, derived from the configured key.
fn subkey(hkdf: &hkdf::Hkdf<Sha256>, purpose: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    hkdf.expand(purpose.as_bytes(), &mut out).expect("32 bytes is a valid HKDF-SHA256 length");
    out
}

fn hmac(key: &[u8; 32], message: &[u8]) -> [u8; 32] {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(message);
    mac.finalize().into_bytes().into()
}

impl Keys {
    fn new(key: [u8; 32]) -> Self {
        let hkdf = hkdf::Hkdf::<Sha256>::new(Some(HKDF_SALT), &key);
        Keys {
            cipher: Aes256Gcm::new(&subkey(&hkdf, "seal ids").into()),
            state_cipher: Aes256Gcm::new(&subkey(&hkdf, "request state").into()),
            fingerprint_key: subkey(&hkdf, "session fingerprint"),
            session_tag_key: subkey(&hkdf, "mailbox session tag"),
            key_check_key: subkey(&hkdf, "key check"),
        }
    }

    fn key_fingerprint(&self) -> String {
        hmac(&self.key_check_key, b"switchboard key check")[..8].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Keyed fingerprint of a session id, carried in the clear inside every id it seals.
    fn fingerprint(&self, session: &str) -> [u8; FINGERPRINT] {
        hmac(&self.fingerprint_key, session.as_bytes())[..FINGERPRINT].try_into().expect("32-byte MAC")
    }

    fn session_tag(&self, session: &str) -> SessionTag {
        SessionTag(hmac(&self.session_tag_key, session.as_bytes())[..16].try_into().expect("32-byte MAC"))
    }

    fn open(&self, raw: &[u8], kind: u8, session: &str) -> Result<Vec<u8>, OpenError> {
        let (nonce, rest) = raw.split_at(12);
        let (fingerprint, sealed) = rest.split_at(FINGERPRINT);
        let plain = self
            .cipher
            .decrypt(Nonce::from_slice(nonce), Payload { msg: sealed, aad: session.as_bytes() })
            .map_err(|_| if fingerprint == self.fingerprint(session) { OpenError::Tampered } else { OpenError::WrongSession })?;
        // The fingerprint travels in the clear, outside the seal: an id whose fingerprint was
        // changed still decrypts, and must not open as a second spelling of the same id
        // (found by fuzzing).
        if fingerprint != self.fingerprint(session) {
            return Err(OpenError::Tampered);
        }
        match plain.split_first() {
            Some((k, fields)) if *k == kind => Ok(fields.to_vec()),
            _ => Err(OpenError::Foreign),
        }
    }

    fn open_state(&self, nonce: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
        self.state_cipher.decrypt(Nonce::from_slice(nonce), Payload { msg: sealed, aad: STATE_AAD }).ok()
    }
}

impl IdSealer {
    pub fn new(key: [u8; 32]) -> Self {
        IdSealer { current: Keys::new(key), previous: None }
    }

    /// Also open what `previous` sealed (a key being rotated in or out; see [`SealedWith`]).
    pub fn with_previous(mut self, previous: IdSealer) -> Self {
        self.previous = Some(previous.current);
        self
    }

    /// The keys this sealer opens with, current first.
    fn keys(&self) -> impl Iterator<Item = (SealedWith, &Keys)> {
        std::iter::once((SealedWith::Current, &self.current)).chain(self.previous.iter().map(|k| (SealedWith::Previous, k)))
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

    /// A short public fingerprint of the current key, so replicas can tell they were given
    /// different keys (every cross-node answer would otherwise be dropped as another session's).
    pub fn key_fingerprint(&self) -> String {
        self.current.key_fingerprint()
    }

    /// The fingerprint of the previous key, when there is one.
    pub fn previous_key_fingerprint(&self) -> Option<String> {
        self.previous.as_ref().map(Keys::key_fingerprint)
    }

    /// The tag binding a mailbox to `session` (see [`SessionTag`]), under the current key.
    pub fn session_tag(&self, session: &str) -> SessionTag {
        self.current.session_tag(session)
    }

    /// The tag of `session` under the key that sealed an id or state: the one its mailbox's
    /// owner computed.
    pub fn session_tag_with(&self, sealed_with: SealedWith, session: &str) -> SessionTag {
        match (sealed_with, &self.previous) {
            (SealedWith::Previous, Some(previous)) => previous.session_tag(session),
            _ => self.current.session_tag(session),
        }
    }

    fn seal(&self, kind: u8, fields: &[u8], session: &str) -> String {
        let nonce: [u8; 12] = rand::random();
        let mut plain = Vec::with_capacity(1 + fields.len());
        plain.push(kind);
        plain.extend_from_slice(fields);
        let sealed = self.current.cipher.encrypt(&nonce.into(), Payload { msg: &plain, aad: session.as_bytes() }).expect("AES-GCM seals");
        let mut out = Vec::with_capacity(12 + FINGERPRINT + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&self.current.fingerprint(session));
        out.extend_from_slice(&sealed);
        // Written into one string of the exact size: a parked call keeps its request's id.
        let mut id = String::with_capacity(PREFIX.len() + (out.len() * 4).div_ceil(3));
        id.push_str(PREFIX);
        URL_SAFE_NO_PAD.encode_string(&out, &mut id);
        id
    }

    /// Open with each key in turn. When none opens it, the reason is the first key's unless
    /// another one recognized the session's fingerprint (then the id was altered).
    fn open(&self, token: &str, kind: u8, session: &str) -> Result<(Vec<u8>, SealedWith), OpenError> {
        let raw = token.strip_prefix(PREFIX).and_then(|b| URL_SAFE_NO_PAD.decode(b).ok()).ok_or(OpenError::Foreign)?;
        if raw.len() < 12 + FINGERPRINT + 16 + 1 {
            return Err(OpenError::Foreign);
        }
        let mut refusal = None;
        for (with, keys) in self.keys() {
            match keys.open(&raw, kind, session) {
                Ok(fields) => return Ok((fields, with)),
                Err(e) => {
                    if refusal.is_none() || e == OpenError::Tampered {
                        refusal = Some(e);
                    }
                }
            }
        }
        Err(refusal.expect("a sealer has a current key"))
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

    /// Open the id of a client's answer in `session`. Lateness is not decided here but by the
    /// mailbox, in log time: this replica's wall clock may be off (a fault campaign found a
    /// replica 30 s ahead dropping every answer it received as late).
    pub fn open_request(&self, id: &RequestId, session: &str) -> Result<SealedRequest, OpenError> {
        let RequestId::String(token) = id else { return Err(OpenError::Foreign) };
        let (fields, sealed_with) = self.open(token, REQUEST, session)?;
        let fields: [u8; 32] = fields.try_into().map_err(|_| OpenError::Foreign)?;
        let key = u128::from_be_bytes(fields[..16].try_into().expect("16 bytes"));
        let owner = u64::from_be_bytes(fields[16..24].try_into().expect("8 bytes"));
        let deadline_ms = u64::from_be_bytes(fields[24..].try_into().expect("8 bytes"));
        Ok(SealedRequest { key: MailboxKey::from_bits(key), owner, deadline_ms, sealed_with })
    }

    /// The `requestState` of a multi-round-trip round: AES-256-GCM under its own subkey, a fresh
    /// random nonce each time, base64url.
    pub fn seal_state(&self, state: &SealedState) -> String {
        let mut plain = Vec::with_capacity(128);
        plain.extend_from_slice(&state.owner.to_be_bytes());
        plain.extend_from_slice(&state.call.to_be_bytes());
        plain.extend_from_slice(&state.round.to_be_bytes());
        plain.extend_from_slice(&state.answers.bits().to_be_bytes());
        plain.extend_from_slice(&state.deadline_ms.to_be_bytes());
        plain.extend_from_slice(&state.digest);
        for (key, kind) in &state.asks {
            plain.push(kind_byte(*kind));
            plain.extend_from_slice(&(key.len() as u32).to_be_bytes());
            plain.extend_from_slice(key.as_bytes());
        }
        let nonce: [u8; 12] = rand::random();
        let sealed = self.current.state_cipher.encrypt(&nonce.into(), Payload { msg: &plain, aad: STATE_AAD }).expect("AES-GCM seals");
        let mut out = Vec::with_capacity(12 + sealed.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        format!("{STATE_PREFIX}{}", URL_SAFE_NO_PAD.encode(out))
    }

    /// Open a client's `requestState`. Whether its round is over is the round's mailbox's to
    /// decide, in log time (see [`IdSealer::open_request`]).
    pub fn open_state(&self, token: &str) -> Result<SealedState, StateError> {
        let raw = token.strip_prefix(STATE_PREFIX).and_then(|b| URL_SAFE_NO_PAD.decode(b).ok()).ok_or(StateError::Tampered)?;
        if raw.len() < 12 + 16 {
            return Err(StateError::Tampered);
        }
        let (nonce, sealed) = raw.split_at(12);
        let (plain, sealed_with) =
            self.keys().find_map(|(with, keys)| Some((keys.open_state(nonce, sealed)?, with))).ok_or(StateError::Tampered)?;
        let mut state = decode_state(&plain).ok_or(StateError::Tampered)?;
        state.sealed_with = sealed_with;
        Ok(state)
    }

    pub fn seal_event(&self, event: SealedEvent, session: &str) -> String {
        let mut fields = Vec::with_capacity(24);
        for n in [event.owner, event.stream, event.seq] {
            fields.extend_from_slice(&n.to_be_bytes());
        }
        self.seal(EVENT, &fields, session)
    }

    pub fn open_event(&self, token: &str, session: &str) -> Result<SealedEvent, OpenError> {
        let (fields, _) = self.open(token, EVENT, session)?;
        let fields: [u8; 24] = fields.try_into().map_err(|_| OpenError::Foreign)?;
        let n = |i: usize| u64::from_be_bytes(fields[8 * i..8 * i + 8].try_into().expect("8 bytes"));
        Ok(SealedEvent { owner: n(0), stream: n(1), seq: n(2) })
    }
}

/// The fields of a sealed state, as [`IdSealer::seal_state`] wrote them.
fn decode_state(plain: &[u8]) -> Option<SealedState> {
    fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, tail) = bytes.split_at_checked(n)?;
        *bytes = tail;
        Some(head)
    }
    let mut rest = plain;
    let owner = u64::from_be_bytes(take(&mut rest, 8)?.try_into().ok()?);
    let call = u128::from_be_bytes(take(&mut rest, 16)?.try_into().ok()?);
    let round = u32::from_be_bytes(take(&mut rest, 4)?.try_into().ok()?);
    let answers = MailboxKey::from_bits(u128::from_be_bytes(take(&mut rest, 16)?.try_into().ok()?));
    let deadline_ms = u64::from_be_bytes(take(&mut rest, 8)?.try_into().ok()?);
    let digest: [u8; 32] = take(&mut rest, 32)?.try_into().ok()?;
    let mut asks = Vec::new();
    while !rest.is_empty() {
        let kind = kind_of(take(&mut rest, 1)?[0])?;
        let len = u32::from_be_bytes(take(&mut rest, 4)?.try_into().ok()?) as usize;
        let key = String::from_utf8(take(&mut rest, len)?.to_vec()).ok()?;
        asks.push((key, kind));
    }
    Some(SealedState { owner, call, round, answers, deadline_ms, digest, asks, sealed_with: SealedWith::Current })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> SealedState {
        SealedState {
            owner: 3,
            call: rand::random(),
            round: 2,
            answers: MailboxKey::random(),
            deadline_ms: 10_000,
            digest: [9; 32],
            asks: vec![
                ("user_name".into(), RequestKind::Elicitation),
                ("ü-key".into(), RequestKind::Roots),
                (String::new(), RequestKind::Sampling),
            ],
            sealed_with: SealedWith::Current,
        }
    }

    #[test]
    fn an_id_with_an_altered_fingerprint_does_not_open() {
        let sealer = IdSealer::new([5; 32]);
        let RequestId::String(token) = sealer.seal_request(&request(), "s") else { unreachable!() };
        assert_eq!(token.capacity(), token.len(), "an id is built at its size: a parked call keeps it");
        let mut raw = URL_SAFE_NO_PAD.decode(token.strip_prefix(PREFIX).unwrap()).unwrap();
        // The fingerprint is bytes 12..18: outside the AES-GCM seal.
        raw[12] ^= 0x40;
        let altered = RequestId::String(format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(&raw)));
        assert_eq!(sealer.open_request(&altered, "s"), Err(OpenError::Tampered));
        assert!(sealer.open_request(&RequestId::String(token), "s").is_ok());
    }

    #[test]
    fn a_rotating_sealer_opens_what_either_key_sealed_and_says_which() {
        let (old, new) = ([1u8; 32], [2u8; 32]);
        let before = IdSealer::new(old);
        // Phase 1 of a rotation: the new key is accepted, ids are still sealed with the old one.
        let accepting = IdSealer::new(old).with_previous(IdSealer::new(new));
        // Phase 2: ids are sealed with the new key, the old one is still accepted.
        let rotated = IdSealer::new(new).with_previous(IdSealer::new(old));
        let after = IdSealer::new(new);

        let request = request();
        let sealed_before = before.seal_request(&request, "s");
        let sealed_rotated = rotated.seal_request(&request, "s");
        let opened = rotated.open_request(&sealed_before, "s").unwrap();
        assert_eq!((opened.key.clone(), opened.sealed_with), (request.key.clone(), SealedWith::Previous));
        assert_eq!(accepting.open_request(&sealed_rotated, "s").unwrap().sealed_with, SealedWith::Previous);
        assert_eq!(accepting.open_request(&sealed_before, "s").unwrap().sealed_with, SealedWith::Current);
        assert_eq!(after.open_request(&sealed_rotated, "s").unwrap().sealed_with, SealedWith::Current);
        assert_eq!(after.open_request(&sealed_before, "s"), Err(OpenError::WrongSession), "a retired key is not accepted");
        // The tag a deliverer computes matches the one the owner bound the mailbox to.
        assert_eq!(rotated.session_tag_with(opened.sealed_with, "s"), before.session_tag("s"));
        assert_ne!(rotated.session_tag("s"), before.session_tag("s"));
        // Altered under the previous key: reported as altered, not as another session's.
        let RequestId::String(token) = &sealed_before else { unreachable!() };
        let mut bytes = URL_SAFE_NO_PAD.decode(token.strip_prefix(PREFIX).unwrap()).unwrap();
        *bytes.last_mut().unwrap() ^= 1;
        let altered = RequestId::String(format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes)));
        assert_eq!(rotated.open_request(&altered, "s"), Err(OpenError::Tampered));
        // Request states and event ids rotate the same way.
        let state = before.seal_state(&state());
        assert_eq!(rotated.open_state(&state).unwrap().sealed_with, SealedWith::Previous);
        let event = before.seal_event(SealedEvent { owner: 1, stream: 2, seq: 3 }, "s");
        assert_eq!(rotated.open_event(&event, "s").unwrap().seq, 3);
        assert_eq!(rotated.key_fingerprint(), after.key_fingerprint());
        assert_eq!(rotated.previous_key_fingerprint(), Some(before.key_fingerprint()));
    }

    #[test]
    fn request_states_round_trip_and_refuse_tampering_expiry_and_other_keys() {
        let sealer = IdSealer::random();
        let s = state();
        let token = sealer.seal_state(&s);
        // Past its deadline it still opens: lateness is the round's mailbox's to decide.
        assert_eq!(sealer.open_state(&token), Ok(s.clone()));
        // What the conformance suite does, and every single flipped character.
        assert_eq!(sealer.open_state(&format!("{token}-TAMPERED")), Err(StateError::Tampered));
        for i in STATE_PREFIX.len()..token.len() {
            let mut bytes = token.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            assert!(sealer.open_state(&String::from_utf8(bytes).unwrap()).is_err(), "flip at {i} accepted");
        }
        assert_eq!(IdSealer::random().open_state(&token), Err(StateError::Tampered), "another cluster's key");
        // A state is not an id, nor an id a state (separate subkeys and prefixes).
        let RequestId::String(id) = sealer.seal_request(&request(), "s") else { panic!() };
        assert_eq!(sealer.open_state(&id), Err(StateError::Tampered));
        assert_eq!(sealer.open_state(&id.replacen(PREFIX, STATE_PREFIX, 1)), Err(StateError::Tampered));
        // Fresh nonces: the same state never seals the same twice.
        let tokens: std::collections::HashSet<String> = (0..1000).map(|_| sealer.seal_state(&s)).collect();
        assert_eq!(tokens.len(), 1000);
    }

    fn request() -> SealedRequest {
        SealedRequest { key: MailboxKey::random(), owner: 2, deadline_ms: 10_000, sealed_with: SealedWith::Current }
    }

    #[test]
    fn a_request_id_opens_in_its_session_only() {
        let sealer = IdSealer::random();
        let r = request();
        let id = sealer.seal_request(&r, "session-a");
        assert_eq!(sealer.open_request(&id, "session-a"), Ok(r));
        assert_eq!(sealer.open_request(&id, "session-b"), Err(OpenError::WrongSession));
    }

    #[test]
    fn altered_ids_are_refused() {
        let sealer = IdSealer::random();
        let RequestId::String(token) = sealer.seal_request(&request(), "s") else { panic!() };
        for i in PREFIX.len() + 30..token.len() {
            let mut bytes = token.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let tampered = RequestId::String(String::from_utf8(bytes).unwrap());
            assert!(sealer.open_request(&tampered, "s").is_err(), "flip at {i} accepted");
        }
        let RequestId::String(t) = sealer.seal_request(&request(), "s") else { panic!() };
        let mut bytes = t.into_bytes();
        let inside = bytes.len() - 10;
        bytes[inside] = if bytes[inside] == b'A' { b'B' } else { b'A' };
        assert_eq!(sealer.open_request(&RequestId::String(String::from_utf8(bytes).unwrap()), "s"), Err(OpenError::Tampered));
    }

    #[test]
    fn another_key_or_foreign_shapes_are_refused() {
        let id = IdSealer::random().seal_request(&request(), "s");
        assert!(matches!(IdSealer::random().open_request(&id, "s"), Err(OpenError::WrongSession | OpenError::Tampered)));
        let sealer = IdSealer::random();
        for foreign in [
            RequestId::Number(1),
            RequestId::String("sb:abc".into()),
            RequestId::String("sb2.!!".into()),
            RequestId::String("sb2.AAAA".into()),
        ] {
            assert_eq!(sealer.open_request(&foreign, "s"), Err(OpenError::Foreign));
        }
        // An event id is not a request id.
        let event = sealer.seal_event(SealedEvent { owner: 1, stream: 2, seq: 3 }, "s");
        assert_eq!(sealer.open_request(&RequestId::String(event), "s"), Err(OpenError::Foreign));
    }

    #[test]
    fn late_answers_are_expired() {
        let sealer = IdSealer::random();
        let id = sealer.seal_request(&request(), "s");
        assert_eq!(sealer.open_request(&id, "s").unwrap().deadline_ms, 10_000, "the deadline travels; the mailbox judges it");
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

    /// The construction, checked independently: every use has its own HKDF-SHA256 subkey, and
    /// a fingerprint is an HMAC under the fingerprint subkey — not an AES-GCM tag under the
    /// sealing key with a fixed nonce, whose GHASH key a handful of fingerprints reveal.
    #[test]
    fn fingerprints_and_tags_are_hmacs_under_subkeys_independent_of_the_sealing_key() {
        let master = [5u8; 32];
        let sealer = IdSealer::new(master);
        let hkdf = hkdf::Hkdf::<Sha256>::new(Some(b"switchboard id keys v2"), &master);
        let derive = |info: &[u8]| {
            let mut k = [0u8; 32];
            hkdf.expand(info, &mut k).unwrap();
            k
        };
        let (seal, fingerprint, tag) = (derive(b"seal ids"), derive(b"session fingerprint"), derive(b"mailbox session tag"));
        assert!(seal != fingerprint && seal != tag && fingerprint != tag && seal != master, "one key per use");
        let mac = |key: &[u8; 32], msg: &[u8]| {
            let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).unwrap();
            m.update(msg);
            m.finalize().into_bytes().to_vec()
        };
        assert_eq!(sealer.current.fingerprint("session-a").to_vec(), mac(&fingerprint, b"session-a")[..FINGERPRINT]);
        assert_eq!(sealer.session_tag("session-a").0.to_vec(), mac(&tag, b"session-a")[..16]);
        // The id's seal is AES-GCM under the sealing subkey: it opens with that key, not the master.
        let RequestId::String(token) = sealer.seal_request(&request(), "s") else { panic!() };
        let raw = URL_SAFE_NO_PAD.decode(token.strip_prefix(PREFIX).unwrap()).unwrap();
        let (nonce, rest) = raw.split_at(12);
        let sealed = &rest[FINGERPRINT..];
        let open_with =
            |key: [u8; 32]| Aes256Gcm::new(&key.into()).decrypt(Nonce::from_slice(nonce), Payload { msg: sealed, aad: b"s" }).is_ok();
        assert!(open_with(seal));
        assert!(!open_with(master));
        // The fixed-nonce GMAC of the old scheme is not what travels in the clear.
        let gmac = Aes256Gcm::new(&seal.into()).encrypt(&Nonce::default(), Payload { msg: &[], aad: b"s" }).unwrap();
        assert_ne!(&rest[..FINGERPRINT], &gmac[..FINGERPRINT]);
    }

    #[test]
    fn session_tags_differ_by_session_and_by_key() {
        let sealer = IdSealer::new([1; 32]);
        assert_eq!(sealer.session_tag("a"), IdSealer::new([1; 32]).session_tag("a"));
        assert_ne!(sealer.session_tag("a"), sealer.session_tag("b"));
        assert_ne!(sealer.session_tag("a"), IdSealer::new([2; 32]).session_tag("a"));
    }

    #[test]
    fn keys_parse_from_hex_or_base64() {
        assert!(IdSealer::from_text(&"ab".repeat(32)).is_ok());
        assert!(IdSealer::from_text(&base64::engine::general_purpose::STANDARD.encode([7u8; 32])).is_ok());
        assert!(IdSealer::from_text("short").is_err());
        assert!(IdSealer::from_text(&base64::engine::general_purpose::STANDARD.encode([7u8; 16])).is_err());
    }
}
