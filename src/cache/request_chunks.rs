//! A request body as the chunks it arrived in (hyper hands a 77 KB body
//! over in several), so that the memo of parsed requests can be asked about
//! it without first joining the chunks into one buffer: the join cost every
//! poll a 77 KB allocation and copy, and a memo hit needs neither (issue 41).
//!
//! What is computed on chunks must be what the same bytes joined would give:
//! the sampled key has one definition, [`feed_sampled`], which reads the
//! chunks as one piece (xxh3's streaming state does not see where one
//! update ends), and [`BodyChunks::equals`] compares byte for byte. It owns no
//! memo and parses nothing.

use bytes::Bytes;
use xxhash_rust::xxh3::Xxh3;

/// A body's bytes, in the chunks it was read in, in order.
#[derive(Debug, Clone, Default)]
pub(crate) struct BodyChunks {
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
    pub(crate) fn push(&mut self, chunk: Bytes) {
        if !chunk.is_empty() {
            self.len += chunk.len();
            self.chunks.push(chunk);
        }
    }

    /// Bytes in all.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The body in one buffer: the one chunk as it is, else joined (a copy).
    pub(crate) fn into_bytes(mut self) -> Bytes {
        match self.chunks.len() {
            0 => Bytes::new(),
            1 => self.chunks.pop().unwrap_or_default(),
            _ => {
                let mut joined = Vec::with_capacity(self.len);
                for chunk in &self.chunks {
                    joined.extend_from_slice(chunk);
                }
                Bytes::from(joined)
            }
        }
    }

    /// The xxh3 of what [`feed_sampled`] takes of the body, as one piece,
    /// with `shape` its edge, stride and sample.
    pub(crate) fn sampled_key(&self, shape: [usize; 3]) -> u64 {
        let mut hasher = Xxh3::new();
        feed_sampled(&mut hasher, &self.chunks, self.len, shape);
        hasher.digest()
    }

    /// Whether the body is, byte for byte, `pieces` one after the other.
    pub(crate) fn equals(&self, pieces: &[&[u8]]) -> bool {
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

/// Feeds `hasher` the bytes a sampled key takes of `chunks` read as one
/// piece of `len` bytes: the length, then the first and last `edge` bytes
/// and `sample` bytes every `stride` between them (all of it when it is no
/// longer than two edges). The one definition of that key: the memo of
/// parsed requests keys joined bodies, chunked bodies and frames with it.
pub(crate) fn feed_sampled<C: AsRef<[u8]>>(
    hasher: &mut Xxh3,
    chunks: &[C],
    len: usize,
    [edge, stride, sample]: [usize; 3],
) {
    hasher.update(&(len as u64).to_le_bytes());
    let mut cursor = Cursor::new(chunks);
    if len <= 2 * edge {
        cursor.feed(0..len, hasher);
        return;
    }
    cursor.feed(0..edge, hasher);
    let middle_end = len - edge;
    let mut at = edge;
    while at < middle_end {
        cursor.feed(at..(at + sample).min(middle_end), hasher);
        at += stride;
    }
    cursor.feed(middle_end..len, hasher);
}

/// Walks chunks forward, handing increasing byte ranges to a hasher.
struct Cursor<'a, C> {
    chunks: &'a [C],
    /// The chunk the next range starts in, and that chunk's offset.
    index: usize,
    start: usize,
}

impl<'a, C: AsRef<[u8]>> Cursor<'a, C> {
    fn new(chunks: &'a [C]) -> Cursor<'a, C> {
        Cursor {
            chunks,
            index: 0,
            start: 0,
        }
    }

    /// Hashes `range` of the joined bytes; ranges come in increasing order.
    fn feed(&mut self, range: std::ops::Range<usize>, hasher: &mut Xxh3) {
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
            hasher.update(&chunk[at - self.start..upto - self.start]);
            at = upto;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
