//! The echo of a message whose only number is its `${seq}` (the echo conversation's, as
//! throughput sends it), read the short way: the bytes before the digits, the digits, and the
//! bytes after them compared whole against the message as sent with as many digits. Asked of
//! every answer of a counting loop: the general template walk (`Out::echoed_seq`) cost a
//! sixth of the client's CPU there, this two `memcmp`s and the digits. The messages it
//! compares with are made by the caller (`render`: the message of a `${seq}` at the size).

use std::sync::OnceLock;
use wsload_spec::template::Part;

/// Digits a `${seq}` is read with here: far past any connection's count of messages (beyond
/// it the general walk reads the echo).
const DIGITS: usize = 12;

/// The parts of a message at the cell's size, around its `${seq}`.
#[derive(Debug)]
pub struct SeqEcho {
    /// What comes before the digits.
    before: Box<[u8]>,
    size: usize,
    /// What comes after `n` digits (index `n - 1`), made the first time an echo with that
    /// many is read: a connection's numbers reach a few widths.
    after: [OnceLock<Box<[u8]>>; DIGITS],
}

impl SeqEcho {
    /// For a template (`pieces`) of literal bytes, a pad and one `${seq}` written in digits
    /// right after the leading literal bytes; `None` for any other.
    pub(super) fn of(
        pieces: &[Part<usize>],
        size: usize,
        render: impl FnOnce(u64, usize) -> Vec<u8>,
    ) -> Option<SeqEcho> {
        let mut seqs = 0;
        for p in pieces {
            match p {
                Part::Literal(_) | Part::Pad => {}
                Part::Seq => seqs += 1,
                _ => return None,
            }
        }
        if seqs != 1 {
            return None;
        }
        let mut at = 0;
        for p in pieces {
            match p {
                Part::Literal(r) => at += r.len(),
                Part::Seq => break,
                _ => return None,
            }
        }
        Some(SeqEcho {
            before: render(1, size).get(..at)?.into(),
            size,
            after: Default::default(),
        })
    }

    /// The `${seq}` `data` carries if it is the message sent with it byte for byte; `None`
    /// when it is not one (the general walk then decides).
    #[inline(always)]
    pub(super) fn seq(
        &self,
        data: &[u8],
        render: impl FnOnce(u64, usize) -> Vec<u8>,
    ) -> Option<u64> {
        let rest = data.get(self.before.len()..)?;
        if !same(&data[..self.before.len()], &self.before) {
            return None;
        }
        let mut seq = 0u64;
        let mut width = 0;
        for b in rest.iter().take(DIGITS) {
            if !b.is_ascii_digit() {
                break;
            }
            seq = seq * 10 + u64::from(b - b'0');
            width += 1;
        }
        // No leading zero: no message was sent with one.
        if width == 0 || (width > 1 && rest[0] == b'0') {
            return None;
        }
        let after = self.after[width - 1].get_or_init(|| {
            let first = 10u64.pow(width as u32 - 1);
            render(first, self.size)
                .get(self.before.len() + width..)
                .unwrap_or_default()
                .into()
        });
        same(&rest[width..], after).then_some(seq)
    }
}

/// Whether two byte slices are equal, compared 8 bytes at a time in line, the last word
/// overlapping the one before it (no byte loop): asked of every answer with a message's few
/// literal bytes, for which the call to `bcmp` cost more than the compare itself. No early
/// exit: an answer is nearly always equal, so every byte is read anyway.
#[inline]
fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n < 8 {
        return a == b;
    }
    let word = |s: &[u8], at: usize| {
        s.get(at..at + 8)
            .and_then(|w| w.try_into().ok())
            .map_or(0, u64::from_ne_bytes)
    };
    let mut diff = word(a, n - 8) ^ word(b, n - 8);
    let mut at = 0;
    while at + 8 <= n {
        diff |= word(a, at) ^ word(b, at);
        at += 8;
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::same;

    #[test]
    fn same_is_slice_equality_at_every_length_and_place() {
        for len in 0..40 {
            let a: Vec<u8> = (0..len as u8).map(|i| i.wrapping_mul(37)).collect();
            assert!(same(&a, &a.clone()), "{len}");
            for at in 0..len {
                let mut b = a.clone();
                b[at] ^= 0x40;
                assert!(!same(&a, &b), "{len} differs at {at}");
            }
            assert!(!same(&a, &a[..len.saturating_sub(1)]) || len == 0);
        }
    }
}
