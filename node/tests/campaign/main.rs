//! Fault campaign: real `switchboard serve` processes (3, and in a second configuration 5) with
//! durable data directories, a TCP proxy on every peer link and nginx in front, concurrent
//! clients doing elicitation and sampling round trips (2025-11-25 SSE sessions and 2026-07-28
//! multi-round-trip calls) against random nodes or through nginx, a seeded nemesis (kills of the
//! leader, of a follower and of the node holding the most parked calls, pauses, partitions,
//! one-way loss, drained restarts, membership changes, clock jumps), and a checker over the
//! whole history and the replicas' final state (see `checker`).
//!
//! - `cargo test -p switchboard-node --test campaign`: the short campaign, a fixed set of
//!   seeds covering every fault kind; any anomaly fails it.
//! - `CAMPAIGN_RUNS=200 cargo test --release -p switchboard-node --test campaign -- --ignored
//!   long_campaign --nocapture`: seeded runs (seed 1000 + i) printing a summary table.
//! - `CAMPAIGN_SEED=1007 cargo test --release -p switchboard-node --test campaign -- --ignored
//!   replay --nocapture`: one run again (its schedule follows from the seed; `CAMPAIGN_LOGS=1`
//!   shows the nodes' logs). Each run's history is written to `target/campaign/seed-N.jsonl`.

#[path = "../common/mod.rs"]
mod common;

mod checker;
mod clients;
mod cluster;
mod history;
mod nemesis;

use checker::{Anomaly, Final, Timing};
use clients::Workload;
use cluster::{ANSWER_TIMEOUT, Cluster};
use history::{Era, Event, Fault, Recorder};
use nemesis::Kind;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

struct RunConfig {
    seed: u64,
    nodes: usize,
    kinds: Vec<Kind>,
    clients: usize,
}

#[derive(Debug, Default)]
struct Report {
    seed: u64,
    nodes: usize,
    faults: Vec<Fault>,
    ops: usize,
    /// Round trips started and completed by era and whether the call went through nginx.
    routes: BTreeMap<(Era, bool), (usize, usize)>,
    ok: usize,
    fail: usize,
    unknown: usize,
    anomalies: Vec<Anomaly>,
    /// Killed leader → first write committed by its successor, per leader kill.
    failover_ms: Vec<u64>,
    /// End of the last fault → first completed round trip.
    heal_to_ok_ms: Option<u64>,
    /// Round trips started during a fault, and how many of them completed.
    during_faults: (usize, usize),
    elections: u64,
}

async fn wait_for(what: &str, within: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(Instant::now() < deadline, "campaign: {what} not within {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn run(config: RunConfig) -> Report {
    let n = config.nodes;
    let mut cluster = Cluster::start(n).await;
    wait_for("every node ready", Duration::from_secs(30), async || cluster.all_ready().await).await;
    let first_term = cluster.leader().await.map_or(0, |s| s.term);
    let recorder = Arc::new(Recorder::new());
    let balancer = cluster.balancer.as_ref().map(|b| b.url.clone());
    let workload = Workload::new((0..n).map(|i| cluster.mcp_url(i)).collect(), balancer, recorder.clone());
    let mut tasks: Vec<_> = (0..config.clients).map(|c| tokio::spawn(workload.clone().client(config.seed * 100 + c as u64))).collect();
    tasks.push(tokio::spawn(workload.clone().probe(config.seed)));

    let plan = nemesis::schedule(config.seed, &config.kinds);
    let started = Instant::now();
    let mut faults = Vec::new();
    for planned in &plan {
        tokio::time::sleep(planned.at.saturating_sub(started.elapsed())).await;
        if let Some(fault) = nemesis::apply(&mut cluster, planned, workload.busiest(), &recorder).await {
            faults.push(fault);
        }
    }
    tokio::time::sleep(nemesis::duration(&plan).saturating_sub(started.elapsed())).await;
    workload.stop.store(true, Ordering::Release);
    for task in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(30), task).await;
    }

    // Heal everything, then read the final state.
    cluster.heal();
    for i in 0..n {
        cluster.resume(i);
        if !cluster.is_up(i) {
            cluster.spawn(i, None);
        }
    }
    let expected: Vec<u64> = (0..n as u64).collect();
    wait_for("every node ready after healing", Duration::from_secs(40), async || cluster.all_ready().await).await;
    let mut voters = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Some(status) = cluster.leader().await {
                voters = status.voters.clone();
                if voters == expected && status.learners.is_empty() {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    let last_term = cluster.leader().await.map_or(first_term, |s| s.term);
    let digests = converged_digests(&cluster).await;
    let events = recorder.events();
    let lost_sessions = lost_sessions(&cluster, &events).await;
    let last = Final { digests, lost_sessions, voters, expected_voters: expected };
    let timing = Timing { answer_timeout_ms: ANSWER_TIMEOUT.as_millis() as u64, slack_ms: 750 };
    let anomalies = checker::check(&events, &faults, &last, timing);
    write_history(config.seed, &events, &faults);
    cluster.stop_all().await;
    report(config, events, faults, anomalies, last_term.saturating_sub(first_term))
}

/// `(node, applied index, digest)` of every replica once they agree on the index (or after
/// 20 s, as they are).
async fn converged_digests(cluster: &Cluster) -> Vec<(usize, u64, String)> {
    let mut last = Vec::new();
    for _ in 0..100 {
        let mut now = Vec::new();
        for i in 0..cluster.nodes.len() {
            if let Some(d) = cluster.digest(i).await {
                now.push((i, d.applied_index, d.digest));
            }
        }
        let same_index = now.len() == cluster.nodes.len() && now.windows(2).all(|w| w[0].1 == w[1].1);
        if same_index && now == last {
            return now;
        }
        last = now;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    last
}

/// Sessions opened during the run (a sample) that no node knows any more.
async fn lost_sessions(cluster: &Cluster, events: &[Event]) -> Vec<String> {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(3)).build().unwrap();
    let opened: Vec<&String> =
        events.iter().filter_map(|e| if let Event::Committed { session, .. } = e { Some(session) } else { None }).collect();
    let step = (opened.len() / 40).max(1);
    let mut lost = Vec::new();
    for (k, session) in opened.iter().step_by(step).enumerate() {
        let node = k % cluster.nodes.len();
        let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
        let mut verdict = None;
        for _ in 0..5 {
            let sent = http
                .post(cluster.mcp_url(node))
                .header("accept", "application/json, text/event-stream")
                .header("content-type", "application/json")
                .header("mcp-session-id", session.as_str())
                .body(ping.to_string())
                .send()
                .await;
            match sent.map(|r| r.status().as_u16()) {
                Ok(200) => {
                    verdict = Some(true);
                    break;
                }
                Ok(404) => {
                    verdict = Some(false);
                    break;
                }
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        if verdict == Some(false) {
            lost.push(session.to_string());
        }
    }
    lost
}

fn write_history(seed: u64, events: &[Event], faults: &[Fault]) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/campaign");
    let _ = std::fs::create_dir_all(&dir);
    let mut lines: Vec<String> = faults.iter().map(|f| json!({"type": "fault", "fault": f}).to_string()).collect();
    lines.extend(events.iter().map(|e| serde_json::to_string(e).unwrap()));
    let _ = std::fs::write(dir.join(format!("seed-{seed}.jsonl")), lines.join("\n") + "\n");
}

fn report(config: RunConfig, events: Vec<Event>, faults: Vec<Fault>, anomalies: Vec<Anomaly>, elections: u64) -> Report {
    let mut r = Report { seed: config.seed, nodes: config.nodes, anomalies, elections, ..Report::default() };
    let mut invoked: BTreeMap<u64, (u64, (Era, bool))> = BTreeMap::new();
    for e in &events {
        match e {
            Event::Invoke { op, t, era, balanced, .. } => {
                invoked.insert(*op, (*t, (*era, *balanced)));
                r.routes.entry((*era, *balanced)).or_default().0 += 1;
                r.ops += 1;
            }
            Event::Ok { op, .. } => {
                if let Some((_, route)) = invoked.get(op) {
                    r.routes.entry(*route).or_default().1 += 1;
                }
                r.ok += 1;
            }
            Event::Fail { .. } => r.fail += 1,
            Event::Unknown { .. } => r.unknown += 1,
            _ => {}
        }
    }
    // Writes sent after the kill: one in flight before it may have been committed by the old leader.
    let committed: Vec<(u64, u64)> =
        events.iter().filter_map(|e| if let Event::Committed { t, sent, .. } = e { Some((*sent, *t)) } else { None }).collect();
    for fault in faults.iter().filter(|f| f.kind == "kill_leader") {
        if let Some(t) = committed.iter().filter(|(sent, _)| *sent > fault.start).map(|(_, t)| *t).min() {
            r.failover_ms.push(t - fault.start);
        }
    }
    let in_fault = |t: u64| faults.iter().any(|f| f.start <= t && t <= f.end);
    for e in &events {
        match e {
            Event::Invoke { t, .. } if in_fault(*t) => r.during_faults.0 += 1,
            Event::Ok { op, .. } if invoked.get(op).is_some_and(|(t, _)| in_fault(*t)) => r.during_faults.1 += 1,
            _ => {}
        }
    }
    if let Some(healed) = faults.iter().map(|f| f.end).max() {
        r.heal_to_ok_ms = events.iter().filter(|e| matches!(e, Event::Ok { .. }) && e.t() > healed).map(|e| e.t() - healed).min();
    }
    r.faults = faults;
    r
}

fn print_table(reports: &[Report]) {
    let mut faults_by_kind: BTreeMap<String, usize> = BTreeMap::new();
    let mut anomalies_by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for r in reports {
        for f in &r.faults {
            *faults_by_kind.entry(f.kind.clone()).or_default() += 1;
        }
        for a in &r.anomalies {
            *anomalies_by_kind.entry(a.kind).or_default() += 1;
        }
    }
    let sum = |f: fn(&Report) -> usize| reports.iter().map(f).sum::<usize>();
    let mut failovers: Vec<u64> = reports.iter().flat_map(|r| r.failover_ms.clone()).collect();
    failovers.sort_unstable();
    let median = |v: &[u64]| if v.is_empty() { "-".to_string() } else { format!("{} ms", v[v.len() / 2]) };
    let mut heals: Vec<u64> = reports.iter().filter_map(|r| r.heal_to_ok_ms).collect();
    heals.sort_unstable();
    let (during, during_ok) = reports.iter().fold((0, 0), |(a, b), r| (a + r.during_faults.0, b + r.during_faults.1));
    let faults: usize = reports.iter().map(|r| r.faults.len()).sum();
    let elections: u64 = reports.iter().map(|r| r.elections).sum();
    println!(
        "| runs | {} ({} with 3 nodes, {} with 5) |",
        reports.len(),
        reports.iter().filter(|r| r.nodes == 3).count(),
        reports.iter().filter(|r| r.nodes == 5).count()
    );
    println!("| faults by kind | {faults_by_kind:?} |");
    println!(
        "| round trips | {} started: {} ok, {} failed, {} unknown |",
        sum(|r| r.ops),
        sum(|r| r.ok),
        sum(|r| r.fail),
        sum(|r| r.unknown)
    );
    let mut routes: BTreeMap<(Era, bool), (usize, usize)> = BTreeMap::new();
    for (route, (started, ok)) in reports.iter().flat_map(|r| &r.routes) {
        let entry = routes.entry(*route).or_default();
        entry.0 += started;
        entry.1 += ok;
    }
    let by_route: Vec<String> = routes
        .iter()
        .map(|((era, balanced), (started, ok))| {
            let era = serde_json::to_value(era).unwrap();
            format!("{} {}: {ok} ok of {started}", era.as_str().unwrap(), if *balanced { "via nginx" } else { "direct" })
        })
        .collect();
    println!("| round trips by route | {} |", by_route.join("; "));
    println!("| anomalies by kind | {anomalies_by_kind:?} |");
    println!(
        "| completed when started during a fault | {during_ok} of {during} ({:.0} %) |",
        100.0 * during_ok as f64 / during.max(1) as f64
    );
    println!(
        "| heal to first completed round trip | median {}, max {} |",
        median(&heals),
        heals.last().map_or("-".into(), |m| format!("{m} ms"))
    );
    println!("| elections per fault | {:.2} |", elections as f64 / faults.max(1) as f64);
    println!(
        "| leader failover (killed → successor's first commit) | median {}, min {}, max {} over {} kills |",
        median(&failovers),
        failovers.first().map_or("-".into(), |m| format!("{m} ms")),
        failovers.last().map_or("-".into(), |m| format!("{m} ms")),
        failovers.len()
    );
    for r in reports.iter().filter(|r| !r.anomalies.is_empty()) {
        println!("seed {} ({} nodes): {:?}", r.seed, r.nodes, r.anomalies);
    }
}

fn kinds_of(text: &str) -> Vec<Kind> {
    text.split(',').filter_map(|name| Kind::ALL.into_iter().find(|k| k.name() == name.trim())).collect()
}

/// The runs of the test command: fixed seeds, every fault kind, 3 and 5 nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn short_campaign() {
    let runs = [
        (1, 3, vec![Kind::KillLeader, Kind::Pause, Kind::Isolate, Kind::OneWay]),
        (2, 3, vec![Kind::KillFollower, Kind::KillOwner, Kind::Restart, Kind::ClockJump]),
        (3, 3, vec![Kind::Membership, Kind::KillLeader]),
        (4, 5, vec![Kind::SplitMinority, Kind::KillLeader, Kind::Pause]),
    ];
    let mut reports = Vec::new();
    for (seed, nodes, kinds) in runs {
        reports.push(run(RunConfig { seed, nodes, kinds, clients: 6 }).await);
    }
    print_table(&reports);
    for r in &reports {
        assert!(r.anomalies.is_empty(), "seed {} ({} nodes): {:?}", r.seed, r.nodes, r.anomalies);
        assert!(r.ok > 20, "seed {}: only {} round trips completed", r.seed, r.ok);
    }
}

/// `CAMPAIGN_RUNS` seeded runs (default 200), `CAMPAIGN_FAULTS` random fault kinds each
/// (default 3), alternating 3 and 5 nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "long: run by flag (see the module documentation)"]
async fn long_campaign() {
    let runs: u64 = std::env::var("CAMPAIGN_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(200);
    let per_run: usize = std::env::var("CAMPAIGN_FAULTS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let mut reports = Vec::new();
    for i in 0..runs {
        let seed = 1000 + i;
        let mut kinds = Kind::ALL.to_vec();
        let pick = nemesis::schedule(seed, &kinds);
        kinds = pick.into_iter().take(per_run).map(|p| p.kind).collect();
        let nodes = if seed % 2 == 0 { 3 } else { 5 };
        let report = run(RunConfig { seed, nodes, kinds: kinds.clone(), clients: 6 }).await;
        println!("seed {seed} ({nodes} nodes, {kinds:?}): {} ok of {}, anomalies {:?}", report.ok, report.ops, report.anomalies);
        reports.push(report);
    }
    print_table(&reports);
    assert!(reports.iter().all(|r| r.anomalies.is_empty()));
}

/// One run again: `CAMPAIGN_SEED`, `CAMPAIGN_NODES` (3), `CAMPAIGN_KINDS` (names, comma
/// separated; default every kind).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "by flag: replays one seed"]
async fn replay() {
    let seed = std::env::var("CAMPAIGN_SEED").ok().and_then(|s| s.parse().ok()).expect("CAMPAIGN_SEED");
    let nodes = std::env::var("CAMPAIGN_NODES").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let kinds = std::env::var("CAMPAIGN_KINDS").map(|k| kinds_of(&k)).unwrap_or_else(|_| Kind::ALL.to_vec());
    let report = run(RunConfig { seed, nodes, kinds, clients: 6 }).await;
    print_table(std::slice::from_ref(&report));
    assert!(report.anomalies.is_empty(), "{:?}", report.anomalies);
}
