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

/// The allocator type; `#[global_allocator] static A: Allocator = Allocator;` installs it.
pub use mimalloc::MiMalloc as Allocator;

/// mimalloc's own switch for transparent huge pages; when it is set, its value stands.
const THP_OPTION: &str = "MIMALLOC_ALLOW_THP";

/// Turn transparent huge pages off for this process (see above), unless `MIMALLOC_ALLOW_THP` says
/// otherwise; first thing in `main`. Where that cannot be done, the process runs as before.
pub fn tune() {
    #[cfg(target_os = "linux")]
    if std::env::var_os(THP_OPTION).is_none()
        && let Err(e) = rustix::thread::disable_transparent_huge_pages(true)
    {
        // Before logging is set up: said on stderr, once.
        eprintln!("switchboard: could not turn transparent huge pages off ({e}); running with them");
    }
}
