//! The PodDisruptionBudget and the NetworkPolicy of the peer port.

use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{MCP_PORT, METRICS_PORT, PEER_PORT, Settings, Target};

fn selector(target: &Target) -> LabelSelector {
    LabelSelector { match_labels: Some(target.selector_labels()), ..LabelSelector::default() }
}

/// How many of `voters` may be down while a majority still stands: 1 of 3, 2 of 5, and none of 1
/// or 2 (a cluster of two needs both to commit).
pub fn tolerated_failures(voters: i32) -> i32 {
    (voters.max(1) - 1) / 2
}

/// `NAME`: voluntary disruptions (drains, evictions) never take the voters below a majority.
/// Pods already unavailable count against the budget, so with one member down a drain waits.
/// Unhealthy pods may always be evicted: they add nothing to the quorum, and a crash-looping pod
/// must not block a node drain.
pub fn pod_disruption_budget(target: &Target) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: target.meta(target.name.clone()),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(tolerated_failures(target.mcp.spec.replicas))),
            selector: Some(selector(target)),
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".into()),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    }
}

fn tcp(port: i32) -> NetworkPolicyPort {
    NetworkPolicyPort { port: Some(IntOrString::Int(port)), protocol: Some("TCP".into()), ..NetworkPolicyPort::default() }
}

/// `NAME-peers`: the pods take MCP and metrics traffic from anywhere, but the peer port (Raft
/// and the admin API) only from the other pods of this McpServer, and from the operator when
/// its namespace and labels are known.
pub fn network_policy(target: &Target, settings: &Settings) -> NetworkPolicy {
    let mut peers = vec![NetworkPolicyPeer { pod_selector: Some(selector(target)), ..NetworkPolicyPeer::default() }];
    if let Some(operator) = &settings.operator {
        peers.push(NetworkPolicyPeer {
            namespace_selector: Some(LabelSelector {
                match_labels: Some([("kubernetes.io/metadata.name".to_string(), operator.namespace.clone())].into()),
                ..LabelSelector::default()
            }),
            pod_selector: Some(LabelSelector { match_labels: Some(operator.labels.clone()), ..LabelSelector::default() }),
            ..NetworkPolicyPeer::default()
        });
    }
    NetworkPolicy {
        metadata: target.meta(target.peer_service_name()),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(selector(target)),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![
                NetworkPolicyIngressRule { ports: Some(vec![tcp(MCP_PORT), tcp(METRICS_PORT)]), from: None },
                NetworkPolicyIngressRule { ports: Some(vec![tcp(PEER_PORT)]), from: Some(peers) },
            ]),
            ..NetworkPolicySpec::default()
        }),
    }
}
