//! The outcomes of recent client writes, kept for their retries for [`DEDUP_RETENTION_MS`].
//!
//! There is one record per write of that window: under load hundreds of thousands a replica,
//! held twice while a snapshot is built. So a record is small. Records are grouped by the
//! write's origin. A hash table of the origin's serials holds each write's place among
//! [`COMMON_RESPONSES`], 9 bytes a slot; the rare other response is kept beside it. A deque
//! holds each write's time, 16 bytes. A table keyed by the whole write id, with the response
//! inline, took 32 bytes a slot, and a hash table that churns keeps about twice the buckets
//! it holds records.

use super::{COMMON_RESPONSES, DEDUP_RETENTION_MS, FastMap, Millis, Response, WriteId, insert_in_order};
use crate::mailbox::NodeId;
use serde::Serialize;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, VecDeque};

/// A write's response as it is remembered: its place among [`COMMON_RESPONSES`], or itself.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Remembered<'a> {
    Common(u8),
    Other(&'a Response),
}

impl<'a> Remembered<'a> {
    pub fn of(response: &'a Response) -> Self {
        match COMMON_RESPONSES.iter().position(|common| common == response) {
            Some(place) => Remembered::Common(place as u8),
            None => Remembered::Other(response),
        }
    }

    pub fn response(self) -> Response {
        match self {
            Remembered::Common(place) => COMMON_RESPONSES[usize::from(place)].clone(),
            Remembered::Other(response) => response.clone(),
        }
    }
}

/// The place of a response that is not among the common ones.
const OTHER: u8 = u8::MAX;

/// Every write outcome remembered, by origin (ordered, so that a snapshot and a digest list
/// them alike on every replica).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WriteOutcomes {
    origins: BTreeMap<NodeId, Origin>,
    len: usize,
}

/// The remembered writes of one origin.
#[derive(Debug, Clone, Default)]
struct Origin {
    /// By serial: the place of the response among [`COMMON_RESPONSES`], or [`OTHER`].
    places: FastMap<u64, u8>,
    /// By serial: the responses placed [`OTHER`].
    other: FastMap<u64, Response>,
    /// `(applied at, serial)` of every write, in that order.
    by_time: VecDeque<(Millis, u64)>,
    /// No serial above this was remembered. An origin hands out serials in order, so almost
    /// every write is above it and is known new without a look into `places`, a table of
    /// hundreds of thousands under load where a look is a cache miss.
    highest: u64,
}

/// The same writes remembered, whatever the bound on serials.
impl PartialEq for Origin {
    fn eq(&self, other: &Self) -> bool {
        (&self.places, &self.other, &self.by_time) == (&other.places, &other.other, &other.by_time)
    }
}

impl Origin {
    fn remembered(&self, serial: u64) -> Option<Remembered<'_>> {
        if serial > self.highest {
            return None;
        }
        match *self.places.get(&serial)? {
            OTHER => self.other.get(&serial).map(Remembered::Other),
            place => Some(Remembered::Common(place)),
        }
    }
}

impl WriteOutcomes {
    pub fn get(&self, write: WriteId) -> Option<Remembered<'_>> {
        self.origins.get(&write.origin)?.remembered(write.serial)
    }

    /// Remember `write`'s outcome, applied at `at` (once: a write remembered already keeps its
    /// first outcome, as its retries get it).
    pub fn remember(&mut self, write: WriteId, remembered: Remembered<'_>, at: Millis) {
        let origin = self.origins.entry(write.origin).or_default();
        let place = match remembered {
            Remembered::Common(place) => place,
            Remembered::Other(_) => OTHER,
        };
        match origin.places.entry(write.serial) {
            Entry::Occupied(_) => return,
            Entry::Vacant(vacant) => vacant.insert(place),
        };
        origin.highest = origin.highest.max(write.serial);
        if let Remembered::Other(response) = remembered {
            origin.other.insert(write.serial, response.clone());
        }
        insert_in_order(&mut origin.by_time, (at, write.serial));
        self.len += 1;
    }

    /// Forget the writes applied [`DEDUP_RETENTION_MS`] or longer before `now`.
    pub fn forget_before(&mut self, now: Millis) {
        let len = &mut self.len;
        self.origins.retain(|_, origin| {
            let mut highest_forgotten = false;
            while let Some(&(at, serial)) = origin.by_time.front() {
                if at + DEDUP_RETENTION_MS > now {
                    break;
                }
                origin.by_time.pop_front();
                if origin.places.remove(&serial) == Some(OTHER) {
                    origin.other.remove(&serial);
                }
                highest_forgotten |= serial == origin.highest;
                *len -= 1;
            }
            // Lowered to what is left: a restarted origin hands out serials from a new random
            // start, maybe below its old ones, and would otherwise be looked up for good.
            // (Serials come in order, so the highest goes last, with the rest of its origin.)
            if highest_forgotten {
                origin.highest = origin.by_time.iter().map(|&(_, serial)| serial).max().unwrap_or(0);
            }
            !origin.by_time.is_empty()
        });
    }

    /// When the next remembered write is forgotten.
    pub fn next_expiry(&self) -> Option<Millis> {
        self.origins.values().filter_map(|origin| origin.by_time.front()).map(|(at, _)| at + DEDUP_RETENTION_MS).min()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every record: origins in order, each origin's writes in the order they were applied.
    pub fn iter(&self) -> impl Iterator<Item = (WriteId, Millis, Remembered<'_>)> {
        self.origins.iter().flat_map(|(&origin, records)| {
            records.by_time.iter().map(move |&(at, serial)| {
                let remembered = records.remembered(serial).expect("every write in the deque has a place");
                (WriteId { origin, serial }, at, remembered)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::LimitReached;

    fn write(origin: NodeId, serial: u64) -> WriteId {
        WriteId { origin, serial }
    }

    #[test]
    fn a_record_is_a_serial_and_a_place_in_the_table_and_a_time_in_the_deque() {
        assert_eq!(std::mem::size_of::<(u64, u8)>(), 16);
        assert_eq!(std::mem::size_of::<(Millis, u64)>(), 16);
        let uncommon = [Response::Refused(LimitReached::Sessions(3)), Response::Task(Ok(vec!["a".into()])), Response::TasksFailed(2)];
        let mut outcomes = WriteOutcomes::default();
        for (serial, response) in COMMON_RESPONSES.iter().chain(&uncommon).enumerate() {
            let remembered = Remembered::of(response);
            assert_eq!(matches!(remembered, Remembered::Common(_)), COMMON_RESPONSES.contains(response), "{response:?}");
            outcomes.remember(write(1, serial as u64), remembered, 10);
            assert_eq!(outcomes.get(write(1, serial as u64)).map(Remembered::response).as_ref(), Some(response));
        }
        assert_eq!(outcomes.origins[&1].other.len(), uncommon.len(), "only the uncommon ones are kept whole");
        assert_eq!(outcomes.get(write(2, 0)), None, "another origin's serial is another write");
    }

    #[test]
    fn serials_below_the_highest_are_looked_up_and_the_bound_is_not_part_of_the_state() {
        let done = Remembered::of(&COMMON_RESPONSES[0]);
        let created = Remembered::of(&COMMON_RESPONSES[1]);
        let mut outcomes = WriteOutcomes::default();
        outcomes.remember(write(1, 5), done, 1000);
        outcomes.remember(write(1, 3), created, 1001);
        outcomes.remember(write(1, 5), created, 1002);
        outcomes.remember(write(1, 3), done, 1003);
        assert_eq!((outcomes.get(write(1, 5)), outcomes.get(write(1, 3))), (Some(done), Some(created)), "first outcomes kept");
        assert_eq!((outcomes.get(write(1, 4)), outcomes.get(write(1, 6))), (None, None));

        // The highest serial forgotten first (it was applied first): the rest reads the same
        // as a replica that only ever saw the rest, as one restored from a snapshot.
        outcomes.forget_before(1000 + DEDUP_RETENTION_MS);
        let mut restored = WriteOutcomes::default();
        restored.remember(write(1, 3), created, 1001);
        assert_eq!(outcomes, restored);
        assert_eq!(outcomes.get(write(1, 5)), None, "forgotten");
        outcomes.remember(write(1, 5), created, 1004);
        assert_eq!(outcomes.get(write(1, 5)), Some(created), "a write forgotten is new again");

        // An origin restarted with serials below its old ones: once the old ones are
        // forgotten, its writes are above the bound again.
        let mut outcomes = WriteOutcomes::default();
        outcomes.remember(write(1, 900), done, 1000);
        outcomes.remember(write(1, 10), done, 1001);
        outcomes.remember(write(1, 11), done, 1002);
        assert_eq!(outcomes.origins[&1].highest, 900);
        outcomes.forget_before(1000 + DEDUP_RETENTION_MS);
        assert_eq!(outcomes.origins[&1].highest, 11, "lowered to the highest left");
        assert_eq!(outcomes.get(write(1, 11)), Some(done));
    }

    #[test]
    fn a_write_is_forgotten_at_its_time_plus_the_retention_whatever_its_origin() {
        let mut outcomes = WriteOutcomes::default();
        let done = Remembered::of(&COMMON_RESPONSES[0]);
        let refused = Response::Refused(LimitReached::Sessions(1));
        // Origin 2's first write comes last, origin 1's serials out of order.
        outcomes.remember(write(1, 9), done, 1000);
        outcomes.remember(write(1, 4), Remembered::of(&refused), 1001);
        outcomes.remember(write(3, 1), done, 1001);
        outcomes.remember(write(2, 7), done, 1002);
        outcomes.remember(write(1, 10), done, 1002);
        outcomes.remember(write(1, 9), Remembered::of(&refused), 1003);
        assert_eq!(outcomes.len(), 5, "a write is remembered once");
        assert_eq!(outcomes.get(write(1, 9)), Some(done), "with its first outcome");
        let listed: Vec<_> = outcomes.iter().map(|(w, at, _)| (w.origin, w.serial, at)).collect();
        assert_eq!(listed, [(1, 9, 1000), (1, 4, 1001), (1, 10, 1002), (2, 7, 1002), (3, 1, 1001)]);
        assert_eq!(outcomes.next_expiry(), Some(1000 + DEDUP_RETENTION_MS));
        outcomes.forget_before(1000 + DEDUP_RETENTION_MS);
        assert_eq!((outcomes.get(write(1, 9)), outcomes.len()), (None, 4));
        assert_eq!(outcomes.next_expiry(), Some(1001 + DEDUP_RETENTION_MS));
        outcomes.forget_before(1001 + DEDUP_RETENTION_MS);
        assert_eq!(outcomes.iter().map(|(w, _, _)| w).collect::<Vec<_>>(), [write(1, 10), write(2, 7)]);
        assert!(outcomes.origins[&1].other.is_empty(), "an uncommon response goes with its write");
        assert!(!outcomes.origins.contains_key(&3), "an origin with nothing left goes");
        outcomes.forget_before(1002 + DEDUP_RETENTION_MS);
        assert_eq!((outcomes.len(), outcomes.next_expiry()), (0, None));
        assert_eq!(outcomes, WriteOutcomes::default());
    }
}
