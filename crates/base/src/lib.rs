//! The leaves every layer of xds-gateway uses, and nothing else: how a
//! lock is taken and a task is ended ([`sync`]), and how untrusted text is
//! written into a log line ([`log_escape`]). With `test-support`, what the
//! randomised tests of the crates above share (`testing`).

pub mod log_escape;
pub mod sync;

#[cfg(feature = "test-support")]
pub mod testing;
