//! The process's allocator settings, made once at start-up. The crate's only `unsafe`: two
//! calls into glibc.
#![allow(unsafe_code)]

/// Allocations of this size and more get mappings of their own, returned to the system when
/// freed.
pub const OWN_MAPPING_BYTES: usize = 1 << 20;

/// Serve large allocations (the replicated state's tables, the in-memory log's deque, snapshot
/// buffers) from mappings of their own. glibc's default threshold rises after each such free
/// to the size freed, up to 32 MiB, after which they come from the heap: there, regrown and
/// freed, they fragmented it, and a replica's RSS kept climbing under sustained load while its
/// state stayed flat. A threshold the operator set in `GLIBC_TUNABLES` is left alone. Without
/// effect on other C libraries.
pub fn tune() {
    if sets_mmap_threshold(std::env::var("GLIBC_TUNABLES").ok().as_deref()) {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a parameter of glibc's allocator, under its own lock.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, OWN_MAPPING_BYTES as libc::c_int);
    }
}

/// Whether a `GLIBC_TUNABLES` value (`name=value` pairs joined by `:`) sets malloc's mmap
/// threshold.
fn sets_mmap_threshold(tunables: Option<&str>) -> bool {
    tunables.is_some_and(|t| t.split(':').any(|pair| pair.split('=').next() == Some("glibc.malloc.mmap_threshold")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_mmap_threshold_in_glibc_tunables_is_recognised() {
        assert!(!sets_mmap_threshold(None));
        assert!(!sets_mmap_threshold(Some("")));
        assert!(sets_mmap_threshold(Some("glibc.malloc.mmap_threshold=65536")));
        assert!(sets_mmap_threshold(Some("glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=65536")));
        assert!(!sets_mmap_threshold(Some("glibc.malloc.arena_max=2:glibc.malloc.trim_threshold=65536")));
        assert!(!sets_mmap_threshold(Some("glibc.malloc.mmap_threshold_max=1")));
    }

    /// Bytes in mappings of their own.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn mapped() -> usize {
        // SAFETY: mallinfo2 only reads the allocator's counters.
        unsafe { libc::mallinfo2() }.hblkhd
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_large_allocation_gets_its_own_mapping_even_after_a_larger_one_was_freed() {
        tune();
        // Other tests allocate and free beside this one, moving the count: one clean reading of
        // five will do (without the setting, none is).
        let readings: Vec<(usize, usize)> = (0..5)
            .map(|_| {
                // By default this free would raise the threshold past the allocation below.
                drop(std::hint::black_box(vec![1u8; 8 * OWN_MAPPING_BYTES]));
                let before = mapped();
                let block = std::hint::black_box(vec![1u8; 2 * OWN_MAPPING_BYTES]);
                let after = mapped();
                drop(block);
                (before, after)
            })
            .collect();
        assert!(
            readings.iter().any(|(before, after)| *after >= before + 2 * OWN_MAPPING_BYTES),
            "bytes mapped before and after: {readings:?}"
        );
    }
}
