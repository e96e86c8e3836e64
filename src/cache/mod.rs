//! What the gateway knows now: per (node identity, type) versioned states,
//! resources rendered once per content version, assembled response bodies,
//! and the bookkeeping that spots rejections. No network I/O.

pub mod rejection;
pub mod resource;
pub mod state;

pub use rejection::{RejectionTracker, Suspicion};
pub use resource::{Renderer, Resource};
pub use state::{Answer, Coverage, Names, TypeState};
