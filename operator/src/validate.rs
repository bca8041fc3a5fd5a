//! Pure validation of an `McpServer` before anything is built.
//!
//! The CRD's schema and CEL rules already refuse most bad specs at the API server; this repeats
//! them (an older CRD may be installed, or none of its rules may run in a test) and adds the
//! checks CEL cannot express, such as environment variables that would clash with the ones the
//! operator sets. Every problem found is reported, each as one clear sentence.

use std::collections::BTreeSet;

use kube::ResourceExt;
use switchboard_contract::duration::parse_duration;
use switchboard_contract::origin::{parse_allowed_host, parse_allowed_origin};

use crate::builders::RESERVED_ENV;
use crate::crd::{McpServer, RESERVED_MOUNT_PATHS, RESERVED_POD_LABELS, RESERVED_VOLUMES, ServiceType};
use crate::{Error, Result};

/// Longest `metadata.name`: pods are `NAME-ORDINAL` and the StatefulSet's revision label adds a
/// hash, all within a 63-character label value.
pub const MAX_NAME_LEN: usize = 52;

/// `address/prefix`, IPv4 or IPv6, the prefix within the address's length.
fn is_cidr(text: &str) -> bool {
    let Some((address, prefix)) = text.split_once('/') else { return false };
    let (Ok(address), Ok(prefix)) = (address.parse::<std::net::IpAddr>(), prefix.parse::<u8>()) else { return false };
    prefix <= if address.is_ipv4() { 32 } else { 128 }
}

/// Check an `McpServer`; `Err(Error::InvalidSpec)` lists every problem, separated by `; `.
pub fn validate(mcp: &McpServer) -> Result<()> {
    let problems = problems(mcp);
    if problems.is_empty() { Ok(()) } else { Err(Error::InvalidSpec(problems.join("; "))) }
}

/// Every problem with an `McpServer`, in the order of its fields.
pub fn problems(mcp: &McpServer) -> Vec<String> {
    let mut out = Vec::new();
    let spec = &mcp.spec;
    let name = mcp.name_any();
    if name.len() > MAX_NAME_LEN {
        out.push(format!("metadata.name {name:?} is {} characters long; at most {MAX_NAME_LEN} are allowed", name.len()));
    }
    if spec.replicas < 1 {
        out.push(format!("spec.replicas is {}, but at least 1 is needed", spec.replicas));
    }
    if !(15..=3600).contains(&spec.termination_grace_period_seconds) {
        out.push(format!(
            "spec.terminationGracePeriodSeconds is {}, but it must be between 15 and 3600",
            spec.termination_grace_period_seconds
        ));
    }
    if spec.image.trim().is_empty() {
        out.push("spec.image is empty; name the switchboard node image".into());
    } else if spec.image.chars().any(char::is_whitespace) {
        out.push(format!("spec.image {:?} contains whitespace", spec.image));
    }
    let mut duration = |field: &str, text: &str| match parse_duration(text) {
        Ok(d) => Some(d),
        Err(e) => {
            out.push(format!("spec.{field}: {e}"));
            None
        }
    };
    duration("timeouts.elicitation", &spec.timeouts.elicitation);
    duration("timeouts.sampling", &spec.timeouts.sampling);
    duration("timeouts.session", &spec.timeouts.session);
    let heartbeat = duration("raft.heartbeatInterval", &spec.raft.heartbeat_interval);
    let election = duration("raft.electionTimeout", &spec.raft.election_timeout);
    if let (Some(h), Some(e)) = (heartbeat, election)
        && h >= e
    {
        out.push(format!(
            "spec.raft.heartbeatInterval ({}) must be shorter than spec.raft.electionTimeout ({})",
            spec.raft.heartbeat_interval, spec.raft.election_timeout
        ));
    }
    if !spec.storage.size.0.starts_with(|c: char| c.is_ascii_digit()) {
        out.push(format!("spec.storage.size {:?} is not a quantity such as 1Gi", spec.storage.size.0));
    }
    if let Some(class) = &spec.storage.storage_class_name
        && !is_dns_subdomain(class)
    {
        out.push(format!("spec.storage.storageClassName {class:?} is not a valid name"));
    }
    let mut seen = BTreeSet::new();
    for var in &spec.env {
        if var.name.is_empty() {
            out.push("spec.env has an entry without a name".into());
        } else if RESERVED_ENV.contains(&var.name.as_str()) {
            out.push(format!("spec.env sets {}, which the operator manages; use the McpServer field instead", var.name));
        } else if !seen.insert(var.name.as_str()) {
            out.push(format!("spec.env sets {} twice", var.name));
        }
    }
    if let Some(secret) = &spec.secret_ref
        && !is_dns_subdomain(&secret.name)
    {
        out.push(format!("spec.secretRef.name {:?} is not a valid Secret name", secret.name));
    }
    if !(1..=65535).contains(&spec.service.port) {
        out.push(format!("spec.service.port {} is outside 1-65535", spec.service.port));
    }
    for key in spec.pod_labels.keys() {
        if RESERVED_POD_LABELS.contains(&key.as_str()) {
            out.push(format!("spec.podLabels sets {key}, which the operator's selector uses"));
        }
    }
    let mut volumes = BTreeSet::new();
    for volume in &spec.volumes {
        if RESERVED_VOLUMES.contains(&volume.name.as_str()) {
            out.push(format!("spec.volumes has a volume called {}, a name the operator uses", volume.name));
        } else if !volumes.insert(volume.name.as_str()) {
            out.push(format!("spec.volumes has two volumes called {}", volume.name));
        }
    }
    for mount in &spec.volume_mounts {
        let path = mount.mount_path.trim_end_matches('/');
        if RESERVED_MOUNT_PATHS
            .iter()
            .any(|reserved| path == *reserved || (*reserved != "/tmp" && path.starts_with(&format!("{reserved}/"))))
        {
            out.push(format!("spec.volumeMounts mounts {} over a path the operator uses", mount.mount_path));
        }
        if !volumes.contains(mount.name.as_str()) {
            out.push(format!("spec.volumeMounts mounts {}, which is not in spec.volumes", mount.name));
        }
    }
    let service = &spec.service;
    if service.external_traffic_policy.is_some() && service.type_ == ServiceType::ClusterIP {
        out.push("spec.service.externalTrafficPolicy needs type NodePort or LoadBalancer".into());
    }
    if !service.load_balancer_source_ranges.is_empty() && service.type_ != ServiceType::LoadBalancer {
        out.push("spec.service.loadBalancerSourceRanges needs type LoadBalancer".into());
    }
    for range in &service.load_balancer_source_ranges {
        if !is_cidr(range) {
            out.push(format!("spec.service.loadBalancerSourceRanges entry {range:?} is not a CIDR such as 203.0.113.0/24"));
        }
    }
    for (i, host) in spec.allowed_hosts.iter().enumerate() {
        if let Err(e) = parse_allowed_host(host) {
            out.push(format!("spec.allowedHosts[{i}]: {e}"));
        }
    }
    for (i, origin) in spec.allowed_origins.iter().enumerate() {
        if let Err(e) = parse_allowed_origin(origin) {
            out.push(format!("spec.allowedOrigins[{i}]: {e}"));
        }
    }
    for (field, list) in [("allowedHosts", &spec.allowed_hosts), ("allowedOrigins", &spec.allowed_origins)] {
        if list.len() > MAX_ALLOWED {
            out.push(format!("spec.{field} has {} entries; at most {MAX_ALLOWED} are allowed", list.len()));
        }
    }
    out
}

/// Most entries of `spec.allowedHosts` and of `spec.allowedOrigins` (the CRD's `maxItems`).
pub const MAX_ALLOWED: usize = 32;

/// A DNS-1123 subdomain: lower-case alphanumerics, `-` and `.`, at most 253 characters.
fn is_dns_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_read_as_the_node_reads_them() {
        let mcp = McpServer::test().timeouts("30", "250ms", "1h").raft("100ms", "2");
        assert_eq!(problems(&mcp), Vec::<String>::new(), "a bare number is seconds");
        let mcp = McpServer::test().raft("3", "2");
        assert_eq!(problems(&mcp), vec!["spec.raft.heartbeatInterval (3) must be shorter than spec.raft.electionTimeout (2)".to_string()]);
    }

    #[test]
    fn dns_subdomains() {
        assert!(is_dns_subdomain("fast-ssd"));
        assert!(is_dns_subdomain("a.b-c.d"));
        for bad in ["", "Upper", "-a", "a-", "a..b", "a_b"] {
            assert!(!is_dns_subdomain(bad), "{bad:?}");
        }
    }
}

#[cfg(test)]
mod spec_tests {
    use super::*;
    use crate::crd::McpServer;
    use serde_json::json;

    fn message(mcp: &McpServer) -> String {
        match validate(mcp) {
            Err(Error::InvalidSpec(m)) => m,
            other => panic!("expected an invalid spec, got {other:?}"),
        }
    }

    #[test]
    fn defaults_and_every_field_set_are_valid() {
        assert_eq!(problems(&McpServer::test()), Vec::<String>::new());
        assert_eq!(problems(&McpServer::fully_specified()), Vec::<String>::new());
    }

    /// The test McpServer with `fields` merged into its spec.
    fn with(fields: serde_json::Value) -> McpServer {
        let mut value = serde_json::to_value(McpServer::test()).unwrap();
        for (k, v) in fields.as_object().unwrap() {
            value["spec"][k] = v.clone();
        }
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn invalid_specs_are_refused_with_clear_messages() {
        let cases: Vec<(McpServer, &str)> = vec![
            (McpServer::test().replicas(0), "spec.replicas is 0, but at least 1 is needed"),
            (McpServer::test().image(""), "spec.image is empty"),
            (with(json!({"podLabels": {"app.kubernetes.io/instance": "other"}})), "spec.podLabels sets app.kubernetes.io/instance"),
            (with(json!({"volumes": [{"name": "data", "emptyDir": {}}]})), "a volume called data, a name the operator uses"),
            (with(json!({"volumes": [{"name": "x", "emptyDir": {}}, {"name": "x", "emptyDir": {}}]})), "two volumes called x"),
            (
                with(
                    json!({"volumes": [{"name": "x", "emptyDir": {}}], "volumeMounts": [{"name": "x", "mountPath": "/var/lib/switchboard/raft"}]}),
                ),
                "mounts /var/lib/switchboard/raft over a path the operator uses",
            ),
            (with(json!({"volumeMounts": [{"name": "nope", "mountPath": "/opt/x"}]})), "mounts nope, which is not in spec.volumes"),
            (with(json!({"service": {"externalTrafficPolicy": "Local"}})), "externalTrafficPolicy needs type NodePort or LoadBalancer"),
            (
                with(json!({"service": {"type": "NodePort", "loadBalancerSourceRanges": ["10.0.0.0/8"]}})),
                "loadBalancerSourceRanges needs type LoadBalancer",
            ),
            (
                with(json!({"service": {"type": "LoadBalancer", "loadBalancerSourceRanges": ["10.0.0.0/33"]}})),
                "\"10.0.0.0/33\" is not a CIDR",
            ),
            (
                {
                    let mut short = McpServer::test();
                    short.spec.termination_grace_period_seconds = 5;
                    short
                },
                "spec.terminationGracePeriodSeconds is 5, but it must be between 15 and 3600",
            ),
            (McpServer::test().image("switchboard: latest"), "contains whitespace"),
            (McpServer::test().timeouts("1.5m", "10m", "1h"), r#"spec.timeouts.elicitation: "1.5m" has a fraction"#),
            (McpServer::test().timeouts("5m", "10d", "1h"), r#"spec.timeouts.sampling: "10d" has an unknown unit "d""#),
            (McpServer::test().timeouts("5m", "10m", "0h"), r#"spec.timeouts.session: "0h" must be greater than zero"#),
            (McpServer::test().raft("1s", "1s"), "spec.raft.heartbeatInterval (1s) must be shorter than spec.raft.electionTimeout (1s)"),
            (McpServer::test().raft("100ms", "soon"), "spec.raft.electionTimeout"),
            (McpServer::test().env("SWITCHBOARD_PEERS", "0=x:1"), "spec.env sets SWITCHBOARD_PEERS, which the operator manages"),
            (McpServer::test().env("SWITCHBOARD_LOG", "debug").env("SWITCHBOARD_LOG", "info"), "spec.env sets SWITCHBOARD_LOG twice"),
            (McpServer::test().secret_ref("Bad_Name"), r#"spec.secretRef.name "Bad_Name" is not a valid Secret name"#),
            (McpServer::test().service_port(0), "spec.service.port 0 is outside 1-65535"),
            (McpServer::test().named(&"x".repeat(53)), "is 53 characters long; at most 52 are allowed"),
            (McpServer::test().allowed_origins(&["https://app.example.com", "*"]), "spec.allowedOrigins[1]: \"*\": * is not an origin"),
            (
                McpServer::test().allowed_origins(&["https://app.example.com/"]),
                "spec.allowedOrigins[0]: \"https://app.example.com/\" is not an origin",
            ),
            (McpServer::test().allowed_hosts(&["mcp.example.com:443"]), "spec.allowedHosts[0]: \"mcp.example.com:443\" is not a host name"),
            (McpServer::test().allowed_hosts(&["a,b"]), "spec.allowedHosts[0]: \"a,b\" is not a host name"),
            (McpServer::test().allowed_hosts(&["h"; 33]), "spec.allowedHosts has 33 entries; at most 32 are allowed"),
        ];
        for (mcp, expected) in cases {
            let m = message(&mcp);
            assert!(m.contains(expected), "{m:?} should contain {expected:?}");
        }
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let mcp = McpServer::test().replicas(0).timeouts("5x", "10m", "1h").service_port(70000);
        let all = problems(&mcp);
        assert_eq!(all.len(), 3, "{all:?}");
        assert_eq!(message(&mcp).matches("; ").count(), 2);
    }

    #[test]
    fn user_variables_the_operator_does_not_set_are_allowed() {
        let mcp = McpServer::test().env("SWITCHBOARD_TOOLS", "conformance").env("RUST_BACKTRACE", "1");
        assert!(validate(&mcp).is_ok());
    }
}
