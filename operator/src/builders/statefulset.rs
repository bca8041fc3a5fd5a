//! The StatefulSet: one pod per Raft member, pod ordinal = node id.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, ConfigMapKeySelector, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, HTTPGetAction,
    ObjectFieldSelector, PersistentVolumeClaim, PersistentVolumeClaimSpec, PodAffinityTerm, PodAntiAffinity, PodSecurityContext, PodSpec,
    PodTemplateSpec, Probe, SeccompProfile, SecretVolumeSource, SecurityContext, Volume, VolumeMount, VolumeResourceRequirements,
    WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use switchboard_contract::env;

use super::config::{self, config_hash};
use super::{
    CLUSTER_SECRET_KEY, CONFIG_HASH_ANNOTATION, CONTAINER, DATA_DIR, ENCRYPTION_KEY_KEY, INITIAL_MEMBERS_ANNOTATION, MCP_PORT,
    METRICS_PORT, PEER_PORT, POD_NAME, PREVIOUS_CLUSTER_SECRET_KEY, PREVIOUS_ENCRYPTION_KEY_KEY, Rollout, SECRET_DIR,
    SECRET_HASH_ANNOTATION, Settings, Target,
};

/// The non-root user and group the node runs as (the image's `nonroot` user).
pub const RUN_AS: i64 = 65532;
/// Name of the data volume claim template (PVCs are `data-NAME-N`).
pub const DATA_VOLUME: &str = "data";

/// `--peers`: the founding members `0=host:7070,1=host:7070,...`.
pub fn peers_flag(target: &Target, settings: &Settings, initial_members: i32) -> String {
    (0..initial_members).map(|i| format!("{i}={}", target.peer_address(i, settings))).collect::<Vec<_>>().join(",")
}

/// `--allowed-hosts`: loopback (what `kubectl port-forward` sends), every DNS name of the client
/// Service (what clients in the cluster send), then `spec.allowedHosts`. Never `*` unless the spec
/// says so; and even then no Origin is let in by it (see [`allowed_origins_flag`]).
pub fn allowed_hosts_flag(target: &Target, settings: &Settings) -> String {
    let (name, ns) = (&target.name, &target.namespace);
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "[::1]"].map(String::from).into();
    hosts.extend([
        name.clone(),
        format!("{name}.{ns}"),
        format!("{name}.{ns}.svc"),
        format!("{name}.{ns}.svc.{}", settings.cluster_domain),
    ]);
    for extra in &target.mcp.spec.allowed_hosts {
        if !hosts.iter().any(|h| h.eq_ignore_ascii_case(extra)) {
            hosts.push(extra.clone());
        }
    }
    hosts.join(",")
}

/// `--allowed-origins`: `spec.allowedOrigins`, or `None` for the node's default (`http` and
/// `https` on any port of each allowed host).
pub fn allowed_origins_flag(target: &Target) -> Option<String> {
    let origins = &target.mcp.spec.allowed_origins;
    (!origins.is_empty()).then(|| origins.join(","))
}

fn var(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar { name: name.into(), value: Some(value.into()), value_from: None }
}

fn env_from_config(target: &Target, name: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: None,
        value_from: Some(EnvVarSource {
            config_map_key_ref: Some(ConfigMapKeySelector { name: target.config_map_name(), key: key.into(), optional: None }),
            ..EnvVarSource::default()
        }),
    }
}

/// The node container's environment: every `serve` flag through its `SWITCHBOARD_` twin, then
/// the user's `spec.env`.
pub fn container_env(target: &Target, settings: &Settings, rollout: Rollout) -> Vec<EnvVar> {
    let mut vars = vec![
        EnvVar {
            name: POD_NAME.into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector { field_path: "metadata.name".into(), api_version: None }),
                ..EnvVarSource::default()
            }),
        },
        var(env::LISTEN, format!("0.0.0.0:{MCP_PORT}")),
        var(env::PEER_LISTEN, format!("0.0.0.0:{PEER_PORT}")),
        var(env::METRICS_LISTEN, format!("0.0.0.0:{METRICS_PORT}")),
        // Kubernetes expands $(POD_NAME) from the variable above.
        var(
            env::ADVERTISE_PEER,
            format!("$({POD_NAME}).{}.{}.svc.{}:{PEER_PORT}", target.peer_service_name(), target.namespace, settings.cluster_domain),
        ),
        var(env::PEERS, peers_flag(target, settings, rollout.initial_members)),
        var(env::DATA_DIR, DATA_DIR),
        var(env::CLUSTER_SECRET_FILE, format!("{SECRET_DIR}/{CLUSTER_SECRET_KEY}")),
        var(env::ENCRYPTION_KEY_FILE, format!("{SECRET_DIR}/{ENCRYPTION_KEY_KEY}")),
        // Present only while a rotation is under way; a missing file means none.
        var(env::PREVIOUS_CLUSTER_SECRET_FILE, format!("{SECRET_DIR}/{PREVIOUS_CLUSTER_SECRET_KEY}")),
        var(env::PREVIOUS_ENCRYPTION_KEY_FILE, format!("{SECRET_DIR}/{PREVIOUS_ENCRYPTION_KEY_KEY}")),
        env_from_config(target, env::ELICITATION_TIMEOUT, config::ELICITATION_TIMEOUT),
        env_from_config(target, env::SAMPLING_TIMEOUT, config::SAMPLING_TIMEOUT),
        env_from_config(target, env::SESSION_TTL, config::SESSION_TTL),
        env_from_config(target, env::HEARTBEAT_INTERVAL, config::HEARTBEAT_INTERVAL),
        env_from_config(target, env::ELECTION_TIMEOUT, config::ELECTION_TIMEOUT),
        var(env::DRAIN_TIMEOUT, format!("{}s", drain_seconds(target))),
        var(env::ALLOWED_HOSTS, allowed_hosts_flag(target, settings)),
        var(env::LOG_FORMAT, "json"),
    ];
    if let Some(origins) = allowed_origins_flag(target) {
        vars.push(var(env::ALLOWED_ORIGINS, origins));
    }
    vars.extend(target.mcp.spec.env.iter().cloned());
    vars
}

/// The share of the termination grace period a stopping node gives its running calls.
pub fn drain_seconds(target: &Target) -> i64 {
    (target.mcp.spec.termination_grace_period_seconds - crate::crd::STOP_MARGIN_SECONDS).max(5)
}

fn probe(path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction { path: Some(path.into()), port: IntOrString::Int(METRICS_PORT), ..HTTPGetAction::default() }),
        period_seconds: Some(period),
        failure_threshold: Some(failures),
        timeout_seconds: Some(2),
        ..Probe::default()
    }
}

fn container_port(name: &str, port: i32) -> ContainerPort {
    ContainerPort { name: Some(name.into()), container_port: port, protocol: Some("TCP".into()), ..ContainerPort::default() }
}

/// The node container: `switchboard serve`, configured through the environment.
pub fn container(target: &Target, settings: &Settings, rollout: Rollout) -> Container {
    let spec = &target.mcp.spec;
    Container {
        name: CONTAINER.into(),
        image: Some(spec.image.clone()),
        image_pull_policy: spec.image_pull_policy.map(|p| p.as_str().into()),
        command: Some(vec!["switchboard".into()]),
        args: Some(vec!["serve".into()]),
        env: Some(container_env(target, settings, rollout)),
        ports: Some(vec![container_port("mcp", MCP_PORT), container_port("peer", PEER_PORT), container_port("metrics", METRICS_PORT)]),
        // Ready while the member hears from a quorum; restarted only when the process stops answering.
        readiness_probe: Some(probe("/readyz", 5, 3)),
        liveness_probe: Some(probe("/healthz", 10, 6)),
        resources: spec.resources.clone(),
        security_context: Some(spec.security_context.clone().unwrap_or_else(|| SecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(RUN_AS),
            run_as_group: Some(RUN_AS),
            read_only_root_filesystem: Some(true),
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), add: None }),
            ..SecurityContext::default()
        })),
        // `env` wins over `envFrom` in Kubernetes: the operator's variables stay.
        env_from: (!spec.env_from.is_empty()).then(|| spec.env_from.clone()),
        volume_mounts: Some(
            [
                VolumeMount { name: DATA_VOLUME.into(), mount_path: DATA_DIR.into(), ..VolumeMount::default() },
                VolumeMount { name: "secret".into(), mount_path: SECRET_DIR.into(), read_only: Some(true), ..VolumeMount::default() },
                VolumeMount { name: "tmp".into(), mount_path: "/tmp".into(), ..VolumeMount::default() },
            ]
            .into_iter()
            .chain(spec.volume_mounts.iter().cloned())
            .collect(),
        ),
        ..Container::default()
    }
}

/// Without an affinity in the spec, pods prefer distinct hosts, so one host failing takes one
/// member.
fn affinity(target: &Target) -> Affinity {
    if let Some(affinity) = &target.mcp.spec.affinity {
        return affinity.clone();
    }
    Affinity {
        pod_anti_affinity: Some(PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![WeightedPodAffinityTerm {
                weight: 100,
                pod_affinity_term: PodAffinityTerm {
                    label_selector: Some(LabelSelector { match_labels: Some(target.selector_labels()), ..LabelSelector::default() }),
                    topology_key: "kubernetes.io/hostname".into(),
                    ..PodAffinityTerm::default()
                },
            }]),
            ..PodAntiAffinity::default()
        }),
        ..Affinity::default()
    }
}

/// The pod template. Its config-hash annotation changes with the ConfigMap, which rolls the pods.
pub fn pod_template(target: &Target, settings: &Settings, rollout: Rollout) -> PodTemplateSpec {
    let spec = &target.mcp.spec;
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            // The operator's labels and annotations last: they win over the spec's.
            labels: Some(spec.pod_labels.clone().into_iter().chain(target.labels()).collect()),
            annotations: Some(
                spec.pod_annotations
                    .clone()
                    .into_iter()
                    .chain([(CONFIG_HASH_ANNOTATION.to_string(), config_hash(target))])
                    .chain(target.secret_hash.clone().map(|hash| (SECRET_HASH_ANNOTATION.to_string(), hash)))
                    .collect(),
            ),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            containers: vec![container(target, settings, rollout)],
            // The node never talks to the Kubernetes API.
            automount_service_account_token: Some(false),
            // Service links would put variables such as SWITCHBOARD_PORT into the environment,
            // where the node reads its flags.
            enable_service_links: Some(false),
            security_context: Some(spec.pod_security_context.clone().unwrap_or_else(|| PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(RUN_AS),
                run_as_group: Some(RUN_AS),
                fs_group: Some(RUN_AS),
                seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), localhost_profile: None }),
                ..PodSecurityContext::default()
            })),
            service_account_name: spec.service_account_name.clone(),
            priority_class_name: spec.priority_class_name.clone(),
            image_pull_secrets: (!spec.image_pull_secrets.is_empty()).then(|| spec.image_pull_secrets.clone()),
            topology_spread_constraints: (!spec.topology_spread_constraints.is_empty()).then(|| spec.topology_spread_constraints.clone()),
            termination_grace_period_seconds: Some(target.mcp.spec.termination_grace_period_seconds),
            volumes: Some(
                vec![
                    Volume {
                        name: "secret".into(),
                        secret: Some(SecretVolumeSource {
                            secret_name: Some(target.secret_name()),
                            default_mode: Some(0o440),
                            ..SecretVolumeSource::default()
                        }),
                        ..Volume::default()
                    },
                    Volume { name: "tmp".into(), empty_dir: Some(EmptyDirVolumeSource::default()), ..Volume::default() },
                ]
                .into_iter()
                .chain(spec.volumes.iter().cloned())
                .collect(),
            ),
            node_selector: (!spec.node_selector.is_empty()).then(|| spec.node_selector.clone()),
            tolerations: (!spec.tolerations.is_empty()).then(|| spec.tolerations.clone()),
            affinity: Some(affinity(target)),
            ..PodSpec::default()
        }),
    }
}

/// The per-pod volume claim of the Raft log.
fn data_claim(target: &Target) -> PersistentVolumeClaim {
    let storage = &target.mcp.spec.storage;
    PersistentVolumeClaim {
        metadata: ObjectMeta { name: Some(DATA_VOLUME.into()), labels: Some(target.selector_labels()), ..ObjectMeta::default() },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: storage.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".to_string(), storage.size.clone())])),
                limits: None,
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}

/// `NAME`: pods `NAME-0..N`, started in parallel (members must reach each other to become
/// ready), a volume per pod that goes with its pod on scale-down and stays when the McpServer
/// is deleted.
pub fn statefulset(target: &Target, settings: &Settings, rollout: Rollout) -> StatefulSet {
    let mut metadata = target.meta(target.name.clone());
    metadata.annotations = Some(BTreeMap::from([(INITIAL_MEMBERS_ANNOTATION.to_string(), rollout.initial_members.to_string())]));
    StatefulSet {
        metadata,
        spec: Some(StatefulSetSpec {
            replicas: Some(rollout.replicas),
            service_name: Some(target.peer_service_name()),
            pod_management_policy: Some("Parallel".into()),
            selector: LabelSelector { match_labels: Some(target.selector_labels()), ..LabelSelector::default() },
            template: pod_template(target, settings, rollout),
            volume_claim_templates: Some(vec![data_claim(target)]),
            persistent_volume_claim_retention_policy: Some(StatefulSetPersistentVolumeClaimRetentionPolicy {
                when_scaled: Some("Delete".into()),
                when_deleted: Some("Retain".into()),
            }),
            ..StatefulSetSpec::default()
        }),
        ..StatefulSet::default()
    }
}
