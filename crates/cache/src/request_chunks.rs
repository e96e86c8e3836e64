//! A request body as the chunks it arrived in (hyper hands a large body over
//! in several), so that the memo of parsed requests can be asked about it
//! without joining them. What is computed on chunks is what the joined bytes
//! would give: the sampled key has one definition, [`feed_sampled`];
//! [`BodyChunks::pieces`] feeds a streaming hash of all the bytes; and
//! [`BodyChunks::equals`] compares byte for byte.

use bytes::Bytes;

/// A body's bytes, in the chunks it was read in, in order.
#[derive(Debug, Clone, Default)]
pub struct BodyChunks {
    chunks: Vec<Bytes>,
    len: usize,
}

impl From<Bytes> for BodyChunks {
    fn from(bytes: Bytes) -> BodyChunks {
        let mut chunks = BodyChunks::default();
        chunks.push(bytes);
        chunks
    }
}

impl BodyChunks {
    /// Appends `chunk` (an empty one is dropped).
    pub fn push(&mut self, chunk: Bytes) {
        if !chunk.is_empty() {
            self.len += chunk.len();
            self.chunks.push(chunk);
        }
    }

    /// The body in one buffer: the one chunk as it is, else joined (a copy).
    pub fn into_bytes(mut self) -> Bytes {
        match self.chunks.len() {
            0 => Bytes::new(),
            1 => self.chunks.pop().unwrap_or_default(),
            _ => self.chunks.concat().into(),
        }
    }

    /// Its bytes, chunk by chunk, in order.
    pub fn pieces(&self) -> impl Iterator<Item = &[u8]> {
        self.chunks.iter().map(|c| &c[..])
    }

    /// The xxh3 of what `feed_sampled` takes of the body, as one piece,
    /// with `shape` its edge, stride and sample.
    pub fn sampled_key(&self, shape: [usize; 3]) -> u64 {
        let mut taken = Vec::with_capacity(sampled_len(self.len, shape));
        feed_sampled(&mut taken, &self.chunks, self.len, shape);
        xxhash_rust::xxh3::xxh3_64(&taken)
    }

    /// Whether the body is, byte for byte, `pieces` one after the other.
    pub fn equals(&self, pieces: &[&[u8]]) -> bool {
        if pieces.iter().map(|p| p.len()).sum::<usize>() != self.len {
            return false;
        }
        let mut theirs = pieces.iter().copied().filter(|p| !p.is_empty());
        let mut ours = self.chunks.iter().map(|c| &c[..]);
        let (mut a, mut b): (&[u8], &[u8]) = (&[], &[]);
        loop {
            if a.is_empty() {
                match ours.next() {
                    Some(next) => a = next,
                    None => return b.is_empty() && theirs.next().is_none(),
                }
            }
            if b.is_empty() {
                match theirs.next() {
                    Some(next) => b = next,
                    None => return false,
                }
            }
            let n = a.len().min(b.len());
            if a[..n] != b[..n] {
                return false;
            }
            (a, b) = (&a[n..], &b[n..]);
        }
    }
}

/// Appends to `taken` the bytes a sampled key takes of `chunks` read as one
/// piece of `len` bytes: the length, then the first and last `edge` bytes and
/// `sample` bytes every `stride` between them (all of it when it is no longer
/// than two edges). The one definition of that key: the memo of parsed
/// requests keys joined bodies, chunked bodies and frames with the xxh3 of
/// what it takes, gathered into one buffer and hashed at once.
pub(crate) fn feed_sampled<C: AsRef<[u8]>>(
    taken: &mut Vec<u8>,
    chunks: &[C],
    len: usize,
    [edge, stride, sample]: [usize; 3],
) {
    taken.extend_from_slice(&(len as u64).to_le_bytes());
    let mut cursor = Cursor {
        chunks,
        index: 0,
        start: 0,
    };
    if len <= 2 * edge {
        cursor.feed(0..len, taken);
        return;
    }
    cursor.feed(0..edge, taken);
    let middle_end = len - edge;
    let mut at = edge;
    while at < middle_end {
        cursor.feed(at..(at + sample).min(middle_end), taken);
        at += stride;
    }
    cursor.feed(middle_end..len, taken);
}

/// Room for what [`feed_sampled`] takes of `len` bytes: never less.
pub(crate) fn sampled_len(len: usize, [edge, stride, sample]: [usize; 3]) -> usize {
    if len <= 2 * edge {
        return 8 + len;
    }
    8 + 2 * edge + (len - 2 * edge).div_ceil(stride.max(1)) * sample
}

/// Walks chunks forward, appending increasing byte ranges.
struct Cursor<'a, C> {
    chunks: &'a [C],
    /// The chunk the next range starts in, and that chunk's offset.
    index: usize,
    start: usize,
}

impl<'a, C: AsRef<[u8]>> Cursor<'a, C> {
    /// Appends `range` of the joined bytes; ranges come in increasing order.
    fn feed(&mut self, range: std::ops::Range<usize>, taken: &mut Vec<u8>) {
        let mut at = range.start;
        while at < range.end {
            let Some(chunk) = self.chunks.get(self.index) else {
                return;
            };
            let chunk = chunk.as_ref();
            let end = self.start + chunk.len();
            if at >= end {
                self.index += 1;
                self.start = end;
                continue;
            }
            let upto = range.end.min(end);
            taken.extend_from_slice(&chunk[at - self.start..upto - self.start]);
            at = upto;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl BodyChunks {
        pub(crate) fn len(&self) -> usize {
            self.len
        }
    }

    #[test]
    fn joined_and_compared_as_one_buffer() {
        let mut chunks = BodyChunks::default();
        for piece in ["ab", "", "cde", "f"] {
            chunks.push(Bytes::from(piece));
        }
        assert_eq!(chunks.len(), 6);
        assert!(chunks.equals(&[b"a", b"bcd", b"", b"ef"]));
        assert!(!chunks.equals(&[b"abcdeg"]));
        assert!(!chunks.equals(&[b"abcde"]));
        assert!(!chunks.equals(&[b"abcdef", b"g"]));
        assert_eq!(chunks.into_bytes(), Bytes::from("abcdef"));
        assert!(BodyChunks::default().equals(&[b""]));
        assert_eq!(BodyChunks::default().into_bytes(), Bytes::new());
    }

    /// The room asked for holds what is taken, for any length and shape,
    /// and what is taken is the length, the edges and the samples.
    #[test]
    fn the_room_holds_what_a_key_takes() {
        let bytes: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        for shape in [
            [1024, 2048, 32],
            [4, 7, 3],
            [16, 16, 16],
            [1, 1, 1],
            [0, 5, 9],
        ] {
            for len in (0..bytes.len()).step_by(97).chain([1, 2, 2048, 2049, 4096]) {
                let mut taken = Vec::new();
                feed_sampled(&mut taken, &[&bytes[..len]], len, shape);
                assert!(taken.len() <= sampled_len(len, shape), "{shape:?} {len}");
            }
        }
        let mut taken = Vec::new();
        feed_sampled(&mut taken, &[b"abcdefghij"], 10, [2, 3, 1]);
        let mut expected = 10u64.to_le_bytes().to_vec();
        expected.extend_from_slice(b"abcfij");
        assert_eq!(taken, expected);
    }
}
