//! An assembled `DiscoveryResponse` body, in three pieces: the opening
//! (its version), the rendered resources joined by commas, and the closing
//! (type URL and nonce). The middle piece, what makes a body big, is shared
//! by every node identity holding the same resources ([`super::state`] keys
//! it by content). The pieces go out as an HTTP body of three chunks;
//! [`JsonBody::to_bytes`] copies them into one buffer for what reads the
//! JSON (YAML, `?pretty`, watch events, `?changes`).

use bytes::Bytes;

/// A complete `DiscoveryResponse` JSON body: `head`, `resources`, `tail`
/// concatenated. Cheap to clone (three reference-counted buffers).
#[derive(Clone)]
pub struct JsonBody {
    head: Bytes,
    resources: Bytes,
    tail: Bytes,
}

impl JsonBody {
    pub fn new(head: Bytes, resources: Bytes, tail: Bytes) -> JsonBody {
        JsonBody {
            head,
            resources,
            tail,
        }
    }

    pub fn len(&self) -> usize {
        self.head.len() + self.resources.len() + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pieces in order (empty ones included).
    pub fn into_pieces(self) -> [Bytes; 3] {
        [self.head, self.resources, self.tail]
    }

    /// The body in one buffer (a copy).
    pub fn to_bytes(&self) -> Bytes {
        [&self.head[..], &self.resources, &self.tail]
            .concat()
            .into()
    }

    fn bytes(&self) -> impl Iterator<Item = &u8> {
        self.head
            .iter()
            .chain(&self.resources[..])
            .chain(&self.tail[..])
    }
}

impl From<Bytes> for JsonBody {
    fn from(bytes: Bytes) -> JsonBody {
        JsonBody::new(Bytes::new(), bytes, Bytes::new())
    }
}

/// Equal when the bytes are, however they are split.
impl PartialEq for JsonBody {
    fn eq(&self, other: &JsonBody) -> bool {
        self.len() == other.len() && self.bytes().eq(other.bytes())
    }
}

impl Eq for JsonBody {}

impl std::fmt::Debug for JsonBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const SHOWN: usize = 200;
        let bytes = self.to_bytes();
        let text = String::from_utf8_lossy(&bytes[..bytes.len().min(SHOWN)]);
        f.debug_struct("JsonBody")
            .field("len", &bytes.len())
            .field("start", &text)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl JsonBody {
        /// The resources piece (what identities holding the same resources share).
        pub fn resources(&self) -> &Bytes {
            &self.resources
        }
    }

    #[test]
    fn equal_by_bytes_whatever_the_split() {
        let a = JsonBody::new(
            Bytes::from_static(b"{\"a\":["),
            Bytes::from_static(b"1,2"),
            Bytes::from_static(b"]}"),
        );
        let b = JsonBody::from(Bytes::from_static(b"{\"a\":[1,2]}"));
        assert_eq!(a, b);
        assert_eq!(a.len(), 11);
        assert_eq!(&a.to_bytes()[..], b"{\"a\":[1,2]}");
        assert_ne!(a, JsonBody::from(Bytes::from_static(b"{\"a\":[1,3]}")));
    }
}
