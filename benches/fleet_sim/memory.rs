//! What the simulator's process holds, from `/proc/self/status`: the figure "memory per
//! simulated node" is built from (the whole process, not an allocator's view, so that every
//! per-node cost counts: runtimes, pools, TLS configurations, buffers).

use serde::Serialize;

/// Resident and peak resident set, in KiB.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Rss {
    pub rss_kb: u64,
    pub hwm_kb: u64,
}

/// The process's RSS now and its peak so far; zeros where `/proc` is not there.
pub fn now() -> Rss {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return Rss::default();
    };
    Rss {
        rss_kb: field(&status, "VmRSS:"),
        hwm_kb: field(&status, "VmHWM:"),
    }
}

fn field(status: &str, name: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Hands memory glibc keeps after frees back to the system, so that a figure taken after the
/// start-up measures what the nodes hold, not what their start-up once needed.
pub fn release_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own free lists; it takes no pointer of ours.
    unsafe {
        libc::malloc_trim(0);
    }
}
