//! Faults over real sockets: leader loss with a parked waiter, restarts from the data directory
//! (log replay and snapshot install), and a partitioned minority. No acknowledged delivery is lost.

mod common;

use common::cluster::TestCluster;
use openraft::async_runtime::WatchReceiver;
use serde_json::json;
use std::time::Duration;
use switchboard_node::mailbox::{DeliverOutcome, Mailbox, MailboxKey, SessionTag, WaitOutcome};
use switchboard_node::raft::state_machine::MailboxState;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_waiter_survives_the_leader_being_killed() {
    let mut cluster = TestCluster::start(3).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await;
    let owner = (leader + 1) % 3;
    let other = (leader + 2) % 3;
    let key = MailboxKey::random();
    cluster.mailbox(owner).create(&key, SessionTag::default(), owner as u64, Duration::from_secs(60)).await.unwrap();
    let waiter = {
        let (store, key) = (cluster.mailbox(owner), key.clone());
        tokio::spawn(async move { store.wait(&key, Duration::from_secs(30)).await.unwrap() })
    };

    cluster.kill(leader).await;
    let new_leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    assert_ne!(new_leader, leader);
    // Deliver through the member that is not the owner.
    assert_eq!(
        cluster.mailbox(other).deliver(&key, SessionTag::default(), None, json!("after failover")).await.unwrap(),
        DeliverOutcome::Delivered
    );
    let woke = tokio::time::timeout(Duration::from_secs(10), waiter).await.expect("waiter wakes").unwrap();
    assert_eq!(woke, WaitOutcome::Delivered(json!("after failover")));

    // The old leader comes back from its disk and agrees.
    cluster.restart(leader).await;
    cluster.node(leader).linearize().await.unwrap();
    assert_delivered(&cluster, leader, &key, &json!("after failover"));
    cluster.stop_all().await;
}

/// Acknowledged deliveries to `count` fresh mailboxes, created through `via`.
async fn deliver_many(cluster: &TestCluster, via: usize, count: usize) -> Vec<(MailboxKey, serde_json::Value)> {
    deliver_many_padded(cluster, via, count, 0).await
}

/// The same, each answer padded with `pad` bytes.
async fn deliver_many_padded(cluster: &TestCluster, via: usize, count: usize, pad: usize) -> Vec<(MailboxKey, serde_json::Value)> {
    let mut acked = Vec::new();
    for i in 0..count {
        let key = MailboxKey::random();
        cluster.mailbox(via).create(&key, SessionTag::default(), via as u64, Duration::from_secs(600)).await.unwrap();
        let value = if pad == 0 { json!({"n": i}) } else { json!({"n": i, "pad": "x".repeat(pad)}) };
        assert_eq!(
            cluster.mailbox(via).deliver(&key, SessionTag::default(), None, value.clone()).await.unwrap(),
            DeliverOutcome::Delivered
        );
        acked.push((key, value));
    }
    acked
}

/// Member `member` holds the delivery of `value` to `key`: the value, or (once the owner's wait
/// took it) the tombstone of a delivered mailbox. Read from its state, not with a wait, which on
/// the owner would take the value.
fn assert_delivered(cluster: &TestCluster, member: usize, key: &MailboxKey, value: &serde_json::Value) {
    match cluster.node(member).sm.read(|sm| sm.state_of(key).cloned()) {
        Some(MailboxState::Delivered(held)) => assert_eq!(&held.decode(), value, "member {member} holds another value"),
        Some(MailboxState::Taken) => {}
        other => panic!("member {member} lost an acknowledged delivery: {other:?}"),
    }
}

async fn assert_all_delivered(cluster: &TestCluster, member: usize, acked: &[(MailboxKey, serde_json::Value)]) {
    // A member just healed may take longer than one linearize allows (1.5 s) to catch up when
    // the machine is busy with the other tests' clusters.
    let mut attempts = 0;
    while let Err(e) = cluster.node(member).linearize().await {
        attempts += 1;
        assert!(attempts < 5, "member {member} does not catch up: {e}");
    }
    for (key, value) in acked {
        assert_delivered(cluster, member, key, value);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_follower_catches_up_from_its_log() {
    let mut cluster = TestCluster::start(3).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await;
    let follower = (leader + 1) % 3;
    let before = deliver_many(&cluster, leader, 5).await;
    cluster.kill(follower).await;
    let during = deliver_many(&cluster, leader, 20).await;
    cluster.restart(follower).await;
    assert_all_delivered(&cluster, follower, &before).await;
    assert_all_delivered(&cluster, follower, &during).await;
    cluster.stop_all().await;
}

/// The leader's last log index, once it has applied all of its log: with no writes going on and
/// a member cut off (killed or partitioned), an upper bound of that member's log. The member's
/// own metrics may lag what it had written, and the leader's its own appends.
async fn last_log_index(cluster: &TestCluster, leader: usize) -> u64 {
    let settled = cluster
        .node(leader)
        .raft
        .wait(Some(Duration::from_secs(5)))
        .metrics(|m| m.last_log_index == m.last_applied.map(|id| id.index), "the log applied")
        .await
        .expect("the leader applies its log");
    settled.last_log_index.unwrap_or(0)
}

/// Wait until the leader has snapshotted and purged its log past `index`, so a member whose log
/// ends there can only catch up by installing a snapshot.
async fn wait_purged_past(cluster: &TestCluster, leader: usize, index: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while cluster.node(leader).raft.metrics().borrow_watched().purged.is_none_or(|p| p.index <= index) {
        assert!(tokio::time::Instant::now() < deadline, "leader never purged its log past {index}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `member` caught up by installing a snapshot. Its metrics report the install a moment after
/// the data is readable, so this waits for them.
async fn assert_installed_a_snapshot(cluster: &TestCluster, member: usize) {
    let installed = cluster.node(member).raft.wait(Some(Duration::from_secs(5))).metrics(|m| m.snapshot.is_some(), "a snapshot").await;
    assert!(installed.is_ok(), "member {member} caught up by installing a snapshot");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_follower_catches_up_through_a_snapshot_after_purge() {
    let mut cluster = TestCluster::start_with(3, |c| {
        c.snapshot_every = 20;
        c.keep_logs = 0;
    })
    .await;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await;
    let follower = (leader + 1) % 3;
    cluster.kill(follower).await;
    let follower_last = last_log_index(&cluster, leader).await;
    let during = deliver_many(&cluster, leader, 40).await;
    wait_purged_past(&cluster, leader, follower_last).await;
    cluster.restart(follower).await;
    assert_all_delivered(&cluster, follower, &during).await;
    assert_installed_a_snapshot(&cluster, follower).await;
    assert!(cluster.data_dir(follower).join("snapshot.bin").exists(), "the installed snapshot is on disk");
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_catches_up_through_a_snapshot_sent_in_many_pieces() {
    const CHUNK: u64 = 16 * 1024;
    let mut cluster = TestCluster::start_with(3, |c| {
        c.snapshot_every = 40;
        c.keep_logs = 0;
        c.snapshot_chunk_bytes = CHUNK as usize;
    })
    .await;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await;
    let lagging = (leader + 1) % 3;
    cluster.partition(lagging);
    let lagging_last = last_log_index(&cluster, leader).await;
    // About 1 MiB of answers in 80 entries (a create and a delivery each).
    let during = deliver_many_padded(&cluster, leader, 40, 25_000).await;
    // Not necessarily the last snapshot: openraft postpones a purge while a replication to the
    // cut-off member is in flight, which with a blackhole is most of the time.
    wait_purged_past(&cluster, leader, lagging_last).await;
    cluster.heal();
    assert_all_delivered(&cluster, lagging, &during).await;
    assert_installed_a_snapshot(&cluster, lagging).await;
    // Any snapshot past the lagging member's log holds 40 entries or more since the start,
    // about half the answers: hundreds of KiB.
    let size = std::fs::metadata(cluster.data_dir(lagging).join("snapshot.bin")).unwrap().len();
    let pieces = cluster.metrics[lagging].snapshot_chunks_received_count();
    assert!(size > 16 * CHUNK, "a snapshot of {size} bytes");
    assert!(pieces >= size / CHUNK, "{size} bytes arrived in {pieces} pieces of at most {CHUNK}");
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_minority_refuses_writes_while_the_majority_serves() {
    let mut cluster = TestCluster::start_with(3, |c| c.write_timeout = Duration::from_millis(1500)).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await;
    let isolated = (leader + 1) % 3;
    let majority = (leader + 2) % 3;
    let key = MailboxKey::random();
    cluster.mailbox(leader).create(&key, SessionTag::default(), leader as u64, Duration::from_secs(600)).await.unwrap();
    let acked_before = deliver_many(&cluster, majority, 3).await;

    cluster.partition(isolated);
    let err = cluster.mailbox(isolated).deliver(&key, SessionTag::default(), None, json!("from the minority")).await.unwrap_err();
    assert!(err.to_string().contains("not committed"), "a clear error: {err}");
    // The majority goes on, and its answer wins.
    assert_eq!(
        cluster.mailbox(majority).deliver(&key, SessionTag::default(), None, json!("from the majority")).await.unwrap(),
        DeliverOutcome::Delivered
    );
    let acked_during = deliver_many(&cluster, majority, 3).await;

    cluster.heal();
    for member in 0..3 {
        assert_all_delivered(&cluster, member, &acked_before).await;
        assert_all_delivered(&cluster, member, &acked_during).await;
        assert_delivered(&cluster, member, &key, &json!("from the majority"));
    }
    cluster.stop_all().await;
}

/// The leader's applied index, once every member agrees who leads.
fn applied(cluster: &TestCluster, member: usize) -> u64 {
    cluster.node(member).raft.metrics().borrow_watched().last_applied.map_or(0, |id| id.index)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_catches_up_across_more_entries_than_one_peer_frame_holds() {
    use futures::StreamExt;
    let mut cluster = TestCluster::start(3).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await;
    let lagging = (leader + 1) % 3;
    cluster.partition(lagging);
    // 300 answers of 1 MiB each: more than a peer frame (256 MiB) in all, and the same number
    // of entries as one openraft payload (300), so one batch of them cannot be sent whole.
    let answer = json!("x".repeat(1 << 20));
    let keys: Vec<MailboxKey> = (0..300).map(|_| MailboxKey::random()).collect();
    for key in &keys {
        cluster.mailbox(leader).create(key, SessionTag::default(), leader as u64, Duration::from_secs(600)).await.unwrap();
    }
    // The answers back to back, so any 300 consecutive entries of the backlog are ~300 MiB.
    let deliveries = futures::stream::iter(&keys).map(|key| {
        let (store, answer) = (cluster.mailbox(leader), answer.clone());
        async move { assert_eq!(store.deliver(key, SessionTag::default(), None, answer).await.unwrap(), DeliverOutcome::Delivered) }
    });
    deliveries.buffer_unordered(8).collect::<Vec<()>>().await;
    let target = applied(&cluster, leader);
    let healed = tokio::time::Instant::now();
    cluster.heal();
    while applied(&cluster, lagging) < target {
        assert!(
            healed.elapsed() < Duration::from_secs(45),
            "the follower is stuck at {} of {target} after {:?}",
            applied(&cluster, lagging),
            healed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("caught up {target} entries in {:?}", healed.elapsed());
    cluster.stop_all().await;
}

/// Wait until `member`'s readiness is `ready`, or fail after `within`.
async fn wait_ready(cluster: &TestCluster, member: usize, ready: bool, within: Duration) -> Duration {
    let started = tokio::time::Instant::now();
    loop {
        let readiness = cluster.node(member).readiness().await;
        if readiness.is_ok() == ready {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "member {member} not {} within {within:?}: {readiness:?}",
            if ready { "ready" } else { "unready" }
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_leader_fails_writes_within_the_write_timeout_and_turns_unready() {
    let write_timeout = Duration::from_millis(1500);
    let mut cluster = TestCluster::start_with(3, |c| c.write_timeout = Duration::from_millis(1500)).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(5)).await;
    let ready_within = cluster.node(leader).config().ready_within();
    for member in 0..3 {
        wait_ready(&cluster, member, true, Duration::from_secs(5)).await;
    }

    cluster.partition(leader);
    let partitioned = tokio::time::Instant::now();
    let write = {
        let store = cluster.mailbox(leader);
        tokio::spawn(
            async move { store.create(&MailboxKey::random(), SessionTag::default(), leader as u64, Duration::from_secs(60)).await },
        )
    };
    // It still calls itself leader, but it is no longer ready, within a few election timeouts.
    let unready_after = wait_ready(&cluster, leader, false, ready_within + Duration::from_secs(1)).await;
    assert_eq!(cluster.node(leader).leader_id(), Some(leader as u64), "openraft does not step down on silence");
    let err = write.await.unwrap().unwrap_err();
    let took = partitioned.elapsed();
    assert!(err.to_string().contains("no quorum: write not committed within"), "a clear error: {err}");
    assert!(took < write_timeout + Duration::from_millis(500), "the write failed after {took:?}, not about {write_timeout:?}");
    eprintln!("unready after {unready_after:?}, write failed after {took:?}");

    // The majority elects a new leader and is ready.
    let majority: Vec<usize> = (0..3).filter(|m| *m != leader).collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let new_leader = loop {
        let views: Vec<Option<u64>> = majority.iter().map(|m| cluster.node(*m).leader_id()).collect();
        if let Some(Some(l)) = views.first()
            && *l != leader as u64
            && views.iter().all(|v| *v == Some(*l))
        {
            break *l as usize;
        }
        assert!(tokio::time::Instant::now() < deadline, "the majority elected no leader: {views:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    for member in &majority {
        wait_ready(&cluster, *member, true, Duration::from_secs(5)).await;
    }
    cluster
        .mailbox(new_leader)
        .create(&MailboxKey::random(), SessionTag::default(), new_leader as u64, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(
        cluster.node(leader).readiness().await.is_err(),
        "the cut-off member stays unready: {:?}",
        cluster.node(leader).readiness().await
    );

    cluster.heal();
    wait_ready(&cluster, leader, true, Duration::from_secs(10)).await;
    assert_eq!(cluster.node(leader).leader_id(), Some(new_leader as u64), "it follows the new leader");
    cluster.stop_all().await;
}
