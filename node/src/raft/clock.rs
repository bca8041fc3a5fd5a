//! The time a leader stamps into the log.
//!
//! Log time (`StateMachine::now`) decides every expiry on every replica, and it never goes back:
//! a leader whose wall clock jumped an hour ahead would expire every session and mailbox at
//! once, everywhere, and keep log time an hour ahead after its clock is fixed. Two rules keep
//! log time honest:
//!
//! 1. The state machine lets one entry move log time at most
//!    [`MAX_CLOCK_STEP_MS`](super::state_machine::MAX_CLOCK_STEP_MS) past its previous value,
//!    unless the entry says its stamp is agreed ([`Request::clock_agreed`]): no later than the
//!    clocks of a majority of the voters. Deterministic, and it bounds what a bad stamp can do
//!    whatever the leader believes.
//! 2. The leader stamps its wall clock corrected by the offset its last agreement found
//!    ([`LeaderClock`]). When that stamp is more than a step away from log time (after an idle
//!    period, after an election, after its own clock jumped either way) it first asks every voter
//!    for its clock and takes the latest time a majority of them has reached
//!    ([`majority_time`]). So a leader whose clock is an hour ahead stamps the majority's time;
//!    and after a real ten-minute idle period the first entry moves log time by ten minutes,
//!    expiring what fell due meanwhile.
//!
//! The trade-off: every entry after an idle period longer than a step costs one more round
//! trip to the voters (a small request per voter, concurrent), and a leader cut off from a
//! majority stamps unagreed entries, which it cannot commit anyway. A majority of clocks jumping
//! together still moves log time: time is whatever most of the cluster says it is.
//!
//! [`Request::clock_agreed`]: super::state_machine::Request::clock_agreed

use super::state_machine::Millis;
use crate::clock::now_ms;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

/// How long after an agreement the leader's stamps still count as agreed (the voters' clocks
/// have moved on by as much as its own).
pub const AGREEMENT_FRESH: Duration = Duration::from_secs(1);

/// How long the leader waits for the voters' clocks.
pub const CLOCK_QUERY_TIMEOUT: Duration = Duration::from_secs(1);
/// How much longer it waits for the rest once a majority has answered.
pub const CLOCK_STRAGGLER_WAIT: Duration = Duration::from_millis(100);

/// A leader's corrected clock and its last agreement with the voters.
#[derive(Default)]
pub struct LeaderClock {
    /// Milliseconds to add to this node's wall clock to get the voters' majority time.
    offset_ms: AtomicI64,
    /// The last agreement: when it was reached, and the majority time it found then.
    agreed_at: Mutex<Option<(Instant, Millis)>>,
    /// One agreement at a time: the writes waiting meanwhile use its result.
    pub(super) agreeing: tokio::sync::Mutex<()>,
}

impl LeaderClock {
    /// The time to stamp. While the last agreement is fresh: its majority time plus the time
    /// elapsed since, on the monotonic clock, so a wall-clock jump in that window cannot pass
    /// as agreed. Otherwise this node's wall clock corrected by the last agreement's offset.
    pub fn now(&self) -> Millis {
        self.agreed_now().unwrap_or_else(|| now_ms().saturating_add_signed(self.offset_ms.load(Ordering::Relaxed)))
    }

    /// The agreed time now, if an agreement was reached a moment ago (a stamp taken from it is
    /// still agreed): its majority time plus the monotonic time elapsed since.
    pub fn agreed_now(&self) -> Option<Millis> {
        let (at, agreed) = (*self.agreed_at.lock().unwrap())?;
        let elapsed = at.elapsed();
        (elapsed < AGREEMENT_FRESH).then(|| agreed.saturating_add(elapsed.as_millis() as Millis))
    }

    /// Record an agreement: when this node's wall clock read `own`, the voters' majority time
    /// was `agreed`. Returns the new offset.
    pub fn agreed(&self, own: Millis, agreed: Millis) -> i64 {
        let offset = agreed as i64 - own as i64;
        self.offset_ms.store(offset, Ordering::Relaxed);
        *self.agreed_at.lock().unwrap() = Some((Instant::now(), agreed));
        offset
    }
}

/// The latest time a majority of `voters` has reached, from the clock `readings` of the voters
/// that answered (the leader's own included); `None` without a majority of readings. Clocks
/// that jumped ahead in a minority cannot move it past an honest clock.
pub fn majority_time(mut readings: Vec<Millis>, voters: usize) -> Option<Millis> {
    let majority = voters / 2 + 1;
    if readings.len() < majority {
        return None;
    }
    readings.sort_unstable_by(|a, b| b.cmp(a));
    Some(readings[majority - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minority_of_clocks_cannot_move_the_majority_time() {
        let hour = 3_600_000;
        // The leader jumped an hour ahead; the others are honest.
        assert_eq!(majority_time(vec![1_000 + hour, 1_000, 999], 3), Some(1_000));
        // The leader lags an hour behind.
        assert_eq!(majority_time(vec![1_000 - 500, 1_000, 1_002], 3), Some(1_000));
        // Five voters, two jumped: the latest honest clock, which three voters have reached.
        assert_eq!(majority_time(vec![5 * hour, 4 * hour, 10, 11, 12], 5), Some(12));
        // Without a majority of readings, no agreement.
        assert_eq!(majority_time(vec![10], 3), None);
        assert_eq!(majority_time(vec![10, 12], 5), None);
        // A lone node agrees with itself.
        assert_eq!(majority_time(vec![7], 1), Some(7));
    }

    #[test]
    fn the_corrected_clock_follows_the_agreement() {
        let clock = LeaderClock::default();
        assert!(clock.agreed_now().is_none());
        let own = now_ms();
        let offset = clock.agreed(own, own - 3_600_000);
        assert_eq!(offset, -3_600_000);
        assert!(clock.agreed_now().is_some());
        let corrected = clock.now();
        assert!(corrected >= own - 3_600_000 && corrected < own - 3_500_000, "{corrected} vs {own}");
        // While fresh, the stamp is the agreed time plus monotonic time since: it never depends
        // on this node's wall clock, which may jump in that window.
        let agreed_now = clock.agreed_now().expect("fresh");
        assert!(agreed_now >= own - 3_600_000 && agreed_now < own - 3_600_000 + AGREEMENT_FRESH.as_millis() as Millis);
    }
}
