//! Writes proposed together. openraft's cost on a lone member is per entry, not per byte: a log
//! id, an append, an apply and a response each (a group commit that merged ten writes a message
//! into one append moved nothing; see `docs/architecture.md`). So while an entry is in flight,
//! the writes that come meanwhile wait here, and go as one [`Command::Batch`] entry when it
//! commits: under load many writes pay for one entry, while a write that finds nothing in
//! flight is proposed at once, alone.
//!
//! Only a member that is the whole membership batches (see `RaftNode::propose`): every member
//! must decode a batch entry, and members do not tell each other their versions, so during a
//! rolling update an older follower could not apply one. A lone member's log reaches only the
//! members that join it, and those run its image (a scale-up).
//!
//! This is the queue alone, without I/O: the node proposes what it hands out.

use super::messages::{Refusal, WriteReply};
use super::state_machine::{BatchedWrite, Command, Response, WriteId};
use std::collections::VecDeque;
use std::sync::Mutex;
use tokio::sync::oneshot;

/// Entries the batcher keeps in flight at once: one is written while the one before it is
/// applied, and the writes that come meanwhile wait for the next. (One or four made no
/// difference past the noise at 64 clients; two was ahead in each of three alternating pairs.)
const MAX_IN_FLIGHT: usize = 2;
/// Most writes one batch entry takes.
pub const MAX_BATCH_WRITES: usize = 512;
/// What a write adds to an entry beyond its command's encoding: its id and the field names
/// (MessagePack with names: under 50 bytes).
const WRITE_OVERHEAD_BYTES: usize = 64;

/// The writes waiting for the entry in flight to commit.
pub struct Batcher {
    queue: Mutex<Queue>,
    /// An entry's size limit: a batch never grows past it.
    max_entry_bytes: usize,
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Queued>,
    in_flight: usize,
}

/// A write waiting for an entry.
pub struct Queued {
    pub write: WriteId,
    pub command: Command,
    /// Its command's encoded size.
    pub size: usize,
    pub reply: oneshot::Sender<WriteReply>,
}

/// What the batcher made of a write.
pub enum Admission {
    /// Nothing waits and an entry may go: propose it now, alone, and hand the batcher's turn
    /// on when done ([`Batcher::next_batch`]).
    Propose(Command),
    /// It waits for an entry in flight; its outcome comes here.
    Wait(oneshot::Receiver<WriteReply>),
}

impl Batcher {
    pub fn new(max_entry_bytes: usize) -> Self {
        Batcher { queue: Mutex::default(), max_entry_bytes }
    }

    /// Propose `command` now or queue it. `size` is its encoded size, at most an entry's limit.
    pub fn admit(&self, write: WriteId, command: Command, size: usize) -> Admission {
        let mut queue = self.queue.lock().unwrap();
        if queue.in_flight < MAX_IN_FLIGHT && queue.waiting.is_empty() {
            queue.in_flight += 1;
            return Admission::Propose(command);
        }
        let (reply, outcome) = oneshot::channel();
        queue.waiting.push_back(Queued { write, command, size, reply });
        Admission::Wait(outcome)
    }

    /// An entry went (committed or not): the writes to propose next in the turn it held, as
    /// many of those waiting as one entry takes; or none, and the turn is given up.
    pub fn next_batch(&self) -> Option<Vec<Queued>> {
        let mut queue = self.queue.lock().unwrap();
        // Writes whose callers gave up waiting are left out: they are retried (under the same
        // write id) if the caller still wants them.
        queue.waiting.retain(|queued| !queued.reply.is_closed());
        if queue.waiting.is_empty() {
            queue.in_flight -= 1;
            return None;
        }
        let mut bytes = 0;
        let mut taken = 0;
        for queued in &queue.waiting {
            let cost = queued.size + WRITE_OVERHEAD_BYTES;
            if taken == MAX_BATCH_WRITES || (taken > 0 && bytes + cost > self.max_entry_bytes) {
                break;
            }
            bytes += cost;
            taken += 1;
        }
        Some(queue.waiting.drain(..taken).collect())
    }
}

/// The entry that carries `batch` (a lone write as itself with its id, several as one batch
/// entry) and the writes' reply channels, in the batch's order, to [`answer`] them with.
pub fn into_entry(batch: Vec<Queued>) -> (Option<WriteId>, Command, Vec<oneshot::Sender<WriteReply>>) {
    if batch.len() == 1 {
        let Queued { write, command, reply, .. } = batch.into_iter().next().expect("one write");
        return (Some(write), command, vec![reply]);
    }
    let (writes, replies) =
        batch.into_iter().map(|Queued { write, command, reply, .. }| (BatchedWrite { write: Some(write), command }, reply)).unzip();
    (None, Command::Batch { writes }, replies)
}

/// Hand each write its outcome from `reply`, the reply to the entry [`into_entry`] made of
/// them; `replies` are their channels from it.
pub fn answer(replies: Vec<oneshot::Sender<WriteReply>>, reply: WriteReply) {
    match reply {
        Ok((Response::Batch(responses), index)) if replies.len() > 1 && responses.len() == replies.len() => {
            for (sender, response) in replies.into_iter().zip(responses) {
                let _ = sender.send(Ok((response, index)));
            }
        }
        Ok(reply) if replies.len() == 1 => {
            let _ = replies.into_iter().next().map(|sender| sender.send(Ok(reply)));
        }
        Ok((response, index)) => {
            let refusal = Refusal::Unavailable(format!("entry {index} answered {} writes with {response:?}", replies.len()));
            tracing::error!(%refusal, "a batch entry's response does not match its writes");
            send_all(replies, Err(refusal));
        }
        Err(refusal) => send_all(replies, Err(refusal)),
    }
}

fn send_all(replies: Vec<oneshot::Sender<WriteReply>>, reply: WriteReply) {
    for sender in replies {
        let _ = sender.send(reply.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mailbox::{CreateOutcome, MailboxKey};

    fn write(serial: u64) -> WriteId {
        WriteId { origin: 1, serial }
    }

    fn delete(n: u128) -> Command {
        Command::MailboxDelete { key: MailboxKey::from_bits(n) }
    }

    /// A batcher with every entry it may have in flight taken, as under load: the first writes
    /// go at once, alone.
    fn busy(max_entry_bytes: usize) -> Batcher {
        let batcher = Batcher::new(max_entry_bytes);
        for n in 0..MAX_IN_FLIGHT as u64 {
            assert!(matches!(batcher.admit(write(1000 + n), delete(n.into()), 10), Admission::Propose(c) if c == delete(n.into())));
        }
        batcher
    }

    /// Admit a write that must wait.
    fn queue(batcher: &Batcher, serial: u64, size: usize) -> oneshot::Receiver<WriteReply> {
        match batcher.admit(write(serial), delete(serial.into()), size) {
            Admission::Wait(outcome) => outcome,
            Admission::Propose(_) => panic!("write {serial} proposed while every entry in flight is taken"),
        }
    }

    #[test]
    fn writes_that_come_while_entries_are_in_flight_go_together_after_one_of_them() {
        let batcher = busy(1 << 20);
        let mut waiting: Vec<_> = (1..=3).map(|n| queue(&batcher, n, 10)).collect();
        let batch = batcher.next_batch().expect("three waiting");
        assert_eq!(batch.iter().map(|q| q.write.serial).collect::<Vec<_>>(), [1, 2, 3], "in arrival order");
        let (write_id, command, replies) = into_entry(batch);
        assert_eq!(write_id, None, "a batch entry has no id of its own: its writes have");
        let Command::Batch { writes } = command else { panic!("three writes make a batch") };
        assert_eq!(
            writes.iter().map(|w| (w.write, w.command.clone())).collect::<Vec<_>>(),
            [(Some(write(1)), delete(1)), (Some(write(2)), delete(2)), (Some(write(3)), delete(3))]
        );

        // The batch holds the finished entry's turn: a write now still waits.
        let _fourth = queue(&batcher, 4, 10);
        let responses = vec![Response::Done, Response::Created(CreateOutcome::Created), Response::Session(false)];
        answer(replies, Ok((Response::Batch(responses.clone()), 7)));
        for (outcome, response) in waiting.iter_mut().zip(responses) {
            assert_eq!(outcome.try_recv().unwrap(), Ok((response, 7)), "each write its own response, at the entry's index");
        }
        let lone = batcher.next_batch().expect("the fourth");
        let (write_id, command, replies) = into_entry(lone);
        assert_eq!((write_id, command, replies.len()), (Some(write(4)), delete(4), 1), "a lone write goes as itself");
        assert!(batcher.next_batch().is_none(), "nothing waits: the turn is given up");
        assert!(matches!(batcher.admit(write(5), delete(5), 10), Admission::Propose(_)), "and the next write goes at once");
        assert!(matches!(batcher.admit(write(6), delete(6), 10), Admission::Wait(_)), "and the one after it waits again");
    }

    #[test]
    fn a_batch_stops_at_the_entry_limit_and_at_the_most_writes() {
        let batcher = busy(1000);
        let _outcomes: Vec<_> = [400, 400, 400, 2000, 10].iter().zip(1..).map(|(size, n)| queue(&batcher, n, *size)).collect();
        let sizes = |batch: Vec<Queued>| batch.iter().map(|q| q.size).collect::<Vec<_>>();
        assert_eq!(sizes(batcher.next_batch().unwrap()), [400, 400], "two with their overhead fit in 1000, not three");
        assert_eq!(sizes(batcher.next_batch().unwrap()), [400]);
        assert_eq!(sizes(batcher.next_batch().unwrap()), [2000], "a write at the limit goes alone");
        assert_eq!(sizes(batcher.next_batch().unwrap()), [10]);

        let many = busy(usize::MAX);
        let _outcomes: Vec<_> = (1..=MAX_BATCH_WRITES as u64 + 1).map(|n| queue(&many, n, 1)).collect();
        assert_eq!(many.next_batch().unwrap().len(), MAX_BATCH_WRITES);
        assert_eq!(many.next_batch().unwrap().len(), 1);
    }

    #[test]
    fn a_refused_or_mismatched_entry_fails_every_write_of_it() {
        let batcher = busy(1 << 20);
        let mut outcomes: Vec<_> = (1..=2).map(|n| queue(&batcher, n, 10)).collect();
        let refusal = Refusal::NotLeader { leader: Some((2, "b:1".into())) };
        answer(into_entry(batcher.next_batch().unwrap()).2, Err(refusal.clone()));
        for outcome in &mut outcomes {
            assert_eq!(outcome.try_recv().unwrap(), Err(refusal.clone()), "each retries as it would alone");
        }

        let mut outcomes: Vec<_> = (3..=4).map(|n| queue(&batcher, n, 10)).collect();
        answer(into_entry(batcher.next_batch().unwrap()).2, Ok((Response::Batch(vec![Response::Done]), 9)));
        for outcome in &mut outcomes {
            assert!(matches!(outcome.try_recv().unwrap(), Err(Refusal::Unavailable(_))), "one response for two writes is no answer");
        }
    }

    #[test]
    fn writes_whose_callers_gave_up_are_left_out() {
        let batcher = busy(1 << 20);
        let gone = queue(&batcher, 1, 10);
        let _kept = queue(&batcher, 2, 10);
        drop(gone);
        let batch = batcher.next_batch().unwrap();
        assert_eq!(batch.iter().map(|q| q.write.serial).collect::<Vec<_>>(), [2]);
    }
}
