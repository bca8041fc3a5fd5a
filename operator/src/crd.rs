//! The `McpServer` custom resource (`switchboard.dev/v1alpha1`).
//!
//! The schema carries what the API server can check on its own: defaults, ranges, enums and CEL
//! rules (`x-kubernetes-validations`) for durations and the Raft timing. [`crate::validate`]
//! repeats those checks (an older CRD may be installed) and adds the ones CEL cannot express.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, EnvFromSource, EnvVar, LocalObjectReference, PodSecurityContext, ResourceRequirements, SecurityContext, Toleration,
    TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use switchboard_contract::origin;

/// CEL for the duration in the string field `$field`, read as
/// [`switchboard_contract::duration::parse_duration`] reads it: a bare number is seconds (CEL's
/// `duration()` wants a unit).
macro_rules! cel_duration {
    ($field:literal) => {
        concat!("duration(", $field, ".matches('^[0-9]+$') ? ", $field, " + 's' : ", $field, ")")
    };
}

/// The CEL rule every duration field carries: the one format of
/// [`switchboard_contract::duration::parse_duration`] (which the node's flags use too), positive.
pub const DURATION_RULE: &str = concat!("self.matches('^[0-9]{1,9}(ms|s|m|h)?$') && ", cel_duration!("self"), " > duration('0s')");
/// The message shown when [`DURATION_RULE`] fails.
pub const DURATION_MESSAGE: &str = "must be a positive duration: a whole number followed by ms, s, m or h, or a whole number of seconds (such as 250ms, 30s, 5m, 1h or 30)";
/// The CEL rule of [`RaftTiming`]: the heartbeat is shorter than the election timeout.
pub const RAFT_TIMING_RULE: &str = concat!(
    "!has(self.heartbeatInterval) || !has(self.electionTimeout) || ",
    cel_duration!("self.heartbeatInterval"),
    " < ",
    cel_duration!("self.electionTimeout")
);

/// Pod labels the operator sets itself (its selector and bookkeeping).
pub const RESERVED_POD_LABELS: [&str; 4] =
    ["app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/component"];
/// The CEL rule of `spec.podLabels`.
pub const POD_LABELS_RULE: &str = "self.all(k, !(k in ['app.kubernetes.io/name', 'app.kubernetes.io/instance', 'app.kubernetes.io/managed-by', 'app.kubernetes.io/component']))";
pub const POD_LABELS_MESSAGE: &str =
    "podLabels cannot set app.kubernetes.io/name, instance, managed-by or component: the operator's selector uses them";
/// Volume names the operator uses.
pub const RESERVED_VOLUMES: [&str; 3] = ["data", "secret", "tmp"];
/// The CEL rule of `spec.volumes`.
pub const VOLUMES_RULE: &str = "self.all(v, !(v.name in ['data', 'secret', 'tmp']))";
pub const VOLUMES_MESSAGE: &str = "volumes cannot be called data, secret or tmp: the operator's volumes use those names";
/// Paths the operator mounts.
pub const RESERVED_MOUNT_PATHS: [&str; 3] = ["/var/lib/switchboard", "/etc/switchboard/secret", "/tmp"];
/// The CEL rule of `spec.volumeMounts`.
pub const VOLUME_MOUNTS_RULE: &str = "self.all(m, !(m.mountPath in ['/var/lib/switchboard', '/etc/switchboard/secret', '/tmp']) && !m.mountPath.startsWith('/var/lib/switchboard/') && !m.mountPath.startsWith('/etc/switchboard/secret/') && !(m.name in ['data', 'secret', 'tmp']))";
pub const VOLUME_MOUNTS_MESSAGE: &str =
    "volumeMounts cannot mount over /var/lib/switchboard, /etc/switchboard/secret or /tmp, nor mount the operator's volumes";
/// The CEL rule of `spec.service`: the traffic policy needs a NodePort or LoadBalancer, source
/// ranges a LoadBalancer.
pub const SERVICE_RULE: &str = "(!has(self.externalTrafficPolicy) || (has(self.type) && self.type != 'ClusterIP')) && (!has(self.loadBalancerSourceRanges) || size(self.loadBalancerSourceRanges) == 0 || (has(self.type) && self.type == 'LoadBalancer'))";
pub const SERVICE_MESSAGE: &str =
    "service.externalTrafficPolicy needs type NodePort or LoadBalancer, and service.loadBalancerSourceRanges type LoadBalancer";

/// Desired state of a switchboard cluster: a Raft group of `replicas` MCP server nodes behind a
/// Service.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "switchboard.dev",
    version = "v1alpha1",
    kind = "McpServer",
    plural = "mcpservers",
    shortname = "mcps",
    category = "switchboard",
    namespaced,
    status = "McpServerStatus",
    doc = "A clustered MCP server: replicas of `switchboard serve` forming one Raft group",
    scale(spec_replicas_path = ".spec.replicas", status_replicas_path = ".status.replicas", label_selector_path = ".status.selector"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas", description = "Desired number of nodes"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas", description = "Nodes that are serving"),
    printcolumn(name = "Leader", type_ = "string", json_path = ".status.leader", description = "Pod of the current Raft leader"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("self.metadata.name.size() <= 52").message("metadata.name must be at most 52 characters (pod and Service names are derived from it)")
)]
#[x_kube(validation = Rule::new("(has(self.secretRef) ? self.secretRef.name : '') == (has(oldSelf.secretRef) ? oldSelf.secretRef.name : '')").message("secretRef cannot change after creation: members with different secrets stop trusting each other"))]
#[serde(rename_all = "camelCase")]
pub struct McpServerSpec {
    /// Number of nodes (pods) in the Raft group. Odd numbers tolerate the most failures per node.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1))]
    pub replicas: i32,
    /// Container image of the switchboard node (runs `switchboard serve`).
    #[schemars(length(min = 1))]
    pub image: String,
    /// Image pull policy of the node container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<PullPolicy>,
    /// How long tools wait for answers, and how long idle sessions live.
    #[serde(default)]
    pub timeouts: Timeouts,
    /// Raft timing.
    #[serde(default)]
    pub raft: RaftTiming,
    /// How long a stopping pod (rolling update, drain, scale-down) has: it turns not-ready,
    /// hands Raft leadership over, and lets its running calls finish for all but the last 10
    /// seconds; calls still waiting for an answer then end with an error telling the client to
    /// call again. Raise it towards the elicitation timeout to let long questions finish.
    #[serde(default = "default_termination_grace_period_seconds")]
    #[schemars(range(min = 15, max = 3600))]
    pub termination_grace_period_seconds: i64,
    /// The persistent volume of each node's Raft log. Fixed after creation.
    #[serde(default)]
    pub storage: Storage,
    /// Compute resources of the node container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Extra environment variables of the node container (names the operator sets are refused).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Node labels a pod must match to be scheduled.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of the node pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Affinity of the node pods. Without it, pods prefer to spread over hosts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// How the node pods spread over zones or hosts (as in a pod spec).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    /// Priority class of the node pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub priority_class_name: Option<String>,
    /// Secrets the kubelet pulls the node image with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// Service account of the node pods (they never call the Kubernetes API, so its token is not
    /// mounted). Without it: the namespace's `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub service_account_name: Option<String>,
    /// Extra annotations of the node pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_annotations: BTreeMap<String, String>,
    /// Extra labels of the node pods; the operator's own (`app.kubernetes.io/name`, `instance`,
    /// `managed-by`, `component`) cannot be set here.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(validation = Rule::new(POD_LABELS_RULE).message(POD_LABELS_MESSAGE))]
    pub pod_labels: BTreeMap<String, String>,
    /// Replaces the pod security context (default: user and group 65532, non-root,
    /// `RuntimeDefault` seccomp).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_security_context: Option<PodSecurityContext>,
    /// Replaces the node container's security context (default: non-root 65532, read-only root
    /// filesystem, no privilege escalation, every capability dropped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,
    /// Environment variables from Secrets and ConfigMaps. Variables the operator sets win.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub env_from: Vec<EnvFromSource>,
    /// Extra volumes of the node pods (`data`, `secret` and `tmp` are the operator's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new(VOLUMES_RULE).message(VOLUMES_MESSAGE))]
    pub volumes: Vec<Volume>,
    /// Extra mounts of the node container, of volumes listed in `volumes`, never over the
    /// operator's paths (`/var/lib/switchboard`, `/etc/switchboard/secret`, `/tmp`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new(VOLUME_MOUNTS_RULE).message(VOLUME_MOUNTS_MESSAGE))]
    pub volume_mounts: Vec<VolumeMount>,
    /// A Secret holding the cluster secret (key `cluster-secret`) and the id-encryption key (key
    /// `encryption-key`, 64 hex characters). Without it the operator generates one, once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
    /// The Service clients reach the MCP endpoint through.
    #[serde(default)]
    pub service: ServiceSettings,
    /// Extra names the MCP endpoint accepts in the `Host` header (an Ingress or LoadBalancer
    /// name, say), besides the ones the operator always lists: the client Service's DNS names
    /// (`NAME`, `NAME.NAMESPACE`, `NAME.NAMESPACE.svc`, `NAME.NAMESPACE.svc.CLUSTER_DOMAIN`) and
    /// loopback (for `kubectl port-forward`). No port, no scheme. `*` accepts any Host; the
    /// Origin check stays.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(max = 253)))]
    #[x_kube(validation = Rule::new(allowed_hosts_rule()).message(ALLOWED_HOSTS_MESSAGE))]
    pub allowed_hosts: Vec<String>,
    /// Origins browser clients may send (`https://app.example.com`, `http://localhost:5173`):
    /// `http` or `https`, a host, an optional port; never `*`. Without any, the node accepts
    /// `http` and `https` on any port of each allowed host. Requests without `Origin` (clients
    /// that are not browsers) are always accepted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(max = 270)))]
    #[x_kube(validation = Rule::new(allowed_origins_rule()).message(ALLOWED_ORIGINS_MESSAGE))]
    pub allowed_origins: Vec<String>,
}

/// The CEL rule of `spec.allowedHosts`: each entry as
/// [`switchboard_contract::origin::parse_allowed_host`] reads it.
pub fn allowed_hosts_rule() -> String {
    format!("self.all(h, size(h) <= {} && h.matches(r'{}'))", origin::MAX_HOST_LEN, origin::HOST_PATTERN)
}
/// The message shown when [`allowed_hosts_rule`] fails.
pub const ALLOWED_HOSTS_MESSAGE: &str =
    "allowedHosts entries must be *, a DNS name, an IPv4 address or a bracketed IPv6 address ([::1]), without port or scheme";

/// The CEL rule of `spec.allowedOrigins`: each entry as
/// [`switchboard_contract::origin::parse_allowed_origin`] reads it (so never `*`).
pub fn allowed_origins_rule() -> String {
    format!("self.all(o, o.matches(r'{}'))", origin::ORIGIN_PATTERN)
}
/// The message shown when [`allowed_origins_rule`] fails.
pub const ALLOWED_ORIGINS_MESSAGE: &str =
    "allowedOrigins entries must be http://HOST or https://HOST with an optional :PORT (no *, no path, no trailing slash)";

fn default_replicas() -> i32 {
    3
}

/// Seconds a stopping pod has by default (see [`McpServerSpec::termination_grace_period_seconds`]).
pub const DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS: i64 = 60;
/// What a stopping pod keeps for itself after its calls' share of the grace period: the
/// leadership hand-off and closing Raft.
pub const STOP_MARGIN_SECONDS: i64 = 10;

fn default_termination_grace_period_seconds() -> i64 {
    DEFAULT_TERMINATION_GRACE_PERIOD_SECONDS
}

/// When the kubelet pulls the node image.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

impl PullPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            PullPolicy::Always => "Always",
            PullPolicy::IfNotPresent => "IfNotPresent",
            PullPolicy::Never => "Never",
        }
    }
}

/// Timeouts, as durations such as `250ms`, `30s`, `5m` or `1h` (a bare number is seconds).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Timeouts {
    /// How long a tool waits for the user to answer an elicitation.
    #[serde(default = "default_elicitation")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new(DURATION_RULE).message(DURATION_MESSAGE))]
    pub elicitation: String,
    /// How long a tool waits for the client's LLM to answer a sampling request.
    #[serde(default = "default_sampling")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new(DURATION_RULE).message(DURATION_MESSAGE))]
    pub sampling: String,
    /// How long an idle MCP session stays valid.
    #[serde(default = "default_session")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new(DURATION_RULE).message(DURATION_MESSAGE))]
    pub session: String,
}

fn default_elicitation() -> String {
    "5m".into()
}
fn default_sampling() -> String {
    "10m".into()
}
fn default_session() -> String {
    "1h".into()
}

impl Default for Timeouts {
    fn default() -> Self {
        Self { elicitation: default_elicitation(), sampling: default_sampling(), session: default_session() }
    }
}

/// Raft timing, as durations. The heartbeat must be shorter than the election timeout.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(RAFT_TIMING_RULE).message("raft.heartbeatInterval must be shorter than raft.electionTimeout"))]
pub struct RaftTiming {
    /// How often the leader sends heartbeats.
    #[serde(default = "default_heartbeat")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new(DURATION_RULE).message(DURATION_MESSAGE))]
    pub heartbeat_interval: String,
    /// Minimum election timeout (the maximum, and the followers' leader lease, is 1.25 times this).
    #[serde(default = "default_election")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new(DURATION_RULE).message(DURATION_MESSAGE))]
    pub election_timeout: String,
}

fn default_heartbeat() -> String {
    "100ms".into()
}
fn default_election() -> String {
    "1s".into()
}

impl Default for RaftTiming {
    fn default() -> Self {
        Self { heartbeat_interval: default_heartbeat(), election_timeout: default_election() }
    }
}

/// The persistent volume claim of each node.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self == oldSelf").message("storage cannot change after creation (a StatefulSet's volume claims are fixed)"))]
pub struct Storage {
    /// Size of each node's volume.
    #[serde(default = "default_storage_size")]
    pub size: Quantity,
    /// Storage class of the volumes (the cluster default when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

fn default_storage_size() -> Quantity {
    Quantity("1Gi".into())
}

impl Default for Storage {
    fn default() -> Self {
        Self { size: default_storage_size(), storage_class_name: None }
    }
}

/// A Secret in the McpServer's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct SecretRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// The client-facing Service.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(SERVICE_RULE).message(SERVICE_MESSAGE))]
pub struct ServiceSettings {
    /// Service type.
    #[serde(default, rename = "type")]
    pub type_: ServiceType,
    /// Port of the MCP endpoint on the Service (the pods listen on 8080).
    #[serde(default = "default_service_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// Annotations of the client Service (a cloud load balancer's settings, say).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// `Cluster` or `Local` (keeps client source addresses); NodePort and LoadBalancer only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_traffic_policy: Option<TrafficPolicy>,
    /// CIDRs allowed to reach a LoadBalancer Service (`203.0.113.0/24`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), inner(length(max = 43)))]
    pub load_balancer_source_ranges: Vec<String>,
}

/// `spec.service.externalTrafficPolicy`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrafficPolicy {
    Cluster,
    Local,
}

impl TrafficPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            TrafficPolicy::Cluster => "Cluster",
            TrafficPolicy::Local => "Local",
        }
    }
}

fn default_service_port() -> i32 {
    8080
}

impl Default for ServiceSettings {
    fn default() -> Self {
        Self {
            type_: ServiceType::default(),
            port: default_service_port(),
            annotations: BTreeMap::new(),
            external_traffic_policy: None,
            load_balancer_source_ranges: Vec::new(),
        }
    }
}

/// Kubernetes Service types the operator supports.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ServiceType {
    #[default]
    ClusterIP,
    NodePort,
    LoadBalancer,
}

impl ServiceType {
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceType::ClusterIP => "ClusterIP",
            ServiceType::NodePort => "NodePort",
            ServiceType::LoadBalancer => "LoadBalancer",
        }
    }
}

/// Observed state, written by the operator.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct McpServerStatus {
    /// Pods the StatefulSet currently has.
    #[serde(default)]
    pub replicas: i32,
    /// Pods that are serving (ready).
    #[serde(default)]
    pub ready_replicas: i32,
    /// Label selector of the pods, for the scale subresource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Pod of the current Raft leader, from the node admin API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
    /// Members of the Raft group, from the node admin API.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<Member>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Progressing` and `Degraded`, following the Kubernetes API conventions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// One member of the Raft group.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    /// Raft node id (the pod's ordinal).
    pub id: u64,
    /// The pod.
    pub pod: String,
    /// Voter or Learner.
    pub role: MemberRole,
}

/// Whether a member votes.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberRole {
    Voter,
    Learner,
}

/// Condition types.
pub mod condition {
    pub const READY: &str = "Ready";
    pub const PROGRESSING: &str = "Progressing";
    pub const DEGRADED: &str = "Degraded";
    /// False when the replica count tolerates no failure (1 or 2) or no more than the odd count
    /// below it (an even count).
    pub const FAULT_TOLERANT: &str = "FaultTolerant";
}

/// The CRD as YAML: what `switchboard-operator crd` prints and `crds/mcpserver.yaml` holds.
pub fn crd_yaml() -> crate::Result<String> {
    let crd = McpServer::crd();
    let yaml = serde_saphyr::to_string(&crd).map_err(|e| crate::Error::Serialization(e.to_string()))?;
    Ok(format!("# Generated by `switchboard-operator crd`; do not edit.\n---\n{yaml}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::cel::{validate_cel, validate_cel_update};

    const COMMITTED: &str = include_str!("../../crds/mcpserver.yaml");

    #[test]
    fn committed_crd_matches_the_generated_one() {
        let generated = crd_yaml().unwrap();
        assert!(
            generated == COMMITTED,
            "crds/mcpserver.yaml is stale; regenerate it with\n  cargo run -p switchboard-operator -- crd > crds/mcpserver.yaml\n(and copy it to charts/switchboard-operator/crds/)"
        );
    }

    #[test]
    fn crd_names_scope_and_subresources() {
        let crd = McpServer::crd();
        assert_eq!(crd.metadata.name.as_deref(), Some("mcpservers.switchboard.dev"));
        assert_eq!(crd.spec.group, "switchboard.dev");
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.names.kind, "McpServer");
        assert_eq!(crd.spec.names.plural, "mcpservers");
        assert_eq!(crd.spec.names.short_names, Some(vec!["mcps".to_string()]));
        assert_eq!(crd.spec.names.categories, Some(vec!["switchboard".to_string()]), "kubectl get switchboard lists them");
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        let sub = version.subresources.as_ref().unwrap();
        assert!(sub.status.is_some());
        let scale = sub.scale.as_ref().unwrap();
        assert_eq!(scale.spec_replicas_path, ".spec.replicas");
        assert_eq!(scale.status_replicas_path, ".status.replicas");
        assert_eq!(scale.label_selector_path.as_deref(), Some(".status.selector"));
        let columns: Vec<&str> = version.additional_printer_columns.as_ref().unwrap().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(columns, vec!["Replicas", "Ready", "Leader", "Age"]);
    }

    #[test]
    fn schema_defaults_match_the_issue() {
        let schema = serde_json::to_value(McpServer::crd().spec.versions[0].schema.clone().unwrap().open_api_v3_schema.unwrap()).unwrap();
        let spec = &schema["properties"]["spec"]["properties"];
        assert_eq!(spec["replicas"]["default"], 3);
        assert_eq!(spec["replicas"]["minimum"], 1.0);
        assert_eq!(spec["timeouts"]["default"], serde_json::json!({"elicitation": "5m", "sampling": "10m", "session": "1h"}));
        assert_eq!(spec["service"]["default"], serde_json::json!({"type": "ClusterIP", "port": 8080}));
        assert_eq!(schema["properties"]["spec"]["required"], serde_json::json!(["image"]));
    }

    fn cel_messages(mcp: &McpServer) -> Vec<String> {
        match validate_cel(mcp) {
            Ok(()) => vec![],
            Err(e) => e.into_vec().into_iter().map(|e| e.message).collect(),
        }
    }

    #[test]
    fn cel_accepts_defaults_and_every_field_set() {
        assert_eq!(cel_messages(&McpServer::test()), Vec::<String>::new());
        assert_eq!(cel_messages(&McpServer::fully_specified()), Vec::<String>::new());
    }

    #[test]
    fn cel_guards_the_operators_labels_volumes_paths_and_service_options() {
        let with = |fields: serde_json::Value| {
            let mut value = serde_json::to_value(McpServer::test()).unwrap();
            for (k, v) in fields.as_object().unwrap() {
                value["spec"][k] = v.clone();
            }
            serde_json::from_value::<McpServer>(value).unwrap()
        };
        let cases = [
            (serde_json::json!({"podLabels": {"app.kubernetes.io/name": "x"}}), POD_LABELS_MESSAGE),
            (serde_json::json!({"volumes": [{"name": "secret", "emptyDir": {}}]}), VOLUMES_MESSAGE),
            (serde_json::json!({"volumeMounts": [{"name": "x", "mountPath": "/tmp"}]}), VOLUME_MOUNTS_MESSAGE),
            (serde_json::json!({"volumeMounts": [{"name": "x", "mountPath": "/etc/switchboard/secret/extra"}]}), VOLUME_MOUNTS_MESSAGE),
            (serde_json::json!({"volumeMounts": [{"name": "data", "mountPath": "/opt/data"}]}), VOLUME_MOUNTS_MESSAGE),
            (serde_json::json!({"service": {"type": "ClusterIP", "externalTrafficPolicy": "Local"}}), SERVICE_MESSAGE),
            (serde_json::json!({"service": {"type": "NodePort", "loadBalancerSourceRanges": ["10.0.0.0/8"]}}), SERVICE_MESSAGE),
        ];
        for (fields, message) in cases {
            assert_eq!(cel_messages(&with(fields.clone())), vec![message.to_string()], "{fields}");
        }
        let fine = serde_json::json!({"podLabels": {"team": "a"}, "volumes": [{"name": "x", "emptyDir": {}}],
            "volumeMounts": [{"name": "x", "mountPath": "/opt/x"}], "service": {"type": "NodePort", "externalTrafficPolicy": "Local"}});
        assert_eq!(cel_messages(&with(fine)), Vec::<String>::new());
    }

    #[test]
    fn cel_refuses_durations_the_node_cannot_parse() {
        for bad in ["0", "0s", "1h30m", "5d", "-1m", "1.5s", "1.5", "soon", "1234567890"] {
            let messages = cel_messages(&McpServer::test().timeouts(bad, "10m", "1h"));
            assert_eq!(messages, vec![DURATION_MESSAGE.to_string()], "{bad:?}");
        }
        let messages = cel_messages(&McpServer::test().raft("100ms", "1x"));
        assert!(messages.contains(&DURATION_MESSAGE.to_string()), "{messages:?}");
    }

    #[test]
    fn cel_and_the_operator_agree_on_durations() {
        let table = [
            "1ms",
            "250ms",
            "30s",
            "5m",
            "1h",
            "999999999ms",
            "5",
            "0m",
            "1h30m",
            "5 m",
            "m",
            "1e3s",
            "10d",
            "01s",
            // Bare numbers are seconds.
            "7",
            "30",
            "01",
            "999999999",
            "0",
            "000",
            "1234567890",
            "-5",
            "+5",
            "1.5",
            " 5",
            "5 ",
            "",
        ];
        for text in table {
            let cel_ok = cel_messages(&McpServer::test().timeouts(text, "10m", "1h")).is_empty();
            let rust_ok = switchboard_contract::duration::parse_duration(text).is_ok();
            assert_eq!(cel_ok, rust_ok, "{text:?}: CEL says {cel_ok}, the operator says {rust_ok}");
        }
    }

    #[test]
    fn cel_requires_heartbeat_below_election_timeout() {
        let expected = vec!["raft.heartbeatInterval must be shorter than raft.electionTimeout".to_string()];
        assert_eq!(cel_messages(&McpServer::test().raft("1s", "1s")), expected);
        assert_eq!(cel_messages(&McpServer::test().raft("2s", "1000ms")), expected);
        assert!(cel_messages(&McpServer::test().raft("999ms", "1s")).is_empty());
        // Bare numbers are seconds here too.
        assert_eq!(cel_messages(&McpServer::test().raft("1", "1s")), expected);
        assert_eq!(cel_messages(&McpServer::test().raft("1500ms", "1")), expected);
        assert!(cel_messages(&McpServer::test().raft("999ms", "1")).is_empty());
        assert!(cel_messages(&McpServer::test().raft("1", "2")).is_empty());
    }

    #[test]
    fn cel_refuses_a_wildcard_origin() {
        let messages = cel_messages(&McpServer::test().allowed_origins(&["https://app.example.com", "*"]));
        assert_eq!(messages, vec![ALLOWED_ORIGINS_MESSAGE.to_string()]);
        let messages = cel_messages(&McpServer::test().allowed_hosts(&["mcp.example.com:443"]));
        assert_eq!(messages, vec![ALLOWED_HOSTS_MESSAGE.to_string()]);
        assert!(cel_messages(&McpServer::test().allowed_hosts(&["*"]).allowed_origins(&["http://localhost:5173"])).is_empty());
    }

    #[test]
    fn cel_and_the_operator_agree_on_hosts_and_origins() {
        let hosts = [
            "*",
            "localhost",
            "127.0.0.1",
            "[::1]",
            "[2001:db8::7]",
            "mcp.example.com",
            "MCP.Example.com",
            "a-b.c9",
            "",
            "**",
            "*.example.com",
            "example.com:8080",
            "http://example.com",
            "-a.com",
            "a-.com",
            "a..b",
            "a b",
            "a,b",
            "::1",
            "[x]",
            "example.com.",
            "a_b.com",
        ];
        let long_host = "a.".repeat(126) + "ab";
        let too_long_host = "a.".repeat(127) + "a";
        let long_label = "a".repeat(64);
        for text in hosts.iter().copied().chain([long_host.as_str(), too_long_host.as_str(), long_label.as_str()]) {
            let cel_ok = cel_messages(&McpServer::test().allowed_hosts(&[text])).is_empty();
            let rust_ok = origin::parse_allowed_host(text).is_ok();
            assert_eq!(cel_ok, rust_ok, "host {text:?}: CEL says {cel_ok}, the operator says {rust_ok}");
        }
        let origins = [
            "https://app.example.com",
            "http://localhost:5173",
            "http://[::1]:8080",
            "https://h:65535",
            "https://h:1",
            "https://App.Example.com",
            "*",
            "https://*.example.com",
            "",
            "null",
            "example.com",
            "ftp://example.com",
            "HTTP://example.com",
            "https://example.com/",
            "https://example.com/app",
            "https://user@example.com",
            "https://example.com:",
            "https://example.com:0",
            "https://example.com:080",
            "https://example.com:65536",
            "https://example.com:70000",
            "https://example.com:123456",
            "https://exa mple.com",
            "https://",
            "https://[::1",
            "https://a,b",
        ];
        for text in origins {
            let cel_ok = cel_messages(&McpServer::test().allowed_origins(&[text])).is_empty();
            let rust_ok = origin::parse_allowed_origin(text).is_ok();
            assert_eq!(cel_ok, rust_ok, "origin {text:?}: CEL says {cel_ok}, the operator says {rust_ok}");
        }
    }

    #[test]
    fn cel_limits_the_name_length() {
        let messages = cel_messages(&McpServer::test().named(&"a".repeat(53)));
        assert_eq!(messages.len(), 1);
        assert!(messages[0].starts_with("metadata.name must be at most 52 characters"));
        assert!(cel_messages(&McpServer::test().named(&"a".repeat(52))).is_empty());
    }

    #[test]
    fn cel_keeps_storage_and_secret_ref_fixed_but_allows_other_changes() {
        let old = McpServer::test();
        let mut bigger = McpServer::test();
        bigger.spec.storage.size = Quantity("2Gi".into());
        let messages: Vec<String> = validate_cel_update(&bigger, &old).unwrap_err().into_vec().into_iter().map(|e| e.message).collect();
        assert!(messages[0].starts_with("storage cannot change after creation"), "{messages:?}");

        let referenced = McpServer::test().secret_ref("mcp-keys");
        let messages: Vec<String> = validate_cel_update(&referenced, &old).unwrap_err().into_vec().into_iter().map(|e| e.message).collect();
        assert!(messages[0].starts_with("secretRef cannot change after creation"), "{messages:?}");

        let retuned = McpServer::test().timeouts("6m", "10m", "1h").replicas(5);
        assert!(validate_cel_update(&retuned, &old).is_ok());
    }
}

#[cfg(test)]
mod example_tests {
    use super::*;
    use kube::core::cel::validate_cel;

    const EXAMPLE: &str = include_str!("../../charts/switchboard-operator/examples/mcpserver.yaml");

    #[test]
    fn the_chart_example_is_a_valid_mcpserver() {
        let mut mcp: McpServer = serde_saphyr::from_str(EXAMPLE).expect("example parses as an McpServer");
        assert_eq!(mcp.spec.replicas, 3);
        assert_eq!(mcp.spec.timeouts, Timeouts::default());
        mcp.metadata.namespace = Some("default".into());
        crate::validate::validate(&mcp).expect("example passes the operator's validation");
        validate_cel(&mcp).expect("example passes the CRD's CEL rules");
    }
}
