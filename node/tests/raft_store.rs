//! The Raft-backed store: openraft's storage suite, the mailbox contract over real loopback
//! networking, the session store, durability and bad peer input.

mod common;

use common::cluster::{SECRET, TestCluster};
use openraft::StorageError;
use openraft::testing::log::{StoreBuilder, Suite};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use switchboard_node::mailbox::{DeliverOutcome, Mailbox, MailboxKey, SessionTag, WaitOutcome, contract};
use switchboard_node::metrics::Metrics;
use switchboard_node::protocol::types::{CapabilityFlags, Implementation, LogLevel};
use switchboard_node::raft::log_store::LogStore;
use switchboard_node::raft::sm_store::StateMachineStore;
use switchboard_node::raft::types::TypeConfig;
use switchboard_node::raft::{RaftNode, RaftStoreError};
use switchboard_node::session::{SessionId, SessionRecord, SessionStore};

struct LogBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, tempfile::TempDir> for LogBuilder {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachineStore), StorageError<TypeConfig>> {
        let dir = tempfile::tempdir().unwrap();
        // A budget of one byte: every replication read goes through the limited path.
        let log = LogStore::open(dir.path()).unwrap().batch_budget(1);
        let sm = StateMachineStore::open(dir.path(), log.entries()).unwrap();
        Ok((dir, log, sm))
    }
}

/// The same log with tiny segments: every few entries start a new one, and purges delete them.
struct SmallSegmentsBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, tempfile::TempDir> for SmallSegmentsBuilder {
    async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachineStore), StorageError<TypeConfig>> {
        let dir = tempfile::tempdir().unwrap();
        let log = LogStore::open_with_segments_of(dir.path(), 512).unwrap();
        let sm = StateMachineStore::open(dir.path(), log.entries()).unwrap();
        Ok((dir, log, sm))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_storage_suite_passes_on_the_segmented_log() {
    Suite::test_all(LogBuilder).await.unwrap();
    Suite::test_all(SmallSegmentsBuilder).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mailbox_contract_on_one_node() {
    let mut cluster = TestCluster::start(1).await;
    contract::run_all(Arc::new(cluster.mailbox(0))).await;
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mailbox_contract_on_three_nodes_from_a_follower() {
    let mut cluster = TestCluster::start(3).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await;
    let follower = (leader + 1) % 3;
    contract::run_all(Arc::new(cluster.mailbox(follower))).await;
    contract::run_all(Arc::new(cluster.mailbox(leader))).await;
    cluster.stop_all().await;
}

/// Early delivery across nodes: the answer reaches the log (through one follower) before the
/// create (through another), as when the create is still on its way while the client answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_delivered_on_one_node_before_the_create_on_another_is_kept_for_it() {
    let mut cluster = TestCluster::start(3).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await;
    let (owner, answerer) = ((leader + 1) % 3, (leader + 2) % 3);
    contract::an_answer_before_its_create_is_kept_for_it(&cluster.mailbox(owner), &cluster.mailbox(answerer)).await;
    contract::an_early_answer_from_another_session_is_not_taken(&cluster.mailbox(owner), &cluster.mailbox(answerer)).await;
    contract::an_answer_before_its_create_is_kept_for_it(&cluster.mailbox(leader), &cluster.mailbox(answerer)).await;
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_on_one_node_wakes_the_waiter_on_another() {
    let mut cluster = TestCluster::start(3).await;
    let key = MailboxKey::random();
    cluster.mailbox(1).create(&key, SessionTag::default(), 1, Duration::from_secs(30)).await.unwrap();
    let waiter = {
        let store = cluster.mailbox(1);
        let key = key.clone();
        tokio::spawn(async move { store.wait(&key, Duration::from_secs(10)).await.unwrap() })
    };
    // Deliver only once the owner's handler is parked, so the wake-up path is what is tested.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while cluster.node(1).sm.parked() == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the waiter never parked");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        cluster.mailbox(2).deliver(&key, SessionTag::default(), None, json!({"answer": 42})).await.unwrap(),
        DeliverOutcome::Delivered
    );
    assert_eq!(waiter.await.unwrap(), WaitOutcome::Delivered(json!({"answer": 42})));
    // Every replica agrees on the outcome.
    for i in 0..3 {
        assert_eq!(
            cluster.mailbox(i).deliver(&key, SessionTag::default(), None, json!(0)).await.unwrap(),
            DeliverOutcome::AlreadyDelivered
        );
    }
    cluster.stop_all().await;
}

/// The owner's waits release what they took in a few entries, not one per answer: a write per
/// answer would put another commit on every round trip.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_the_owner_took_are_released_together() {
    let mut cluster = TestCluster::start(1).await;
    let mailbox = cluster.mailbox(0);
    let last_index = |cluster: &TestCluster| cluster.node(0).status().last_log_index.unwrap();
    let before = last_index(&cluster);
    let mut keys = Vec::new();
    for n in 0..20 {
        let key = MailboxKey::random();
        mailbox.create(&key, SessionTag::default(), 0, Duration::from_secs(60)).await.unwrap();
        mailbox.deliver(&key, SessionTag::default(), None, json!({"n": n})).await.unwrap();
        assert_eq!(mailbox.wait(&key, Duration::from_secs(5)).await.unwrap(), WaitOutcome::Delivered(json!({"n": n})));
        keys.push(key);
    }
    let taken = |cluster: &TestCluster| {
        cluster
            .node(0)
            .sm
            .read(|sm| keys.iter().all(|k| sm.state_of(k) == Some(&switchboard_node::raft::state_machine::MailboxState::Taken)))
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !taken(&cluster) {
        assert!(tokio::time::Instant::now() < deadline, "the taken values were never released");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let entries = last_index(&cluster) - before;
    assert!(entries <= 40 + 4, "{entries} entries for 20 round trips (40 writes and their releases)");
    cluster.stop_all().await;
}

/// A lone member proposes the writes that come while an entry is in flight as one entry, each
/// write with its own outcome; a member of a cluster never does (an older member could not
/// apply a batch entry during a rolling update).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_member_batches_concurrent_writes_and_a_cluster_member_does_not() {
    use switchboard_node::mailbox::CreateOutcome;
    use switchboard_node::raft::state_machine::{Command, JsonText, Response};
    for members in [1, 3] {
        let mut cluster = TestCluster::start(members).await;
        let leader = cluster.wait_for_leader(Duration::from_secs(5)).await;
        let node = cluster.node(leader).clone();
        let keys: Vec<_> = (0..64).map(|_| MailboxKey::random()).collect();
        let session = SessionTag::default();
        let creates = keys.iter().map(|key| node.propose(Command::MailboxCreate { key: key.clone(), session, owner: 0, ttl_ms: 60_000 }));
        let created = futures::future::join_all(creates).await;
        // Each key answered twice at once: the first value wins, the second is told so.
        let answer = |key: &MailboxKey, n: u64| Command::MailboxDeliver {
            key: key.clone(),
            session,
            value: JsonText::from(&json!(n)),
            addressee: None,
        };
        let answers = keys.iter().flat_map(|key| [answer(key, 1), answer(key, 2)]).map(|command| node.propose(command));
        let delivered = futures::future::join_all(answers).await;

        let mut indexes = std::collections::BTreeSet::new();
        for outcome in &created {
            let (response, index) = outcome.as_ref().expect("every create commits");
            assert_eq!(response, &Response::Created(CreateOutcome::Created), "{members} members");
            indexes.insert(*index);
        }
        for (key, pair) in keys.iter().zip(delivered.chunks(2)) {
            let outcomes: Vec<_> = pair.iter().map(|o| o.as_ref().expect("every answer commits")).collect();
            indexes.extend(outcomes.iter().map(|(_, index)| *index));
            let firsts: Vec<_> = outcomes.iter().map(|(r, _)| r == &Response::Delivered(DeliverOutcome::Delivered)).collect();
            let first = firsts.iter().position(|first| *first).expect("one answer is delivered");
            assert_eq!(
                outcomes[1 - first].0,
                Response::Delivered(DeliverOutcome::AlreadyDelivered),
                "{members} members: the other answer is a duplicate"
            );
            let kept = node.sm.read(|sm| sm.state_of(key).cloned());
            let expected = switchboard_node::raft::state_machine::MailboxState::Delivered(JsonText::from(&json!(first + 1)));
            assert_eq!(kept, Some(expected), "{members} members: the delivered value is the one told it was");
        }
        let writes = created.len() + delivered.len();
        if members == 1 {
            assert!(indexes.len() < writes / 4, "{} entries for {writes} concurrent writes on a lone member", indexes.len());
            // Replayed from the log at a restart, the batch entries rebuild the same state.
            let before = node.sm.read(|sm| sm.digest());
            drop(node);
            cluster.kill(0).await;
            cluster.restart(0).await;
            cluster.wait_for_leader(Duration::from_secs(5)).await;
            let node = cluster.node(0);
            assert!(node.sm.applied_at_least(*indexes.last().unwrap(), Duration::from_secs(5)).await);
            let after = node.sm.read(|sm| sm.digest());
            assert_eq!(after, before, "the state rebuilt from batch entries is the state they made");
        } else {
            assert_eq!(indexes.len(), writes, "a cluster's leader gives every write an entry of its own");
        }
        cluster.stop_all().await;
    }
}

/// Snapshots come every `snapshot_every` writes, not entries: a batch entry holds many writes,
/// and counted by entries the log kept in memory between snapshots grew with the batch size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_member_snapshots_by_writes_however_few_entries_carry_them() {
    use switchboard_node::raft::state_machine::Command;
    let mut cluster = TestCluster::start_with(1, |c| c.snapshot_every = 500).await;
    let node = cluster.node(0).clone();
    let writes = (0..600).map(|_| node.propose(Command::MailboxDelete { key: MailboxKey::random() }));
    let indexes: std::collections::BTreeSet<u64> =
        futures::future::join_all(writes).await.into_iter().map(|outcome| outcome.expect("every write commits").1).collect();
    assert!(indexes.len() < 250, "{} entries: too few writes to a batch to tell writes from entries", indexes.len());
    let snapshot = node.raft.wait(Some(Duration::from_secs(5))).metrics(|m| m.snapshot.is_some(), "a snapshot").await;
    assert!(snapshot.is_ok(), "600 writes in {} entries, and no snapshot", indexes.len());
    assert!(cluster.data_dir(0).join("snapshot.bin").exists());
    cluster.stop_all().await;
}

/// An owner that takes more values in a window than one release entry names releases them all
/// in the next window: released one entry a window, they fell further behind each second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_takes_in_a_window_than_one_release_names_are_all_released_in_the_next() {
    use switchboard_node::raft::state_machine::{MAX_RELEASE_BATCH, MailboxState};
    let mut cluster = TestCluster::start(1).await;
    let mailbox = cluster.mailbox(0);
    let keys: Vec<MailboxKey> = (0..4 * MAX_RELEASE_BATCH).map(|_| MailboxKey::random()).collect();
    for chunk in keys.chunks(64) {
        futures::future::join_all(chunk.iter().map(|key| async {
            mailbox.create(key, SessionTag::default(), 0, Duration::from_secs(600)).await.unwrap();
            mailbox.deliver(key, SessionTag::default(), None, json!("answer")).await.unwrap();
        }))
        .await;
    }
    // Every value taken at once: all the keys wait for the same release window.
    let taken_at = tokio::time::Instant::now();
    let outcomes = futures::future::join_all(keys.iter().map(|key| mailbox.wait(key, Duration::from_secs(5)))).await;
    assert!(outcomes.into_iter().all(|o| o.unwrap() == WaitOutcome::Delivered(json!("answer"))));
    let released =
        |cluster: &TestCluster| cluster.node(0).sm.read(|sm| keys.iter().filter(|k| sm.state_of(k) == Some(&MailboxState::Taken)).count());
    while released(&cluster) < keys.len() {
        let waited = taken_at.elapsed();
        assert!(
            waited < Duration::from_millis(2500),
            "{} of {} taken values released after {waited:?} (one window is 1 s)",
            released(&cluster),
            keys.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.stop_all().await;
}

fn record(id: &str) -> SessionRecord {
    SessionRecord {
        id: SessionId(id.into()),
        protocol_version: switchboard_node::protocol::types::ProtocolVersion::V2025_11_25,
        client_info: Implementation { name: "t".into(), version: "1".into(), title: None },
        capabilities: CapabilityFlags { elicitation_form: true, ..Default::default() },
        log_level: LogLevel::Info,
        subscriptions: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_created_anywhere_are_readable_everywhere_at_once() {
    let mut cluster = TestCluster::start(3).await;
    for i in 0..3 {
        let id = SessionId(format!("s{i}").into());
        cluster.sessions(i).create(record(&id.0), 100).await.unwrap();
        // Read-your-writes on every other node, immediately (ReadIndex on a miss).
        for j in 0..3 {
            let got = cluster.sessions(j).get(&id).await.unwrap().expect("session visible");
            assert_eq!(got.capabilities, CapabilityFlags { elicitation_form: true, ..Default::default() });
        }
    }
    // Every request reads the record: it gets the replica's shared copy, not a clone of it.
    let (a, b) = (cluster.sessions(1).get(&SessionId("s0".into())).await.unwrap(), cluster.sessions(1).get(&SessionId("s0".into())).await);
    assert!(Arc::ptr_eq(&a.unwrap(), &b.unwrap().unwrap()), "two reads share one record");
    let id = SessionId("s0".into());
    assert!(cluster.sessions(2).set_log_level(&id, LogLevel::Error).await.unwrap());
    cluster.node(0).linearize().await.unwrap();
    assert_eq!(cluster.sessions(0).get(&id).await.unwrap().unwrap().log_level, LogLevel::Error);
    assert!(cluster.sessions(1).delete(&id).await.unwrap());
    assert!(!cluster.sessions(1).delete(&id).await.unwrap(), "deleting twice says it was gone");
    for j in 0..3 {
        assert!(cluster.sessions(j).get(&id).await.unwrap().is_none());
    }
    assert!(cluster.sessions(0).get(&SessionId("never".into())).await.unwrap().is_none());
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_expire_by_ttl_unless_used() {
    // A TTL several times the gap between uses, so a stalled runner does not expire `busy`.
    let mut cluster = TestCluster::start_with(1, |c| c.session_ttl = Duration::from_millis(1000)).await;
    let store = cluster.sessions(0);
    store.create(record("idle"), 100).await.unwrap();
    store.create(record("busy"), 100).await.unwrap();
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(store.get(&SessionId("busy".into())).await.unwrap().is_some(), "use keeps it alive");
    }
    assert!(store.get(&SessionId("idle".into())).await.unwrap().is_none(), "idle session expired");
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_requests_without_the_secret_are_refused_and_change_nothing() {
    let mut cluster = TestCluster::start(1).await;
    let addr = cluster.members[0].as_ref().unwrap().peer_addr;
    let before = cluster.node(0).status();
    let http = reqwest::Client::new();
    let vote =
        rmp_serde::to_vec_named(&json!({"vote": {"leader_id": {"term": 99, "node_id": 5}, "committed": false}, "last_log_id": null}))
            .unwrap();
    for (auth, reason) in [(None, "missing_secret"), (Some("Bearer wrong"), "wrong_secret")] {
        for path in ["/raft/vote", "/raft/append", "/raft/append-stream", "/raft/write-stream", "/admin/status", "/admin/remove"] {
            let mut request = http.post(format!("http://{addr}{path}")).body(vote.clone());
            if let Some(auth) = auth {
                request = request.header("authorization", auth);
            }
            let res = request.send().await.unwrap();
            assert_eq!(res.status(), 401, "{path} with {auth:?}");
        }
        assert_eq!(cluster.metrics[0].peer_refused_count(reason), 6);
    }
    // Authenticated but malformed: 400, nothing applied.
    for path in ["/raft/vote", "/raft/append", "/raft/snapshot", "/raft/applied"] {
        let res = http.post(format!("http://{addr}{path}")).bearer_auth(SECRET).body(vec![0xc1, 0x00, 0xff]).send().await.unwrap();
        assert_eq!(res.status(), 400, "{path}");
    }
    let res = http.post(format!("http://{addr}/admin/learners")).bearer_auth(SECRET).body("{").send().await.unwrap();
    assert_eq!(res.status(), 400);
    // The streams need the upgrade, and a malformed frame on one closes it.
    for (path, protocol) in [("/raft/append-stream", "switchboard-raft-append"), ("/raft/write-stream", "switchboard-raft-write")] {
        let res = http.post(format!("http://{addr}{path}")).bearer_auth(SECRET).send().await.unwrap();
        assert_eq!(res.status(), 400, "{path} without the upgrade");
        assert_eq!(malformed_stream_frame(addr, path, protocol).await, 0, "{path} is closed");
    }
    let after = cluster.node(0).status();
    assert_eq!((before.term, before.leader, before.voters.clone()), (after.term, after.leader, after.voters.clone()));
    assert_eq!(before.last_log_index, after.last_log_index);
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_or_malformed_snapshot_stream_is_refused_and_changes_nothing() {
    use futures::StreamExt;
    use openraft::async_runtime::WatchReceiver;
    use switchboard_node::peer::PeerClient;
    use switchboard_node::peer::codec::{decode, encode};
    use switchboard_node::peer::stream::{framed, send_encoded};
    use switchboard_node::raft::snapshot_stream::{PROTOCOL, SnapshotRefused, SnapshotReply, ToFollower};
    use switchboard_node::raft::state_machine::StateMachine;
    use switchboard_node::raft::types::{SnapshotMeta, Vote};
    use tokio::io::AsyncWriteExt;

    let mut cluster = TestCluster::start(1).await;
    let addr = cluster.members[0].as_ref().unwrap().peer_addr.to_string();
    let key = MailboxKey::random();
    cluster.mailbox(0).create(&key, SessionTag::default(), 0, Duration::from_secs(60)).await.unwrap();
    let before = cluster.node(0).status();
    let client = PeerClient::new(SECRET.into(), None, None);
    // A state that loads, announced by a leader of a later term: anything installed, or any
    // vote taken, would show in the term or the state.
    let state = switchboard_node::raft::state_machine::snapshot::encode(&StateMachine::default());
    // Each case: the frames sent (encoded), then the end of the stream; what the refusal says.
    let begin =
        |size: usize| encode(&ToFollower::Begin { vote: Vote::new_committed(99, 5), meta: SnapshotMeta::default(), size: size as u64 });
    let chunk = |data: &[u8]| encode(&ToFollower::Chunk(data.into()));
    let end = encode(&ToFollower::End);
    let half = &state[..state.len() / 2];
    let cases = [
        (vec![begin(state.len()), chunk(half)], "ended before"),
        (vec![begin(half.len()), chunk(&state), end.clone()], "more data than"),
        (vec![begin(state.len()), vec![0xc1, 0x00, 0xff]], "malformed frame"),
        (vec![begin(3), chunk(b"abc"), end.clone()], "malformed snapshot data"),
    ];
    for (frames, expected) in cases {
        let (mut reader, mut writer) = framed(client.upgrade(&addr, "/raft/snapshot", PROTOCOL).await.unwrap());
        for frame in frames {
            send_encoded(&mut writer, frame).await.unwrap();
        }
        writer.get_mut().shutdown().await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(10), reader.next()).await.expect("answered").unwrap().unwrap();
        match decode::<SnapshotReply>(&answer).unwrap() {
            Err(SnapshotRefused::Invalid(reason)) => assert!(reason.contains(expected), "{reason:?} should say {expected:?}"),
            other => panic!("{expected}: expected a refusal, got {other:?}"),
        }
    }
    let after = cluster.node(0).status();
    // The log may grow by a tick (the create's dedup entry falls due 20 s on, which a slow run
    // reaches); it never goes back, as an installed snapshot would take it.
    assert_eq!((before.term, before.leader), (after.term, after.leader));
    assert!(after.last_log_index >= before.last_log_index, "{before:?} -> {after:?}");
    assert!(cluster.node(0).raft.metrics().borrow_watched().snapshot.is_none(), "no snapshot installed");
    assert_eq!(
        cluster.mailbox(0).deliver(&key, SessionTag::default(), None, json!("still here")).await.unwrap(),
        DeliverOutcome::Delivered
    );
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_cluster_keeps_its_replication_connections() {
    let mut cluster = TestCluster::start_direct(3, |_| {}).await;
    cluster.mailbox(0).create(&MailboxKey::random(), SessionTag::default(), 0, Duration::from_secs(30)).await.unwrap();
    let accepted = |c: &TestCluster| (0..3).map(|i| c.metrics[i].peer_streams_accepted_count("switchboard-raft-append")).sum::<u64>();
    let before = accepted(&cluster);
    assert!(before >= 2, "one replication connection per follower at least: {before}");
    // Longer than the wait for an answer on a busy connection: idleness is not silence.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(accepted(&cluster), before, "connections were re-opened while idle");
    cluster.stop_all().await;
}

/// Upgrade a raw connection to a peer stream, send a frame that is not MessagePack, and return
/// how many bytes the node answers before closing.
async fn malformed_stream_frame(addr: std::net::SocketAddr, path: &str, protocol: &str) -> usize {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let upgrade = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {SECRET}\r\nconnection: upgrade\r\nupgrade: {protocol}\r\ncontent-length: 0\r\n\r\n"
    );
    tcp.write_all(upgrade.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(tcp.read_u8().await.unwrap());
    }
    assert!(String::from_utf8_lossy(&head).starts_with("HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
    tcp.write_all(&[0, 0, 0, 3, 0xc1, 0x00, 0xff]).await.unwrap();
    let mut answered = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut answered)).await.expect("closed").unwrap();
    answered.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_with_another_id_key_is_refused_loudly() {
    let mut cluster = TestCluster::start_with(1, |c| c.key_fingerprint = Some("aaaa".into())).await;
    let addr = cluster.members[0].as_ref().unwrap().peer_addr;
    let http = reqwest::Client::new();
    let status = |fp: Option<&'static str>| {
        let mut request = http.get(format!("http://{addr}/admin/status")).bearer_auth(SECRET);
        if let Some(fp) = fp {
            request = request.header("x-switchboard-key", fp);
        }
        request.send()
    };
    let res = status(Some("bbbb")).await.unwrap();
    assert_eq!(res.status(), 403);
    assert!(res.text().await.unwrap().contains("id-encryption key differs"));
    assert_eq!(cluster.metrics[0].peer_refused_count("key_mismatch"), 1);
    assert_eq!(status(Some("aaaa")).await.unwrap().status(), 200);
    assert_eq!(status(None).await.unwrap().status(), 200, "admin tools send no key");
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_written_under_another_key_is_refused_at_start_and_kept() {
    let mut cluster = TestCluster::start_with(1, |c| c.key_fingerprint = Some("aaaa".into())).await;
    cluster.wait_for_leader(Duration::from_secs(5)).await;
    let written = cluster.node(0).status().last_log_index;
    cluster.kill(0).await;
    // The stopped member's background tasks let go of its log store.
    tokio::time::sleep(Duration::from_secs(1)).await;

    // The same volume under a newly generated key, as when an McpServer is re-created with the
    // same name: the member refuses to start, says why and what to do, and writes nothing.
    let mut config = cluster.config(0);
    config.key_fingerprint = Some("bbbb".into());
    let refused = RaftNode::start(config, Arc::new(Metrics::new())).await.err().expect("refused");
    let message = refused.to_string();
    assert!(matches!(refused, RaftStoreError::ForeignData { .. }), "{refused:?}");
    assert!(
        message.contains("belongs to encryption key aaaa, not this node's bbbb") && message.contains("restore the Secret"),
        "{message}"
    );

    // Under its own key it starts on its data as before.
    cluster.restart(0).await;
    cluster.wait_for_leader(Duration::from_secs(5)).await;
    assert!(cluster.node(0).status().last_log_index >= written);
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_a_rotation_the_previous_secret_and_key_are_accepted_but_nothing_older() {
    let mut cluster = TestCluster::start_with(1, |c| {
        c.key_fingerprint = Some("bbbb".into());
        c.previous_key_fingerprint = Some("aaaa".into());
        c.previous_secret = Some("the-previous-secret".into());
    })
    .await;
    let addr = cluster.members[0].as_ref().unwrap().peer_addr;
    let http = reqwest::Client::new();
    let status = |secret: &'static str, fp: &'static str| {
        http.get(format!("http://{addr}/admin/status")).bearer_auth(secret).header("x-switchboard-key", fp).send()
    };
    assert_eq!(status(SECRET, "bbbb").await.unwrap().status(), 200);
    assert_eq!(status(SECRET, "aaaa").await.unwrap().status(), 200, "the previous key");
    assert_eq!(status("the-previous-secret", "bbbb").await.unwrap().status(), 200, "the previous secret");
    assert_eq!(status(SECRET, "cccc").await.unwrap().status(), 403, "another key");
    assert_eq!(status("an-older-secret", "bbbb").await.unwrap().status(), 401, "another secret");
    cluster.stop_all().await;
}
