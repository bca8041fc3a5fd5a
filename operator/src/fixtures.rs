//! Test objects, built step by step, and a fake Kubernetes API server behind kube's
//! `tower-test` mock service.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::core::v1::EnvVar;
use kube::client::Body;
use kube::runtime::events::{Recorder, Reporter};
use kube::{Client, Resource};
use serde_json::{Value, json};
use switchboard_contract::admin::{self, ClusterStatus};

use crate::builders::Settings;
use crate::crd::{McpServer, McpServerStatus, SecretRef};
use crate::membership::AdminApi;
use crate::reconcile::Context;

impl McpServer {
    /// `tools/demo` with only the required field set, every default filled in by the same serde
    /// defaults the CRD schema declares (as the API server would).
    pub fn test() -> Self {
        serde_json::from_value(json!({
            "apiVersion": "switchboard.dev/v1alpha1",
            "kind": "McpServer",
            "metadata": { "name": "demo", "namespace": "tools", "uid": "7d3c8a8e-0000-4000-8000-000000000001", "generation": 1 },
            "spec": { "image": "switchboard:test" }
        }))
        .expect("fixture deserializes")
    }

    /// Every spec field set to something other than its default.
    pub fn fully_specified() -> Self {
        serde_json::from_value(json!({
            "apiVersion": "switchboard.dev/v1alpha1",
            "kind": "McpServer",
            "metadata": { "name": "full", "namespace": "prod", "uid": "7d3c8a8e-0000-4000-8000-000000000002", "generation": 4 },
            "spec": {
                "replicas": 5,
                "image": "registry.example/switchboard:1.2.3",
                "imagePullPolicy": "Always",
                "timeouts": { "elicitation": "2m", "sampling": "90s", "session": "30m" },
                "raft": { "heartbeatInterval": "250ms", "electionTimeout": "3s" },
                "terminationGracePeriodSeconds": 330,
                "storage": { "size": "5Gi", "storageClassName": "fast-ssd" },
                "resources": { "requests": { "cpu": "250m", "memory": "128Mi" }, "limits": { "memory": "512Mi" } },
                "env": [ { "name": "SWITCHBOARD_LOG", "value": "debug" }, { "name": "SWITCHBOARD_TOOLS", "value": "conformance" } ],
                "nodeSelector": { "pool": "mcp" },
                "tolerations": [ { "key": "dedicated", "operator": "Equal", "value": "mcp", "effect": "NoSchedule" } ],
                "affinity": { "nodeAffinity": { "requiredDuringSchedulingIgnoredDuringExecution": { "nodeSelectorTerms": [
                    { "matchExpressions": [ { "key": "zone", "operator": "In", "values": ["a", "b"] } ] } ] } } },
                "secretRef": { "name": "mcp-keys" },
                "service": { "type": "LoadBalancer", "port": 443, "annotations": { "lb.example.com/internal": "true" },
                    "externalTrafficPolicy": "Local", "loadBalancerSourceRanges": [ "203.0.113.0/24", "2001:db8::/32" ] },
                "topologySpreadConstraints": [ { "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule", "labelSelector": { "matchLabels": { "app.kubernetes.io/instance": "full" } } } ],
                "priorityClassName": "mcp-critical",
                "imagePullSecrets": [ { "name": "registry-creds" } ],
                "serviceAccountName": "mcp-nodes",
                "podAnnotations": { "prometheus.io/scrape": "true" },
                "podLabels": { "team": "platform" },
                "podSecurityContext": { "runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 1000, "runAsNonRoot": true },
                "securityContext": { "runAsUser": 1000, "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false },
                "envFrom": [ { "secretRef": { "name": "tool-tokens" } }, { "configMapRef": { "name": "tool-settings" }, "prefix": "TOOL_" } ],
                "volumes": [ { "name": "ca", "configMap": { "name": "corporate-ca" } } ],
                "volumeMounts": [ { "name": "ca", "mountPath": "/etc/ssl/corporate", "readOnly": true } ],
                "allowedHosts": [ "mcp.example.com" ],
                "allowedOrigins": [ "https://app.example.com", "http://localhost:5173" ]
            }
        }))
        .expect("fixture deserializes")
    }

    pub fn allowed_hosts(mut self, hosts: &[&str]) -> Self {
        self.spec.allowed_hosts = hosts.iter().map(|h| h.to_string()).collect();
        self
    }

    pub fn allowed_origins(mut self, origins: &[&str]) -> Self {
        self.spec.allowed_origins = origins.iter().map(|o| o.to_string()).collect();
        self
    }

    pub fn replicas(mut self, n: i32) -> Self {
        self.spec.replicas = n;
        self
    }

    pub fn timeouts(mut self, elicitation: &str, sampling: &str, session: &str) -> Self {
        self.spec.timeouts.elicitation = elicitation.into();
        self.spec.timeouts.sampling = sampling.into();
        self.spec.timeouts.session = session.into();
        self
    }

    pub fn raft(mut self, heartbeat: &str, election: &str) -> Self {
        self.spec.raft.heartbeat_interval = heartbeat.into();
        self.spec.raft.election_timeout = election.into();
        self
    }

    pub fn image(mut self, image: &str) -> Self {
        self.spec.image = image.into();
        self
    }

    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.spec.env.push(EnvVar { name: name.into(), value: Some(value.into()), value_from: None });
        self
    }

    pub fn secret_ref(mut self, name: &str) -> Self {
        self.spec.secret_ref = Some(SecretRef { name: name.into() });
        self
    }

    pub fn service_port(mut self, port: i32) -> Self {
        self.spec.service.port = port;
        self
    }

    pub fn named(mut self, name: &str) -> Self {
        self.meta_mut().name = Some(name.into());
        self
    }

    pub fn generation(mut self, generation: i64) -> Self {
        self.meta_mut().generation = Some(generation);
        self
    }

    pub fn with_status(mut self, status: McpServerStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// The path of this object in the API.
    pub fn api_path(&self) -> String {
        format!(
            "/apis/switchboard.dev/v1alpha1/namespaces/{}/mcpservers/{}",
            self.meta().namespace.as_deref().unwrap(),
            self.meta().name.as_deref().unwrap()
        )
    }
}

/// One request the fake API server received.
#[derive(Clone, Debug)]
pub struct Call {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub body: Value,
}

impl Call {
    /// `PATCH path` etc., for readable assertions.
    pub fn line(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

#[derive(Default)]
struct FakeState {
    objects: BTreeMap<String, Value>,
    calls: Vec<Call>,
    failures: Vec<(Method, String, u16)>,
}

/// A small in-memory Kubernetes API: GET returns what was stored; POST creates (409 when
/// present); PATCH applies (the object is replaced, its status kept) and `/status` PATCH
/// replaces the status. Every request is recorded. Failures can be injected per method and path.
#[derive(Clone, Default)]
pub struct FakeApi {
    state: Arc<Mutex<FakeState>>,
}

/// Collections a GET lists when no object is stored at the path itself.
const LISTED: [&str; 2] = ["pods", "leases"];

fn status_body(code: u16, reason: &str, message: &str) -> Value {
    json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code })
}

impl FakeApi {
    /// A fake API server and a client talking to it.
    pub fn start() -> (Self, Client) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let fake = FakeApi::default();
        let server = fake.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await.unwrap_or_default();
                let body: Value = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap_or(Value::Null) };
                let call = Call {
                    method: parts.method.clone(),
                    path: parts.uri.path().to_string(),
                    query: parts.uri.query().unwrap_or_default().to_string(),
                    body,
                };
                let (code, reply) = server.answer(call);
                let response = Response::builder().status(code).body(Body::from(serde_json::to_vec(&reply).unwrap())).unwrap();
                send.send_response(response);
            }
        });
        (fake, Client::new(service, "default"))
    }

    fn answer(&self, call: Call) -> (StatusCode, Value) {
        let mut state = self.state.lock().unwrap();
        state.calls.push(call.clone());
        if let Some((_, _, code)) = state.failures.iter().find(|(m, p, _)| *m == call.method && *p == call.path) {
            let code = *code;
            return (StatusCode::from_u16(code).unwrap(), status_body(code, "InternalError", "injected failure"));
        }
        let path = call.path.clone();
        match call.method {
            Method::GET => match state.objects.get(&path) {
                Some(o) => (StatusCode::OK, o.clone()),
                // A collection the operator lists: the objects stored under it.
                None if LISTED.iter().any(|c| path.ends_with(&format!("/{c}"))) => {
                    let prefix = format!("{path}/");
                    let items: Vec<Value> = state
                        .objects
                        .iter()
                        .filter(|(p, _)| p.strip_prefix(&prefix).is_some_and(|rest| !rest.contains('/')))
                        .map(|(_, o)| o.clone())
                        .collect();
                    (StatusCode::OK, json!({"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": items}))
                }
                None => (StatusCode::NOT_FOUND, status_body(404, "NotFound", &format!("{path} not found"))),
            },
            Method::POST => {
                let name = call.body["metadata"]["name"].as_str().unwrap_or("unnamed").to_string();
                let full = format!("{path}/{name}");
                if state.objects.contains_key(&full) {
                    return (StatusCode::CONFLICT, status_body(409, "AlreadyExists", &format!("{full} already exists")));
                }
                let mut object = call.body.clone();
                object["metadata"]["resourceVersion"] = json!("1");
                state.objects.insert(full, object.clone());
                (StatusCode::CREATED, object)
            }
            // Replace, with optimistic concurrency: the write must carry the stored version.
            Method::PUT => {
                let Some(stored) = state.objects.get(&path) else {
                    return (StatusCode::NOT_FOUND, status_body(404, "NotFound", &format!("{path} not found")));
                };
                let version = stored["metadata"]["resourceVersion"].as_str().unwrap_or("0").to_string();
                if call.body["metadata"]["resourceVersion"].as_str().is_some_and(|v| v != version) {
                    return (StatusCode::CONFLICT, status_body(409, "Conflict", "the object has been modified"));
                }
                let mut object = call.body.clone();
                object["metadata"]["resourceVersion"] = json!((version.parse::<u64>().unwrap_or(0) + 1).to_string());
                state.objects.insert(path, object.clone());
                (StatusCode::OK, object)
            }
            Method::PATCH => {
                if let Some(base) = path.strip_suffix("/status") {
                    let Some(object) = state.objects.get_mut(base) else {
                        return (StatusCode::NOT_FOUND, status_body(404, "NotFound", &format!("{base} not found")));
                    };
                    object["status"] = call.body["status"].clone();
                    return (StatusCode::OK, object.clone());
                }
                let mut object = call.body.clone();
                if let Some(previous) = state.objects.get(&path) {
                    if let Some(status) = previous.get("status") {
                        object["status"] = status.clone();
                    }
                    // Keep what the server owns in metadata.
                    for key in ["generation", "uid", "resourceVersion"] {
                        if let Some(v) = previous["metadata"].get(key) {
                            object["metadata"][key] = v.clone();
                        }
                    }
                }
                state.objects.insert(path, object.clone());
                (StatusCode::OK, object)
            }
            _ => (StatusCode::METHOD_NOT_ALLOWED, status_body(405, "MethodNotAllowed", "not supported by the fake")),
        }
    }

    /// Store an object at `path`.
    pub fn put(&self, path: &str, object: Value) {
        self.state.lock().unwrap().objects.insert(path.into(), object);
    }

    /// The object at `path`.
    pub fn object(&self, path: &str) -> Option<Value> {
        self.state.lock().unwrap().objects.get(path).cloned()
    }

    /// Stop injecting failures.
    pub fn clear_failures(&self) {
        self.state.lock().unwrap().failures.clear();
    }

    /// Answer `method path` with `code` from now on.
    pub fn fail(&self, method: Method, path: &str, code: u16) {
        self.state.lock().unwrap().failures.push((method, path.into(), code));
    }

    /// Every request so far.
    pub fn calls(&self) -> Vec<Call> {
        self.state.lock().unwrap().calls.clone()
    }

    /// Forget the recorded requests.
    pub fn clear_calls(&self) {
        self.state.lock().unwrap().calls.clear();
    }

    /// Reasons of the events posted so far, in order.
    pub fn event_reasons(&self) -> Vec<String> {
        self.calls()
            .iter()
            .filter(|c| c.method == Method::POST && c.path.ends_with("/events"))
            .map(|c| c.body["reason"].as_str().unwrap_or_default().to_string())
            .collect()
    }
}

impl Context {
    /// A context over a fake API server whose nodes answer through `admin`.
    pub fn test(admin: Arc<dyn AdminApi>) -> (Arc<Self>, FakeApi) {
        let (fake, client) = FakeApi::start();
        let recorder = Recorder::new(client.clone(), Reporter { controller: "switchboard-operator".into(), instance: None });
        (Arc::new(Context::new(client, recorder, Settings::default(), admin, Arc::new(crate::metrics::Metrics::new()))), fake)
    }
}

/// A recorded node admin API: answers from one shared cluster state, applies membership calls
/// to it like the leader would, and records every call as `"promote 3 via ADDR"` etc.
#[derive(Default)]
pub struct RecordedAdmin {
    pub cluster: Mutex<ClusterStatus>,
    pub calls: Mutex<Vec<String>>,
    /// Replication lag a newly added learner starts with.
    pub new_learner_lag: u64,
    /// Addresses that do not answer.
    pub down: Mutex<Vec<String>>,
    /// Membership calls answer 409 with this message.
    pub refuse: Mutex<Option<String>>,
    /// Status calls never answer (a node that accepts the connection and hangs).
    pub hang: Mutex<bool>,
}

impl RecordedAdmin {
    /// A formed cluster of voters `0..n`, node 0 leading, every member caught up.
    pub fn formed(name: &str, n: u64) -> Arc<Self> {
        let admin = RecordedAdmin::default();
        {
            let mut c = admin.cluster.lock().unwrap();
            c.leader = Some(0);
            c.voters = (0..n).collect();
            for id in 0..n {
                c.members.insert(id, Self::addr(name, id));
                c.replication_lag.insert(id, 0);
                c.last_contact_ms.insert(id, 0);
            }
        }
        Arc::new(admin)
    }

    /// The peer address the operator builds for `tools/NAME` pod `id`.
    pub fn addr(name: &str, id: u64) -> String {
        format!("{name}-{id}.{name}-peers.tools.svc.cluster.local:7070")
    }

    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    fn check(&self, addr: &str, secret: &str) -> crate::Result<()> {
        if secret.is_empty() {
            return Err(crate::Error::Admin("401 Unauthorized".into()));
        }
        if self.down.lock().unwrap().iter().any(|d| d == addr) {
            return Err(crate::Error::Admin(format!("{addr}: connection refused")));
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl AdminApi for RecordedAdmin {
    async fn status(&self, addr: &str, secret: &str) -> crate::Result<ClusterStatus> {
        if *self.hang.lock().unwrap() {
            std::future::pending::<()>().await;
        }
        self.check(addr, secret)?;
        let mut status = self.cluster.lock().unwrap().clone();
        status.node_id = status.members.iter().find(|(_, a)| a.as_str() == addr).map(|(id, _)| *id).unwrap_or(u64::MAX);
        Ok(status)
    }

    async fn add_learner(&self, addr: &str, secret: &str, id: u64, member_addr: &str) -> crate::Result<()> {
        self.check(addr, secret)?;
        self.calls.lock().unwrap().push(format!("add_learner {id} {member_addr} via {addr}"));
        let mut c = self.cluster.lock().unwrap();
        c.learners.push(id);
        c.members.insert(id, member_addr.into());
        c.replication_lag.insert(id, self.new_learner_lag);
        c.last_contact_ms.insert(id, 0);
        Ok(())
    }

    async fn promote(&self, addr: &str, secret: &str, id: u64) -> crate::Result<()> {
        self.check(addr, secret)?;
        if let Some(message) = self.refuse.lock().unwrap().clone() {
            return Err(crate::Error::Admin(format!("http://{addr}{}: 409 Conflict: {message}", admin::PROMOTE)));
        }
        self.calls.lock().unwrap().push(format!("promote {id} via {addr}"));
        let mut c = self.cluster.lock().unwrap();
        c.learners.retain(|l| *l != id);
        c.voters.push(id);
        c.voters.sort_unstable();
        Ok(())
    }

    async fn remove(&self, addr: &str, secret: &str, id: u64) -> crate::Result<()> {
        self.check(addr, secret)?;
        self.calls.lock().unwrap().push(format!("remove {id} via {addr}"));
        let mut c = self.cluster.lock().unwrap();
        c.learners.retain(|l| *l != id);
        c.voters.retain(|v| *v != id);
        c.members.remove(&id);
        c.replication_lag.remove(&id);
        c.last_contact_ms.remove(&id);
        Ok(())
    }
}
