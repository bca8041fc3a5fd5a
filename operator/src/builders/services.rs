//! The headless peer Service and the client Service.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{MCP_PORT, METRICS_PORT, PEER_PORT, Target};

fn port(name: &str, port: i32, target_port: i32) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        port,
        target_port: Some(IntOrString::Int(target_port)),
        protocol: Some("TCP".into()),
        app_protocol: None,
        ..ServicePort::default()
    }
}

/// `NAME-peers`: headless, so each pod has a stable DNS name (`NAME-N.NAME-peers...`), and
/// publishing not-ready pods, since a member must reach the others before it can be ready.
pub fn peer_service(target: &Target) -> Service {
    Service {
        metadata: target.meta(target.peer_service_name()),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            publish_not_ready_addresses: Some(true),
            selector: Some(target.selector_labels()),
            ports: Some(vec![port("peer", PEER_PORT, PEER_PORT), port("metrics", METRICS_PORT, METRICS_PORT)]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// `NAME`: the MCP endpoint, load-balanced over the ready pods with no session affinity (any
/// node serves any session).
pub fn client_service(target: &Target) -> Service {
    let settings = &target.mcp.spec.service;
    let mut metadata = target.meta(target.name.clone());
    metadata.annotations = (!settings.annotations.is_empty()).then(|| settings.annotations.clone());
    Service {
        metadata,
        spec: Some(ServiceSpec {
            type_: Some(settings.type_.as_str().into()),
            selector: Some(target.selector_labels()),
            ports: Some(vec![ServicePort { app_protocol: Some("http".into()), ..port("mcp", settings.port, MCP_PORT) }]),
            external_traffic_policy: settings.external_traffic_policy.map(|p| p.as_str().into()),
            load_balancer_source_ranges: (!settings.load_balancer_source_ranges.is_empty())
                .then(|| settings.load_balancer_source_ranges.clone()),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}
