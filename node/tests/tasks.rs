//! The MCP Tasks extension: a long tool call becomes a task that any replica reports on, feeds
//! input to and cancels, through the replicated task records. One node over real HTTP, three
//! Raft members, and rmcp's task client.

mod common;

use common::cluster::TestCluster;
use common::mcp_cluster::McpCluster;
use common::modern::{Answer, Modern};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use switchboard_node::mcp_tasks::{TaskId, TaskOutcome, TaskSettings, TaskStatus, TaskStore, contract};
use switchboard_node::protocol::json_text::JsonText;
use switchboard_node::raft::RaftTasks;
use switchboard_node::server::ServerConfig;
use switchboard_node::transport::http::HttpConfig;

const TASKS: &str = "io.modelcontextprotocol/tasks";

fn with_tasks(url: &str) -> Modern {
    Modern::with_capabilities(url, json!({"elicitation": {}, "extensions": {TASKS: {}}}))
}

async fn get(client: &Modern, task: &str) -> Answer {
    client.send(json!("get"), "tasks/get", json!({"taskId": task}), json!({})).await
}

/// Poll `tasks/get` until `done` holds (or fail after `within`).
async fn poll_until(client: &Modern, task: &str, within: Duration, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let answer = get(client, task).await;
        let result = answer.result().clone();
        if done(&result) {
            return result;
        }
        assert!(Instant::now() < deadline, "task {task} never got there: {}", answer.last());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn task_id(answer: &Answer) -> String {
    assert_eq!(answer.result()["resultType"], "task", "{:?}", answer.messages);
    answer.result()["taskId"].as_str().expect("a task id").to_string()
}

fn status(result: &Value) -> &str {
    result["status"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn a_task_is_created_polled_fed_and_finished_on_one_node() {
    let srv = common::start_default().await;
    let client = with_tasks(&srv.url);
    // A tool with input inside the task.
    let created = client.call(1, "confirm_delete", json!({"filename": "a.txt"})).await;
    let task = task_id(&created);
    let result = created.result();
    assert_eq!(result["status"], "working");
    for absent in ["result", "error", "inputRequests", "requestState"] {
        assert!(result.get(absent).is_none(), "{absent} on a new task: {result}");
    }
    assert!(result["createdAt"].as_str().unwrap().ends_with('Z') && result["ttlMs"].as_u64().unwrap() > 0);
    let asking = poll_until(&client, &task, Duration::from_secs(5), |r| status(r) == "input_required").await;
    let key = asking["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    assert_eq!(asking["inputRequests"][&key]["method"], "elicitation/create");
    // Unknown keys are ignored; the ack is empty.
    let ack =
        client.send(json!(2), "tasks/update", json!({"taskId": task, "inputResponses": {"stranger": {"ignored": true}}}), json!({})).await;
    assert_eq!(ack.result()["resultType"], "complete");
    assert_eq!(status(&get(&client, &task).await.result().clone()), "input_required");
    let answer = json!({key: {"action": "accept", "content": {"confirm": true}}});
    client.send(json!(3), "tasks/update", json!({"taskId": task, "inputResponses": answer}), json!({})).await;
    let done = poll_until(&client, &task, Duration::from_secs(5), |r| status(r) == "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "deleted 'a.txt'");
    // Cancelling a finished task is an idempotent ack; the status stays.
    let ack = client.send(json!(4), "tasks/cancel", json!({"taskId": task}), json!({})).await;
    assert_eq!(ack.result()["resultType"], "complete");
    assert!(ack.result().get("status").is_none());
    assert_eq!(status(get(&client, &task).await.result()), "completed");
    assert_eq!(srv.server.metrics().task_ended_count("completed"), 1);
}

#[tokio::test]
async fn cancel_stops_a_working_task_and_errors_are_typed() {
    let srv = common::start_default().await;
    let client = with_tasks(&srv.url);
    let task = task_id(&client.call(1, "slow_compute", json!({"seconds": 60, "label": "c"})).await);
    client.send(json!(2), "tasks/cancel", json!({"taskId": task}), json!({})).await;
    poll_until(&client, &task, Duration::from_secs(5), |r| status(r) == "cancelled").await;
    // A tool error completes the task with isError; a JSON-RPC error fails it.
    let failing = task_id(&client.call(3, "failing_job", json!({})).await);
    let done = poll_until(&client, &failing, Duration::from_secs(5), |r| status(r) == "completed").await;
    assert_eq!(done["result"]["isError"], true);
    let broken = task_id(&client.call(4, "protocol_error_job", json!({})).await);
    let failed = poll_until(&client, &broken, Duration::from_secs(5), |r| status(r) == "failed").await;
    assert_eq!(failed["error"]["code"], -32603);
    assert!(failed.get("result").is_none());
    // Unknown ids: -32602.
    let unknown = get(&client, "00000000000000000000000000000000").await;
    assert_eq!(unknown.error_code(), Some(-32602));
    assert!(unknown.last()["error"]["message"].as_str().unwrap().contains("Task not found"));
    // Without the extension: tasks/* and required tools are refused with -32021 (HTTP 400); an
    // optional one runs inline.
    let plain = Modern::with_capabilities(&srv.url, json!({}));
    for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let refused = plain.send(json!(5), method, json!({"taskId": task, "inputResponses": {}}), json!({})).await;
        assert_eq!((refused.status, refused.error_code()), (400, Some(-32021)), "{method}");
        assert_eq!(refused.last()["error"]["data"]["requiredCapabilities"]["extensions"][TASKS], json!({}));
    }
    let required = plain.call(6, "failing_job", json!({})).await;
    assert_eq!((required.status, required.error_code()), (400, Some(-32021)));
    let inline = plain.call(7, "slow_compute", json!({"seconds": 0, "label": "i"})).await;
    assert_eq!(inline.result()["resultType"], "complete");
    assert!(inline.result().get("taskId").is_none());
}

#[tokio::test]
async fn a_task_expires_with_its_ttl() {
    let config = ServerConfig { tasks: TaskSettings { ttl: Duration::from_millis(300), ..TaskSettings::default() }, ..Default::default() };
    let srv = common::start(config, HttpConfig::default()).await;
    let client = with_tasks(&srv.url);
    let created = client.call(1, "slow_compute", json!({"seconds": 0, "label": "t"})).await;
    let task = task_id(&created);
    assert_eq!(created.result()["ttlMs"], 300);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let expired = get(&client, &task).await;
    assert_eq!(expired.error_code(), Some(-32602));
    assert!(expired.last()["error"]["message"].as_str().unwrap().contains("expired"), "{}", expired.last());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_replica_reports_on_feeds_and_cancels_a_task() {
    let mut cluster = McpCluster::start().await;
    let nodes: Vec<Modern> = cluster.urls.iter().map(|u| with_tasks(u)).collect();
    let created = nodes[0].call(1, "multi_input", json!({})).await;
    let task = task_id(&created);
    // Right after creation, on another node (linearizable).
    assert!(get(&nodes[1], &task).await.result()["status"].is_string());
    let asking =
        poll_until(&nodes[2], &task, Duration::from_secs(5), |r| r["inputRequests"].as_object().is_some_and(|k| k.len() == 2)).await;
    let keys: Vec<String> = asking["inputRequests"].as_object().unwrap().keys().cloned().collect();
    let answer = |key: &str| json!({key: {"action": "accept", "content": {"name": "ada", "confirm": true}}});
    // One answer on node 2: node 1 sees only the other key outstanding at once.
    nodes[2].send(json!(2), "tasks/update", json!({"taskId": task, "inputResponses": answer(&keys[0])}), json!({})).await;
    let partial = get(&nodes[1], &task).await.result().clone();
    assert_eq!(partial["inputRequests"].as_object().unwrap().keys().cloned().collect::<Vec<_>>(), vec![keys[1].clone()], "{partial}");
    nodes[1].send(json!(3), "tasks/update", json!({"taskId": task, "inputResponses": answer(&keys[1])}), json!({})).await;
    let done = poll_until(&nodes[2], &task, Duration::from_secs(5), |r| status(r) == "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "name=\"ada\" confirmed=true");
    // Cancel through another node than the owner.
    let slow = task_id(&nodes[0].call(4, "slow_compute", json!({"seconds": 60, "label": "x"})).await);
    nodes[2].send(json!(5), "tasks/cancel", json!({"taskId": slow}), json!({})).await;
    poll_until(&nodes[1], &slow, Duration::from_secs(5), |r| status(r) == "cancelled").await;
    cluster.raft.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replicated_task_store_keeps_the_contract_across_nodes() {
    let mut cluster = TestCluster::start(3).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let (owner, other) = ((leader + 1) % 3, (leader + 2) % 3);
    let (owner_store, other_store) = (RaftTasks::new(cluster.node(owner).clone()), RaftTasks::new(cluster.node(other).clone()));
    contract::run(&owner_store, &other_store, owner as u64).await;
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_records_survive_a_leader_change_and_a_restarted_replica() {
    let mut cluster = TestCluster::start(3).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let (owner, other) = ((leader + 1) % 3, (leader + 2) % 3);
    let tasks = RaftTasks::new(cluster.node(owner).clone());
    let id = TaskId::random();
    tasks.create(id, owner as u64, TaskSettings::default()).await.unwrap();
    // The leader goes: the owner finishes the task through the new one.
    cluster.kill(leader).await;
    tasks.finish(id, TaskOutcome::Completed(JsonText::from(&json!({"content": []})))).await.unwrap();
    assert_eq!(RaftTasks::new(cluster.node(other).clone()).get(id).await.unwrap().record.status, TaskStatus::Completed);
    // The old leader, a replica that does not own the task, restarts from its data directory
    // and learns how the task ended (it was down when it did).
    cluster.restart(leader).await;
    let restarted = RaftTasks::new(cluster.node(leader).clone());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match restarted.get(id).await {
            Ok(view) if view.record.status == TaskStatus::Completed => break,
            other => assert!(Instant::now() < deadline, "the restarted replica does not report the task: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_owner_dies_fails_and_every_replica_says_so() {
    let mut cluster = McpCluster::start_with(|c| c.task_owner_timeout = Duration::from_secs(2)).await;
    let leader = cluster.raft.wait_for_leader(Duration::from_secs(10)).await;
    let owner = (0..3).find(|&i| i != leader).unwrap();
    let other = (0..3).find(|&i| i != leader && i != owner).unwrap();
    let task = task_id(&with_tasks(&cluster.urls[owner]).call(1, "slow_compute", json!({"seconds": 60, "label": "o"})).await);
    let killed = Instant::now();
    cluster.raft.kill(owner).await;
    let failed = poll_until(&with_tasks(&cluster.urls[other]), &task, Duration::from_secs(15), |r| status(r) == "failed").await;
    assert!(failed["error"]["message"].as_str().unwrap().contains("lost"), "{failed}");
    // The bound: the owner timeout plus the leader's one-second check, with room for commits.
    assert!(killed.elapsed() < Duration::from_secs(8), "failed only after {:?}", killed.elapsed());
    cluster.raft.stop_all().await;
}

/// rmcp 3.11's task client: a task created on one node, polled on another, fed input on a
/// third, and a second one cancelled, each call through a different node.
mod rmcp_tasks {
    use super::*;
    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig, GetTaskParams, Implementation,
        ProtocolVersion, TaskStatus as RmcpStatus, UpdateTaskParams,
    };
    use rmcp::service::{RoleClient, RunningService};
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt};

    #[derive(Clone)]
    struct TaskClient;

    impl ClientHandler for TaskClient {
        fn get_info(&self) -> ClientConfig {
            let capabilities: ClientCapabilities = serde_json::from_value(json!({"elicitation": {}, "extensions": {TASKS: {}}})).unwrap();
            ClientConfig::new(capabilities, Implementation::new("rmcp-task-client", "1.0.0"))
        }
    }

    async fn connect(url: &str) -> RunningService<RoleClient, TaskClient> {
        let lifecycle = ClientLifecycleMode::Auto { preferred_versions: vec![ProtocolVersion::V_2026_07_28], legacy_version: None };
        TaskClient.serve_with_lifecycle(StreamableHttpClientTransport::from_uri(url), lifecycle).await.expect("rmcp connects")
    }

    async fn wait_status(client: &RunningService<RoleClient, TaskClient>, id: &str, want: RmcpStatus) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let got = client.get_task(GetTaskParams::new(id)).await.expect("tasks/get");
            if got.task.task.status == want {
                return serde_json::to_value(&got).unwrap();
            }
            assert!(Instant::now() < deadline, "task {id} never reached {want:?}: {got:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rmcp_creates_polls_updates_and_cancels_tasks_through_different_nodes() {
        let mut cluster = McpCluster::start().await;
        let clients = [connect(&cluster.urls[0]).await, connect(&cluster.urls[1]).await, connect(&cluster.urls[2]).await];
        let args = |v: Value| v.as_object().cloned().unwrap();
        let CallToolResponse::Task(created) = clients[0]
            .call_tool_once(CallToolRequestParams::new("confirm_delete").with_arguments(args(json!({"filename": "r.txt"}))))
            .await
            .unwrap()
        else {
            panic!("confirm_delete did not become a task")
        };
        let id = created.task.task_id.clone();
        let asking = wait_status(&clients[1], &id, RmcpStatus::InputRequired).await;
        let key = asking["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
        let responses = [(key, json!({"action": "accept", "content": {"confirm": true}}))].into_iter().collect();
        clients[2].update_task(UpdateTaskParams::new(id.clone(), responses)).await.unwrap();
        let done = wait_status(&clients[1], &id, RmcpStatus::Completed).await;
        assert_eq!(done["result"]["content"][0]["text"], "deleted 'r.txt'");
        let CallToolResponse::Task(slow) = clients[0]
            .call_tool_once(CallToolRequestParams::new("slow_compute").with_arguments(args(json!({"seconds": 60, "label": "r"}))))
            .await
            .unwrap()
        else {
            panic!("slow_compute did not become a task")
        };
        clients[2].cancel_task(CancelTaskParams::new(slow.task.task_id.clone())).await.unwrap();
        wait_status(&clients[1], &slow.task.task_id, RmcpStatus::Cancelled).await;
        for client in clients {
            let _ = client.cancel().await;
        }
        cluster.raft.stop_all().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_owner_fails_the_tasks_of_its_earlier_run() {
    let mut cluster = TestCluster::start(3).await;
    let leader = cluster.wait_for_leader(Duration::from_secs(10)).await;
    let (owner, other) = ((leader + 1) % 3, (leader + 2) % 3);
    let id = TaskId::random();
    {
        let tasks = RaftTasks::new(cluster.node(owner).clone());
        tasks.create(id, owner as u64, TaskSettings::default()).await.unwrap();
    }
    // The owner's process goes and comes back: the handler that ran the task is gone with it.
    cluster.kill(owner).await;
    let reader = RaftTasks::new(cluster.node(other).clone());
    assert_eq!(reader.get(id).await.unwrap().record.status, TaskStatus::Working);
    cluster.restart(owner).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match reader.get(id).await {
            Ok(view) if view.record.status == TaskStatus::Failed => break,
            other => assert!(Instant::now() < deadline, "the earlier run's task is not failed: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.stop_all().await;
}
