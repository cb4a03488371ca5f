//! Latency histograms: HdrHistogram in microseconds, 3 significant digits, 1 us to 1 h.
//!
//! One histogram is ~190 KB, so they are kept per worker thread (never per connection) and
//! merged at the end. They serialize (V2 + deflate, base64) into results so that shards merge
//! exactly, not by averaging percentiles.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hdrhistogram::serialization::{
    DeserializeError, Deserializer, Serializer as _, V2DeflateSerializer,
};
use hdrhistogram::{AdditionError, Histogram};
use serde::{Deserialize, Serialize, Serializer};
use std::time::Duration;

const MAX_MICROS: u64 = 3_600_000_000;

#[derive(Clone)]
pub struct Hist(Histogram<u64>);

impl std::fmt::Debug for Hist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Hist(n={}, p50={}us, max={}us)",
            self.0.len(),
            self.0.value_at_quantile(0.5),
            self.0.max()
        )
    }
}

impl Default for Hist {
    fn default() -> Self {
        Self::new()
    }
}

impl Hist {
    pub fn new() -> Self {
        // Bounds are constants that hdrhistogram accepts; failure is a programming error.
        Hist(Histogram::new_with_bounds(1, MAX_MICROS, 3).expect("valid histogram bounds"))
    }

    #[inline]
    pub fn record(&mut self, d: Duration) {
        let us = (d.as_micros() as u64).clamp(1, MAX_MICROS);
        // Saturating: values are clamped into range, so this cannot fail.
        self.0.saturating_record(us);
    }

    pub fn add(&mut self, other: &Hist) {
        // Same bounds on both sides: cannot fail.
        let _ = self.0.add(&other.0);
    }

    pub fn len(&self) -> u64 {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Percentile `p` (0..100) in seconds; 0 when empty.
    pub fn percentile(&self, p: f64) -> f64 {
        if self.0.is_empty() {
            0.0
        } else {
            self.0.value_at_percentile(p) as f64 / 1e6
        }
    }
    pub fn min(&self) -> f64 {
        if self.0.is_empty() {
            0.0
        } else {
            self.0.min() as f64 / 1e6
        }
    }
    pub fn max(&self) -> f64 {
        self.0.max() as f64 / 1e6
    }
    pub fn mean(&self) -> f64 {
        self.0.mean() / 1e6
    }

    pub fn to_base64(&self) -> String {
        let mut buf = Vec::new();
        // Serializing into a Vec only fails on internal bugs; an empty string then decodes as empty.
        if V2DeflateSerializer::new()
            .serialize(&self.0, &mut buf)
            .is_err()
        {
            return String::new();
        }
        B64.encode(buf)
    }

    pub fn from_base64(s: &str) -> Result<Hist, HistError> {
        if s.is_empty() {
            return Ok(Hist::new());
        }
        let bytes = B64.decode(s).map_err(HistError::NotBase64)?;
        let h: Histogram<u64> = Deserializer::new()
            .deserialize(&mut &bytes[..])
            .map_err(HistError::Undecodable)?;
        let mut out = Hist::new();
        out.0.add(&h).map_err(HistError::OutOfRange)?;
        Ok(out)
    }
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
}

impl Serialize for Hist {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_base64())
    }
}

impl<'de> Deserialize<'de> for Hist {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Hist::from_base64(&s).map_err(serde::de::Error::custom)
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
}
