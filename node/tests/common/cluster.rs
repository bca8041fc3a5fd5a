//! In-process Raft clusters over real loopback sockets, with a TCP proxy in front of every
//! member's peer port so tests can cut a member off (partition) without stopping it.

use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchboard_node::Server;
use switchboard_node::cluster::{ClusterStores, Member};
use switchboard_node::metrics::Metrics;
use switchboard_node::raft::{Membership, RaftMailbox, RaftNode, RaftNodeConfig, RaftSessions};
use switchboard_node::transport::http::HttpConfig;
use tokio::net::{TcpListener, TcpStream};

pub const SECRET: &str = "test-cluster-secret";

/// Loopback address member `i` sends its peer traffic from (so proxies can tell members apart).
pub fn source_ip(i: usize) -> IpAddr {
    IpAddr::from([127, 0, 0, 10 + i as u8])
}

/// A TCP proxy that can drop connections from, or all connections to, a member.
pub struct Proxy {
    pub addr: SocketAddr,
    blocked_sources: Arc<Mutex<HashSet<IpAddr>>>,
    blackholed: Arc<Mutex<bool>>,
    /// Bumped on every block, so live connections notice and drop.
    generation: Arc<tokio::sync::watch::Sender<u64>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let blocked_sources: Arc<Mutex<HashSet<IpAddr>>> = Arc::default();
        let blackholed: Arc<Mutex<bool>> = Arc::default();
        let generation = Arc::new(tokio::sync::watch::channel(0u64).0);
        let (sources, hole, gen_tx) = (blocked_sources.clone(), blackholed.clone(), generation.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((inbound, peer)) = listener.accept().await else { return };
                if *hole.lock().unwrap() || sources.lock().unwrap().contains(&peer.ip()) {
                    drop(inbound);
                    continue;
                }
                let mut changed = gen_tx.subscribe();
                let (sources, hole) = (sources.clone(), hole.clone());
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(target).await else { return };
                    // Small writes must not wait for delayed ACKs (Nagle), or every batch stalls ~40 ms.
                    let _ = (inbound.set_nodelay(true), outbound.set_nodelay(true));
                    let (mut ri, mut wi) = inbound.into_split();
                    let (mut ro, mut wo) = outbound.into_split();
                    let cut = async move {
                        loop {
                            if changed.changed().await.is_err() {
                                return;
                            }
                            if *hole.lock().unwrap() || sources.lock().unwrap().contains(&peer.ip()) {
                                return;
                            }
                        }
                    };
                    tokio::select! {
                        _ = tokio::io::copy(&mut ri, &mut wo) => {}
                        _ = tokio::io::copy(&mut ro, &mut wi) => {}
                        _ = cut => {}
                    }
                });
            }
        });
        Proxy { addr, blocked_sources, blackholed, generation, task }
    }

    pub fn block_source(&self, ip: IpAddr) {
        self.blocked_sources.lock().unwrap().insert(ip);
        self.generation.send_modify(|g| *g += 1);
    }

    pub fn set_blackholed(&self, on: bool) {
        *self.blackholed.lock().unwrap() = on;
        self.generation.send_modify(|g| *g += 1);
    }

    pub fn heal(&self) {
        self.blocked_sources.lock().unwrap().clear();
        self.set_blackholed(false);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub struct TestCluster {
    pub dirs: Vec<tempfile::TempDir>,
    pub members: Vec<Option<Member>>,
    /// Real peer listen addresses (stable across restarts).
    pub listen: Vec<SocketAddr>,
    /// One per member, in front of its peer port; empty for a cluster started `direct`.
    pub proxies: Vec<Proxy>,
    pub metrics: Vec<Arc<Metrics>>,
    pub tweak: fn(&mut RaftNodeConfig),
    /// Builds member `i`'s MCP server over its replicated stores; `None`: no MCP endpoint.
    pub mcp: Option<McpServerFor>,
}

/// The MCP server of member `i`.
pub type McpServerFor = Arc<dyn Fn(usize, ClusterStores) -> Server + Send + Sync>;

fn fast(config: &mut RaftNodeConfig) {
    config.heartbeat = Duration::from_millis(50);
    config.election_timeout = Duration::from_millis(300);
    config.tick_interval = Duration::from_millis(20);
    config.write_timeout = Duration::from_secs(3);
}

impl TestCluster {
    pub async fn start(n: usize) -> TestCluster {
        Self::start_with(n, |_| {}).await
    }

    /// `tweak` adjusts every member's configuration (after the fast test defaults).
    pub async fn start_with(n: usize, tweak: fn(&mut RaftNodeConfig)) -> TestCluster {
        Self::start_inner(n, tweak, true, None).await
    }

    /// Members with an MCP endpoint each, built by `mcp`.
    pub async fn start_with_mcp(n: usize, mcp: McpServerFor) -> TestCluster {
        Self::start_inner(n, |_| {}, true, Some(mcp)).await
    }

    /// Members with an MCP endpoint each, built by `mcp`, configured by `tweak`.
    pub async fn start_tweaked_with_mcp(n: usize, tweak: fn(&mut RaftNodeConfig), mcp: McpServerFor) -> TestCluster {
        Self::start_inner(n, tweak, true, Some(mcp)).await
    }

    /// Members talk to each other directly, with no proxies to partition them (benchmarks).
    pub async fn start_direct(n: usize, tweak: fn(&mut RaftNodeConfig)) -> TestCluster {
        Self::start_inner(n, tweak, false, None).await
    }

    async fn start_inner(n: usize, tweak: fn(&mut RaftNodeConfig), with_proxies: bool, mcp: Option<McpServerFor>) -> TestCluster {
        let mut listeners = Vec::new();
        let mut proxies = Vec::new();
        for _ in 0..n {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            if with_proxies {
                proxies.push(Proxy::start(listener.local_addr().unwrap()).await);
            }
            listeners.push(listener);
        }
        let mut cluster = TestCluster {
            dirs: (0..n).map(|_| tempfile::tempdir().unwrap()).collect(),
            members: (0..n).map(|_| None).collect(),
            listen: listeners.iter().map(|l| l.local_addr().unwrap()).collect(),
            proxies,
            metrics: (0..n).map(|_| Arc::new(Metrics::new())).collect(),
            tweak,
            mcp,
        };
        let starts: Vec<_> = listeners.into_iter().enumerate().map(|(i, l)| cluster.start_member(i, l)).collect();
        for (i, member) in futures::future::join_all(starts).await.into_iter().enumerate() {
            cluster.members[i] = Some(member);
        }
        cluster.wait_for_leader(Duration::from_secs(10)).await;
        cluster
    }

    fn start_member(&self, i: usize, listener: TcpListener) -> impl Future<Output = Member> + 'static {
        let (config, metrics, mcp) = (self.config(i), self.metrics[i].clone(), self.mcp.clone());
        async move {
            let started = match mcp {
                Some(mcp) => Member::start_with_mcp(config, listener, metrics, HttpConfig::default(), |stores| mcp(i, stores)).await,
                None => Member::start(config, listener, metrics).await,
            };
            started.expect("member starts")
        }
    }

    pub fn config(&self, i: usize) -> RaftNodeConfig {
        let peers: BTreeMap<u64, String> = (0..self.listen.len()).map(|j| (j as u64, self.advertised(j))).collect();
        let mut config = RaftNodeConfig::new(i as u64, self.data_dir(i), self.advertised(i), SECRET.into());
        config.membership = if peers.len() == 1 { Membership::Single } else { Membership::Peers(peers) };
        config.source_ip = Some(source_ip(i));
        fast(&mut config);
        (self.tweak)(&mut config);
        config
    }

    /// The peer address member `i` is known by: its proxy's, or its own when direct.
    fn advertised(&self, i: usize) -> String {
        self.proxies.get(i).map_or(self.listen[i], |p| p.addr).to_string()
    }

    pub fn data_dir(&self, i: usize) -> PathBuf {
        self.dirs[i].path().to_path_buf()
    }

    pub fn node(&self, i: usize) -> &Arc<RaftNode> {
        &self.members[i].as_ref().expect("member is running").node
    }

    pub fn mailbox(&self, i: usize) -> RaftMailbox {
        self.members[i].as_ref().expect("member is running").mailbox()
    }

    pub fn sessions(&self, i: usize) -> RaftSessions {
        self.members[i].as_ref().expect("member is running").sessions()
    }

    pub fn running(&self) -> Vec<usize> {
        (0..self.members.len()).filter(|i| self.members[*i].is_some()).collect()
    }

    /// The member every running member agrees leads (waits for agreement).
    pub async fn wait_for_leader(&self, within: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let views: Vec<Option<u64>> = self.running().iter().map(|i| self.node(*i).leader_id()).collect();
            if let Some(Some(leader)) = views.first()
                && views.iter().all(|v| *v == Some(*leader))
                && self.members[*leader as usize].is_some()
            {
                return *leader as usize;
            }
            assert!(tokio::time::Instant::now() < deadline, "no agreed leader within {within:?}: {views:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stop a member (its data directory stays).
    pub async fn kill(&mut self, i: usize) {
        if let Some(member) = self.members[i].take() {
            member.stop().await;
        }
    }

    /// Start a stopped member again from its data directory, on its old address.
    pub async fn restart(&mut self, i: usize) {
        let listener = bind_retrying(self.listen[i]).await;
        self.members[i] = Some(self.start_member(i, listener).await);
    }

    /// Cut member `i` off: nobody reaches it, it reaches nobody. It keeps running.
    pub fn partition(&self, i: usize) {
        self.proxies[i].set_blackholed(true);
        for (j, proxy) in self.proxies.iter().enumerate() {
            if j != i {
                proxy.block_source(source_ip(i));
            }
        }
    }

    pub fn heal(&self) {
        for proxy in &self.proxies {
            proxy.heal();
        }
    }

    pub async fn stop_all(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i).await;
        }
    }
}

async fn bind_retrying(addr: SocketAddr) -> TcpListener {
    for _ in 0..100 {
        if let Ok(l) = TcpListener::bind(addr).await {
            return l;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("could not rebind {addr}");
}
