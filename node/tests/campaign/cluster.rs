//! Real `switchboard serve` processes with durable data directories, each peer link through a
//! TCP proxy the nemesis can cut, and the signals and restarts the nemesis needs.

use crate::common::cluster::Proxy;
use crate::common::nginx::{self, Nginx};
use crate::common::{FaketimeLeftovers, free_port};
use serde_json::{Value, json};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use switchboard_contract::admin::{self, ClusterStatus, MemberRequest, StateDigest};
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_switchboard");

/// The answer timeout the nodes run with (elicitation and sampling).
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(4);

pub fn source_ip(i: usize) -> IpAddr {
    IpAddr::from([127, 0, 0, 40 + i as u8])
}

pub struct Node {
    pub mcp: String,
    metrics: String,
    /// The peer port itself (the harness's admin calls skip the proxy).
    pub peer: String,
    proxy: Proxy,
    dir: PathBuf,
    child: Option<Child>,
    /// A node started under libfaketime: what it leaves in /dev/shm, removed once it is gone
    /// (dropped after the child, whose drop kills it).
    faketime: Option<FaketimeLeftovers>,
}

pub struct Cluster {
    pub nodes: Vec<Node>,
    /// nginx in front of every node's MCP port, when nginx is installed.
    pub balancer: Option<Nginx>,
    secret: String,
    files: tempfile::TempDir,
    http: reqwest::Client,
}

impl Cluster {
    pub async fn start(n: usize) -> Cluster {
        let files = tempfile::tempdir().unwrap();
        let secret = format!("{:032x}", rand::random::<u128>());
        std::fs::write(files.path().join("secret"), &secret).unwrap();
        std::fs::write(files.path().join("key"), format!("{:064x}", rand::random::<u128>())).unwrap();
        let mut nodes = Vec::new();
        for i in 0..n {
            let peer = format!("127.0.0.1:{}", free_port());
            let proxy = Proxy::start(peer.parse().unwrap()).await;
            nodes.push(Node {
                mcp: format!("127.0.0.1:{}", free_port()),
                metrics: format!("127.0.0.1:{}", free_port()),
                peer,
                proxy,
                dir: files.path().join(format!("node-{i}")),
                child: None,
                faketime: None,
            });
        }
        let http = reqwest::Client::builder().timeout(Duration::from_secs(3)).build().unwrap();
        let balancer = match nginx::bin() {
            Some(bin) => {
                let ports: Vec<u16> = nodes.iter().map(|n| n.mcp.rsplit(':').next().unwrap().parse().unwrap()).collect();
                Some(Nginx::start(&bin, &files.path().join("nginx"), free_port(), &ports))
            }
            None => {
                eprintln!("campaign: nginx not found (NGINX_BIN, PATH, /usr/sbin): every client talks to the nodes directly");
                None
            }
        };
        let mut cluster = Cluster { nodes, balancer, secret, files, http };
        for i in 0..n {
            cluster.spawn(i, None);
        }
        cluster
    }

    fn peers(&self) -> String {
        self.nodes.iter().enumerate().map(|(i, n)| format!("{i}={}", n.proxy.addr)).collect::<Vec<_>>().join(",")
    }

    /// Start node `i` on its data directory, its clock shifted by `skew_s` seconds if given.
    pub fn spawn(&mut self, i: usize, skew_s: Option<i64>) {
        let peers = self.peers();
        let node = &self.nodes[i];
        let mut command = Command::new(BIN);
        command
            .args(["serve", "--node-id", &i.to_string(), "--listen", &node.mcp, "--metrics-listen", &node.metrics])
            .args(["--peer-listen", &node.peer, "--advertise-peer", &node.proxy.addr.to_string()])
            .args(["--peer-source-ip", &source_ip(i).to_string(), "--peers", &peers])
            .arg("--data-dir")
            .arg(&node.dir)
            .arg("--cluster-secret-file")
            .arg(self.files.path().join("secret"))
            .arg("--encryption-key-file")
            .arg(self.files.path().join("key"))
            .args(["--tools", "conformance", "--elicitation-timeout", "4s", "--sampling-timeout", "4s", "--drain-timeout", "2s"])
            .args(["--heartbeat-interval", "100ms", "--election-timeout", "1s"])
            .stdout(Stdio::null())
            .stderr(if std::env::var_os("CAMPAIGN_LOGS").is_some() { Stdio::inherit() } else { Stdio::null() })
            .kill_on_drop(true);
        if let Some(skew) = skew_s {
            // The wall clock only: timers run on the monotonic clock, as on a host whose NTP
            // stepped the time.
            command
                .env("LD_PRELOAD", crate::common::libfaketime())
                .env("FAKETIME", format!("{skew:+}s"))
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
                .env("FAKETIME_NO_CACHE", "1");
        }
        let child = command.spawn().expect("switchboard starts");
        self.nodes[i].faketime = skew_s.and(child.id()).map(FaketimeLeftovers);
        self.nodes[i].child = Some(child);
    }

    pub fn is_up(&self, i: usize) -> bool {
        self.nodes[i].child.is_some()
    }

    fn pid(&self, i: usize) -> Option<String> {
        self.nodes[i].child.as_ref()?.id().map(|p| p.to_string())
    }

    fn signal(&self, i: usize, signal: &str) {
        if let Some(pid) = self.pid(i) {
            let _ = std::process::Command::new("kill").args([signal, &pid]).status();
        }
    }

    pub async fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill().await;
        }
        self.nodes[i].faketime = None;
    }

    /// SIGTERM, and wait for the drain to end.
    pub async fn terminate(&mut self, i: usize) {
        self.signal(i, "-TERM");
        if let Some(mut child) = self.nodes[i].child.take()
            && tokio::time::timeout(Duration::from_secs(10), child.wait()).await.is_err()
        {
            let _ = child.kill().await;
        }
        self.nodes[i].faketime = None;
    }

    pub fn pause(&self, i: usize) {
        self.signal(i, "-STOP");
    }

    pub fn resume(&self, i: usize) {
        self.signal(i, "-CONT");
    }

    /// Cut every link between `side` and the others, both ways.
    pub fn split(&self, side: &[usize]) {
        for (j, node) in self.nodes.iter().enumerate() {
            for i in 0..self.nodes.len() {
                if side.contains(&i) != side.contains(&j) {
                    node.proxy.block_source(source_ip(i));
                }
            }
        }
    }

    /// `from` can no longer reach `to`; the other way still works.
    pub fn cut_one_way(&self, from: usize, to: usize) {
        self.nodes[to].proxy.block_source(source_ip(from));
    }

    pub fn heal(&self) {
        for node in &self.nodes {
            node.proxy.heal();
        }
    }

    /// Forget node `i`'s data (it must be stopped): it restarts empty.
    pub fn wipe(&self, i: usize) {
        let _ = std::fs::remove_dir_all(&self.nodes[i].dir);
    }

    pub fn mcp_url(&self, i: usize) -> String {
        format!("http://{}/mcp", self.nodes[i].mcp)
    }

    pub async fn ready(&self, i: usize) -> bool {
        let url = format!("http://{}/readyz", self.nodes[i].metrics);
        matches!(self.http.get(url).send().await, Ok(r) if r.status().is_success())
    }

    pub async fn all_ready(&self) -> bool {
        for i in 0..self.nodes.len() {
            if !self.ready(i).await {
                return false;
            }
        }
        true
    }

    async fn admin_get<T: serde::de::DeserializeOwned>(&self, i: usize, path: &str) -> Option<T> {
        let res = self.http.get(format!("http://{}{path}", self.nodes[i].peer)).bearer_auth(&self.secret).send().await.ok()?;
        if !res.status().is_success() {
            return None;
        }
        res.json().await.ok()
    }

    pub async fn status(&self, i: usize) -> Option<ClusterStatus> {
        self.admin_get(i, admin::STATUS).await
    }

    pub async fn digest(&self, i: usize) -> Option<StateDigest> {
        self.admin_get(i, admin::DIGEST).await
    }

    /// The leader as the running nodes see it, with its status.
    pub async fn leader(&self) -> Option<ClusterStatus> {
        for i in 0..self.nodes.len() {
            if !self.is_up(i) {
                continue;
            }
            if let Some(status) = self.status(i).await
                && let Some(leader) = status.leader
                && self.is_up(leader as usize)
            {
                return self.status(leader as usize).await.filter(|s| s.leader == Some(s.node_id));
            }
        }
        None
    }

    /// A membership call through the leader; `Err` with the answer when refused.
    pub async fn admin_post(&self, path: &str, body: &MemberRequest) -> Result<Value, String> {
        let leader = self.leader().await.ok_or("no leader")?;
        let res = self
            .http
            .post(format!("http://{}{path}", self.nodes[leader.node_id as usize].peer))
            .bearer_auth(&self.secret)
            .json(body)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = res.status();
        let text = res.text().await.unwrap_or_default();
        if status.is_success() { Ok(serde_json::from_str(&text).unwrap_or(json!(null))) } else { Err(format!("{status}: {text}")) }
    }

    pub fn proxy_addr(&self, i: usize) -> String {
        self.nodes[i].proxy.addr.to_string()
    }

    pub async fn stop_all(&mut self) {
        self.balancer = None;
        for i in 0..self.nodes.len() {
            self.resume(i);
            self.kill(i).await;
        }
    }
}
