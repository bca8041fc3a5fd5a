//! How the Raft layer's own threads ask the kernel to schedule them. Requests are handled on
//! tokio's workers; the log writer and snapshot builds run on threads of their own, and when
//! replicas, the load balancer and clients share a host's cores those threads should not take a
//! core from a worker that has requests to finish. Each setting applies to the calling thread
//! only, and one that cannot be made leaves the thread as it was.

/// Make the calling thread the last to get a core when cores are short (nice 19). A thread can
/// always lower its own priority.
pub fn run_last() {
    #[cfg(target_os = "linux")]
    if let Err(e) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), 19) {
        tracing::debug!(error = %e, "could not lower the thread's CPU priority");
    }
}

/// Let the calling thread wait for its turn instead of preempting: under `SCHED_BATCH` a thread
/// that wakes (the log writer, when its `fdatasync` returns or a write is queued) takes a busy
/// core only when the running thread's slice ends, at the same share of CPU as before. With
/// the cores saturated the writer then finds more writes queued per flush and workers are
/// switched out far less; with a core idle it runs at once, as before.
#[allow(unsafe_code)]
pub fn wait_for_turn() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` is a valid `sched_param` for the whole call, and pid 0 names the
        // calling thread; the call changes nothing else.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) } != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "could not switch the thread to batch scheduling");
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
pub(crate) mod tests {
    use super::*;

    /// `SCHED_BATCH` in `sched(7)`.
    pub const BATCH: u64 = 3;

    /// The scheduling policy of a thread: field 41 of its `stat` (`proc(5)`).
    pub fn policy(stat: &str) -> u64 {
        // Fields start after the command name, which may hold spaces and parentheses.
        let after_name = &stat[stat.rfind(')').expect("a stat line names its command") + 1..];
        after_name.split_whitespace().nth(41 - 3).and_then(|f| f.parse().ok()).expect("a stat line has a policy")
    }

    fn own_policy() -> u64 {
        policy(&std::fs::read_to_string("/proc/thread-self/stat").unwrap())
    }

    #[test]
    fn a_thread_that_runs_last_is_at_nice_19_and_no_other_thread_is() {
        let nice = || rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap();
        let before = nice();
        let lowered = std::thread::spawn(move || {
            run_last();
            nice()
        });
        assert_eq!(lowered.join().unwrap(), 19);
        assert_eq!(nice(), before, "only the calling thread");
    }

    #[cfg(target_env = "gnu")]
    #[test]
    fn a_thread_that_waits_for_its_turn_is_batch_scheduled_and_no_other_thread_is() {
        let before = own_policy();
        assert_ne!(before, BATCH);
        let batched = std::thread::spawn(|| {
            wait_for_turn();
            own_policy()
        });
        assert_eq!(batched.join().unwrap(), BATCH);
        assert_eq!(own_policy(), before, "only the calling thread");
    }

    #[test]
    fn the_policy_is_read_past_a_command_name_with_spaces_and_parentheses() {
        let mut stat = "4242 (a (b) c) S".to_string();
        for field in 4..=45 {
            stat.push_str(&format!(" {}", if field == 41 { 3 } else { field * 100 }));
        }
        assert_eq!(policy(&stat), BATCH);
    }
}
