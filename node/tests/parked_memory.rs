//! A parked call holds what it must resend, and a large argument at most about twice: the RSS
//! of a real `switchboard serve` process is measured while calls with a 1 MB argument are
//! parked on an elicitation.
//!
//! The binary's allocator (mimalloc) is started taking its pages straight from the system and
//! giving them back once empty, with no delay (`MIMALLOC_DISALLOW_ARENA_ALLOC=1`,
//! `MIMALLOC_PURGE_DELAY=0`): what the process parses and copies on the way is not counted,
//! only what it still holds.

mod common;

use common::{RawClient, free_port, park_confirm, read_events};
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};

const BIN: &str = env!("CARGO_BIN_EXE_switchboard");
const ARGUMENT_BYTES: usize = 1 << 20;
const PARKED: usize = 8;

fn rss_bytes(child: &Child) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id().unwrap())).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS");
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// A one-process server with the memory store, answering on `url`.
async fn serve(dir: &std::path::Path) -> (Child, String) {
    let port = free_port();
    let child = Command::new(BIN)
        .args(["serve", "--store", "memory", "--node-id", "0"])
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--metrics-listen", &format!("127.0.0.1:{}", free_port())])
        .arg("--data-dir")
        .arg(dir)
        .env("MIMALLOC_DISALLOW_ARENA_ALLOC", "1")
        .env("MIMALLOC_PURGE_DELAY", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while reqwest::Client::new().get(&url).send().await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "the server never listened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (child, url)
}

/// Call `confirm` with `action` and read its stream until the `elicitation/create` it parks on;
/// the response stays open (the call stays parked). Returns the response and the request's id.
async fn park(client: &RawClient, id: i64, action: &str) -> (reqwest::Response, Value) {
    let (res, _, request) = park_confirm(client, id, action).await;
    (res, request["id"].clone())
}

#[tokio::test]
async fn a_parked_call_holds_a_large_argument_at_most_twice() {
    let dir = tempfile::tempdir().unwrap();
    let (child, url) = serve(dir.path()).await;
    let mut client = RawClient::new(&url);
    client.initialize().await;
    // One call with the large argument parked and answered first: what the first such call
    // builds once (buffers, caches) is not counted.
    let action = "a".repeat(ARGUMENT_BYTES);
    let (mut warm, id) = park(&client, 1, &action).await;
    let answer = json!({"jsonrpc": "2.0", "id": id, "result": {"action": "decline"}});
    assert_eq!(client.post(answer.to_string()).send().await.unwrap().status(), 202);
    read_events(&mut warm, usize::MAX, &mut String::new()).await;

    let before = rss_bytes(&child);
    let mut parked = Vec::new();
    for n in 0..PARKED {
        parked.push(park(&client, 10 + n as i64, &action).await);
    }
    let per_call = rss_bytes(&child).saturating_sub(before) as f64 / PARKED as f64;
    let ratio = per_call / ARGUMENT_BYTES as f64;
    println!("a parked call with a {ARGUMENT_BYTES}-byte argument holds {per_call:.0} bytes ({ratio:.2}x the argument)");
    // What it must resend (the elicitation/create event, which carries the argument once) and
    // the handler's own copy (the tool's result repeats the action); nothing else may hold it.
    // Those two measure 2.34-2.53x under mimalloc (its size classes and page granularity; 2.03x
    // under glibc with a 64 KiB mmap threshold); a third copy would add a whole 1.0x.
    assert!(ratio < 2.75, "a parked call holds {ratio:.2}x its argument");
    drop(parked);
}
