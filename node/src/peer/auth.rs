//! Authentication of the peer port: every request carries the cluster secret (401 and counted
//! otherwise), and a replica sealing ids with another key is refused loudly (403) instead of
//! silently dropping every answer it relays.

use super::client::KEY_HEADER;
use crate::metrics::Metrics;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// Largest peer request body (a snapshot travels in one).
pub const MAX_BODY: usize = 256 * 1024 * 1024;

/// What a peer request must present: one of the accepted cluster secrets (the current one, and
/// during a rotation the previous one too) and, when it names its id-encryption key, one of
/// the accepted keys' fingerprints.
#[derive(Clone)]
pub struct Credentials {
    secrets: Arc<[String]>,
    key_fingerprints: Arc<[String]>,
    metrics: Arc<Metrics>,
}

impl Credentials {
    /// `secrets` and `key_fingerprints`: current first; an empty fingerprint list checks no key.
    pub fn new(secrets: Vec<String>, key_fingerprints: Vec<String>, metrics: Arc<Metrics>) -> Self {
        assert!(!secrets.is_empty(), "a peer port needs a cluster secret");
        Self { secrets: secrets.into(), key_fingerprints: key_fingerprints.into(), metrics }
    }
}

/// `routes` behind the cluster secret and the key check.
pub fn authenticated(routes: Router, credentials: Credentials) -> Router {
    routes.layer(middleware::from_fn_with_state(credentials, authenticate)).layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
}

/// Byte-wise comparison that takes the same time wherever the first difference is.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn authenticate(State(state): State<Credentials>, request: Request, next: Next) -> Response {
    let presented = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    let reason = match presented {
        None => "missing_secret",
        // Every accepted secret is compared, so the time taken says nothing about which matched.
        Some(secret) if !state.secrets.iter().fold(false, |any, s| any | constant_time_eq(secret.as_bytes(), s.as_bytes())) => {
            "wrong_secret"
        }
        Some(_) => {
            let theirs = request.headers().get(KEY_HEADER).and_then(|v| v.to_str().ok());
            match theirs {
                Some(theirs) if !state.key_fingerprints.is_empty() && !state.key_fingerprints.iter().any(|ours| ours == theirs) => {
                    state.metrics.peer_refused("key_mismatch");
                    tracing::error!(path = %request.uri().path(), "refused a peer with another id-encryption key: every replica needs the same --encryption-key-file");
                    return (StatusCode::FORBIDDEN, "peer request refused: the id-encryption key differs between replicas").into_response();
                }
                _ => return next.run(request).await,
            }
        }
    };
    state.metrics.peer_refused(reason);
    tracing::warn!(reason, path = %request.uri().path(), "refused unauthenticated peer request");
    (StatusCode::UNAUTHORIZED, "peer request refused: missing or wrong cluster secret").into_response()
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn constant_time_eq_compares_whole_strings() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret-longer"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}
