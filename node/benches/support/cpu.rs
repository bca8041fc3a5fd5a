//! CPU time of processes, read from /proc: shared by the benches (included by path).

use std::time::Duration;

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
