//! The log of NACKs sent upstream: one line per run of identical refusals,
//! not one per NACK.
//!
//! A control plane that re-sends a refused version at once (java-control-
//! plane's SotW cache does: the request's version differs from its snapshot's)
//! makes a NACK loop of thousands of NACKs a second, which a WARN line each
//! would flood the log with. A run of NACKs of one type with the same reason
//! logs its first NACK, then a line each time its count doubles (2, 4, 8,
//! ...), and one when it ends (the next answer of the type is accepted, or
//! refused for another reason): O(log n) lines for n NACKs.
//! Every NACK is still counted (`xds_gateway_upstream_nacks_total`) and
//! recorded as the type's last reply (`/debug/sessions`, the status page).

use std::collections::BTreeMap;

use tracing::{info, warn};

use crate::log_escape::Escaped;
use crate::xds::ResourceType;

/// The run of identical NACKs going on for one type.
#[derive(Debug)]
struct Run {
    reason: String,
    /// NACKs in the run so far (1 after the first).
    count: u64,
}

/// Per type of one session's stream protocol: the run of NACKs going on.
#[derive(Debug, Default)]
pub(super) struct NackLog {
    runs: BTreeMap<ResourceType, Run>,
}

/// What a NACK asks of the log.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// Nothing: a repeat inside a run.
    None,
    /// The first NACK of a run (after `ended` repeats of another run).
    First { ended: u64 },
    /// A repeat whose count is a power of two.
    Repeated(u64),
}

impl NackLog {
    /// Logs (or not) a NACK of `kind` sent for the `version` the upstream
    /// sent (`mode`: "sotw" or "delta"), refused for `reason`.
    pub(super) fn refused(&mut self, kind: ResourceType, mode: &str, version: &str, reason: &str) {
        let (version, reason_text) = (Escaped(version), Escaped(reason));
        match self.note(kind, reason) {
            Line::None => {}
            Line::First { ended } => {
                if ended > 1 {
                    info!(%kind, mode, nacks = ended, "the run of identical NACKs before this one ended");
                }
                warn!(%kind, mode, %version, reason = %reason_text, "rejected upstream response (NACK)");
            }
            Line::Repeated(count) => {
                warn!(%kind, mode, %version, reason = %reason_text, nacks = count, "the upstream keeps sending a response the gateway refuses (NACK loop); logged again when the count doubles");
            }
        }
    }

    /// An answer of `kind` was accepted: the run of NACKs ends.
    pub(super) fn accepted(&mut self, kind: ResourceType) {
        if let Some(run) = self.runs.remove(&kind).filter(|run| run.count > 1) {
            info!(%kind, nacks = run.count, "the run of identical NACKs ended: an answer was accepted");
        }
    }

    fn note(&mut self, kind: ResourceType, reason: &str) -> Line {
        match self.runs.get_mut(&kind) {
            Some(run) if run.reason == reason => {
                run.count += 1;
                if run.count.is_power_of_two() {
                    Line::Repeated(run.count)
                } else {
                    Line::None
                }
            }
            _ => {
                let before = self.runs.insert(
                    kind,
                    Run {
                        reason: reason.to_owned(),
                        count: 1,
                    },
                );
                Line::First {
                    ended: before.map_or(0, |run| run.count),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CDS: ResourceType = ResourceType::Clusters;

    /// The loop the issue measured: 13,800 NACKs in 2 s. Fifteen lines.
    #[test]
    fn a_nack_loop_logs_a_line_per_doubling() {
        let mut log = NackLog::default();
        let lines = (0..13_800)
            .filter(|_| log.note(CDS, "bad cluster") != Line::None)
            .count();
        assert_eq!(lines, 14, "the first NACK, then at 2, 4, ..., 8192");
        assert_eq!(
            log.note(CDS, "another reason"),
            Line::First { ended: 13_800 }
        );
    }

    #[test]
    fn runs_are_per_type_and_end_when_an_answer_is_accepted() {
        let mut log = NackLog::default();
        assert_eq!(log.note(CDS, "r"), Line::First { ended: 0 });
        assert_eq!(
            log.note(ResourceType::Endpoints, "r"),
            Line::First { ended: 0 }
        );
        assert_eq!(log.note(CDS, "r"), Line::Repeated(2));
        assert_eq!(log.note(CDS, "r"), Line::None);
        log.accepted(CDS);
        assert_eq!(log.note(CDS, "r"), Line::First { ended: 0 }, "a new run");
    }
}
