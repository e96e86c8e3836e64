//! The `node` of REST request bodies, held once per distinct node.
//!
//! A polling Envoy repeats its whole node (77 KB for Envoy 1.40) in every
//! request; an Envoy polling 1,000 EDS clusters sends 1,000 distinct bodies
//! around one node. The memo keeps a body as the bytes around its node and
//! the node, interned here (looked up by xxh3, confirmed by comparison), so
//! those 1,000 entries hold one node.
//!
//! Bounded: interned live nodes are at most [`NodeJsons::cap`] bytes (past
//! it a body keeps its node as its own). Entries are weak: a node lives
//! while a memo entry or a request holds it; dead ones are swept as the map
//! grows.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;

/// A node's JSON, interned or a body's own.
#[derive(Debug)]
pub(crate) struct NodeJson {
    bytes: Bytes,
    /// The interner's count of live bytes, if interned (given back on drop).
    live: Option<Arc<AtomicUsize>>,
}

impl NodeJson {
    pub(crate) fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// Whether it is shared through the interner (else a body's own).
    pub(crate) fn interned(&self) -> bool {
        self.live.is_some()
    }
}

impl Drop for NodeJson {
    fn drop(&mut self) {
        if let Some(live) = &self.live {
            live.fetch_sub(self.bytes.len(), Ordering::AcqRel);
        }
    }
}

#[derive(Debug)]
pub(crate) struct NodeJsons {
    map: Mutex<Map>,
    live: Arc<AtomicUsize>,
    cap: usize,
}

#[derive(Debug, Default)]
struct Map {
    by_hash: HashMap<u64, Weak<NodeJson>>,
    swept_at: usize,
}

impl NodeJsons {
    /// An interner holding at most `cap` bytes of live nodes.
    pub(crate) fn with_cap(cap: usize) -> NodeJsons {
        NodeJsons {
            map: Mutex::default(),
            live: Arc::default(),
            cap,
        }
    }

    /// The node `node` (a slice of a request body): the one interned with
    /// the same bytes, else interned now, else (past the cap, or its hash
    /// taken by another node) its own.
    pub(crate) fn intern(&self, node: Bytes) -> Arc<NodeJson> {
        let hash = xxhash_rust::xxh3::xxh3_64(&node);
        let mut map = crate::sync::lock(&self.map);
        let held = map.by_hash.get(&hash).and_then(Weak::upgrade);
        match held {
            Some(held) if held.bytes == node => return held,
            // Another node under the same hash: this one goes alone.
            Some(_) => return own(node),
            None => {}
        }
        if self.live.load(Ordering::Acquire) + node.len() > self.cap {
            return own(node);
        }
        self.live.fetch_add(node.len(), Ordering::AcqRel);
        let interned = Arc::new(NodeJson {
            // A copy: a slice would keep the whole body's buffer alive.
            bytes: Bytes::copy_from_slice(&node),
            live: Some(self.live.clone()),
        });
        map.by_hash.insert(hash, Arc::downgrade(&interned));
        if map.by_hash.len() >= 2 * map.swept_at.max(64) {
            map.by_hash.retain(|_, node| node.strong_count() > 0);
            map.swept_at = map.by_hash.len();
        }
        interned
    }
}

fn own(node: Bytes) -> Arc<NodeJson> {
    Arc::new(NodeJson {
        bytes: node,
        live: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Default for NodeJsons {
        fn default() -> NodeJsons {
            let cap = crate::config::MemoryShares::default().nodes;
            NodeJsons::with_cap(usize::try_from(cap).unwrap_or(usize::MAX))
        }
    }

    impl NodeJsons {
        /// Bytes of interned nodes alive now.
        pub(crate) fn live_bytes(&self) -> usize {
            self.live.load(Ordering::Acquire)
        }
    }

    #[test]
    fn same_bytes_one_node_and_the_cap_holds() {
        let nodes = NodeJsons::with_cap(100);
        let a = nodes.intern(Bytes::from_static(b"{\"id\":\"a\"}"));
        let again = nodes.intern(Bytes::from(b"{\"id\":\"a\"}".to_vec()));
        assert!(Arc::ptr_eq(&a, &again) && a.interned());
        let b = nodes.intern(Bytes::from_static(b"{\"id\":\"b\"}"));
        assert!(!Arc::ptr_eq(&a, &b));
        assert_eq!(nodes.live_bytes(), 20);
        // Past the cap: its own, not counted.
        let big = nodes.intern(Bytes::from(vec![b' '; 90]));
        assert!(!big.interned());
        assert_eq!(nodes.live_bytes(), 20);
        // Dropped nodes give their bytes back.
        drop((a, again));
        assert_eq!(nodes.live_bytes(), 10);
        assert!(nodes.intern(Bytes::from(vec![b' '; 90])).interned());
    }
}
