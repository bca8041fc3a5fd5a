//! CPU time of processes, read from /proc: shared by the benches (included by path).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// CPU time (user + system) the processes `pids` have used so far.
pub fn cpu_time(pids: &[u32]) -> Duration {
    let ticks: u64 = pids
        .iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .map(|stat| {
            // Fields after the command (which may hold spaces): utime and stime are the 12th and 13th.
            let rest = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
            let fields: Vec<&str> = rest.split_whitespace().collect();
            fields[11].parse::<u64>().unwrap_or(0) + fields[12].parse::<u64>().unwrap_or(0)
        })
        .sum();
    from_ticks(ticks)
}

/// The time `ticks` clock ticks of /proc make: 10 ms each (USER_HZ is 100 on Linux).
fn from_ticks(ticks: u64) -> Duration {
    Duration::from_millis(ticks * 10)
}

/// The host's CPU counters (`/proc/stat`, all CPUs): time spent busy, idle (waiting for I/O
/// included), and time the hypervisor ran something else while this machine wanted the CPU
/// (steal).
#[derive(Clone, Copy, Debug, Default)]
pub struct HostCpu {
    pub busy: Duration,
    pub idle: Duration,
    pub steal: Duration,
}

impl HostCpu {
    pub fn read() -> HostCpu {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let ticks: Vec<u64> = stat
            .lines()
            .next()
            .filter(|line| line.starts_with("cpu "))
            .map(|line| line.split_whitespace().skip(1).map(|t| t.parse().unwrap_or(0)).collect())
            .unwrap_or_default();
        let tick = |i: usize| from_ticks(ticks.get(i).copied().unwrap_or(0));
        // user nice system idle iowait irq softirq steal: busy leaves out idle, iowait and steal.
        HostCpu { busy: tick(0) + tick(1) + tick(2) + tick(5) + tick(6), idle: tick(3) + tick(4), steal: tick(7) }
    }

    /// The time spent since `earlier`.
    pub fn since(&self, earlier: &HostCpu) -> HostCpu {
        HostCpu {
            busy: self.busy.saturating_sub(earlier.busy),
            idle: self.idle.saturating_sub(earlier.idle),
            steal: self.steal.saturating_sub(earlier.steal),
        }
    }
}

/// How fast this machine's CPU runs a fixed piece of work, read on a thread of its own while
/// a bench runs: a slower window with a slower probe had a slower machine (a neighbour on the
/// physical core, a lower clock), which no steal counter shows.
///
/// Each reading is the fastest of a few short runs of a register-only loop, by the wall clock:
/// a run the scheduler preempts is slow and is not the fastest, so a saturated machine still
/// reads true, and the loop touches no memory, so the benched servers' cache misses do not
/// count. About 0.5 % of a core.
pub struct SpeedProbe {
    readings: Arc<Mutex<Vec<(Instant, Duration)>>>,
    stop: Arc<AtomicBool>,
}

impl SpeedProbe {
    const EVERY: Duration = Duration::from_millis(500);
    const RUNS: usize = 8;
    const STEPS: u64 = 100_000;

    pub fn start() -> SpeedProbe {
        let probe = SpeedProbe { readings: Default::default(), stop: Default::default() };
        let (readings, stop) = (probe.readings.clone(), probe.stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let fastest = (0..Self::RUNS).map(|_| Self::time_one_run()).min().unwrap_or_default();
                readings.lock().unwrap().push((Instant::now(), fastest));
                std::thread::sleep(Self::EVERY);
            }
        });
        probe
    }

    /// A chain of dependent multiplies and shifts: its time is the core's speed alone.
    fn time_one_run() -> Duration {
        let started = Instant::now();
        let mut x = std::hint::black_box(0x9e37_79b9_7f4a_7c15_u64);
        for _ in 0..Self::STEPS {
            x = (x ^ (x >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        }
        std::hint::black_box(x);
        started.elapsed()
    }

    /// The median reading taken between `from` and `to`.
    pub fn median_between(&self, from: Instant, to: Instant) -> Option<Duration> {
        let mut within: Vec<Duration> =
            self.readings.lock().unwrap().iter().filter(|(at, _)| (from..to).contains(at)).map(|(_, took)| *took).collect();
        within.sort();
        within.get(within.len() / 2).copied()
    }
}

impl Drop for SpeedProbe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
