//! The one memory budget every per-kind bound sits inside
//! (`--memory-budget-bytes`): by default the container's memory limit (its
//! cgroup's `memory.max`, or `memory.limit_in_bytes` under cgroup v1), and
//! none where there is no limit.
//!
//! The kinds of state a client can make the gateway hold each get a share
//! of the budget ([`MemoryShares`]): the sessions' nodes
//! (`--max-session-bytes`), the config history (`--history-max-bytes`), the
//! memo of assembled bodies, the YAML and `?pretty` renditions, the memo of
//! parsed requests and the nodes it interns, the client book, and the
//! upstream answers the sessions' streams hold while they read them (a
//! push reaches every session at once, and each stream reads its answer
//! whole: a session weighs the largest answer the upstream has sent). The
//! process itself (its code, the descriptor pool, the runtime) takes
//! [`BASE`] first; the kinds' shares add up to four fifths of what is
//! left, and the last fifth is for what no client sizes (the upstream's
//! own config, the connections' buffers, a request's work in progress,
//! the allocator's slack). A share is a cap: a bound is
//! never looser than its own default, and a flag set above its share is cut
//! to it (raise the budget instead). Without a budget every bound is its
//! default.

use std::path::Path;

/// What the process takes before any client state: its code, the descriptor
/// pool, the runtime.
pub const BASE: u64 = 64 * 1024 * 1024;

/// The smallest budget taken: below it the shares would not hold one
/// request's node.
pub const MIN_BUDGET: u64 = 128 * 1024 * 1024;

/// A cgroup limit at or above this is no limit ("max" is written as a huge
/// number by cgroup v1).
const NO_LIMIT: u64 = 1 << 60;

/// Where the container's memory limit is read: cgroup v2, then v1.
const CGROUP_LIMITS: [&str; 2] = [
    "/sys/fs/cgroup/memory.max",
    "/sys/fs/cgroup/memory/memory.limit_in_bytes",
];

/// The bound of each kind of state clients make the gateway hold, in
/// bytes; see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryShares {
    /// The budget they sit in (`None`: no budget, every bound its default).
    pub budget: Option<u64>,
    /// The sessions' nodes (caps `--max-session-bytes`).
    pub sessions: u64,
    /// The config history (caps `--history-max-bytes`).
    pub history: u64,
    /// The memo of assembled bodies.
    pub bodies: u64,
    /// The YAML and `?pretty` renditions.
    pub renditions: u64,
    /// The memo of parsed requests.
    pub parsed: u64,
    /// The nodes the parsed requests intern.
    pub nodes: u64,
    /// The client book.
    pub book: u64,
    /// The upstream answers the sessions' streams hold at once (sessions
    /// times the largest answer); no bound without a budget.
    pub answers: u64,
}

/// Each kind's default bound and its share of a budget, in percent.
const KINDS: MemoryShares = MemoryShares {
    budget: None,
    sessions: 1 << 30,
    history: 64 << 20,
    bodies: 256 << 20,
    renditions: 256 << 20,
    parsed: 64 << 20,
    nodes: 256 << 20,
    book: 64 << 20,
    answers: u64::MAX,
};
const PERCENT: MemoryShares = MemoryShares {
    budget: None,
    sessions: 25,
    history: 10,
    bodies: 10,
    renditions: 5,
    parsed: 5,
    nodes: 5,
    book: 5,
    answers: 15,
};

impl Default for MemoryShares {
    /// No budget: every bound its default.
    fn default() -> MemoryShares {
        KINDS
    }
}

impl MemoryShares {
    /// The shares of `budget` (at least [`MIN_BUDGET`]), each at most its
    /// kind's default.
    pub fn of(budget: u64) -> MemoryShares {
        let budget = budget.max(MIN_BUDGET);
        let room = budget - BASE;
        let share = |default: u64, percent: u64| default.min(room / 100 * percent);
        MemoryShares {
            budget: Some(budget),
            sessions: share(KINDS.sessions, PERCENT.sessions),
            history: share(KINDS.history, PERCENT.history),
            bodies: share(KINDS.bodies, PERCENT.bodies),
            renditions: share(KINDS.renditions, PERCENT.renditions),
            parsed: share(KINDS.parsed, PERCENT.parsed),
            nodes: share(KINDS.nodes, PERCENT.nodes),
            book: share(KINDS.book, PERCENT.book),
            answers: share(KINDS.answers, PERCENT.answers),
        }
    }

    /// The shares of `budget` when it is not 0, else of the container's
    /// limit if there is one, else none.
    pub fn from_flag(budget: u64) -> MemoryShares {
        match budget {
            0 => CGROUP_LIMITS
                .iter()
                .find_map(|path| cgroup_limit(Path::new(path)))
                .map_or_else(MemoryShares::default, MemoryShares::of),
            budget => MemoryShares::of(budget),
        }
    }

    /// What the bounded kinds may hold together.
    pub fn total(&self) -> u64 {
        [
            self.sessions,
            self.history,
            self.bodies,
            self.renditions,
            self.parsed,
            self.nodes,
            self.book,
            self.answers,
        ]
        .iter()
        .fold(0, |sum: u64, share| sum.saturating_add(*share))
    }
}

/// The memory limit a cgroup file states, if it states one.
fn cgroup_limit(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let limit: u64 = text.trim().parse().ok()?;
    (limit < NO_LIMIT).then_some(limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 512 MiB the chart and the manifests give the pod: every kind
    /// within its share, all of them within four fifths of what the
    /// process leaves.
    #[test]
    fn the_shares_of_a_pod_sit_inside_its_limit() {
        let budget = 512 << 20;
        let shares = MemoryShares::of(budget);
        assert!(shares.total() <= (budget - BASE) / 5 * 4, "{shares:?}");
        assert_eq!(shares.sessions, (budget - BASE) / 100 * 25);
        // Never looser than the defaults, however big the budget; the
        // answers in flight, unbounded without one, are bounded by any.
        let big = MemoryShares::of(1 << 40);
        assert_eq!(big.answers, ((1 << 40) - BASE) / 100 * 15);
        assert_eq!(
            MemoryShares {
                budget: None,
                answers: u64::MAX,
                ..big
            },
            MemoryShares::default()
        );
        // A budget too small to hold a node is raised to the least one.
        assert_eq!(MemoryShares::of(1).budget, Some(MIN_BUDGET));
    }

    #[test]
    fn a_cgroup_file_states_a_limit_or_none() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let file = dir.path().join("memory.max");
        for (text, limit) in [
            ("536870912\n", Some(536_870_912)),
            ("max\n", None),
            ("9223372036854771712\n", None),
            ("", None),
        ] {
            std::fs::write(&file, text).expect("write");
            assert_eq!(cgroup_limit(&file), limit, "{text:?}");
        }
        assert_eq!(cgroup_limit(&dir.path().join("absent")), None);
    }
}
