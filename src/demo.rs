//! The demo snapshot (`examples/demo/`), compiled into the binary by the
//! build script: what the gateway serves with no upstream and no snapshot
//! directory. The producers read it as any embedded snapshot.

use crate::upstream::Origin;

mod files {
    include!(concat!(env!("OUT_DIR"), "/demo_snapshot.rs"));
}

/// The demo, as the snapshot feeder's origin.
pub(crate) fn origin() -> Origin {
    Origin::Embedded(files::DEMO_FILES)
}
