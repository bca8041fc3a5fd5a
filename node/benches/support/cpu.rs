//! CPU time of processes, read from /proc: shared by the benches (included by path).

use std::time::Duration;

/// CPU time (user + system) the processes `pids` have used so far.
pub fn cpu_time(pids: &[u32]) -> Duration {
    // Clock ticks of 10 ms (USER_HZ is 100 on Linux).
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
    Duration::from_millis(ticks * 10)
}
