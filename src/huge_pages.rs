//! Transparent huge pages off for the process, for mimalloc's sake: the
//! gateway binary calls it first thing, and so do the benchmarks whose own
//! processes stand in for its clients and upstream.

/// Transparent huge pages off for this process, unless `MIMALLOC_ALLOW_THP`
/// decides (mimalloc reads it itself). mimalloc asks for huge pages on its
/// arenas, so where THP is `always` or `madvise` (most distributions) a page
/// fault zeroes 2 MiB, and every purge of a freed 64 KiB span splits one to be
/// faulted and zeroed again. A failure is said on stderr, not fatal.
pub fn transparent_huge_pages_off() {
    #[cfg(target_os = "linux")]
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_none() {
        if let Err(e) = rustix::thread::disable_transparent_huge_pages(true) {
            eprintln!("warning: cannot turn transparent huge pages off: {e}");
        }
    }
}
