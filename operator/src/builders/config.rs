//! The ConfigMap of timeouts and the generated Secret.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use sha2::{Digest, Sha256};

use super::{CLUSTER_SECRET_KEY, ENCRYPTION_KEY_KEY, Target, hex};

/// ConfigMap keys, each read into the node flag of the same name through an env variable.
pub const ELICITATION_TIMEOUT: &str = "elicitation-timeout";
pub const SAMPLING_TIMEOUT: &str = "sampling-timeout";
pub const SESSION_TTL: &str = "session-ttl";
pub const HEARTBEAT_INTERVAL: &str = "heartbeat-interval";
pub const ELECTION_TIMEOUT: &str = "election-timeout";

/// The configuration the pods read at start, keyed as above.
pub fn config_data(target: &Target) -> BTreeMap<String, String> {
    let spec = &target.mcp.spec;
    BTreeMap::from([
        (ELICITATION_TIMEOUT.to_string(), spec.timeouts.elicitation.clone()),
        (SAMPLING_TIMEOUT.to_string(), spec.timeouts.sampling.clone()),
        (SESSION_TTL.to_string(), spec.timeouts.session.clone()),
        (HEARTBEAT_INTERVAL.to_string(), spec.raft.heartbeat_interval.clone()),
        (ELECTION_TIMEOUT.to_string(), spec.raft.election_timeout.clone()),
    ])
}

/// `NAME-config`: the timeouts and Raft timing.
pub fn config_map(target: &Target) -> ConfigMap {
    ConfigMap { metadata: target.meta(target.config_map_name()), data: Some(config_data(target)), ..ConfigMap::default() }
}

/// Hash of what the pods read from the ConfigMap: first 16 hex digits of SHA-256 over the
/// sorted `key=value` lines. Put on the pod template, a change of it rolls the pods.
pub fn config_hash(target: &Target) -> String {
    let mut hasher = Sha256::new();
    for (k, v) in config_data(target) {
        hasher.update(k.as_bytes());
        hasher.update(b"=");
        hasher.update(v.as_bytes());
        hasher.update(b"\n");
    }
    hex(&hasher.finalize()[..8])
}

/// Hash of what the pods read from their Secret (the keys in [`super::SECRET_KEYS`], present or
/// not): first 16 hex digits of SHA-256. Put on the pod template, a rotation rolls the pods.
pub fn secret_hash(value_of: impl Fn(&str) -> Option<Vec<u8>>) -> String {
    let mut hasher = Sha256::new();
    for key in super::SECRET_KEYS {
        hasher.update(key.as_bytes());
        match value_of(key) {
            Some(value) => {
                hasher.update(b"=");
                hasher.update((value.len() as u64).to_be_bytes());
                hasher.update(&value);
            }
            None => hasher.update(b"-"),
        }
        hasher.update(b"\n");
    }
    hex(&hasher.finalize()[..8])
}

/// The random material of a generated Secret. Made once, when the Secret does not exist yet;
/// the builder only lays it out, so it stays pure.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretMaterial {
    /// Shared secret every peer request carries (64 hex digits).
    pub cluster_secret: String,
    /// AES-256 key of the sealed request ids (32 bytes as 64 hex digits).
    pub encryption_key: String,
}

impl std::fmt::Debug for SecretMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretMaterial(..)")
    }
}

impl SecretMaterial {
    /// Fresh random material from the operating system's generator.
    pub fn generate() -> Self {
        Self { cluster_secret: hex(&rand::random::<[u8; 32]>()), encryption_key: hex(&rand::random::<[u8; 32]>()) }
    }

    /// [`secret_hash`] of the Secret made from this material.
    pub fn hash(&self) -> String {
        secret_hash(|key| match key {
            super::CLUSTER_SECRET_KEY => Some(self.cluster_secret.clone().into_bytes()),
            super::ENCRYPTION_KEY_KEY => Some(self.encryption_key.clone().into_bytes()),
            _ => None,
        })
    }
}

/// `NAME-secret`: the cluster secret and id-encryption key, when the spec references none.
pub fn secret(target: &Target, material: &SecretMaterial) -> Secret {
    Secret {
        metadata: target.meta(target.generated_secret_name()),
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([
            (CLUSTER_SECRET_KEY.to_string(), ByteString(material.cluster_secret.clone().into_bytes())),
            (ENCRYPTION_KEY_KEY.to_string(), ByteString(material.encryption_key.clone().into_bytes())),
        ])),
        ..Secret::default()
    }
}
