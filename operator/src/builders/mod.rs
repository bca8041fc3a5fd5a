//! Pure functions from an `McpServer` to the objects that run it. No client, no clock, no
//! randomness: whatever varies (the generated secret, how far a scale has got) comes in as an
//! argument, so every object can be asserted on in a plain unit test.
//!
//! | child | name | builder |
//! | --- | --- | --- |
//! | StatefulSet | `NAME` | [`statefulset::statefulset`] |
//! | headless peer Service | `NAME-peers` | [`services::peer_service`] |
//! | client Service | `NAME` | [`services::client_service`] |
//! | ConfigMap (timeouts) | `NAME-config` | [`config::config_map`] |
//! | Secret (generated once) | `NAME-secret` | [`config::secret`] |
//! | PodDisruptionBudget | `NAME` | [`policy::pod_disruption_budget`] |
//! | NetworkPolicy | `NAME-peers` | [`policy::network_policy`] |
//!
//! [`Children::build`] makes all of them at once, as one value.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};
use switchboard_contract::env;

use crate::crd::McpServer;
use crate::{Error, Result};

pub mod config;
pub mod policy;
pub mod services;
pub mod statefulset;

pub use config::SecretMaterial;

/// Port of the MCP endpoint in the pod.
pub const MCP_PORT: i32 = 8080;
/// Port of Raft RPCs and the admin API in the pod.
pub const PEER_PORT: i32 = 7070;
/// Port of `/metrics`, `/healthz` and `/readyz` in the pod.
pub const METRICS_PORT: i32 = 9090;
/// Where each pod's volume is mounted (`--data-dir`).
pub const DATA_DIR: &str = "/var/lib/switchboard";
/// Where the Secret's keys are mounted.
pub const SECRET_DIR: &str = "/etc/switchboard/secret";
/// Key of the cluster secret in the Secret.
pub const CLUSTER_SECRET_KEY: &str = "cluster-secret";
/// Key of the id-encryption key in the Secret.
pub const ENCRYPTION_KEY_KEY: &str = "encryption-key";
/// Optional Secret keys of a rotation under way: also accepted, never used to send or seal.
pub const PREVIOUS_CLUSTER_SECRET_KEY: &str = "previous-cluster-secret";
pub const PREVIOUS_ENCRYPTION_KEY_KEY: &str = "previous-encryption-key";
/// Every Secret key the pods read.
pub const SECRET_KEYS: [&str; 4] = [CLUSTER_SECRET_KEY, ENCRYPTION_KEY_KEY, PREVIOUS_CLUSTER_SECRET_KEY, PREVIOUS_ENCRYPTION_KEY_KEY];
/// Pod-template annotation holding the hash of the configuration, so a change rolls the pods.
pub const CONFIG_HASH_ANNOTATION: &str = "switchboard.dev/config-hash";
/// Pod-template annotation: hash of the Secret's keys the pods read, so rotating them rolls
/// the pods.
pub const SECRET_HASH_ANNOTATION: &str = "switchboard.dev/secret-hash";
/// StatefulSet annotation recording the members the cluster was founded with (`--peers`); it
/// never changes after creation, so scaling does not change the pod template.
pub const INITIAL_MEMBERS_ANNOTATION: &str = "switchboard.dev/initial-members";
/// The container's name.
pub const CONTAINER: &str = "switchboard";

/// Not a node flag: the pod's own name (from the downward API), so that
/// `SWITCHBOARD_ADVERTISE_PEER` can say `$(POD_NAME).NAME-peers...`.
pub const POD_NAME: &str = "POD_NAME";

/// Environment variables the operator sets on the node container; `spec.env` may not use them.
/// [`env::LOG_FORMAT`] is set too, but only as a default the user may override.
pub const RESERVED_ENV: &[&str] = &[
    // Pod variables that are not node flags.
    POD_NAME,
    // `switchboard serve` flags.
    env::LISTEN,
    env::PEER_LISTEN,
    env::METRICS_LISTEN,
    env::ADVERTISE_PEER,
    env::PEERS,
    env::JOIN,
    env::NODE_ID,
    env::DATA_DIR,
    env::STORE,
    env::CLUSTER_SECRET_FILE,
    env::ENCRYPTION_KEY_FILE,
    env::PREVIOUS_CLUSTER_SECRET_FILE,
    env::PREVIOUS_ENCRYPTION_KEY_FILE,
    env::ELICITATION_TIMEOUT,
    env::SAMPLING_TIMEOUT,
    env::SESSION_TTL,
    env::HEARTBEAT_INTERVAL,
    env::ELECTION_TIMEOUT,
    env::DRAIN_TIMEOUT,
    env::ALLOWED_HOSTS,
    env::ALLOWED_ORIGINS,
];

/// Operator-wide settings that shape the children (from the operator's flags).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// The cluster's DNS domain (`cluster.local`), for the peers' stable names.
    pub cluster_domain: String,
    /// The operator's own pods, which the NetworkPolicy lets reach the admin API.
    pub operator: Option<OperatorPods>,
}

impl Default for Settings {
    fn default() -> Self {
        Self { cluster_domain: "cluster.local".into(), operator: None }
    }
}

/// Where the operator runs, so the peer port's NetworkPolicy can let it in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorPods {
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
}

/// How far the cluster has got: the part of the StatefulSet that is not a function of the spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rollout {
    /// Members the cluster was founded with: the ordinals listed in `--peers`. Fixed once the
    /// StatefulSet exists, so scaling never changes the pod template.
    pub initial_members: i32,
    /// Pods the StatefulSet should have now. Differs from `spec.replicas` while a scale-down
    /// waits for the Raft group to let go of the highest ordinals.
    pub replicas: i32,
}

impl Rollout {
    /// A new cluster: founded with, and running, `spec.replicas` members.
    pub fn initial(mcp: &McpServer) -> Self {
        Self { initial_members: mcp.spec.replicas, replicas: mcp.spec.replicas }
    }
}

/// The `McpServer` being built for, with the keys every child needs.
#[derive(Clone)]
pub struct Target<'a> {
    pub mcp: &'a McpServer,
    pub name: String,
    pub namespace: String,
    owner: OwnerReference,
    /// Hash of the Secret's contents the pods read ([`config::secret_hash`]), once read.
    pub secret_hash: Option<String>,
}

impl<'a> Target<'a> {
    /// Fails if the object lacks a namespace or uid (an object read from the API server has both).
    pub fn new(mcp: &'a McpServer) -> Result<Self> {
        let namespace = mcp.namespace().ok_or(Error::MissingObjectKey("metadata.namespace"))?;
        let mut owner = mcp.controller_owner_ref(&()).ok_or(Error::MissingObjectKey("metadata.uid"))?;
        // Foreground deletion of the McpServer waits for its children (needs `update` on
        // `mcpservers/finalizers` in the operator's role).
        owner.block_owner_deletion = Some(true);
        Ok(Self { mcp, name: mcp.name_any(), namespace, owner, secret_hash: None })
    }

    /// The target, with the hash of the Secret the pods will read.
    pub fn with_secret_hash(mut self, hash: String) -> Self {
        self.secret_hash = Some(hash);
        self
    }

    /// Name of the headless peer Service.
    pub fn peer_service_name(&self) -> String {
        format!("{}-peers", self.name)
    }

    /// Name of the ConfigMap.
    pub fn config_map_name(&self) -> String {
        format!("{}-config", self.name)
    }

    /// Name of the Secret the pods mount: the referenced one, or the generated one.
    pub fn secret_name(&self) -> String {
        match &self.mcp.spec.secret_ref {
            Some(r) => r.name.clone(),
            None => self.generated_secret_name(),
        }
    }

    /// Name of the Secret the operator generates when there is no `secretRef`.
    pub fn generated_secret_name(&self) -> String {
        format!("{}-secret", self.name)
    }

    /// Stable DNS name of pod `ordinal` under the peer Service.
    pub fn pod_host(&self, ordinal: i32, settings: &Settings) -> String {
        format!("{}-{ordinal}.{}.{}.svc.{}", self.name, self.peer_service_name(), self.namespace, settings.cluster_domain)
    }

    /// Peer address (host:port) of pod `ordinal`.
    pub fn peer_address(&self, ordinal: i32, settings: &Settings) -> String {
        format!("{}:{PEER_PORT}", self.pod_host(ordinal, settings))
    }

    /// Labels that select this McpServer's pods.
    pub fn selector_labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("app.kubernetes.io/name".to_string(), "switchboard".to_string()),
            ("app.kubernetes.io/instance".to_string(), self.name.clone()),
        ])
    }

    /// The selector as the string the scale subresource reports.
    pub fn selector_string(&self) -> String {
        self.selector_labels().iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
    }

    /// Labels of every child.
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut labels = self.selector_labels();
        labels.insert("app.kubernetes.io/managed-by".into(), crate::FIELD_MANAGER.into());
        labels.insert("app.kubernetes.io/component".into(), "mcp-server".into());
        labels
    }

    /// Metadata of a child called `name`: namespace, labels and the controller owner reference.
    pub fn meta(&self, name: String) -> ObjectMeta {
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.namespace.clone()),
            labels: Some(self.labels()),
            owner_references: Some(vec![self.owner.clone()]),
            ..ObjectMeta::default()
        }
    }
}

/// Hex of bytes.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;

/// Every child of an `McpServer`, built once. Whatever consumes it (the reconcile's apply step,
/// [`Children::into_json`] for `render` and the tests) takes it apart with a pattern naming every
/// field, so a new child cannot be left out of either.
#[derive(Clone, Debug)]
pub struct Children {
    /// The generated Secret: only when the spec references none and there is material for one
    /// (a Secret that already exists is never rebuilt).
    pub secret: Option<Secret>,
    pub config_map: ConfigMap,
    pub peer_service: Service,
    pub client_service: Service,
    pub pod_disruption_budget: PodDisruptionBudget,
    pub network_policy: NetworkPolicy,
    pub statefulset: StatefulSet,
}

impl Children {
    /// Build every child. `material` is the random part of a Secret to generate, if one is to be.
    pub fn build(target: &Target, settings: &Settings, rollout: Rollout, material: Option<&SecretMaterial>) -> Self {
        let secret = match (&target.mcp.spec.secret_ref, material) {
            (None, Some(material)) => Some(config::secret(target, material)),
            _ => None,
        };
        // The pods of a Secret about to be generated read its material.
        let hashed;
        let target = match (&target.secret_hash, material) {
            (None, Some(material)) => {
                hashed = Target { secret_hash: Some(material.hash()), ..target.clone() };
                &hashed
            }
            _ => target,
        };
        Self {
            secret,
            config_map: config::config_map(target),
            peer_service: services::peer_service(target),
            client_service: services::client_service(target),
            pod_disruption_budget: policy::pod_disruption_budget(target),
            network_policy: policy::network_policy(target, settings),
            statefulset: statefulset::statefulset(target, settings, rollout),
        }
    }

    /// Every child as JSON, in apply order (the Secret first, when there is one).
    pub fn into_json(self) -> Result<Vec<serde_json::Value>> {
        let Children { secret, config_map, peer_service, client_service, pod_disruption_budget, network_policy, statefulset } = self;
        let json = |v: serde_json::Result<serde_json::Value>| v.map_err(|e| Error::Serialization(e.to_string()));
        let mut out = Vec::new();
        if let Some(secret) = secret {
            out.push(json(serde_json::to_value(secret))?);
        }
        out.push(json(serde_json::to_value(config_map))?);
        out.push(json(serde_json::to_value(peer_service))?);
        out.push(json(serde_json::to_value(client_service))?);
        out.push(json(serde_json::to_value(pod_disruption_budget))?);
        out.push(json(serde_json::to_value(network_policy))?);
        out.push(json(serde_json::to_value(statefulset))?);
        Ok(out)
    }
}

/// Every child as JSON, in apply order (the Secret first, when there is one to generate).
/// Used by `switchboard-operator render` and the tests that run the pod template.
pub fn children(
    target: &Target,
    settings: &Settings,
    rollout: Rollout,
    material: Option<&SecretMaterial>,
) -> Result<Vec<serde_json::Value>> {
    Children::build(target, settings, rollout, material).into_json()
}
