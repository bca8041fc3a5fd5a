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
//! made here, once.

/// The allocator type; `#[global_allocator] static A: Allocator = Allocator;` installs it.
pub use mimalloc::MiMalloc as Allocator;
