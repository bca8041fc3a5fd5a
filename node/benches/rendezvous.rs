//! Rendezvous benchmark: create + deliver + wake through the Raft mailbox (1 and 3 durable
//! nodes on loopback, answers delivered from a follower), and the same workload against a
//! Redis-based rendezvous (SET NX + LPUSH/BLPOP) for comparison.
//!
//! `cargo bench -p switchboard-node --bench rendezvous` (needs `redis-server` on PATH for the
//! comparison; it is skipped otherwise). Prints figures (latency, pairs per second, and the CPU
//! time per pair of every process taking part); asserts nothing. The members talk to
//! each other directly over loopback (no test proxies) with the node's default timing.

// The test harness; the benchmark uses only part of it.
#[allow(dead_code)]
#[path = "../tests/common/cluster.rs"]
mod cluster;
#[path = "support/cpu.rs"]
#[allow(dead_code)] // the host counters serve the elicitation bench
mod cpu;

use cluster::TestCluster;
use cpu::cpu_time;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use switchboard_node::mailbox::{DeliverOutcome, Mailbox, MailboxKey, SessionTag, WaitOutcome};
use switchboard_node::raft::{RaftMailbox, RaftNodeConfig};

// The allocator the `switchboard` binary ships with, so what runs in this process (here: the Raft members) runs on it too.
#[global_allocator]
static ALLOCATOR: switchboard_node::allocator::Allocator = switchboard_node::allocator::Allocator;

const LATENCY_SAMPLES: usize = 1000;
const CONCURRENCY: usize = 64;
const THROUGHPUT_WINDOW: Duration = Duration::from_secs(5);
const TTL: Duration = Duration::from_secs(60);

struct Figures {
    p50: Duration,
    p99: Duration,
    pairs_per_sec: f64,
    /// CPU time (all the processes that take part: this one, and the Redis server) per pair in
    /// the throughput window.
    cpu_per_pair: Duration,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// One rendezvous: create on the owner, park there, deliver elsewhere, wake.
async fn round_trip(owner: &impl Mailbox, deliverer: &impl Mailbox) {
    let key = MailboxKey::random();
    owner.create(&key, SessionTag::default(), 0, TTL).await.unwrap();
    let (delivered, woke) = tokio::join!(deliverer.deliver(&key, SessionTag::default(), None, json!({"ok": true})), owner.wait(&key, TTL));
    assert_eq!(delivered.unwrap(), DeliverOutcome::Delivered);
    assert!(matches!(woke.unwrap(), WaitOutcome::Delivered(_)));
}

/// `pids`: the processes whose CPU the rendezvous uses (this one always).
async fn measure<M: Mailbox + Clone>(members: Vec<M>, owner: usize, deliverer: usize, pids: &[u32]) -> Figures {
    for _ in 0..50 {
        round_trip(&members[owner], &members[deliverer]).await;
    }
    let mut samples = Vec::with_capacity(LATENCY_SAMPLES);
    for _ in 0..LATENCY_SAMPLES {
        let start = Instant::now();
        round_trip(&members[owner], &members[deliverer]).await;
        samples.push(start.elapsed());
    }
    samples.sort();
    let done = Arc::new(AtomicU64::new(0));
    let stop = Instant::now() + THROUGHPUT_WINDOW;
    let workers: Vec<_> = (0..CONCURRENCY)
        .map(|w| {
            let (o, d) = (members[w % members.len()].clone(), members[(w + 1) % members.len()].clone());
            let done = done.clone();
            tokio::spawn(async move {
                while Instant::now() < stop {
                    round_trip(&o, &d).await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let (started, cpu_before) = (Instant::now(), cpu_time(pids));
    for w in workers {
        w.await.unwrap();
    }
    let pairs = done.load(Ordering::Relaxed);
    Figures {
        p50: percentile(&samples, 0.5),
        p99: percentile(&samples, 0.99),
        pairs_per_sec: pairs as f64 / started.elapsed().as_secs_f64(),
        cpu_per_pair: cpu_time(pids).saturating_sub(cpu_before) / pairs.max(1) as u32,
    }
}

/// The node's own timing defaults rather than the tests' fast ones.
fn default_timing(config: &mut RaftNodeConfig) {
    let defaults = RaftNodeConfig::new(config.node_id, config.data_dir.clone(), config.advertise.clone(), config.secret.clone());
    config.heartbeat = defaults.heartbeat;
    config.election_timeout = defaults.election_timeout;
    config.tick_interval = defaults.tick_interval;
    config.write_timeout = defaults.write_timeout;
}

fn p50(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    percentile(&samples, 0.5).as_secs_f64() * 1e3
}

/// Where a sequential round trip's time goes: each write alone, and how long after a delivery
/// is acknowledged the owner wakes.
async fn phases(owner: &RaftMailbox, deliverer: &RaftMailbox, leader: &RaftMailbox) {
    let (mut create, mut create_on_leader, mut deliver, mut wake_lag) = (vec![], vec![], vec![], vec![]);
    for _ in 0..300 {
        let key = MailboxKey::random();
        let t = Instant::now();
        leader.create(&key, SessionTag::default(), 0, TTL).await.unwrap();
        create_on_leader.push(t.elapsed());
        let key = MailboxKey::random();
        let t = Instant::now();
        owner.create(&key, SessionTag::default(), 0, TTL).await.unwrap();
        create.push(t.elapsed());
        let waiter = {
            let (owner, key) = (owner.clone(), key.clone());
            tokio::spawn(async move {
                owner.wait(&key, TTL).await.unwrap();
                Instant::now()
            })
        };
        tokio::task::yield_now().await;
        let t = Instant::now();
        deliverer.deliver(&key, SessionTag::default(), None, json!({"ok": true})).await.unwrap();
        let acked = Instant::now();
        deliver.push(acked - t);
        wake_lag.push(waiter.await.unwrap().saturating_duration_since(acked));
    }
    println!(
        "  phases (p50): create from follower {:.3} ms, create on leader {:.3} ms, deliver from follower {:.3} ms, owner wakes {:.3} ms after the deliver is acknowledged",
        p50(create),
        p50(create_on_leader),
        p50(deliver),
        p50(wake_lag)
    );
}

async fn raft(n: usize) -> Figures {
    let mut cluster = TestCluster::start_direct(n, default_timing).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let (owner, deliverer) = if n == 1 { (0, 0) } else { ((leader + 1) % n, (leader + 2) % n) };
    let members: Vec<_> = (0..n).map(|i| cluster.mailbox(i)).collect();
    if n > 1 {
        phases(&members[owner], &members[deliverer], &members[leader]).await;
    }
    let figures = measure(members, owner, deliverer, &[std::process::id()]).await;
    cluster.stop_all().await;
    figures
}

mod redis_rendezvous {
    //! The single-store way: SET NX for create, LPUSH to deliver, BLPOP to wait.
    use super::*;
    use redis::AsyncCommands;

    #[derive(Clone)]
    pub struct RedisMailbox {
        pub client: redis::Client,
        pub shared: redis::aio::MultiplexedConnection,
    }

    #[async_trait::async_trait]
    impl Mailbox for RedisMailbox {
        // The Redis reference keeps no session binding (the bench measures the rendezvous alone).
        async fn create(
            &self,
            key: &MailboxKey,
            _: SessionTag,
            _: u64,
            ttl: Duration,
        ) -> Result<switchboard_node::mailbox::CreateOutcome, switchboard_node::mailbox::MailboxError> {
            let mut con = self.shared.clone();
            let _: Option<String> = redis::cmd("SET")
                .arg(format!("mb:{key}"))
                .arg("pending")
                .arg("NX")
                .arg("PX")
                .arg(ttl.as_millis() as u64)
                .query_async(&mut con)
                .await
                .unwrap();
            Ok(switchboard_node::mailbox::CreateOutcome::Created)
        }
        async fn deliver(
            &self,
            key: &MailboxKey,
            _: SessionTag,
            _: Option<switchboard_node::mailbox::Addressee>,
            value: serde_json::Value,
        ) -> Result<DeliverOutcome, switchboard_node::mailbox::MailboxError> {
            let mut con = self.shared.clone();
            let first: Option<String> = redis::cmd("SET")
                .arg(format!("mb:{key}:v"))
                .arg(value.to_string())
                .arg("NX")
                .arg("PX")
                .arg(60_000)
                .query_async(&mut con)
                .await
                .unwrap();
            if first.is_none() {
                return Ok(DeliverOutcome::AlreadyDelivered);
            }
            let _: i64 = con.lpush(format!("mb:{key}:q"), value.to_string()).await.unwrap();
            Ok(DeliverOutcome::Delivered)
        }
        async fn wait(&self, key: &MailboxKey, timeout: Duration) -> Result<WaitOutcome, switchboard_node::mailbox::MailboxError> {
            // BLPOP blocks its connection, so every waiter needs one of its own.
            let mut con = self.client.get_multiplexed_async_connection().await.unwrap();
            let got: Option<(String, String)> = con.blpop(format!("mb:{key}:q"), timeout.as_secs_f64()).await.unwrap();
            Ok(match got {
                Some((_, v)) => WaitOutcome::Delivered(serde_json::from_str(&v).unwrap()),
                None => WaitOutcome::TimedOut,
            })
        }
        async fn delete(&self, _: &MailboxKey) -> Result<(), switchboard_node::mailbox::MailboxError> {
            Ok(())
        }
    }
}

async fn redis() -> Option<Figures> {
    let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
    let dir = tempfile::tempdir().unwrap();
    let mut server = tokio::process::Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes", "--appendfsync", "everysec"])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .ok()?;
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let mut shared = None;
    for _ in 0..100 {
        if let Ok(con) = client.get_multiplexed_async_connection().await {
            shared = Some(con);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mailbox = redis_rendezvous::RedisMailbox { client, shared: shared? };
    let pids = [std::process::id(), server.id()?];
    let figures = measure(vec![mailbox.clone(), mailbox], 0, 1, &pids).await;
    let _ = server.kill().await;
    Some(figures)
}

fn row(name: &str, f: &Figures) {
    println!(
        "{name:<44} p50 {:>8.3} ms   p99 {:>8.3} ms   {:>9.0} pairs/s   CPU per pair {:>4.0} us",
        f.p50.as_secs_f64() * 1e3,
        f.p99.as_secs_f64() * 1e3,
        f.pairs_per_sec,
        f.cpu_per_pair.as_secs_f64() * 1e6
    );
}

fn main() {
    // The Raft members run in this process: set up as the switchboard binary sets itself up.
    switchboard_node::allocator::tune();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        println!("rendezvous benchmark: {LATENCY_SAMPLES} sequential create+deliver+wake for latency, {CONCURRENCY} concurrent clients for {THROUGHPUT_WINDOW:?} for throughput");
        let only = std::env::args().nth(1).filter(|a| !a.starts_with('-'));
        if only.as_deref().is_none_or(|o| o == "raft1") {
            row("raft, 1 node (fsync per batch)", &raft(1).await);
        }
        let three = raft(3).await;
        row("raft, 3 nodes (owner and deliverer followers)", &three);
        match redis().await {
            Some(r) => {
                row("redis SET NX + LPUSH/BLPOP (appendfsync everysec)", &r);
                println!(
                    "3-node raft vs redis: p50 x{:.2}, p99 x{:.2}, throughput x{:.2}, CPU per pair x{:.2}",
                    three.p50.as_secs_f64() / r.p50.as_secs_f64(),
                    three.p99.as_secs_f64() / r.p99.as_secs_f64(),
                    three.pairs_per_sec / r.pairs_per_sec,
                    three.cpu_per_pair.as_secs_f64() / r.cpu_per_pair.as_secs_f64()
                );
            }
            None => println!("redis-server not found: comparison skipped (apt-get install redis-server)"),
        }
    });
}
