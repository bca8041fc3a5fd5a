//! Pure validation of an `McpServer` before anything is built.
//!
//! The CRD's schema and CEL rules already refuse most bad specs at the API server; this repeats
//! them (an older CRD may be installed, or none of its rules may run in a test) and adds the
//! checks CEL cannot express, such as environment variables that would clash with the ones the
//! operator sets. Every problem found is reported, each as one clear sentence.

use std::collections::BTreeSet;
use std::time::Duration;

use kube::ResourceExt;

use crate::builders::RESERVED_ENV;
use crate::crd::McpServer;
use crate::{Error, Result};

/// Longest `metadata.name`: pods are `NAME-ORDINAL` and the StatefulSet's revision label adds a
/// hash, all within a 63-character label value.
pub const MAX_NAME_LEN: usize = 52;

/// Parse the duration format the node's flags accept and the CRD's CEL rule allows: a whole
/// number followed by `ms`, `s`, `m` or `h`, greater than zero.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() || digits.len() > 9 {
        return Err(format!("{text:?} is not a duration: expected a whole number followed by ms, s, m or h (such as 30s or 5m)"));
    }
    let n: u64 = digits.parse().map_err(|_| format!("{text:?} is not a duration"))?;
    let millis = match unit {
        "ms" => n,
        "s" => n * 1_000,
        "m" => n * 60_000,
        "h" => n * 3_600_000,
        "" => return Err(format!("{text:?} has no unit: write it as {text}s, {text}m, ...")),
        _ => return Err(format!("{text:?} has an unknown unit {unit:?}: use ms, s, m or h")),
    };
    if millis == 0 {
        return Err(format!("{text:?} must be greater than zero"));
    }
    Ok(Duration::from_millis(millis))
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
    out
}

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
    fn durations_in_the_node_format_parse() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
    }

    #[test]
    fn durations_the_node_or_cel_would_refuse_are_refused() {
        for bad in ["", "5", "0s", "1h30m", "5 m", "-1s", "1.5s", "5d", "m", "1234567890s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(parse_duration("5").unwrap_err().contains("no unit"));
        assert!(parse_duration("5d").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("0s").unwrap_err().contains("greater than zero"));
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

    #[test]
    fn invalid_specs_are_refused_with_clear_messages() {
        let cases: Vec<(McpServer, &str)> = vec![
            (McpServer::test().replicas(0), "spec.replicas is 0, but at least 1 is needed"),
            (McpServer::test().image(""), "spec.image is empty"),
            (McpServer::test().image("switchboard: latest"), "contains whitespace"),
            (McpServer::test().timeouts("5", "10m", "1h"), r#"spec.timeouts.elicitation: "5" has no unit"#),
            (McpServer::test().timeouts("5m", "10d", "1h"), r#"spec.timeouts.sampling: "10d" has an unknown unit "d""#),
            (McpServer::test().timeouts("5m", "10m", "0h"), r#"spec.timeouts.session: "0h" must be greater than zero"#),
            (McpServer::test().raft("1s", "1s"), "spec.raft.heartbeatInterval (1s) must be shorter than spec.raft.electionTimeout (1s)"),
            (McpServer::test().raft("100ms", "soon"), "spec.raft.electionTimeout"),
            (McpServer::test().env("SWITCHBOARD_PEERS", "0=x:1"), "spec.env sets SWITCHBOARD_PEERS, which the operator manages"),
            (McpServer::test().env("SWITCHBOARD_LOG", "debug").env("SWITCHBOARD_LOG", "info"), "spec.env sets SWITCHBOARD_LOG twice"),
            (McpServer::test().secret_ref("Bad_Name"), r#"spec.secretRef.name "Bad_Name" is not a valid Secret name"#),
            (McpServer::test().service_port(0), "spec.service.port 0 is outside 1-65535"),
            (McpServer::test().named(&"x".repeat(53)), "is 53 characters long; at most 52 are allowed"),
        ];
        for (mcp, expected) in cases {
            let m = message(&mcp);
            assert!(m.contains(expected), "{m:?} should contain {expected:?}");
        }
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let mcp = McpServer::test().replicas(0).timeouts("5", "10m", "1h").service_port(70000);
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
