//! Running the operator's rendered pods as local processes: the StatefulSet the operator builds
//! becomes `switchboard serve` processes started with the pod template's command, args and
//! environment exactly as Kubernetes would resolve them (`$(VAR)` expansion, `fieldRef`,
//! `configMapKeyRef`), with each pod's DNS name mapped to its own loopback address and the
//! volume paths to temporary directories (kept across a pod's restarts, as its volume is).
//!
//! Needs the `switchboard` binary next to the test executable (`cargo test --workspace` builds
//! it; alone: `cargo build -p switchboard-node --bin switchboard`). `SWITCHBOARD_TEST_LOGS=1`
//! shows the pods' logs.

#![allow(dead_code, reason = "each test file uses part of the harness")]

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Secret};
use serde_json::{Value, json};
use switchboard_contract::admin::{self, ClusterStatus, MemberRequest};
use switchboard_operator::builders::{self, Rollout, SecretMaterial, Settings, Target};
use switchboard_operator::crd::McpServer;
use switchboard_operator::membership::{self, HttpAdmin, Step};
use tokio::process::{Child, Command};

/// `tools/demo`, as the API server would hand it to the operator.
pub fn mcpserver(spec: Value) -> McpServer {
    serde_json::from_value(json!({
        "apiVersion": "switchboard.dev/v1alpha1",
        "kind": "McpServer",
        "metadata": { "name": "demo", "namespace": "tools", "uid": "7d3c8a8e-0000-4000-8000-00000000000a", "generation": 1 },
        "spec": spec
    }))
    .unwrap()
}

pub fn switchboard_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let bin = dir.join("switchboard");
    assert!(bin.exists(), "{} is missing: build it with `cargo build -p switchboard-node --bin switchboard`", bin.display());
    let help = std::process::Command::new(&bin).args(["serve", "--help"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&help.stdout).contains("SWITCHBOARD_DRAIN_TIMEOUT"),
        "{} is stale (no --drain-timeout): rebuild it",
        bin.display()
    );
    bin
}

/// The objects the operator would create for `mcp`.
pub struct Rendered {
    pub container: Container,
    pub config: BTreeMap<String, String>,
    pub secret: BTreeMap<String, Vec<u8>>,
}

pub fn render(mcp: &McpServer) -> Rendered {
    let target = Target::new(mcp).unwrap();
    let material = SecretMaterial::generate();
    let objects = builders::children(&target, &Settings::default(), Rollout::initial(mcp), Some(&material)).unwrap();
    let kind = |k: &str| objects.iter().find(|o| o["kind"] == k).cloned().unwrap();
    let sts: StatefulSet = serde_json::from_value(kind("StatefulSet")).unwrap();
    let cm: ConfigMap = serde_json::from_value(kind("ConfigMap")).unwrap();
    let secret: Secret = serde_json::from_value(kind("Secret")).unwrap();
    Rendered {
        container: sts.spec.unwrap().template.spec.unwrap().containers.remove(0),
        config: cm.data.unwrap(),
        secret: secret.data.unwrap().into_iter().map(|(k, v)| (k, v.0)).collect(),
    }
}

/// `$(VAR)` expansion as the kubelet does it: only variables defined earlier in the list.
pub fn expand(value: &str, defined: &[(String, String)]) -> String {
    let mut out = value.to_string();
    for (name, v) in defined {
        out = out.replace(&format!("$({name})"), v);
    }
    out
}

/// One pod, run as a local process.
pub struct Pod {
    pub ordinal: u64,
    child: Child,
}

pub struct Cluster {
    bin: PathBuf,
    rendered: Rendered,
    secret_dir: tempfile::TempDir,
    /// Pod host (`demo-0.demo-peers.tools.svc.cluster.local`) → its loopback address.
    hosts: Vec<(String, Ipv4Addr)>,
    pub pods: Vec<Pod>,
    /// Each ordinal's volume, kept across restarts of its pod and deleted on scale-down.
    volumes: BTreeMap<u64, tempfile::TempDir>,
    pub cluster_secret: String,
}

/// Clusters started so far by this test process: each gets addresses of its own.
static CLUSTERS: AtomicU8 = AtomicU8::new(0);

impl Cluster {
    pub fn new(mcp: &McpServer, max_pods: u64) -> Self {
        let rendered = render(mcp);
        let secret_dir = tempfile::tempdir().unwrap();
        for (key, value) in &rendered.secret {
            std::fs::write(secret_dir.path().join(key), value).unwrap();
        }
        let cluster_secret = String::from_utf8(rendered.secret[builders::CLUSTER_SECRET_KEY].clone()).unwrap();
        // Addresses of their own per process and per cluster, so concurrent runs do not meet.
        let pid = std::process::id();
        let (a, b) = (100 + (pid % 100) as u8, 1 + ((pid / 100) % 250) as u8);
        let base = 10 + 20 * CLUSTERS.fetch_add(1, Ordering::Relaxed);
        assert!(max_pods <= 20);
        let target = Target::new(mcp).unwrap();
        let hosts =
            (0..max_pods).map(|i| (target.pod_host(i as i32, &Settings::default()), Ipv4Addr::new(127, a, b, base + i as u8))).collect();
        let bin = switchboard_binary();
        Cluster { bin, rendered, secret_dir, hosts, pods: Vec::new(), volumes: BTreeMap::new(), cluster_secret }
    }

    pub fn ip(&self, ordinal: u64) -> Ipv4Addr {
        self.hosts[ordinal as usize].1
    }

    /// A pod's environment, resolved from the container spec, then mapped onto this machine.
    pub fn environment(&self, ordinal: u64, data_dir: &Path) -> Vec<(String, String)> {
        let pod_name = format!("demo-{ordinal}");
        let mut env: Vec<(String, String)> = Vec::new();
        for var in self.rendered.container.env.as_ref().unwrap() {
            let value = match (&var.value, &var.value_from) {
                (Some(v), _) => expand(v, &env),
                (None, Some(from)) => {
                    if let Some(field) = &from.field_ref {
                        assert_eq!(field.field_path, "metadata.name", "only the pod name is used");
                        pod_name.clone()
                    } else if let Some(key) = &from.config_map_key_ref {
                        assert_eq!(key.name, "demo-config");
                        self.rendered.config[&key.key].clone()
                    } else {
                        panic!("unexpected env source for {}", var.name)
                    }
                }
                (None, None) => String::new(),
            };
            env.push((var.name.clone(), value));
        }
        let ip = self.ip(ordinal).to_string();
        let secret_dir = self.secret_dir.path().to_str().unwrap();
        env.into_iter()
            .map(|(name, mut value)| {
                for (host, addr) in &self.hosts {
                    value = value.replace(host, &addr.to_string());
                }
                value = value.replace("0.0.0.0:", &format!("{ip}:"));
                value = value.replace(builders::DATA_DIR, data_dir.to_str().unwrap());
                value = value.replace(builders::SECRET_DIR, secret_dir);
                (name, value)
            })
            .collect()
    }

    /// Start pod `ordinal` the way the kubelet would: the container's command and args, its
    /// environment, and HOSTNAME set to the pod name.
    pub fn start(&mut self, ordinal: u64) {
        let dir = self.volumes.entry(ordinal).or_insert_with(|| tempfile::tempdir().unwrap()).path().to_path_buf();
        let env = self.environment(ordinal, &dir);
        let logs = std::env::var_os("SWITCHBOARD_TEST_LOGS").is_some();
        let container = &self.rendered.container;
        assert_eq!(container.command.as_deref(), Some(&["switchboard".to_string()][..]));
        let child = Command::new(&self.bin)
            .args(container.args.clone().unwrap())
            .env_clear()
            .envs(env)
            .env("HOSTNAME", format!("demo-{ordinal}"))
            .stdout(Stdio::null())
            .stderr(if logs { Stdio::inherit() } else { Stdio::null() })
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        self.pods.push(Pod { ordinal, child });
    }

    fn take(&mut self, ordinal: u64) -> Pod {
        let i = self.pods.iter().position(|p| p.ordinal == ordinal).unwrap_or_else(|| panic!("pod {ordinal} is not running"));
        self.pods.remove(i)
    }

    /// The pod crashes (SIGKILL); its volume stays.
    pub async fn kill(&mut self, ordinal: u64) {
        self.take(ordinal).child.kill().await.unwrap();
    }

    /// The StatefulSet scales the pod away: it goes, and with it its volume (`whenScaled: Delete`).
    pub async fn stop(&mut self, ordinal: u64) {
        self.kill(ordinal).await;
        self.volumes.remove(&ordinal);
    }

    /// The kubelet stops the pod (SIGTERM) and waits for it to exit, at most `grace`, then kills
    /// it; its volume stays. Returns how long the pod took and whether it exited by itself.
    pub async fn terminate(&mut self, ordinal: u64, grace: Duration) -> (Duration, bool) {
        let mut pod = self.take(ordinal);
        let pid = pod.child.id().expect("running").to_string();
        let started = Instant::now();
        let sent = std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(sent.success(), "kill -TERM {pid}");
        match tokio::time::timeout(grace, pod.child.wait()).await {
            Ok(status) => {
                let status = status.unwrap();
                assert!(status.success(), "pod {ordinal} exited with {status} after SIGTERM");
                (started.elapsed(), true)
            }
            Err(_) => {
                pod.child.kill().await.unwrap();
                (started.elapsed(), false)
            }
        }
    }

    pub fn mcp_url(&self, ordinal: u64) -> String {
        format!("http://{}:{}/mcp", self.ip(ordinal), builders::MCP_PORT)
    }

    /// The addresses the operator would give the admin API (before mapping: DNS names).
    pub fn addresses(&self) -> Vec<(u64, String)> {
        (0..self.hosts.len() as u64).map(|i| (i, format!("{}:{}", self.ip(i), builders::PEER_PORT))).collect()
    }

    pub async fn wait_ready(&self, ordinal: u64) {
        let url = format!("http://{}:{}/readyz", self.ip(ordinal), builders::METRICS_PORT);
        let client = reqwest::Client::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) = client.get(&url).send().await
                && r.status().is_success()
            {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "pod {ordinal} not ready within 30 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn status(&self, admin: &HttpAdmin) -> ClusterStatus {
        membership::observe(admin, &self.addresses(), &self.cluster_secret).await.unwrap()
    }

    pub async fn wait_status(&self, admin: &HttpAdmin, what: &str, check: impl Fn(&ClusterStatus) -> bool) -> ClusterStatus {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(s) = membership::observe(admin, &self.addresses(), &self.cluster_secret).await
                && check(&s)
            {
                return s;
            }
            assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Run the membership planner against the real cluster until the plan is done, carrying out
/// each step; returns the steps taken and the StatefulSet replicas after each. A refusal is
/// waited out, as the operator would (right after an election the new leader has not heard
/// from everyone yet), but not forever.
pub async fn scale(cluster: &mut Cluster, admin: &HttpAdmin, desired: i32, mut current: i32) -> Vec<(Step, i32)> {
    let mut taken = Vec::new();
    for _ in 0..100 {
        let status = cluster.status(admin).await;
        let plan = membership::plan(desired, current, &status);
        // The StatefulSet controller: start or stop pods to match.
        while current < plan.statefulset_replicas {
            cluster.start(current as u64);
            current += 1;
        }
        while current > plan.statefulset_replicas {
            current -= 1;
            cluster.stop(current as u64).await;
        }
        if plan.is_done() {
            return taken;
        }
        if let Some(step) = plan.step.clone() {
            // A call the leader refuses (it just changed) is tried again on the next pass.
            if membership::execute(admin, &plan, &status, &cluster.addresses(), &cluster.cluster_secret).await.is_ok() {
                taken.push((step, current));
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("scaling to {desired} did not finish");
}

/// The `Host` a client inside the cluster sends: the client Service's name (the pods are reached
/// by address here, but the node only answers names the operator allowed).
pub const SERVICE_HOST: &str = "demo.tools.svc.cluster.local:8080";

/// A JSON-RPC `body` posted to a pod as a client in the cluster sends it.
pub fn mcp_post(http: &reqwest::Client, url: &str, body: &Value) -> reqwest::RequestBuilder {
    http.post(url)
        .header("host", SERVICE_HOST)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(body.to_string())
}

/// An `initialize` request: opening a session commits its record through Raft.
pub fn initialize(capabilities: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": {"name": "operator-tests", "version": "1"}}})
}

pub struct Session {
    pub http: reqwest::Client,
    pub id: String,
}

impl Session {
    pub async fn open(url: &str) -> Session {
        let http = reqwest::Client::new();
        let res = mcp_post(&http, url, &initialize(json!({"elicitation": {}}))).send().await.unwrap();
        assert_eq!(res.status(), 200);
        let id = res.headers()["mcp-session-id"].to_str().unwrap().to_string();
        let session = Session { http, id };
        let res = session.post(url, json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        assert_eq!(res.status(), 202);
        session
    }

    pub async fn post(&self, url: &str, body: Value) -> reqwest::Response {
        mcp_post(&self.http, url, &body).header("mcp-session-id", &self.id).send().await.unwrap()
    }
}

/// The next JSON-RPC message on an SSE response (the empty priming event skipped).
pub async fn next_message(res: &mut reqwest::Response, buffer: &mut String, within: Duration) -> Value {
    loop {
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            let data: Vec<&str> = block.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim_start).collect();
            if !data.is_empty() && !data.concat().is_empty() {
                return serde_json::from_str(&data.join("\n")).unwrap();
            }
        }
        let chunk = tokio::time::timeout(within, res.chunk()).await.expect("an SSE event in time").unwrap().expect("stream still open");
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
    }
}

impl Cluster {
    /// Change key `key` of the mounted Secret (`None` removes it), as the kubelet would update
    /// the projected files; the running pods read it when they restart.
    pub fn write_secret(&mut self, key: &str, value: Option<&str>) {
        let path = self.secret_dir.path().join(key);
        match value {
            Some(value) => std::fs::write(path, value).unwrap(),
            None => {
                let _ = std::fs::remove_file(path);
            }
        }
        if key == builders::CLUSTER_SECRET_KEY {
            self.cluster_secret = value.expect("the cluster secret is never removed").to_string();
        }
    }

    /// Where key `key` of the mounted Secret is.
    pub fn secret_path(&self, key: &str) -> PathBuf {
        self.secret_dir.path().join(key)
    }

    /// `POST` an admin call through the leader (any member forwards it) and return its answer.
    pub async fn admin_post(&self, admin_path: &str, body: &MemberRequest) -> Result<Value, String> {
        let http = reqwest::Client::new();
        let status = self.status(&HttpAdmin::new(Duration::from_secs(5)).unwrap()).await;
        let via = status.leader.and_then(|l| status.members.get(&l).cloned()).ok_or("no leader")?;
        let res = http
            .post(format!("http://{via}{admin_path}"))
            .bearer_auth(&self.cluster_secret)
            .json(body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let code = res.status();
        let text = res.text().await.unwrap_or_default();
        if code.is_success() { Ok(serde_json::from_str(&text).unwrap_or(Value::Null)) } else { Err(format!("{code}: {text}")) }
    }

    /// Hand Raft leadership to member `id` and wait until every running pod's view agrees.
    pub async fn transfer_leadership(&self, id: u64) {
        self.admin_post(admin::TRANSFER_LEADERSHIP, &MemberRequest::member(id)).await.unwrap();
        let admin = HttpAdmin::new(Duration::from_secs(5)).unwrap();
        self.wait_status(&admin, "the new leader", |s| s.leader == Some(id) && s.node_id == id).await;
    }

    /// A write commits through pod `ordinal`: a session opened there (the session record is a
    /// Raft entry). `Err` when it does not within `within`.
    pub async fn write_through(&self, ordinal: u64, within: Duration) -> Result<(), String> {
        let http = reqwest::Client::builder().timeout(within).build().unwrap();
        let res = mcp_post(&http, &self.mcp_url(ordinal), &initialize(json!({}))).send().await.map_err(|e| e.to_string())?;
        if res.status() == 200 { Ok(()) } else { Err(format!("{}", res.status())) }
    }
}
