//! Builder tests: fixture McpServers in, Kubernetes objects out.

use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec};
use serde_json::{Value, json};

use super::config::{config_hash, config_map, secret};
use super::policy::{network_policy, pod_disruption_budget};
use super::services::{client_service, peer_service};
use super::statefulset::{RUN_AS, statefulset};
use super::*;
use crate::crd::McpServer;

fn built(mcp: &McpServer) -> Value {
    let target = Target::new(mcp).unwrap();
    serde_json::to_value(statefulset(&target, &Settings::default(), Rollout::initial(mcp))).unwrap()
}

fn pod_spec(mcp: &McpServer, rollout: Rollout) -> PodSpec {
    let target = Target::new(mcp).unwrap();
    statefulset(&target, &Settings::default(), rollout).spec.unwrap().template.spec.unwrap()
}

fn container(mcp: &McpServer) -> Container {
    pod_spec(mcp, Rollout::initial(mcp)).containers.remove(0)
}

fn env_value(container: &Container, name: &str) -> Option<EnvVar> {
    container.env.as_ref().unwrap().iter().find(|e| e.name == name).cloned()
}

fn literal(container: &Container, name: &str) -> String {
    env_value(container, name).and_then(|e| e.value).unwrap_or_else(|| panic!("{name} has no literal value"))
}

#[test]
fn every_child_is_named_labelled_and_owned_by_the_mcpserver() {
    let mcp = McpServer::test();
    let target = Target::new(&mcp).unwrap();
    let settings = Settings::default();
    let children: Vec<(Value, &str, &str)> = vec![
        (serde_json::to_value(statefulset(&target, &settings, Rollout::initial(&mcp))).unwrap(), "StatefulSet", "demo"),
        (serde_json::to_value(peer_service(&target)).unwrap(), "Service", "demo-peers"),
        (serde_json::to_value(client_service(&target)).unwrap(), "Service", "demo"),
        (serde_json::to_value(config_map(&target)).unwrap(), "ConfigMap", "demo-config"),
        (serde_json::to_value(secret(&target, &SecretMaterial::generate())).unwrap(), "Secret", "demo-secret"),
        (serde_json::to_value(pod_disruption_budget(&target)).unwrap(), "PodDisruptionBudget", "demo"),
        (serde_json::to_value(network_policy(&target, &settings)).unwrap(), "NetworkPolicy", "demo-peers"),
    ];
    for (object, kind, name) in children {
        assert_eq!(object["kind"], kind, "{object}");
        assert!(object["apiVersion"].is_string(), "server-side apply needs apiVersion: {object}");
        assert_eq!(object["metadata"]["name"], name);
        assert_eq!(object["metadata"]["namespace"], "tools");
        assert_eq!(object["metadata"]["labels"]["app.kubernetes.io/instance"], "demo");
        assert_eq!(object["metadata"]["labels"]["app.kubernetes.io/managed-by"], "switchboard-operator");
        let owners = object["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(owners.len(), 1, "{kind}");
        assert_eq!(owners[0]["kind"], "McpServer");
        assert_eq!(owners[0]["apiVersion"], "switchboard.dev/v1alpha1");
        assert_eq!(owners[0]["name"], "demo");
        assert_eq!(owners[0]["uid"], "7d3c8a8e-0000-4000-8000-000000000001");
        assert_eq!(owners[0]["controller"], true);
        assert_eq!(owners[0]["blockOwnerDeletion"], true);
    }
}

#[test]
fn children_come_in_apply_order_with_a_secret_only_to_generate() {
    let kinds = |mcp: &McpServer, material: Option<&SecretMaterial>| -> Vec<String> {
        let target = Target::new(mcp).unwrap();
        let objects = Children::build(&target, &Settings::default(), Rollout::initial(mcp), material).into_json().unwrap();
        objects.iter().map(|o| o["kind"].as_str().unwrap().to_string()).collect()
    };
    let all = ["Secret", "ConfigMap", "Service", "Service", "PodDisruptionBudget", "NetworkPolicy", "StatefulSet"];
    let material = SecretMaterial::generate();
    assert_eq!(kinds(&McpServer::test(), Some(&material)), all);
    assert_eq!(kinds(&McpServer::test(), None), all[1..], "no material: the Secret exists already");
    assert_eq!(kinds(&McpServer::test().secret_ref("mcp-keys"), Some(&material)), all[1..], "a referenced Secret is the user's");
}

#[test]
fn an_object_without_uid_or_namespace_is_refused() {
    let mut mcp = McpServer::test();
    mcp.metadata.uid = None;
    assert!(matches!(Target::new(&mcp), Err(crate::Error::MissingObjectKey("metadata.uid"))));
    let mut mcp = McpServer::test();
    mcp.metadata.namespace = None;
    assert!(matches!(Target::new(&mcp), Err(crate::Error::MissingObjectKey("metadata.namespace"))));
}

#[test]
fn statefulset_defaults() {
    let sts = built(&McpServer::test());
    let spec = &sts["spec"];
    assert_eq!(spec["replicas"], 3);
    assert_eq!(spec["podManagementPolicy"], "Parallel");
    assert_eq!(spec["serviceName"], "demo-peers");
    assert_eq!(spec["selector"]["matchLabels"], json!({"app.kubernetes.io/instance": "demo", "app.kubernetes.io/name": "switchboard"}));
    assert_eq!(spec["persistentVolumeClaimRetentionPolicy"], json!({"whenScaled": "Delete", "whenDeleted": "Retain"}));
    assert_eq!(sts["metadata"]["annotations"][INITIAL_MEMBERS_ANNOTATION], "3");
    let claim = &spec["volumeClaimTemplates"][0];
    assert_eq!(claim["metadata"]["name"], "data");
    assert_eq!(claim["spec"]["accessModes"], json!(["ReadWriteOnce"]));
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "1Gi");
    assert!(claim["spec"].get("storageClassName").is_none());
    assert_eq!(spec["template"]["metadata"]["labels"]["app.kubernetes.io/instance"], "demo");
    assert_eq!(spec["template"]["metadata"]["annotations"][CONFIG_HASH_ANNOTATION].as_str().unwrap().len(), 16);
    // A stopping pod drains for all but the last 10 seconds of its grace period.
    assert_eq!(spec["template"]["spec"]["terminationGracePeriodSeconds"], 60);
    assert_eq!(literal(&container(&McpServer::test()), "SWITCHBOARD_DRAIN_TIMEOUT"), "50s");
}

#[test]
fn container_runs_switchboard_serve_configured_through_the_environment() {
    let c = container(&McpServer::test());
    assert_eq!(c.name, "switchboard");
    assert_eq!(c.image.as_deref(), Some("switchboard:test"));
    assert_eq!(c.image_pull_policy, None);
    assert_eq!(c.command, Some(vec!["switchboard".to_string()]));
    assert_eq!(c.args, Some(vec!["serve".to_string()]));
    assert_eq!(
        literal(&c, "SWITCHBOARD_PEERS"),
        "0=demo-0.demo-peers.tools.svc.cluster.local:7070,1=demo-1.demo-peers.tools.svc.cluster.local:7070,2=demo-2.demo-peers.tools.svc.cluster.local:7070"
    );
    assert_eq!(literal(&c, "SWITCHBOARD_ADVERTISE_PEER"), "$(POD_NAME).demo-peers.tools.svc.cluster.local:7070");
    let pod_name = env_value(&c, "POD_NAME").unwrap().value_from.unwrap().field_ref.unwrap();
    assert_eq!(pod_name.field_path, "metadata.name");
    // $(POD_NAME) is expanded only from variables defined before it.
    let names: Vec<String> = c.env.as_ref().unwrap().iter().map(|e| e.name.clone()).collect();
    assert!(names.iter().position(|n| n == "POD_NAME") < names.iter().position(|n| n == "SWITCHBOARD_ADVERTISE_PEER"));
    assert_eq!(literal(&c, "SWITCHBOARD_DATA_DIR"), "/var/lib/switchboard");
    assert_eq!(literal(&c, "SWITCHBOARD_CLUSTER_SECRET_FILE"), "/etc/switchboard/secret/cluster-secret");
    assert_eq!(literal(&c, "SWITCHBOARD_ENCRYPTION_KEY_FILE"), "/etc/switchboard/secret/encryption-key");
    assert_eq!(
        literal(&c, "SWITCHBOARD_ALLOWED_HOSTS"),
        "localhost,127.0.0.1,[::1],demo,demo.tools,demo.tools.svc,demo.tools.svc.cluster.local"
    );
    assert!(env_value(&c, "SWITCHBOARD_ALLOWED_ORIGINS").is_none(), "the node derives the origins from the hosts");
    assert_eq!(literal(&c, "SWITCHBOARD_LISTEN"), "0.0.0.0:8080");
    assert_eq!(literal(&c, "SWITCHBOARD_PEER_LISTEN"), "0.0.0.0:7070");
    assert_eq!(literal(&c, "SWITCHBOARD_METRICS_LISTEN"), "0.0.0.0:9090");
    for (var, key) in [
        ("SWITCHBOARD_ELICITATION_TIMEOUT", "elicitation-timeout"),
        ("SWITCHBOARD_SAMPLING_TIMEOUT", "sampling-timeout"),
        ("SWITCHBOARD_SESSION_TTL", "session-ttl"),
        ("SWITCHBOARD_HEARTBEAT_INTERVAL", "heartbeat-interval"),
        ("SWITCHBOARD_ELECTION_TIMEOUT", "election-timeout"),
    ] {
        let from = env_value(&c, var).unwrap().value_from.unwrap().config_map_key_ref.unwrap();
        assert_eq!((from.name.as_str(), from.key.as_str()), ("demo-config", key));
    }
    // Every operator-set variable is reserved, so spec.env cannot clash with it.
    for name in &names {
        assert!(RESERVED_ENV.contains(&name.as_str()) || name == "SWITCHBOARD_LOG_FORMAT", "{name} is not reserved");
    }
    let ports: Vec<(String, i32)> = c.ports.unwrap().into_iter().map(|p| (p.name.unwrap(), p.container_port)).collect();
    assert_eq!(ports, vec![("mcp".into(), 8080), ("peer".into(), 7070), ("metrics".into(), 9090)]);
}

/// The operator never lets every Origin in: the Service's DNS names (under the cluster domain
/// the operator runs with) and the spec's extra hosts are listed, and origins only from the spec.
#[test]
fn hosts_are_the_services_names_plus_the_spec_and_origins_come_only_from_the_spec() {
    let mcp = McpServer::test()
        .allowed_hosts(&["mcp.example.com", "DEMO.tools", "*"])
        .allowed_origins(&["https://app.example.com", "http://localhost:5173"]);
    let target = Target::new(&mcp).unwrap();
    let settings = Settings { cluster_domain: "k8s.internal".into(), ..Settings::default() };
    let c = statefulset(&target, &settings, Rollout::initial(&mcp)).spec.unwrap().template.spec.unwrap().containers.remove(0);
    assert_eq!(
        literal(&c, "SWITCHBOARD_ALLOWED_HOSTS"),
        "localhost,127.0.0.1,[::1],demo,demo.tools,demo.tools.svc,demo.tools.svc.k8s.internal,mcp.example.com,*",
        "a name listed already is not repeated"
    );
    assert_eq!(literal(&c, "SWITCHBOARD_ALLOWED_ORIGINS"), "https://app.example.com,http://localhost:5173");
    // Every value the operator writes is one the node's own parsers accept.
    for host in literal(&c, "SWITCHBOARD_ALLOWED_HOSTS").split(',') {
        switchboard_contract::origin::parse_allowed_host(host).unwrap();
    }
    for origin in literal(&c, "SWITCHBOARD_ALLOWED_ORIGINS").split(',') {
        switchboard_contract::origin::parse_allowed_origin(origin).unwrap();
    }
    // Changing them changes the pod template, so the pods roll.
    let before = serde_json::to_value(pod_spec(&McpServer::test(), Rollout::initial(&mcp))).unwrap();
    let after =
        serde_json::to_value(pod_spec(&McpServer::test().allowed_origins(&["https://app.example.com"]), Rollout::initial(&mcp))).unwrap();
    assert_ne!(before, after);
}

#[test]
fn reserved_names_are_node_flags_or_pod_variables() {
    for name in RESERVED_ENV {
        assert!(switchboard_contract::env::SERVE.contains(name) || *name == POD_NAME, "{name} is neither a serve flag nor POD_NAME");
    }
}

#[test]
fn probes_ask_the_metrics_port() {
    let c = container(&McpServer::test());
    let ready = c.readiness_probe.unwrap().http_get.unwrap();
    assert_eq!((ready.path.as_deref(), &ready.port), (Some("/readyz"), &IntOrString::Int(9090)));
    let live = c.liveness_probe.unwrap().http_get.unwrap();
    assert_eq!((live.path.as_deref(), &live.port), (Some("/healthz"), &IntOrString::Int(9090)));
}

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

#[test]
fn pods_run_unprivileged_on_a_read_only_root_filesystem() {
    let mcp = McpServer::test();
    let pod = pod_spec(&mcp, Rollout::initial(&mcp));
    let sc = pod.containers[0].security_context.clone().unwrap();
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.run_as_user, Some(RUN_AS));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.capabilities.unwrap().drop, Some(vec!["ALL".to_string()]));
    let psc = pod.security_context.unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(psc.fs_group, Some(RUN_AS));
    assert_eq!(psc.seccomp_profile.unwrap().type_, "RuntimeDefault");
    assert_eq!(pod.automount_service_account_token, Some(false));
    assert_eq!(pod.enable_service_links, Some(false));
    // Writable places: the data volume, /tmp; the secret is read-only.
    let mounts: Vec<(String, String, bool)> = pod.containers[0]
        .volume_mounts
        .clone()
        .unwrap()
        .into_iter()
        .map(|m| (m.name, m.mount_path, m.read_only.unwrap_or(false)))
        .collect();
    assert_eq!(
        mounts,
        vec![
            ("data".into(), "/var/lib/switchboard".into(), false),
            ("secret".into(), "/etc/switchboard/secret".into(), true),
            ("tmp".into(), "/tmp".into(), false),
        ]
    );
    let volumes = pod.volumes.unwrap();
    assert_eq!(volumes[0].secret.as_ref().unwrap().secret_name.as_deref(), Some("demo-secret"));
    assert!(volumes[1].empty_dir.is_some());
}

#[test]
fn default_placement_prefers_distinct_hosts() {
    let mcp = McpServer::test();
    let pod = pod_spec(&mcp, Rollout::initial(&mcp));
    let anti = pod.affinity.unwrap().pod_anti_affinity.unwrap();
    let term = &anti.preferred_during_scheduling_ignored_during_execution.unwrap()[0];
    assert_eq!(term.pod_affinity_term.topology_key, "kubernetes.io/hostname");
    assert_eq!(pod.node_selector, None);
    assert_eq!(pod.tolerations, None);
    assert_eq!(pod.containers[0].resources, None);
}

#[test]
fn every_field_set_reaches_the_statefulset() {
    let mcp = McpServer::fully_specified();
    let sts = built(&mcp);
    let spec = &sts["spec"];
    assert_eq!(spec["replicas"], 5);
    assert_eq!(spec["serviceName"], "full-peers");
    let claim = &spec["volumeClaimTemplates"][0]["spec"];
    assert_eq!(claim["resources"]["requests"]["storage"], "5Gi");
    assert_eq!(claim["storageClassName"], "fast-ssd");
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["nodeSelector"], json!({"pool": "mcp"}));
    assert_eq!(pod["tolerations"][0]["key"], "dedicated");
    assert_eq!(
        pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"][0]["key"],
        "zone"
    );
    assert!(pod["affinity"].get("podAntiAffinity").is_none(), "the spec's affinity replaces the default");
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], "mcp-keys");
    assert_eq!(pod["terminationGracePeriodSeconds"], 330);

    let c = container(&mcp);
    assert_eq!(c.image.as_deref(), Some("registry.example/switchboard:1.2.3"));
    assert_eq!(c.image_pull_policy.as_deref(), Some("Always"));
    let resources = serde_json::to_value(c.resources.as_ref().unwrap()).unwrap();
    assert_eq!(resources, json!({"requests": {"cpu": "250m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}));
    assert_eq!(literal(&c, "SWITCHBOARD_DRAIN_TIMEOUT"), "320s");
    assert_eq!(literal(&c, "SWITCHBOARD_PEERS").split(',').count(), 5);
    assert!(literal(&c, "SWITCHBOARD_PEERS").starts_with("0=full-0.full-peers.prod.svc.cluster.local:7070,"));
    // Placement, identity, security and extra configuration from the spec.
    assert_eq!(pod["topologySpreadConstraints"][0]["topologyKey"], "topology.kubernetes.io/zone");
    assert_eq!(pod["priorityClassName"], "mcp-critical");
    assert_eq!(pod["imagePullSecrets"], json!([{"name": "registry-creds"}]));
    assert_eq!(pod["serviceAccountName"], "mcp-nodes");
    assert_eq!(pod["automountServiceAccountToken"], false, "the node never calls the API");
    assert_eq!(pod["securityContext"], json!({"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000, "runAsNonRoot": true}));
    let template = &spec["template"]["metadata"];
    assert_eq!(template["annotations"]["prometheus.io/scrape"], "true");
    assert!(template["annotations"][CONFIG_HASH_ANNOTATION].is_string(), "the operator's annotations stay");
    assert_eq!(template["labels"]["team"], "platform");
    assert_eq!(template["labels"]["app.kubernetes.io/instance"], "full");
    let volumes: Vec<&str> = pod["volumes"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert_eq!(volumes, vec!["secret", "tmp", "ca"]);
    let container_json = &pod["containers"][0];
    assert_eq!(
        container_json["securityContext"],
        json!({"runAsUser": 1000, "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false})
    );
    assert_eq!(container_json["envFrom"][1]["prefix"], "TOOL_");
    let mounts: Vec<&str> = container_json["volumeMounts"].as_array().unwrap().iter().map(|m| m["mountPath"].as_str().unwrap()).collect();
    assert_eq!(mounts, vec!["/var/lib/switchboard", "/etc/switchboard/secret", "/tmp", "/etc/ssl/corporate"]);
    // The user's variables come last, after the operator's.
    let env = c.env.unwrap();
    let tail: Vec<(&str, &str)> = env[env.len() - 2..].iter().map(|e| (e.name.as_str(), e.value.as_deref().unwrap())).collect();
    assert_eq!(tail, vec![("SWITCHBOARD_LOG", "debug"), ("SWITCHBOARD_TOOLS", "conformance")]);
}

#[test]
fn scaling_changes_replicas_but_never_the_pod_template() {
    let mcp = McpServer::test();
    let target = Target::new(&mcp).unwrap();
    let settings = Settings::default();
    let founded = statefulset(&target, &settings, Rollout { initial_members: 3, replicas: 3 });
    let scaled = McpServer::test().replicas(5);
    let scaled_target = Target::new(&scaled).unwrap();
    let grown = statefulset(&scaled_target, &settings, Rollout { initial_members: 3, replicas: 5 });
    assert_eq!(grown.spec.as_ref().unwrap().replicas, Some(5));
    assert_eq!(founded.spec.unwrap().template, grown.spec.unwrap().template, "a scale must not roll the pods");
}

#[test]
fn config_hash_follows_the_configuration_only() {
    let hash = |mcp: &McpServer| config_hash(&Target::new(mcp).unwrap());
    let base = McpServer::test();
    assert_eq!(hash(&base), hash(&McpServer::test()), "deterministic");
    assert_eq!(hash(&base), hash(&McpServer::test().replicas(7)), "replicas are not configuration");
    assert_eq!(hash(&base), hash(&McpServer::test().image("switchboard:other")), "the image rolls pods by itself");
    assert_ne!(hash(&base), hash(&McpServer::test().timeouts("6m", "10m", "1h")));
    assert_ne!(hash(&base), hash(&McpServer::test().timeouts("5m", "11m", "1h")));
    assert_ne!(hash(&base), hash(&McpServer::test().timeouts("5m", "10m", "2h")));
    assert_ne!(hash(&base), hash(&McpServer::test().raft("200ms", "1s")));
    // And the template carries it.
    let changed = McpServer::test().timeouts("6m", "10m", "1h");
    assert_eq!(built(&changed)["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH_ANNOTATION], hash(&changed));
}

#[test]
fn config_map_holds_the_timeouts_and_raft_timing() {
    let mcp = McpServer::fully_specified();
    let cm = config_map(&Target::new(&mcp).unwrap());
    assert_eq!(cm.metadata.name.as_deref(), Some("full-config"));
    let data = serde_json::to_value(cm.data.unwrap()).unwrap();
    assert_eq!(
        data,
        json!({"elicitation-timeout": "2m", "sampling-timeout": "90s", "session-ttl": "30m", "heartbeat-interval": "250ms", "election-timeout": "3s"})
    );
    let defaults = serde_json::to_value(config_map(&Target::new(&McpServer::test()).unwrap()).data.unwrap()).unwrap();
    assert_eq!(
        defaults,
        json!({"elicitation-timeout": "5m", "sampling-timeout": "10m", "session-ttl": "1h", "heartbeat-interval": "100ms", "election-timeout": "1s"})
    );
}

#[test]
fn generated_secret_holds_the_given_material() {
    let mcp = McpServer::test();
    let material = SecretMaterial { cluster_secret: "c".repeat(64), encryption_key: "e".repeat(64) };
    let s = secret(&Target::new(&mcp).unwrap(), &material);
    let data = s.data.unwrap();
    assert_eq!(data[CLUSTER_SECRET_KEY].0, "c".repeat(64).into_bytes());
    assert_eq!(data[ENCRYPTION_KEY_KEY].0, "e".repeat(64).into_bytes());
    assert_eq!(s.type_.as_deref(), Some("Opaque"));
    assert_eq!(format!("{material:?}"), "SecretMaterial(..)", "never logged");
}

#[test]
fn generated_material_is_random_32_byte_hex() {
    let a = SecretMaterial::generate();
    let b = SecretMaterial::generate();
    for value in [&a.cluster_secret, &a.encryption_key] {
        assert_eq!(value.len(), 64);
        assert!(value.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    }
    assert_ne!(a.cluster_secret, a.encryption_key);
    assert_ne!(a, b);
}

#[test]
fn peer_service_is_headless_and_publishes_pods_before_they_are_ready() {
    let svc = serde_json::to_value(peer_service(&Target::new(&McpServer::test()).unwrap())).unwrap();
    assert_eq!(svc["spec"]["clusterIP"], "None");
    assert_eq!(svc["spec"]["publishNotReadyAddresses"], true);
    assert_eq!(svc["spec"]["ports"][0], json!({"name": "peer", "port": 7070, "targetPort": 7070, "protocol": "TCP"}));
    assert_eq!(svc["spec"]["selector"]["app.kubernetes.io/instance"], "demo");
}

#[test]
fn client_service_takes_type_and_port_from_the_spec() {
    let svc = serde_json::to_value(client_service(&Target::new(&McpServer::test()).unwrap())).unwrap();
    assert_eq!(svc["spec"]["type"], "ClusterIP");
    assert_eq!(svc["spec"]["ports"][0]["port"], 8080);
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 8080);
    assert!(svc["spec"].get("sessionAffinity").is_none());
    let full = serde_json::to_value(client_service(&Target::new(&McpServer::fully_specified()).unwrap())).unwrap();
    assert_eq!(full["metadata"]["name"], "full");
    assert_eq!(full["spec"]["type"], "LoadBalancer");
    assert_eq!(full["spec"]["ports"][0]["port"], 443);
    assert_eq!(full["spec"]["ports"][0]["targetPort"], 8080);
    assert_eq!(full["metadata"]["annotations"], json!({"lb.example.com/internal": "true"}));
    assert_eq!(full["spec"]["externalTrafficPolicy"], "Local");
    assert_eq!(full["spec"]["loadBalancerSourceRanges"], json!(["203.0.113.0/24", "2001:db8::/32"]));
    assert!(svc["metadata"].get("annotations").is_none() && svc["spec"].get("externalTrafficPolicy").is_none());
}

#[test]
fn disruption_budget_keeps_a_majority_of_voters() {
    for (replicas, allowed) in [(1, 0), (2, 0), (3, 1), (4, 1), (5, 2), (7, 3)] {
        let mcp = McpServer::test().replicas(replicas);
        let pdb = serde_json::to_value(pod_disruption_budget(&Target::new(&mcp).unwrap())).unwrap();
        assert_eq!(pdb["spec"]["maxUnavailable"], allowed, "{replicas} replicas");
        assert!(replicas - allowed > replicas / 2, "{replicas} replicas: a drain leaves a majority");
    }
    let pdb = serde_json::to_value(pod_disruption_budget(&Target::new(&McpServer::test()).unwrap())).unwrap();
    assert_eq!(pdb["apiVersion"], "policy/v1");
    assert_eq!(pdb["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
    assert_eq!(pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"], "demo");
}

#[test]
fn network_policy_opens_the_peer_port_only_to_the_same_mcpserver() {
    let mcp = McpServer::test();
    let np = serde_json::to_value(network_policy(&Target::new(&mcp).unwrap(), &Settings::default())).unwrap();
    assert_eq!(np["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/instance"], "demo");
    assert_eq!(np["spec"]["policyTypes"], json!(["Ingress"]));
    let rules = np["spec"]["ingress"].as_array().unwrap();
    assert_eq!(rules.len(), 2);
    // MCP and metrics: from anywhere.
    assert_eq!(rules[0]["ports"], json!([{"port": 8080, "protocol": "TCP"}, {"port": 9090, "protocol": "TCP"}]));
    assert!(rules[0].get("from").is_none());
    // Peer port: from this McpServer's pods only.
    assert_eq!(rules[1]["ports"], json!([{"port": 7070, "protocol": "TCP"}]));
    assert_eq!(
        rules[1]["from"],
        json!([{"podSelector": {"matchLabels": {"app.kubernetes.io/instance": "demo", "app.kubernetes.io/name": "switchboard"}}}])
    );
}

#[test]
fn network_policy_lets_the_operator_reach_the_admin_api() {
    let mcp = McpServer::test();
    let settings = Settings {
        operator: Some(OperatorPods {
            namespace: "switchboard-system".into(),
            labels: [("app.kubernetes.io/name".to_string(), "switchboard-operator".to_string())].into(),
        }),
        ..Settings::default()
    };
    let np = serde_json::to_value(network_policy(&Target::new(&mcp).unwrap(), &settings)).unwrap();
    let from = &np["spec"]["ingress"][1]["from"];
    assert_eq!(from.as_array().unwrap().len(), 2);
    assert_eq!(from[1]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"], "switchboard-system");
    assert_eq!(from[1]["podSelector"]["matchLabels"]["app.kubernetes.io/name"], "switchboard-operator");
}

#[test]
fn cluster_domain_shapes_the_peer_addresses() {
    let mcp = McpServer::test().replicas(1);
    let target = Target::new(&mcp).unwrap();
    let settings = Settings { cluster_domain: "corp.internal".into(), operator: None };
    let sts = statefulset(&target, &settings, Rollout::initial(&mcp));
    let c = &sts.spec.unwrap().template.spec.unwrap().containers[0];
    assert_eq!(literal(c, "SWITCHBOARD_PEERS"), "0=demo-0.demo-peers.tools.svc.corp.internal:7070");
    assert_eq!(target.selector_string(), "app.kubernetes.io/instance=demo,app.kubernetes.io/name=switchboard");
}
