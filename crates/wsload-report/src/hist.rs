//! Latency histograms: HdrHistogram in microseconds, 3 significant digits, 1 us to 1 h.
//!
//! A recording histogram is dense, ~190 KB of counts, so they are kept per worker thread (never
//! per connection) and merged at the end. They serialize (V2 + deflate, base64) into results so
//! that shards merge exactly, not by averaging percentiles.
//!
//! A result holds seven histograms per cell, most of them empty or with few distinct values:
//! dense, 5,000 cells took 7 GiB to read. So an empty histogram holds no counts at all, and
//! one read back keeps only its non-empty buckets (8 bytes each, always less than the dense
//! counts), decoded straight into them, answering every figure exactly as the dense histogram
//! would. Recording into either makes it dense.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use flate2::read::ZlibDecoder;
use hdrhistogram::serialization::{
    DeserializeError, Deserializer, Serializer as _, V2DeflateSerializer,
};
use hdrhistogram::{AdditionError, Histogram};
use serde::{Deserialize, Serialize, Serializer};
use std::io::Read as _;
use std::sync::LazyLock;
use std::time::Duration;

const MAX_MICROS: u64 = 3_600_000_000;
const SIGNIFICANT_DIGITS: u8 = 3;

/// Counts in a dense histogram of these bounds (`Histogram::distinct_values`): 23 buckets of
/// 1,024 sub-buckets (a test holds it to hdrhistogram's).
const DENSE_COUNTS: usize = 23_552;

/// The longest V2 payload of a histogram no larger than ours: every count a 9-byte varint.
/// What a serialized histogram's header says past this is refused before the deserializer
/// sizes a buffer by it (its 32-bit length would cost up to 4 GiB).
const MAX_PAYLOAD_BYTES: usize = DENSE_COUNTS * 9;

/// hdrhistogram's V2 cookies (private there): plain, and deflated as `to_base64` writes.
const V2_COOKIE: u32 = 0x1c84_9313;
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9314;
/// A V2 header: cookie, payload length, normalizing offset, digits, lowest, highest, ratio.
const V2_HEADER_BYTES: usize = 40;

/// A non-empty bucket as hdrhistogram iterates it: the highest value the bucket holds, and its
/// count. 32 bits each: the top bucket of 1 h ends at `u32::MAX` us, and a histogram with a
/// count past `u32::MAX` stays dense (a merge of thousands of long shards, rarely).
type Bucket = (u32, u32);

#[derive(Clone)]
pub struct Hist(Repr);

/// The dense histogram is held inline, not boxed: a box would put one more pointer to follow on
/// the recording path.
#[derive(Clone)]
enum Repr {
    /// Nothing recorded: no counts.
    Empty,
    /// Recording, or read back with a count past `u32::MAX`.
    Dense(Histogram<u64>),
    /// Read back: only the non-empty buckets (at least one), by value. Recording into it makes
    /// it dense again.
    Frozen { buckets: Box<[Bucket]>, total: u64 },
}

impl std::fmt::Debug for Hist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Hist(n={}, p50={}us, max={}us)",
            self.len(),
            self.value_at_quantile(0.5),
            self.max_micros()
        )
    }
}

impl Default for Hist {
    fn default() -> Self {
        Self::new()
    }
}

fn dense() -> Histogram<u64> {
    // Bounds are constants that hdrhistogram accepts; failure is a programming error.
    Histogram::new_with_bounds(1, MAX_MICROS, SIGNIFICANT_DIGITS).expect("valid histogram bounds")
}

/// Where a value's bucket begins and its middle, as a histogram of our digits computes them:
/// they depend on the digits and the lowest value only, so the smallest such histogram (16 KB,
/// once) answers for frozen buckets.
static EQUIVALENTS: LazyLock<Histogram<u64>> = LazyLock::new(|| {
    Histogram::new_with_bounds(1, 2, SIGNIFICANT_DIGITS).expect("valid histogram bounds")
});

/// Adds frozen buckets to a dense histogram: the counts, total, minimum and maximum that adding
/// the dense histogram they were frozen from gives.
fn add_buckets(h: &mut Histogram<u64>, buckets: &[Bucket]) {
    for &(value, count) in buckets {
        h.saturating_record_n(value.into(), count.into());
    }
}

fn thaw(buckets: &[Bucket]) -> Histogram<u64> {
    let mut h = dense();
    add_buckets(&mut h, buckets);
    h
}

/// Whether `n` frozen buckets take less room than the dense counts: always at our bounds (the
/// counts past 1 h are never used), kept so a change of bucket width cannot make them larger.
fn fits_frozen(n: usize) -> bool {
    n * size_of::<Bucket>() < DENSE_COUNTS * size_of::<u64>()
}

/// A histogram kept as read back: empty, frozen, or dense when a count does not fit 32 bits.
fn freeze(h: Histogram<u64>) -> Hist {
    if h.is_empty() {
        return Hist(Repr::Empty);
    }
    let n = h.iter_recorded().count();
    if !fits_frozen(n) {
        return Hist(Repr::Dense(h));
    }
    let mut buckets = Vec::with_capacity(n);
    let narrow = h.iter_recorded().all(|v| {
        match (
            u32::try_from(v.value_iterated_to()),
            u32::try_from(v.count_at_value()),
        ) {
            (Ok(value), Ok(count)) => {
                buckets.push((value, count));
                true
            }
            _ => false,
        }
    });
    if !narrow {
        return Hist(Repr::Dense(h));
    }
    Hist(Repr::Frozen {
        buckets: buckets.into_boxed_slice(),
        total: h.len(),
    })
}

/// Two frozen bucket lists added, counts of the same bucket summed; `None` when a sum passes
/// `u32::MAX`. Sized exactly (a first pass counts the buckets): the sum is what a merge keeps.
fn merged(a: &[Bucket], b: &[Bucket]) -> Option<Vec<Bucket>> {
    let mut n = 0;
    union(a, b, |_, _| n += 1);
    let mut out = Vec::with_capacity(n);
    let mut fits = true;
    union(a, b, |value, (x, y)| match x.checked_add(y) {
        Some(count) => out.push((value, count)),
        None => fits = false,
    });
    fits.then_some(out)
}

/// Walks two bucket lists in value order: each value once, with its count in either (0 where
/// it has none).
fn union(a: &[Bucket], b: &[Bucket], mut each: impl FnMut(u32, (u32, u32))) {
    let (mut i, mut j) = (0, 0);
    loop {
        match (a.get(i), b.get(j)) {
            (Some(&(x, cx)), Some(&(y, cy))) if x == y => {
                each(x, (cx, cy));
                i += 1;
                j += 1;
            }
            (Some(&(x, cx)), Some(&(y, _))) if x < y => {
                each(x, (cx, 0));
                i += 1;
            }
            (Some(&(x, cx)), None) => {
                each(x, (cx, 0));
                i += 1;
            }
            (_, Some(&(y, cy))) => {
                each(y, (0, cy));
                j += 1;
            }
            (None, None) => return,
        }
    }
}

impl Hist {
    /// An empty histogram: it allocates nothing until the first value is recorded.
    pub fn new() -> Self {
        Hist(Repr::Empty)
    }

    #[inline]
    pub fn record(&mut self, d: Duration) {
        let us = (d.as_micros() as u64).clamp(1, MAX_MICROS);
        match &mut self.0 {
            // Saturating: values are clamped into range, so this cannot fail.
            Repr::Dense(h) => h.saturating_record(us),
            _ => self.record_into_new(us),
        }
    }

    /// The first value recorded (or one recorded into a histogram read back): the dense counts
    /// are made here, off the recording path.
    #[cold]
    #[inline(never)]
    fn record_into_new(&mut self, us: u64) {
        let mut h = match std::mem::replace(&mut self.0, Repr::Empty) {
            Repr::Empty => dense(),
            Repr::Dense(h) => h,
            Repr::Frozen { buckets, .. } => thaw(&buckets),
        };
        h.saturating_record(us);
        self.0 = Repr::Dense(h);
    }

    pub fn add(&mut self, other: &Hist) {
        if other.is_empty() {
            return;
        }
        match (&mut self.0, &other.0) {
            (_, Repr::Empty) => {}
            (Repr::Empty, _) => *self = other.clone(),
            // Same bounds on both sides: cannot fail.
            (Repr::Dense(a), Repr::Dense(b)) => {
                let _ = a.add(b);
            }
            (Repr::Dense(a), Repr::Frozen { buckets, .. }) => add_buckets(a, buckets),
            (
                Repr::Frozen { buckets, total },
                Repr::Frozen {
                    buckets: b,
                    total: t,
                },
            ) => {
                let total = total.saturating_add(*t);
                self.0 = match merged(buckets, b) {
                    Some(sum) if fits_frozen(sum.len()) => Repr::Frozen {
                        buckets: sum.into_boxed_slice(),
                        total,
                    },
                    _ => {
                        let mut a = thaw(buckets);
                        add_buckets(&mut a, b);
                        Repr::Dense(a)
                    }
                };
            }
            (Repr::Frozen { buckets, .. }, Repr::Dense(b)) => {
                let mut a = thaw(buckets);
                let _ = a.add(b);
                *self = freeze(a);
            }
        }
    }

    pub fn len(&self) -> u64 {
        match &self.0 {
            Repr::Empty => 0,
            Repr::Dense(h) => h.len(),
            Repr::Frozen { total, .. } => *total,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Percentile `p` (0..100) in seconds; 0 when empty.
    pub fn percentile(&self, p: f64) -> f64 {
        if self.is_empty() {
            0.0
        } else {
            self.value_at_quantile(p / 100.0) as f64 / 1e6
        }
    }
    pub fn min(&self) -> f64 {
        match &self.0 {
            Repr::Empty => 0.0,
            Repr::Dense(h) if h.is_empty() => 0.0,
            Repr::Dense(h) => h.min() as f64 / 1e6,
            // hdrhistogram's min is 0 when the bucket of 0 counts anything, else where the
            // first non-empty bucket begins.
            Repr::Frozen { buckets, .. } => match buckets.first() {
                Some(&(value, _)) if value > 0 => {
                    EQUIVALENTS.lowest_equivalent(value.into()) as f64 / 1e6
                }
                _ => 0.0,
            },
        }
    }
    pub fn max(&self) -> f64 {
        self.max_micros() as f64 / 1e6
    }
    pub fn mean(&self) -> f64 {
        match &self.0 {
            Repr::Empty => 0.0,
            Repr::Dense(h) => h.mean() / 1e6,
            Repr::Frozen { buckets, total } => {
                // hdrhistogram's sum, term for term and in its order, so the mean is the same
                // to the last bit.
                let n = *total as f64;
                buckets.iter().fold(0.0_f64, |sum, &(value, count)| {
                    sum + EQUIVALENTS.median_equivalent(value.into()) as f64 * f64::from(count) / n
                }) / 1e6
            }
        }
    }

    /// The bytes its counts take on the heap.
    #[cfg(test)]
    pub(crate) fn counts_bytes(&self) -> usize {
        match &self.0 {
            Repr::Empty => 0,
            Repr::Dense(h) => h.distinct_values() * size_of::<u64>(),
            Repr::Frozen { buckets, .. } => size_of_val(&**buckets),
        }
    }

    /// The largest value recorded, rounded up to its bucket's highest value; 0 when empty.
    fn max_micros(&self) -> u64 {
        match &self.0 {
            Repr::Empty => 0,
            Repr::Dense(h) => h.max(),
            Repr::Frozen { buckets, .. } => buckets.last().map_or(0, |&(value, _)| value.into()),
        }
    }

    /// hdrhistogram's `value_at_quantile`, over frozen buckets too.
    fn value_at_quantile(&self, quantile: f64) -> u64 {
        let (buckets, total) = match &self.0 {
            Repr::Empty => return 0,
            Repr::Dense(h) => return h.value_at_quantile(quantile),
            Repr::Frozen { buckets, total } => (buckets, *total),
        };
        let quantile = if quantile > 1.0 { 1.0 } else { quantile };
        let count_at_quantile = ((quantile * total as f64).ceil() as u64).max(1);
        let mut below: u64 = 0;
        for &(value, count) in buckets.iter() {
            below = below.saturating_add(count.into());
            if below >= count_at_quantile {
                return if quantile == 0.0 {
                    EQUIVALENTS.lowest_equivalent(value.into())
                } else {
                    value.into()
                };
            }
        }
        0
    }

    pub fn to_base64(&self) -> String {
        let thawed;
        let h = match &self.0 {
            Repr::Dense(h) => h,
            Repr::Empty => {
                thawed = dense();
                &thawed
            }
            Repr::Frozen { buckets, .. } => {
                thawed = thaw(buckets);
                &thawed
            }
        };
        let mut buf = Vec::new();
        // Serializing into a Vec only fails on internal bugs; an empty string then decodes as empty.
        if V2DeflateSerializer::new().serialize(h, &mut buf).is_err() {
            return String::new();
        }
        B64.encode(buf)
    }

    /// A serialized histogram read back, kept compact: empty, frozen, or dense when a count
    /// does not fit 32 bits.
    pub fn from_base64(s: &str) -> Result<Hist, HistError> {
        if s.is_empty() {
            return Ok(Hist::new());
        }
        let bytes = B64.decode(s).map_err(HistError::NotBase64)?;
        if let Some((header, payload)) = V2Header::read(&bytes) {
            header.check()?;
            if header.is_ours()
                && let Some(h) = payload.read(header.payload).and_then(|p| read_frozen(&p))
            {
                return Ok(h);
            }
        }
        // Other bounds, a count past 32 bits, or a histogram that does not read: the
        // deserializer reads it (into a dense histogram, transiently) or names what is wrong.
        let h: Histogram<u64> = Deserializer::new()
            .deserialize(&mut &bytes[..])
            .map_err(HistError::Undecodable)?;
        if h.low() == 1 && h.high() == MAX_MICROS && h.sigfig() == SIGNIFICANT_DIGITS {
            return Ok(freeze(h));
        }
        let mut out = dense();
        out.add(&h).map_err(HistError::OutOfRange)?;
        Ok(freeze(out))
    }
}

/// The header of a serialized (V2) histogram, as hdrhistogram's deserializer reads it.
struct V2Header {
    payload: u32,
    normalizing_offset: u32,
    digits: u32,
    low: u64,
    high: u64,
    int_to_double: f64,
}

/// What follows a V2 header: its payload, plain or still deflated.
enum Payload<'a> {
    Plain(&'a [u8]),
    Deflated(ZlibDecoder<&'a [u8]>),
}

impl V2Header {
    /// The header of `bytes` and the payload after it; `None` when it does not read, for the
    /// deserializer to name.
    fn read(bytes: &[u8]) -> Option<(V2Header, Payload<'_>)> {
        let mut header = [0u8; V2_HEADER_BYTES];
        let payload = match bytes.get(..4)? {
            c if c == V2_COMPRESSED_COOKIE.to_be_bytes() => {
                // As the deserializer reads it: the deflated stream within its stated length.
                let len = u32::from_be_bytes(bytes.get(4..8)?.try_into().ok()?) as usize;
                let rest = bytes.get(8..)?;
                let mut z = ZlibDecoder::new(&rest[..len.min(rest.len())]);
                z.read_exact(&mut header).ok()?;
                Payload::Deflated(z)
            }
            c if c == V2_COOKIE.to_be_bytes() => {
                header.copy_from_slice(bytes.get(..V2_HEADER_BYTES)?);
                Payload::Plain(&bytes[V2_HEADER_BYTES..])
            }
            _ => return None,
        };
        let at = |i: usize| -> [u8; 8] {
            let mut b = [0u8; 8];
            b.copy_from_slice(&header[i..i + 8]);
            b
        };
        let word =
            |i: usize| u32::from_be_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]);
        if word(0) != V2_COOKIE {
            return None;
        }
        let header = V2Header {
            payload: word(4),
            normalizing_offset: word(8),
            digits: word(12),
            low: u64::from_be_bytes(at(16)),
            high: u64::from_be_bytes(at(24)),
            int_to_double: f64::from_be_bytes(at(32)),
        };
        Some((header, payload))
    }

    /// Refuses a header that would have the deserializer allocate more than our histogram
    /// takes: more digits or a higher bound (a larger counts array), or a longer payload (a
    /// buffer of that length, up to 4 GiB, from a few bytes of base64).
    fn check(&self) -> Result<(), HistError> {
        if self.payload as usize > MAX_PAYLOAD_BYTES
            || self.digits > u32::from(SIGNIFICANT_DIGITS)
            || self.high > MAX_MICROS
        {
            return Err(HistError::Oversized {
                payload: self.payload,
                digits: self.digits,
                high: self.high,
            });
        }
        Ok(())
    }

    /// Whether the histogram has our bounds and nothing the deserializer refuses.
    fn is_ours(&self) -> bool {
        self.normalizing_offset == 0
            && self.digits == u32::from(SIGNIFICANT_DIGITS)
            && self.low == 1
            && self.high == MAX_MICROS
            && self.int_to_double == 1.0
    }
}

impl Payload<'_> {
    /// Its first `len` bytes; `None` when there are fewer.
    fn read(self, len: u32) -> Option<Vec<u8>> {
        let len = len as usize;
        match self {
            Payload::Plain(b) => Some(b.get(..len)?.to_vec()),
            Payload::Deflated(mut z) => {
                let mut out = vec![0u8; len];
                z.read_exact(&mut out).ok()?;
                Some(out)
            }
        }
    }
}

/// The highest value counted at `index` of our dense counts: hdrhistogram's
/// `highest_equivalent(value_for(index))`, of 1,024 sub-buckets per half bucket (3 digits)
/// and a unit of 1 us.
fn bucket_top(index: usize) -> u64 {
    const HALF: usize = 1024;
    let (bucket, sub) = match index / HALF {
        0 => (0, index),
        b => (b - 1, HALF + index % HALF),
    };
    EQUIVALENTS.highest_equivalent((sub as u64) << bucket)
}

/// A V2 payload of our bounds read straight into frozen buckets, as the deserializer decodes
/// it (zigzag varints: a count, or a run of empty counts) but without building the dense
/// counts: a histogram read back never costs more than it keeps. `None` for a count past 32
/// bits and for anything the deserializer would refuse, which it then names.
fn read_frozen(payload: &[u8]) -> Option<Hist> {
    let mut buckets = Vec::new();
    let mut total: u64 = 0;
    let mut index: usize = 0;
    let mut rest = payload;
    while !rest.is_empty() {
        let (varint, used) = read_varint(rest)?;
        rest = &rest[used..];
        let n = ((varint >> 1) as i64) ^ -((varint & 1) as i64);
        if n < 0 {
            index = index.checked_add(usize::try_from(n.checked_neg()?).ok()?)?;
            continue;
        }
        if n > 0 {
            if index >= DENSE_COUNTS {
                return None;
            }
            let count = u32::try_from(n).ok()?;
            buckets.push((u32::try_from(bucket_top(index)).ok()?, count));
            total = total.saturating_add(count.into());
        }
        index += 1;
    }
    if buckets.is_empty() {
        return Some(Hist::new());
    }
    if !fits_frozen(buckets.len()) {
        return None;
    }
    Some(Hist(Repr::Frozen {
        buckets: buckets.into_boxed_slice(),
        total,
    }))
}

/// hdrhistogram's varint: 7 bits a byte, low first, the 9th byte whole; with its length.
fn read_varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for i in 0..9 {
        let byte = *b.get(i)?;
        if i == 8 {
            return Some((value | u64::from(byte) << 56, 9));
        }
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// Why a serialized histogram does not read back.
#[derive(Debug, thiserror::Error)]
pub enum HistError {
    #[error("histogram is not base64: {0}")]
    NotBase64(#[source] base64::DecodeError),
    // The cause's Debug (its variant's name, e.g. `InvalidCookie`), as these messages have
    // always read.
    #[error("histogram does not decode: {0:?}")]
    Undecodable(#[source] DeserializeError),
    #[error("histogram out of range: {0:?}")]
    OutOfRange(#[source] AdditionError),
    #[error(
        "histogram larger than wsload writes: {digits} significant digits up to {high} us, a {payload}-byte payload (wsload's: {SIGNIFICANT_DIGITS} digits up to {MAX_MICROS} us, at most {MAX_PAYLOAD_BYTES} bytes)"
    )]
    Oversized {
        payload: u32,
        digits: u32,
        high: u64,
    },
}

impl Serialize for Hist {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_base64())
    }
}

impl<'de> Deserialize<'de> for Hist {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Decoded from the JSON text in place: no copy of the base64 per histogram.
        struct Base64;
        impl serde::de::Visitor<'_> for Base64 {
            type Value = Hist;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Hist, E> {
                Hist::from_base64(s).map_err(E::custom)
            }
        }
        d.deserialize_str(Base64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_is_exact_and_survives_serialization() {
        let mut a = Hist::new();
        let mut b = Hist::new();
        for us in 1..=1000u64 {
            a.record(Duration::from_micros(us));
        }
        for _ in 0..1000 {
            b.record(Duration::from_millis(100));
        }
        let b = Hist::from_base64(&b.to_base64()).expect("round trip");
        let mut merged = a.clone();
        merged.add(&b);
        assert_eq!(merged.len(), 2000);
        // Half the samples are <= 1 ms, so p50 is ~1 ms and p75 is ~100 ms.
        assert!(
            (merged.percentile(50.0) - 0.001).abs() < 0.000_01,
            "{}",
            merged.percentile(50.0)
        );
        assert!((merged.percentile(75.0) - 0.1).abs() < 0.001);
        let json = serde_json::to_string(&merged).expect("serialize");
        let back: Hist = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(back.len(), 2000);
        assert_eq!(back.max(), merged.max());
    }

    #[test]
    fn out_of_range_values_are_clamped_not_lost() {
        let mut h = Hist::new();
        h.record(Duration::ZERO);
        h.record(Duration::from_secs(7200));
        assert_eq!(h.len(), 2);
        assert_eq!(h.min(), 0.000_001);
    }

    use crate::fixtures::Rng;

    /// A dense histogram of `values` distinct values (some repeated `heavy` times), as
    /// hdrhistogram records them.
    fn random_dense(rng: &mut Rng, values: usize, heavy: u64) -> Histogram<u64> {
        let mut h = dense();
        let top = [1_000, 100_000, MAX_MICROS][rng.below(3) as usize];
        for _ in 0..values {
            let count = match rng.below(4) {
                0 => heavy,
                1 => 1 + rng.below(1000),
                _ => 1,
            };
            h.saturating_record_n(rng.spread(top), count);
        }
        h
    }

    const QUANTILES: [f64; 16] = [
        0.0, -0.0, 0.0001, 0.1, 1.0, 10.0, 25.0, 50.0, 66.6, 90.0, 99.0, 99.9, 99.99, 100.0, 150.0,
        -5.0,
    ];

    /// Every figure a histogram answers, to the bit.
    fn figures(h: &Hist) -> Vec<u64> {
        let mut out = vec![
            h.len(),
            h.min().to_bits(),
            h.max().to_bits(),
            h.mean().to_bits(),
            u64::from(h.is_empty()),
        ];
        out.extend(QUANTILES.iter().map(|&p| h.percentile(p).to_bits()));
        out.extend(QUANTILES.iter().map(|&p| h.value_at_quantile(p / 100.0)));
        out
    }

    fn is_frozen(h: &Hist) -> bool {
        matches!(h.0, Repr::Frozen { .. })
    }

    /// A histogram read back answers exactly as the dense one it was written from, and writes
    /// the same bytes again.
    #[test]
    fn a_frozen_histogram_answers_as_the_dense_one() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for round in 0..300 {
            let values = [1, 2, 3, 10, 100, 1000, 5000][round % 7];
            let heavy = [1, 1 << 10, 1 << 20, 1 << 30][round % 4];
            let h = random_dense(&mut rng, values, heavy);
            let narrow = h
                .iter_recorded()
                .all(|v| v.count_at_value() <= u32::MAX.into());
            let h = Hist(Repr::Dense(h));
            let text = h.to_base64();
            let back = Hist::from_base64(&text).expect("reads back");
            assert_eq!(is_frozen(&back), narrow, "round {round}: {back:?}");
            assert_eq!(figures(&back), figures(&h), "round {round}: {h:?}");
            assert_eq!(format!("{back:?}"), format!("{h:?}"));
            assert_eq!(back.to_base64(), text, "round {round}");
        }
        // Quantiles that land exactly on a bucket's last count, and a single sample.
        for (value, count) in [
            (1, 1),
            (1, 4),
            (2047, 2),
            (2048, 10),
            (MAX_MICROS, 3),
            (9, 1 << 31),
        ] {
            let mut h = dense();
            h.saturating_record_n(value, count);
            h.saturating_record_n(5000, count);
            let h = Hist(Repr::Dense(h));
            let back = Hist::from_base64(&h.to_base64()).expect("reads back");
            assert_eq!(figures(&back), figures(&h), "{value} x {count}");
        }
    }

    /// The bucket of 0, which only a histogram written elsewhere holds: hdrhistogram's min is
    /// then 0, and its p0 too.
    #[test]
    fn a_histogram_holding_zero_reads_back_alike() {
        let mut h = dense();
        h.saturating_record_n(0, 3);
        h.saturating_record_n(700, 5);
        h.saturating_record_n(90_000, 1);
        let h = Hist(Repr::Dense(h));
        let back = Hist::from_base64(&h.to_base64()).expect("reads back");
        assert!(is_frozen(&back));
        assert_eq!(figures(&back), figures(&h));
        assert_eq!((back.min(), back.percentile(0.0)), (0.0, 0.0));
    }

    /// What the deserializer would have read, bucket for bucket: a histogram of our bounds is
    /// read straight into frozen buckets, never into the dense counts.
    #[test]
    fn the_payload_reads_as_the_deserializer_reads_it() {
        let frozen = |h: &Hist| match &h.0 {
            Repr::Frozen { buckets, total } => (buckets.to_vec(), *total),
            _ => panic!("not frozen: {h:?}"),
        };
        let mut rng = Rng(3);
        let mut edges = dense();
        edges.saturating_record_n(0, 2);
        edges.saturating_record_n(1, 1);
        edges.saturating_record_n(2047, 1);
        edges.saturating_record_n(2048, 1);
        edges.saturating_record_n(MAX_MICROS, u32::MAX.into());
        let mut all = vec![edges, buckets(0..DENSE_COUNTS, 1)];
        all.extend((0..100).map(|i| random_dense(&mut rng, [1, 30, 700, 6000][i % 4], 1 << 12)));
        for h in all {
            let text = Hist(Repr::Dense(h.clone())).to_base64();
            let bytes = B64.decode(&text).expect("base64");
            let (header, payload) = V2Header::read(&bytes).expect("a V2 header");
            assert!(header.is_ours());
            let direct = read_frozen(&payload.read(header.payload).expect("payload"))
                .expect("read directly");
            let deserialized: Histogram<u64> = Deserializer::new()
                .deserialize(&mut &bytes[..])
                .expect("deserialize");
            assert_eq!(frozen(&direct), frozen(&freeze(deserialized)));
            assert_eq!(
                frozen(&Hist::from_base64(&text).expect("reads")),
                frozen(&direct)
            );
        }
        // A histogram of nothing reads as empty without a dense histogram.
        let bytes = B64.decode(Hist::new().to_base64()).expect("base64");
        let (header, payload) = V2Header::read(&bytes).expect("a V2 header");
        let empty = read_frozen(&payload.read(header.payload).expect("payload")).expect("reads");
        assert!(matches!(empty.0, Repr::Empty));
    }

    /// A payload the deserializer refuses is refused as it always was, by the deserializer.
    #[test]
    fn a_payload_past_the_counts_is_refused_as_before() {
        // A run of 30,000 empty counts (zigzag -30000, varint), then a count of 1.
        let body = [0xdf, 0xd4, 0x03, 0x02];
        let e = Hist::from_base64(&serialized(4, 3, 1, MAX_MICROS, &body)).expect_err("past");
        assert!(
            matches!(
                e,
                HistError::Undecodable(DeserializeError::EncodedArrayTooLong)
            ),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            "histogram does not decode: EncodedArrayTooLong"
        );
        // Cut short in a varint.
        let e =
            Hist::from_base64(&serialized(2, 3, 1, MAX_MICROS, &[0x80, 0x80])).expect_err("cut");
        assert!(matches!(e, HistError::Undecodable(_)), "{e}");
    }

    /// Sums of frozen and dense histograms, in every pairing, are the dense sums.
    #[test]
    fn frozen_histograms_add_exactly() {
        let mut rng = Rng(42);
        for round in 0..30 {
            let a = random_dense(&mut rng, [1, 50, 3000][round % 3], 7);
            let b = random_dense(&mut rng, [2, 400, 9000][round % 3], 1 << 20);
            let mut want = Hist(Repr::Dense(a.clone()));
            want.add(&Hist(Repr::Dense(b.clone())));
            let dense = |h: &Histogram<u64>| Hist(Repr::Dense(h.clone()));
            let frozen = |h: &Histogram<u64>| freeze(h.clone());
            for (x, y) in [
                (frozen(&a), frozen(&b)),
                (frozen(&a), dense(&b)),
                (dense(&a), frozen(&b)),
                (Hist::new(), frozen(&b)),
            ] {
                let mut sum = x.clone();
                if sum.is_empty() {
                    sum.add(&dense(&a));
                }
                sum.add(&y);
                assert_eq!(figures(&sum), figures(&want), "round {round}");
                assert_eq!(sum.to_base64(), want.to_base64(), "round {round}");
            }
        }
        // Buckets interleaved: the sum has them all.
        let (a, b) = (
            buckets((0..DENSE_COUNTS).step_by(2), 1),
            buckets((1..DENSE_COUNTS).step_by(2), 2),
        );
        let mut sum = freeze(a.clone());
        sum.add(&freeze(b.clone()));
        assert!(is_frozen(&sum));
        let mut want = Hist(Repr::Dense(a));
        want.add(&Hist(Repr::Dense(b)));
        assert_eq!(figures(&sum), figures(&want));
    }

    /// A count past 32 bits, read back or summed, keeps the histogram dense, and exact.
    #[test]
    fn counts_past_32_bits_stay_dense() {
        let mut h = dense();
        h.saturating_record_n(1500, 1 << 40);
        h.saturating_record_n(90, 3);
        let h = Hist(Repr::Dense(h));
        let back = Hist::from_base64(&h.to_base64()).expect("reads back");
        assert!(matches!(back.0, Repr::Dense(_)), "{back:?}");
        assert_eq!(figures(&back), figures(&h));
        let mut half = dense();
        half.saturating_record_n(1500, u64::from(u32::MAX));
        half.saturating_record_n(7, 1);
        let half = freeze(half);
        assert!(is_frozen(&half));
        let mut sum = half.clone();
        sum.add(&half);
        assert!(matches!(sum.0, Repr::Dense(_)), "{sum:?}");
        assert_eq!(sum.len(), 2 * (u64::from(u32::MAX) + 1));
        let mut want = Hist(Repr::Dense(thaw_of(&half)));
        want.add(&Hist(Repr::Dense(thaw_of(&half))));
        assert_eq!(figures(&sum), figures(&want));
    }

    fn thaw_of(h: &Hist) -> Histogram<u64> {
        match &h.0 {
            Repr::Frozen { buckets, .. } => thaw(buckets),
            _ => panic!("not frozen: {h:?}"),
        }
    }

    #[test]
    fn recording_into_a_read_back_histogram_keeps_its_counts() {
        let mut h = Hist::new();
        h.record(Duration::from_millis(3));
        let mut back = Hist::from_base64(&h.to_base64()).expect("reads back");
        assert!(is_frozen(&back));
        back.record(Duration::from_millis(5));
        assert!(matches!(back.0, Repr::Dense(_)));
        assert_eq!(back.len(), 2);
        assert_eq!(back.max(), 0.005_003);
    }

    /// An empty histogram, however made, holds no counts array, and answers 0 to everything.
    #[test]
    fn an_empty_histogram_allocates_nothing() {
        let written = Hist::new().to_base64();
        // What an empty histogram has always serialized to: hdrhistogram's empty encoding.
        let mut buf = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&dense(), &mut buf)
            .expect("serialize");
        assert_eq!(written, B64.encode(buf));
        let read: Hist = serde_json::from_str(&format!("{written:?}")).expect("reads");
        for h in [
            Hist::new(),
            Hist::default(),
            Hist::from_base64("").expect("empty"),
            Hist::from_base64(&written).expect("empty"),
            read,
        ] {
            assert!(matches!(h.0, Repr::Empty), "{h:?}");
            assert_eq!(figures(&h), figures(&Hist(Repr::Dense(dense()))));
        }
        let mut h = Hist::new();
        h.add(&Hist::new());
        assert!(matches!(h.0, Repr::Empty));
        // Nothing but the enum itself: a cell's seven empty histograms are a few hundred bytes.
        assert!(size_of::<Hist>() <= 160, "{}", size_of::<Hist>());
    }

    /// The lowest value of bucket `index` (hdrhistogram's `value_for`, 1,024 sub-buckets).
    fn bucket_value(index: usize) -> u64 {
        let (bucket, sub) = (index / 1024, (index % 1024) as u64);
        if bucket == 0 {
            sub
        } else {
            (1024 + sub) << (bucket - 1)
        }
    }

    /// A dense histogram counting `count` in each bucket of `indexes`.
    fn buckets(indexes: impl Iterator<Item = usize>, count: u64) -> Histogram<u64> {
        let mut h = dense();
        for v in indexes.map(bucket_value).filter(|&v| v <= MAX_MICROS) {
            h.saturating_record_n(v, count);
        }
        h
    }

    /// Even with every bucket counting, frozen buckets take less than the dense counts.
    #[test]
    fn a_histogram_of_every_value_reads_back_smaller() {
        let h = Hist(Repr::Dense(buckets(0..DENSE_COUNTS, 3)));
        let back = Hist::from_base64(&h.to_base64()).expect("reads back");
        assert!(is_frozen(&back));
        assert!(back.counts_bytes() < h.counts_bytes());
        assert_eq!(figures(&back), figures(&h));
    }

    #[test]
    fn the_constants_are_hdrhistograms() {
        assert_eq!(dense().distinct_values(), DENSE_COUNTS);
        // Every bucket counting as much as a total can hold: the payload stays in bounds.
        let h = buckets(0..DENSE_COUNTS, 1 << 49);
        // All but the top bucket's sub-buckets past 1 h.
        assert!(h.iter_recorded().count() > DENSE_COUNTS - 1024);
        let mut buf = Vec::new();
        hdrhistogram::serialization::V2Serializer::new()
            .serialize(&h, &mut buf)
            .expect("serialize");
        assert!(
            buf.len() <= V2_HEADER_BYTES + MAX_PAYLOAD_BYTES,
            "{}",
            buf.len()
        );
        assert_eq!(
            u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]),
            V2_COOKIE
        );
        let back = Hist::from_base64(&B64.encode(&buf)).expect("plain V2 reads too");
        assert_eq!(figures(&back), figures(&Hist(Repr::Dense(h))));
    }

    /// A V2 header, deflated as `to_base64` writes it, for a payload of `payload` bytes
    /// (none follow).
    fn header(payload: u32, digits: u32, low: u64, high: u64) -> String {
        serialized(payload, digits, low, high, &[])
    }

    /// A V2 histogram, deflated as `to_base64` writes it: a header saying `payload` bytes,
    /// then `body`.
    fn serialized(payload: u32, digits: u32, low: u64, high: u64, body: &[u8]) -> String {
        let mut inner = Vec::new();
        inner.extend(V2_COOKIE.to_be_bytes());
        inner.extend(payload.to_be_bytes());
        inner.extend(0u32.to_be_bytes());
        inner.extend(digits.to_be_bytes());
        inner.extend(low.to_be_bytes());
        inner.extend(high.to_be_bytes());
        inner.extend(1.0f64.to_be_bytes());
        inner.extend(body);
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut z, &inner).expect("deflate");
        let z = z.finish().expect("deflate");
        let mut out = Vec::new();
        out.extend(V2_COMPRESSED_COOKIE.to_be_bytes());
        out.extend(u32::try_from(z.len()).expect("short").to_be_bytes());
        out.extend(z);
        B64.encode(out)
    }

    /// A few bytes of base64 must not have the deserializer allocate gigabytes: a header
    /// claiming a 4 GiB payload, or a 49 MB counts array, is refused first.
    #[test]
    fn an_oversized_header_is_refused_before_it_is_read() {
        for (payload, digits, high) in [
            (u32::MAX, 3, MAX_MICROS),
            (100, 5, u64::MAX / 2),
            (100, 3, MAX_MICROS + 1),
        ] {
            let e = Hist::from_base64(&header(payload, digits, 1, high)).expect_err("refused");
            assert!(matches!(e, HistError::Oversized { .. }), "{e}");
            assert!(
                e.to_string()
                    .starts_with("histogram larger than wsload writes"),
                "{e}"
            );
        }
        // Within bounds, the header passes and the missing payload is the deserializer's to say.
        let e = Hist::from_base64(&header(100, 3, 1, MAX_MICROS)).expect_err("truncated");
        assert!(matches!(e, HistError::Undecodable(_)), "{e}");
        // A histogram of smaller bounds still reads, into ours.
        let mut small = Histogram::<u64>::new_with_bounds(1, 1_000_000, 2).expect("bounds");
        small.saturating_record_n(1234, 5);
        let mut buf = Vec::new();
        V2DeflateSerializer::new()
            .serialize(&small, &mut buf)
            .expect("serialize");
        let back = Hist::from_base64(&B64.encode(buf)).expect("smaller bounds read");
        assert_eq!(back.len(), 5);
        assert!((back.max() - 0.001234).abs() < 0.000_02, "{back:?}");
    }
}
