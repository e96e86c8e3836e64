//! The leaves every layer of xds-gateway uses, and nothing else: how a
//! lock is taken and a task is ended ([`sync`]), how untrusted text is
//! written into a log line ([`log_escape`]), files watched for changes
//! ([`reload`]: certificates, the auth policy, the snapshot directory) and
//! a connection's small reads served from one large read ([`read_ahead`]:
//! every accepted connection and every upstream connection). With
//! `test-support`, what the randomised tests of the crates above share
//! (`testing`).

pub mod log_escape;
pub mod read_ahead;
pub mod reload;
pub mod sync;

#[cfg(any(test, feature = "test-support"))]
pub mod testing;
