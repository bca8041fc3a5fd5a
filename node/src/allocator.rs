//! The allocator the `switchboard` binary installs (`main.rs`), and the benchmarks too, so the
//! reference servers they start from their own binary run on the same one: mimalloc.
//!
//! Why not glibc's malloc: a `perf` profile of a lone node under 64 clients had 28-30 % of its
//! CPU in glibc's allocator (`_int_malloc` 12 %, `malloc_consolidate` 3-5 %: every request of a
//! kilobyte or more flushes the fastbins, and hyper, serde_json and the SSE framing make many),
//! and under sustained load the large tables of the replicated state and the log's deque,
//! regrown and freed in glibc's heap, fragmented it (a replica's RSS climbed to 448 MB with its
//! state flat). Measured on this project's 2-core VM, glibc -> mimalloc, in alternating runs of
//! the elicitation bench's `load` modes (an earlier build given by `BENCH_SWITCHBOARD_BIN`):
//! - lone durable node at 64 clients: 4,940 / 6,097 -> 7,228 / 6,742 round trips/s, 0.262 /
//!   0.212 -> 0.168 / 0.171 ms of server CPU per trip (glibc with fastbins off and a deeper
//!   tcache: 0.226 / 0.199);
//! - 3 nodes behind nginx, one client: 2.35 -> 2.04 ms CPU per trip, p50 1.97 -> 1.68 ms
//!   (medians of three);
//! - 3 nodes behind nginx, 64 clients: 3,109 / 2,518 -> 3,160 / 2,920 trips/s (two pairs).
//!
//! A library user's own binary picks its allocator; this one is a re-export so the choice is
//! made here, once, and [`tune`] sets how it gets memory from the kernel.
//!
//! Why transparent huge pages are off: mimalloc asks for them (`madvise(MADV_HUGEPAGE)` on its
//! arenas), and a first touch of such memory then makes the kernel zero a whole 2 MiB page in the
//! faulting thread. A `perf` profile of a lone durable node at 64 clients had 7.7 % of its CPU in
//! `clear_page_erms`, most of it under the snapshot build's fresh hash tables, and the stalls
//! showed in the tail. Alternating 5 s runs of the elicitation bench's `load` modes, THP on ->
//! off (the same binary, `MIMALLOC_ALLOW_THP=1` / `0`):
//! - lone durable node at 64 clients: 9,086 / 9,233 -> 10,222 / 9,834 round trips/s, 0.133 /
//!   0.131 -> 0.119 / 0.121 ms of server CPU per trip, p99 26.0 / 27.6 -> 11.9 / 13.3 ms;
//! - 3 nodes behind nginx: p99 at 64 clients 52.8 / 52.7 -> 27.0 / 27.8 ms, CPU per trip at
//!   one client 1.95 / 2.00 -> 1.75 / 1.75 ms, 4,053 / 3,790 -> 4,154 / 4,141 trips/s.
//!
//! Why freed memory goes back to the system after 100 ms rather than mimalloc's second: under
//! sustained load a replica frees a snapshot build's copy of the state (about as large as the
//! state) every few seconds, and tables and deques regrow; held a second, those pages stayed in
//! the RSS next to the ones that replaced them. The elicitation bench's `sustained 3` (3 durable
//! nodes behind nginx, 64 clients, 30 s windows), the same binary, `MIMALLOC_PURGE_DELAY` unset ->
//! `100` (two runs each): RSS at the windows' ends 300-430 / 245-490 MB -> 295-372 / 250-324 MB,
//! the largest 497 / 491 -> 372 / 324 MB, at 7,036-7,747 / 6,413-7,025 -> 6,531-6,807 /
//! 6,687-7,293 round trips/s (no cost above the runs' spread; `0` gave 247-407 MB at
//! 6,167-6,780).

use std::ffi::{c_int, c_long};

/// The allocator type; `#[global_allocator] static A: Allocator = Allocator;` installs it.
pub use mimalloc::MiMalloc as Allocator;

/// mimalloc's own switch for transparent huge pages; when it is set, its value stands.
const THP_OPTION: &str = "MIMALLOC_ALLOW_THP";
/// mimalloc's own setting of how long freed memory stays committed; when it is set, its value
/// stands.
const PURGE_DELAY_OPTION: &str = "MIMALLOC_PURGE_DELAY";
/// `mi_option_purge_delay`'s place in mimalloc's `mi_option_t` (v3, as libmimalloc-sys builds
/// it; the crate names no constant for it). A test checks it against [`PURGE_DELAY_OPTION`].
const MI_OPTION_PURGE_DELAY: c_int = 15;
/// How long freed memory stays committed before mimalloc returns it (see above).
const PURGE_DELAY_MS: c_long = 100;

/// The two calls of mimalloc's C API used here (linked in by the `mimalloc` crate).
#[allow(unsafe_code)]
mod ffi {
    use std::ffi::{c_int, c_long};

    unsafe extern "C" {
        /// The option's value (reading it has no precondition); read by the tests.
        #[cfg(test)]
        pub safe fn mi_option_get(option: c_int) -> c_long;
        /// Not thread safe: called only before the process starts other threads.
        pub fn mi_option_set(option: c_int, value: c_long);
    }
}

/// Set how this process gets memory from the kernel (see above): transparent huge pages off,
/// freed memory returned after 100 ms, each unless its `MIMALLOC_*` variable says
/// otherwise. First thing in `main`, before any other thread exists; where a setting cannot be
/// made, the process runs as before.
#[allow(unsafe_code)]
pub fn tune() {
    #[cfg(target_os = "linux")]
    if std::env::var_os(THP_OPTION).is_none()
        && let Err(e) = rustix::thread::disable_transparent_huge_pages(true)
    {
        // Before logging is set up: said on stderr, once.
        eprintln!("switchboard: could not turn transparent huge pages off ({e}); running with them");
    }
    if std::env::var_os(PURGE_DELAY_OPTION).is_none() {
        // SAFETY: `tune` runs first in `main`, while the process has one thread, so nothing
        // reads or writes mimalloc's options concurrently.
        unsafe { ffi::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Set in the child run of the test below: the purge delay it started with.
    const CHILD_EXPECTS: &str = "SWITCHBOARD_TEST_PURGE_DELAY";

    #[test]
    fn tune_returns_freed_memory_after_a_tenth_of_a_second_unless_the_environment_says() {
        if let Ok(expected) = std::env::var(CHILD_EXPECTS) {
            // mimalloc read `MIMALLOC_PURGE_DELAY` at load: under our index if the index is right,
            // and `tune` leaves it.
            assert_eq!(ffi::mi_option_get(MI_OPTION_PURGE_DELAY).to_string(), expected, "the index is not the purge delay");
            tune();
            assert_eq!(ffi::mi_option_get(MI_OPTION_PURGE_DELAY).to_string(), expected, "tune overrode the environment");
            return;
        }
        let name = "allocator::tests::tune_returns_freed_memory_after_a_tenth_of_a_second_unless_the_environment_says";
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([name, "--exact", "--test-threads=1"])
            .env(PURGE_DELAY_OPTION, "4321")
            .env(CHILD_EXPECTS, "4321")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&child.stdout);
        assert!(child.status.success() && stdout.contains("1 passed"), "{stdout}{}", String::from_utf8_lossy(&child.stderr));
        if std::env::var_os(PURGE_DELAY_OPTION).is_none() {
            tune();
            assert_eq!(ffi::mi_option_get(MI_OPTION_PURGE_DELAY), PURGE_DELAY_MS);
        }
    }
}
