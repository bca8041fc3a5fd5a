//! Render and run: the StatefulSet the operator builds for a 3-replica McpServer becomes three
//! local `switchboard serve` processes, started with the pod template's command, args and
//! environment exactly as Kubernetes would resolve them (`$(VAR)` expansion, `fieldRef`,
//! `configMapKeyRef`), with each pod's DNS name mapped to its own loopback address and the
//! volume paths to temporary directories. The cluster forms and serves a cross-node
//! elicitation; then the operator's membership code scales it up and back down against the
//! real admin API while that call stays parked, and the call still completes.
//!
//! Needs the `switchboard` binary next to this test's executable (`cargo test --workspace`
//! builds it; alone: `cargo build -p switchboard-node --bin switchboard`).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Secret};
use serde_json::{Value, json};
use switchboard_contract::admin::ClusterStatus;
use switchboard_operator::builders::{self, Rollout, SecretMaterial, Settings, Target};
use switchboard_operator::crd::McpServer;
use switchboard_operator::membership::{self, HttpAdmin, Step};
use tokio::process::{Child, Command};

/// `tools/demo`, as the API server would hand it to the operator.
fn mcpserver(spec: Value) -> McpServer {
    serde_json::from_value(json!({
        "apiVersion": "switchboard.dev/v1alpha1",
        "kind": "McpServer",
        "metadata": { "name": "demo", "namespace": "tools", "uid": "7d3c8a8e-0000-4000-8000-00000000000a", "generation": 1 },
        "spec": spec
    }))
    .unwrap()
}

fn switchboard_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let bin = dir.join("switchboard");
    assert!(bin.exists(), "{} is missing: build it with `cargo build -p switchboard-node --bin switchboard`", bin.display());
    let help = std::process::Command::new(&bin).args(["serve", "--help"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&help.stdout).contains("SWITCHBOARD_ENCRYPTION_KEY_FILE"),
        "{} is stale (no --encryption-key-file): rebuild it",
        bin.display()
    );
    bin
}

/// The objects the operator would create for `mcp`.
struct Rendered {
    container: Container,
    config: BTreeMap<String, String>,
    secret: BTreeMap<String, Vec<u8>>,
}

fn render(mcp: &McpServer) -> Rendered {
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
fn expand(value: &str, defined: &[(String, String)]) -> String {
    let mut out = value.to_string();
    for (name, v) in defined {
        out = out.replace(&format!("$({name})"), v);
    }
    out
}

/// One pod, run as a local process.
struct Pod {
    ordinal: u64,
    child: Child,
    _dir: tempfile::TempDir,
}

struct Cluster {
    bin: PathBuf,
    rendered: Rendered,
    secret_dir: tempfile::TempDir,
    /// Pod host (`demo-0.demo-peers.tools.svc.cluster.local`) → its loopback address.
    hosts: Vec<(String, Ipv4Addr)>,
    pods: Vec<Pod>,
    cluster_secret: String,
}

impl Cluster {
    fn new(mcp: &McpServer, max_pods: u64) -> Self {
        let rendered = render(mcp);
        let secret_dir = tempfile::tempdir().unwrap();
        for (key, value) in &rendered.secret {
            std::fs::write(secret_dir.path().join(key), value).unwrap();
        }
        let cluster_secret = String::from_utf8(rendered.secret[builders::CLUSTER_SECRET_KEY].clone()).unwrap();
        // Addresses of their own per run, so concurrent runs do not meet.
        let pid = std::process::id();
        let (a, b) = (100 + (pid % 100) as u8, 1 + ((pid / 100) % 250) as u8);
        let target = Target::new(mcp).unwrap();
        let hosts =
            (0..max_pods).map(|i| (target.pod_host(i as i32, &Settings::default()), Ipv4Addr::new(127, a, b, 10 + i as u8))).collect();
        Cluster { bin: switchboard_binary(), rendered, secret_dir, hosts, pods: Vec::new(), cluster_secret }
    }

    fn ip(&self, ordinal: u64) -> Ipv4Addr {
        self.hosts[ordinal as usize].1
    }

    /// A pod's environment, resolved from the container spec, then mapped onto this machine.
    fn environment(&self, ordinal: u64, data_dir: &Path) -> Vec<(String, String)> {
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
    fn start(&mut self, ordinal: u64) {
        let dir = tempfile::tempdir().unwrap();
        let env = self.environment(ordinal, dir.path());
        let container = &self.rendered.container;
        assert_eq!(container.command.as_deref(), Some(&["switchboard".to_string()][..]));
        let child = Command::new(&self.bin)
            .args(container.args.clone().unwrap())
            .env_clear()
            .envs(env)
            .env("HOSTNAME", format!("demo-{ordinal}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        self.pods.push(Pod { ordinal, child, _dir: dir });
    }

    async fn stop(&mut self, ordinal: u64) {
        let i = self.pods.iter().position(|p| p.ordinal == ordinal).unwrap();
        let mut pod = self.pods.remove(i);
        pod.child.kill().await.unwrap();
    }

    fn mcp_url(&self, ordinal: u64) -> String {
        format!("http://{}:{}/mcp", self.ip(ordinal), builders::MCP_PORT)
    }

    /// The addresses the operator would give the admin API (before mapping: DNS names).
    fn addresses(&self) -> Vec<(u64, String)> {
        (0..self.hosts.len() as u64).map(|i| (i, format!("{}:{}", self.ip(i), builders::PEER_PORT))).collect()
    }

    async fn wait_ready(&self, ordinal: u64) {
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

    async fn status(&self, admin: &HttpAdmin) -> ClusterStatus {
        membership::observe(admin, &self.addresses(), &self.cluster_secret).await.unwrap()
    }

    async fn wait_status(&self, admin: &HttpAdmin, what: &str, check: impl Fn(&ClusterStatus) -> bool) -> ClusterStatus {
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
/// each step; returns the steps taken and the StatefulSet replicas after each.
async fn scale(cluster: &mut Cluster, admin: &HttpAdmin, desired: i32, mut current: i32) -> Vec<(Step, i32)> {
    let mut taken = Vec::new();
    for _ in 0..50 {
        let status = cluster.status(admin).await;
        let plan = membership::plan(desired, current, &status);
        assert_eq!(plan.refusal, None, "{status:?}");
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
            membership::execute(admin, &plan, &status, &cluster.addresses(), &cluster.cluster_secret).await.unwrap();
            taken.push((step, current));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("scaling to {desired} did not finish");
}

/// The `Host` a client inside the cluster sends: the client Service's name (the pods are reached
/// by address here, but the node only answers names the operator allowed).
const SERVICE_HOST: &str = "demo.tools.svc.cluster.local:8080";

struct Session {
    http: reqwest::Client,
    id: String,
}

impl Session {
    async fn open(url: &str) -> Session {
        let http = reqwest::Client::new();
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "render-and-run", "version": "1"}}});
        let res = http
            .post(url)
            .header("host", SERVICE_HOST)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(init.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 200);
        let id = res.headers()["mcp-session-id"].to_str().unwrap().to_string();
        let session = Session { http, id };
        let res = session.post(url, json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        assert_eq!(res.status(), 202);
        session
    }

    async fn post(&self, url: &str, body: Value) -> reqwest::Response {
        self.http
            .post(url)
            .header("host", SERVICE_HOST)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-session-id", &self.id)
            .body(body.to_string())
            .send()
            .await
            .unwrap()
    }
}

/// The next JSON-RPC message on an SSE response (the empty priming event skipped).
async fn next_message(res: &mut reqwest::Response, buffer: &mut String, within: Duration) -> Value {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rendered_statefulset_runs_as_a_cluster_that_serves_and_scales() {
    let mcp = mcpserver(json!({
        "image": "switchboard:test",
        "raft": {"heartbeatInterval": "50ms", "electionTimeout": "300ms"},
        "timeouts": {"elicitation": "2m"}
    }));
    let mut cluster = Cluster::new(&mcp, 5);
    for i in 0..3 {
        cluster.start(i);
    }
    for i in 0..3 {
        cluster.wait_ready(i).await;
    }
    let admin = HttpAdmin::new(Duration::from_secs(5)).unwrap();
    let formed = cluster.wait_status(&admin, "three voters and a leader", |s| s.voters.len() == 3 && s.leader.is_some()).await;
    assert_eq!(formed.voters, vec![0, 1, 2]);
    assert_eq!(membership::plan(3, 3, &formed).step, None, "founded by --peers: nothing for the operator to do");

    // A call parked on node 0: its elicitation question arrives on node 0's stream.
    let session = Session::open(&cluster.mcp_url(0)).await;
    // The pods answer the Service's names, and no foreign browser page.
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let send = |host: &'static str, origin: Option<&'static str>| {
        let mut request = session.http.post(cluster.mcp_url(1)).header("host", host).header("mcp-session-id", &session.id);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.header("accept", "application/json, text/event-stream").header("content-type", "application/json").body(ping.clone()).send()
    };
    assert_eq!(send("demo", None).await.unwrap().status(), 200);
    assert_eq!(send("demo.tools:8080", Some("http://demo.tools:8080")).await.unwrap().status(), 200);
    assert_eq!(send("demo.tools", Some("https://evil.example.com")).await.unwrap().status(), 403);
    assert_eq!(send("evil.example.com", None).await.unwrap().status(), 403);
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "confirm", "arguments": {"action": "deploy"}}});
    let mut stream = session.post(&cluster.mcp_url(0), call).await;
    assert_eq!(stream.status(), 200);
    let mut buffer = String::new();
    let question = next_message(&mut stream, &mut buffer, Duration::from_secs(10)).await;
    assert_eq!(question["method"], "elicitation/create", "{question}");

    // Scale 3 → 5 → 3 through the operator's membership code while the call is parked: new pods
    // start empty and wait, are added as learners, promoted once caught up; on the way down the
    // highest ordinals leave the group before their pods go.
    let up = scale(&mut cluster, &admin, 5, 3).await;
    let steps: Vec<Step> = up.iter().map(|(s, _)| s.clone()).collect();
    assert!(steps.contains(&Step::AddLearner { id: 3 }) && steps.contains(&Step::AddLearner { id: 4 }), "{steps:?}");
    assert!(steps.contains(&Step::Promote { id: 3 }) && steps.contains(&Step::Promote { id: 4 }), "{steps:?}");
    let grown = cluster.wait_status(&admin, "five voters", |s| s.voters == vec![0, 1, 2, 3, 4]).await;
    assert!(grown.learners.is_empty());

    let down = scale(&mut cluster, &admin, 3, 5).await;
    assert_eq!(down.iter().map(|(s, _)| s.clone()).collect::<Vec<_>>(), vec![Step::Remove { id: 4 }, Step::Remove { id: 3 }]);
    assert!(cluster.pods.iter().all(|p| p.ordinal < 3), "pods 3 and 4 went after leaving the group");
    let shrunk = cluster.wait_status(&admin, "three voters again", |s| s.voters == vec![0, 1, 2]).await;
    assert!(shrunk.learners.is_empty());

    // The answer goes to node 2; the call parked on node 0 throughout completes.
    let answer = json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"confirm": true}}});
    let res = session.post(&cluster.mcp_url(2), answer).await;
    assert_eq!(res.status(), 202, "{:?}", res.text().await);
    let result = next_message(&mut stream, &mut buffer, Duration::from_secs(15)).await;
    assert_eq!(result["id"], 7, "{result}");
    let text = result["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string();
    assert!(text.contains("confirmed") && !text.contains("not confirmed"), "{result}");

    for ordinal in cluster.pods.iter().map(|p| p.ordinal).collect::<Vec<_>>() {
        cluster.stop(ordinal).await;
    }
}

#[test]
fn the_pod_environment_resolves_like_the_kubelet() {
    let mcp = mcpserver(json!({"image": "switchboard:test"}));
    let rendered = render(&mcp);
    let names: Vec<&str> = rendered.container.env.as_ref().unwrap().iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names[0], "POD_NAME");
    let defined = vec![("POD_NAME".to_string(), "demo-1".to_string())];
    assert_eq!(expand("$(POD_NAME).demo-peers.tools.svc.cluster.local:7070", &defined), "demo-1.demo-peers.tools.svc.cluster.local:7070");
    assert_eq!(rendered.config["elicitation-timeout"], "5m");
    assert_eq!(rendered.secret[builders::ENCRYPTION_KEY_KEY].len(), 64);
}
