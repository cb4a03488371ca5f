//! Durations (`10s`) and percentages (`5%`) as they are written in a LoadTest, and the unit of
//! an instant a server writes in its messages (`publishedAtUnit: ms`).

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::time::{Duration, TryFromFloatSecsError};

/// A duration written as `500ms`, `10s`, `2m`, `1h` (or a bare number of seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Dur(pub Duration);

impl Dur {
    pub const fn secs(s: u64) -> Self {
        Dur(Duration::from_secs(s))
    }
    pub const fn millis(ms: u64) -> Self {
        Dur(Duration::from_millis(ms))
    }
    pub fn get(self) -> Duration {
        self.0
    }
    pub fn parse(s: &str) -> Result<Self, DurationError> {
        let s = s.trim();
        if let Ok(secs) = s.parse::<f64>() {
            return Duration::try_from_secs_f64(secs)
                .map(Dur)
                .map_err(|source| DurationError::Seconds {
                    text: s.to_string(),
                    source,
                });
        }
        humantime::parse_duration(s)
            .map(Dur)
            .map_err(|source| DurationError::NotADuration {
                text: s.to_string(),
                source,
            })
    }
}

/// Why a duration as written is none.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DurationError {
    /// A number of seconds written as text that no duration holds (negative, too large).
    #[error("{text:?}: {source}")]
    Seconds {
        text: String,
        #[source]
        source: TryFromFloatSecsError,
    },
    #[error("{text:?} is not a duration ({source}); write e.g. 500ms, 10s, 2m")]
    NotADuration {
        text: String,
        #[source]
        source: humantime::DurationError,
    },
    /// A number of seconds written as a YAML number that no duration holds; the number is
    /// the document's, so the message names none.
    #[error(transparent)]
    Number(TryFromFloatSecsError),
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        TextOrNumber::deserialize(d)?
            .parse(Dur::parse, |n| {
                Duration::try_from_secs_f64(n)
                    .map(Dur)
                    .map_err(DurationError::Number)
            })
            .map_err(serde::de::Error::custom)
    }
}

/// YAML users write `10s` or `10`, `5%` or `0.05`: both forms are accepted.
#[derive(Deserialize)]
#[serde(untagged)]
enum TextOrNumber {
    Text(String),
    Number(f64),
}

impl TextOrNumber {
    fn parse<T, E>(
        self,
        text: impl FnOnce(&str) -> Result<T, E>,
        number: impl FnOnce(f64) -> Result<T, E>,
    ) -> Result<T, E> {
        match self {
            TextOrNumber::Text(s) => text(&s),
            TextOrNumber::Number(n) => number(n),
        }
    }
}

/// A fraction written as `5%` or `0.05`; held as the fraction (0.05).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Percent(pub f64);

impl Percent {
    pub fn parse(s: &str) -> Result<Self, PercentError> {
        let s = s.trim();
        let (num, scale) = match s.strip_suffix('%') {
            Some(n) => (n.trim(), 100.0),
            None => (s, 1.0),
        };
        let v: f64 = num.parse().map_err(|_| PercentError::NotAPercentage {
            text: s.to_string(),
        })?;
        let v = v / scale;
        if !(0.0..=1.0).contains(&v) {
            return Err(PercentError::OutOfRange {
                text: s.to_string(),
            });
        }
        Ok(Percent(v))
    }
}

/// Why a percentage as written is none.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PercentError {
    #[error("{text:?} is not a percentage; write e.g. 5% or 0.05")]
    NotAPercentage { text: String },
    #[error("{text:?} is outside 0%..100%")]
    OutOfRange { text: String },
}

impl fmt::Display for Percent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}%", self.0 * 100.0)
    }
}

impl Serialize for Percent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Percent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        TextOrNumber::deserialize(d)?
            .parse(Percent::parse, |n| Percent::parse(&n.to_string()))
            .map_err(serde::de::Error::custom)
    }
}

/// The unit of a delivery's publish instant (since the Unix epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum TimeUnit {
    S,
    Ms,
    #[default]
    Us,
    Ns,
}

impl TimeUnit {
    /// The power of ten from this unit to microseconds: an instant read in it is read as
    /// `decimal::Wanted::Scaled` of this, so a fraction of a millisecond is kept.
    pub fn micros_exponent(self) -> i32 {
        match self {
            TimeUnit::S => 6,
            TimeUnit::Ms => 3,
            TimeUnit::Us => 0,
            TimeUnit::Ns => -3,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_percentages_round_trip() {
        assert_eq!(Dur::parse("250ms"), Ok(Dur::millis(250)));
        assert_eq!(Dur::parse("2"), Ok(Dur::secs(2)));
        assert!(
            Dur::parse("soon")
                .unwrap_err()
                .to_string()
                .contains("500ms")
        );
        let d: Dur = serde_json::from_str("\"1m 30s\"").expect("dur");
        assert_eq!(d, Dur::secs(90));
        assert_eq!(serde_json::to_string(&d).expect("ser"), "\"1m 30s\"");

        assert_eq!(Percent::parse("5%"), Ok(Percent(0.05)));
        assert_eq!(Percent::parse("0.1"), Ok(Percent(0.1)));
        assert_eq!(
            Percent::parse("150%").unwrap_err().to_string(),
            "\"150%\" is outside 0%..100%"
        );
        let p: Percent = serde_json::from_str("0.5").expect("number");
        assert_eq!(p, Percent(0.5));
    }
}
