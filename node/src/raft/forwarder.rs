//! Batches the writes a follower forwards to the leader: concurrent writes share one HTTP
//! request (and, on the leader, one Raft batch and fsync). With at most `MAX_IN_FLIGHT`
//! requests outstanding, a lone write goes out at once and a burst queues into the next batch.

use super::network::{ForwardedWrite, PeerClient, PeerError, WriteReply};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc, oneshot};

const MAX_IN_FLIGHT: usize = 2;
const MAX_BATCH: usize = 512;
const BATCH_TIMEOUT: Duration = Duration::from_secs(5);

struct Pending {
    addr: String,
    write: ForwardedWrite,
    reply: oneshot::Sender<Result<WriteReply, PeerError>>,
}

#[derive(Clone)]
pub struct Forwarder {
    tx: mpsc::UnboundedSender<Pending>,
}

impl Forwarder {
    /// Start the batching task; it ends when the last `Forwarder` clone is dropped.
    pub fn start(client: PeerClient) -> Forwarder {
        let (tx, mut rx) = mpsc::unbounded_channel::<Pending>();
        tokio::spawn(async move {
            let permits = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
            while let Some(first) = rx.recv().await {
                let Ok(permit) = permits.clone().acquire_owned().await else { return };
                let mut batch = vec![first];
                while batch.len() < MAX_BATCH {
                    match rx.try_recv() {
                        Ok(p) => batch.push(p),
                        Err(_) => break,
                    }
                }
                let client = client.clone();
                tokio::spawn(async move {
                    let mut by_leader: HashMap<String, Vec<Pending>> = HashMap::new();
                    for p in batch {
                        by_leader.entry(p.addr.clone()).or_default().push(p);
                    }
                    for (addr, group) in by_leader {
                        let writes: Vec<&ForwardedWrite> = group.iter().map(|p| &p.write).collect();
                        match client.forward_writes(&addr, &writes, BATCH_TIMEOUT).await {
                            Ok(replies) if replies.len() == group.len() => {
                                for (p, reply) in group.into_iter().zip(replies) {
                                    let _ = p.reply.send(Ok(reply));
                                }
                            }
                            Ok(replies) => {
                                let e = PeerError::Decode { addr: addr.clone(), reason: format!("{} replies for {} writes", replies.len(), group.len()) };
                                for p in group {
                                    let _ = p.reply.send(Err(PeerError::Decode { addr: addr.clone(), reason: e.to_string() }));
                                }
                            }
                            Err(e) => {
                                let reason = e.to_string();
                                for p in group {
                                    let _ = p.reply.send(Err(PeerError::Unreachable { addr: addr.clone(), reason: reason.clone() }));
                                }
                            }
                        }
                    }
                    drop(permit);
                });
            }
        });
        Forwarder { tx }
    }

    /// Forward one write to the leader at `addr`, waiting at most `timeout` for its outcome.
    pub async fn forward(&self, addr: String, write: ForwardedWrite, timeout: Duration) -> Result<WriteReply, PeerError> {
        let (reply, rx) = oneshot::channel();
        let unreachable = |reason: &str| PeerError::Unreachable { addr: addr.clone(), reason: reason.into() };
        if self.tx.send(Pending { addr: addr.clone(), write, reply }).is_err() {
            return Err(unreachable("forwarder stopped"));
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(unreachable("forwarder dropped the write")),
            Err(_) => Err(unreachable("timed out waiting for the leader")),
        }
    }
}
