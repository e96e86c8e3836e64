//! Fitting the REST listener's connection limit to the process's
//! open-files limit, so connections can never exhaust file descriptors.

use tracing::warn;

/// File descriptors kept free of REST connections: the admin listener's,
/// the upstream's, snapshot files, and some slack.
const FD_RESERVE: usize = 512;

/// `wanted` REST connections, lowered so that they, `others` (the admin
/// listener's) and [`FD_RESERVE`] fit the process's file-descriptor limit:
/// connections must never exhaust it, or nothing (admin included) could
/// accept. Logged when lowered; `wanted` where the limit cannot be read.
pub(crate) fn fit_fd_limit(wanted: usize, others: usize) -> usize {
    let Some(limit) = open_files_limit() else {
        return wanted;
    };
    let room = room_under(limit, others);
    if wanted > room {
        warn!(
            wanted,
            allowed = room,
            open_files_limit = limit,
            "--max-connections lowered to fit the open-files limit (raise `ulimit -n` to allow more)"
        );
        return room;
    }
    wanted
}

/// REST connections that fit under an open-files `limit` beside `others`
/// and [`FD_RESERVE`] (at least one).
fn room_under(limit: usize, others: usize) -> usize {
    limit.saturating_sub(others + FD_RESERVE).max(1)
}

/// The soft limit on open files (Linux: `/proc/self/limits`).
fn open_files_limit() -> Option<usize> {
    soft_open_files(&std::fs::read_to_string("/proc/self/limits").ok()?)
}

/// The soft limit in the text of `/proc/self/limits` (`None` when
/// "unlimited" or absent).
fn soft_open_files(limits: &str) -> Option<usize> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_read_from_proc_limits() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max cpu time              unlimited            unlimited            seconds   \n\
                    Max open files            1024                 524288               files     \n";
        assert_eq!(soft_open_files(text), Some(1024));
        assert_eq!(
            soft_open_files(
                "Max open files            unlimited            unlimited            files"
            ),
            None
        );
        assert_eq!(soft_open_files("Max processes 10 10 processes"), None);
    }

    #[test]
    fn connections_leave_the_reserve_and_the_admin_listener_free() {
        assert_eq!(room_under(1024, 64), 1024 - 64 - FD_RESERVE);
        // Never zero: one connection at least, even under a tiny limit.
        assert_eq!(room_under(100, 64), 1);
    }
}
