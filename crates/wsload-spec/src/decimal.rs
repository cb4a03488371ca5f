//! Unsigned decimal numbers read back from messages: a measured message's `${seq}` as its
//! answer carries it, a delivery's sequence number and publish instant. Read once per
//! message, so the common case (digits only, at most 19) takes no overflow checks, and the
//! functions are `#[inline]`: the load generator calls them from another crate.
//!
//! A server writes a number as it likes: `42`, `42.0`, `4.2e1`, `"42"`. [`read`] takes every
//! JSON form (and a string holding one), exactly: the digits are kept as an integer and a
//! power of ten, never rounded through a float, so `1795864874129.112` milliseconds is
//! `1795864874129112` microseconds to the last digit.

/// `digits` as a `u64`: 1 to 20 ASCII digits (leading zeros allowed), nothing else, within
/// range; anything else is not one.
#[inline]
pub fn parse_u64(digits: &[u8]) -> Option<u64> {
    match digits.len() {
        // Up to 19 digits cannot overflow: only a 20-digit number pays for checked arithmetic.
        1..=19 => digits
            .iter()
            .try_fold(0u64, |n, &b| Some(n * 10 + digit(b)?)),
        20 => digits
            .iter()
            .try_fold(0u64, |n, &b| n.checked_mul(10)?.checked_add(digit(b)?)),
        _ => None,
    }
}

/// The value of an ASCII digit.
#[inline]
pub fn digit(b: u8) -> Option<u64> {
    let d = b.wrapping_sub(b'0');
    (d < 10).then_some(u64::from(d))
}

/// The number `text` starts with, when it starts with fewer than 20 digits: the value and
/// how many bytes it took; `None` when it does not start with a digit or has more (a caller
/// then reads the value as a whole with [`parse_u64`]).
#[inline]
pub fn leading_u64(text: &[u8]) -> Option<(u64, usize)> {
    let mut n = 0u64;
    for (i, &b) in text.iter().enumerate().take(19) {
        match digit(b) {
            Some(d) => n = n * 10 + d,
            None => return (i > 0).then_some((n, i)),
        }
    }
    // Nineteen digits and more may follow, or the text ended within them.
    let used = text.len().min(19);
    (used > 0 && text.get(19).is_none_or(|&b| digit(b).is_none())).then_some((n, used))
}

/// What a number read from a message must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted {
    /// A whole number (an id, a sequence number): `42`, `42.0`, `4.2e1`, `"42"`. A fraction
    /// (`4.5`) is not one: an id is never rounded into another message's.
    Whole,
    /// Any number, times ten to this power, its fraction dropped: an instant in microseconds
    /// from its unit's (`1795864874129.112` ms, times 10^3: `1795864874129112`).
    Scaled(i32),
}

impl Wanted {
    /// An integer as wanted; `None` past `u64`.
    #[inline]
    pub fn of_integer(self, n: u64) -> Option<u64> {
        match self {
            Wanted::Whole | Wanted::Scaled(0) => Some(n),
            Wanted::Scaled(e) if e > 0 => n.checked_mul(10u64.checked_pow(e.unsigned_abs())?),
            Wanted::Scaled(e) => Some(10u64.checked_pow(e.unsigned_abs()).map_or(0, |d| n / d)),
        }
    }
}

/// `text` as a number of the form `wanted`: a JSON number (`42`, `42.0`, `1.5e3`; leading
/// zeros allowed) or the text of a string holding one, not negative, within `u64` once
/// scaled. Anything else (`-1`, `NaN`, `4.5` where a whole number is wanted, `1e30`) is not
/// one.
#[inline]
pub fn read(text: &[u8], wanted: Wanted) -> Option<u64> {
    match parse_u64(text) {
        Some(n) => wanted.of_integer(n),
        None => Decimal::parse(text)?.to_u64(wanted),
    }
}

/// A number as written: `mantissa` x 10^`exp`, exactly (but for digits past what `u128`
/// holds, which can only matter to a number far beyond `u64`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Decimal {
    mantissa: u128,
    exp: i64,
    /// A digit other than 0 was past what the mantissa holds.
    inexact: bool,
}

/// The most significant digits a `u128` mantissa takes without overflow.
const MANTISSA_DIGITS: u32 = 38;
/// An exponent beyond this is past any `u64` either way; it stops growing here.
const MAX_EXP: i64 = 10_000;

impl Decimal {
    /// `int[.frac][(e|E)[+|-]digits]`, digits in each part.
    fn parse(text: &[u8]) -> Option<Decimal> {
        let mut d = Decimal {
            mantissa: 0,
            exp: 0,
            inexact: false,
        };
        let mut digits = 0u32;
        let mut i = 0;
        let mut take = |i: &mut usize, fraction: bool| {
            let from = *i;
            while let Some(v) = text.get(*i).copied().and_then(digit) {
                *i += 1;
                if d.mantissa == 0 && v == 0 {
                    // A leading zero: no digit of the mantissa, but a place of the fraction.
                    d.exp -= i64::from(fraction);
                } else if digits < MANTISSA_DIGITS {
                    d.mantissa = d.mantissa * 10 + u128::from(v);
                    digits += 1;
                    d.exp -= i64::from(fraction);
                } else {
                    d.exp += i64::from(!fraction);
                    d.inexact |= v != 0;
                }
            }
            *i > from
        };
        if !take(&mut i, false) {
            return None;
        }
        if text.get(i) == Some(&b'.') {
            i += 1;
            if !take(&mut i, true) {
                return None;
            }
        }
        if let Some(b'e' | b'E') = text.get(i) {
            i += 1;
            let negative = text.get(i) == Some(&b'-');
            if let Some(b'-' | b'+') = text.get(i) {
                i += 1;
            }
            let from = i;
            let mut e = 0i64;
            while let Some(v) = text.get(i).copied().and_then(digit) {
                e = (e * 10 + v as i64).min(MAX_EXP);
                i += 1;
            }
            if i == from {
                return None;
            }
            d.exp += if negative { -e } else { e };
        }
        (i == text.len()).then_some(d)
    }

    /// The number as `wanted`, if it is one.
    fn to_u64(self, wanted: Wanted) -> Option<u64> {
        let (exp, whole) = match wanted {
            Wanted::Whole => (self.exp, true),
            Wanted::Scaled(e) => (self.exp + i64::from(e), false),
        };
        if self.mantissa == 0 {
            return Some(0);
        }
        if whole && self.inexact {
            return None;
        }
        let n = if exp >= 0 {
            let scale = 10u128.checked_pow(u32::try_from(exp).ok()?)?;
            self.mantissa.checked_mul(scale)?
        } else {
            let Some(scale) = u32::try_from(-exp).ok().and_then(|k| 10u128.checked_pow(k)) else {
                // Below one, whatever the digits: no whole number, and nothing once scaled.
                return (!whole).then_some(0);
            };
            if whole && self.mantissa % scale != 0 {
                return None;
            }
            self.mantissa / scale
        };
        u64::try_from(n).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_digits_in_range_parse() {
        for not_digits in [&b""[..], b"/", b":", b"+1", b"-1", b" 1", b"1.0", b"12a"] {
            assert_eq!(parse_u64(not_digits), None, "{not_digits:?}");
        }
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"007"), Some(7));
        assert_eq!(
            parse_u64(b"9999999999999999999"),
            Some(9_999_999_999_999_999_999)
        );
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b"99999999999999999999"), None);
        assert_eq!(parse_u64(b"000000000000000000001"), None);
    }

    #[test]
    fn a_leading_number_is_read_up_to_what_follows_it() {
        assert_eq!(leading_u64(b"12,\"x\""), Some((12, 2)));
        assert_eq!(leading_u64(b"0}"), Some((0, 1)));
        assert_eq!(leading_u64(b"7"), Some((7, 1)));
        assert_eq!(leading_u64(b"12a"), Some((12, 2)));
        assert_eq!(leading_u64(b"\"12\""), None);
        assert_eq!(leading_u64(b""), None);
        assert_eq!(leading_u64(b"-1"), None);
        assert_eq!(
            leading_u64(b"9999999999999999999"),
            Some((9_999_999_999_999_999_999, 19))
        );
        assert_eq!(
            leading_u64(b"9999999999999999999]"),
            Some((9_999_999_999_999_999_999, 19))
        );
        // Twenty digits or more: left to parse_u64, which checks the range.
        assert_eq!(leading_u64(b"18446744073709551615"), None);
        assert_eq!(leading_u64(b"18446744073709551615,"), None);
    }

    #[test]
    fn whole_numbers_are_read_in_every_form_a_server_writes() {
        for (text, want) in [
            (&b"42"[..], Some(42)),
            (b"42.0", Some(42)),
            (b"42.000", Some(42)),
            (b"4.2e1", Some(42)),
            (b"4.2E+1", Some(42)),
            (b"420e-1", Some(42)),
            (b"0.42e2", Some(42)),
            (b"0042", Some(42)),
            (b"1795864874129112.0", Some(1_795_864_874_129_112)),
            (b"1.795864874129112e15", Some(1_795_864_874_129_112)),
            (b"18446744073709551615.0", Some(u64::MAX)),
            (b"1.8446744073709551615e19", Some(u64::MAX)),
            (b"000000000000000000001", Some(1)),
            (b"0", Some(0)),
            (b"0.0", Some(0)),
            (b"0e5", Some(0)),
            (b"1e0", Some(1)),
            // Not whole, not a number, negative, or too large: never rounded.
            (b"4.5", None),
            (b"42.0000000000000000000000000000000000000001", None),
            (b"1e-1", None),
            (b"-1", None),
            (b"-0.5", None),
            (b"18446744073709551616", None),
            (b"1.8446744073709551616e19", None),
            (b"1e20", None),
            (b"1e99999999999", None),
            (b"NaN", None),
            (b"Infinity", None),
            (b"", None),
            (b".5", None),
            (b"5.", None),
            (b"5e", None),
            (b"5e+", None),
            (b"1_000", None),
            (b" 42", None),
            (b"42 ", None),
            (b"0x2a", None),
            (b"null", None),
        ] {
            assert_eq!(
                read(text, Wanted::Whole),
                want,
                "{}",
                String::from_utf8_lossy(text)
            );
        }
    }

    #[test]
    fn instants_keep_what_their_unit_holds_below_one() {
        let ms = Wanted::Scaled(3);
        for (text, wanted, want) in [
            // Microseconds, as written.
            (
                &b"1795864874129112"[..],
                Wanted::Scaled(0),
                Some(1_795_864_874_129_112),
            ),
            (
                b"1795864874129112.0",
                Wanted::Scaled(0),
                Some(1_795_864_874_129_112),
            ),
            (
                b"1795864874129112.9",
                Wanted::Scaled(0),
                Some(1_795_864_874_129_112),
            ),
            (
                b"1.795864874129112e15",
                Wanted::Scaled(0),
                Some(1_795_864_874_129_112),
            ),
            // Milliseconds with their fraction: every digit kept, none rounded through a float.
            (b"1795864874129.112", ms, Some(1_795_864_874_129_112)),
            (b"1795864874129.5", ms, Some(1_795_864_874_129_500)),
            (b"1795864874129", ms, Some(1_795_864_874_129_000)),
            (b"1.795864874129112e12", ms, Some(1_795_864_874_129_112)),
            // Seconds, and nanoseconds (the fraction of a microsecond dropped).
            (
                b"1795864874.129112",
                Wanted::Scaled(6),
                Some(1_795_864_874_129_112),
            ),
            (
                b"1795864874",
                Wanted::Scaled(6),
                Some(1_795_864_874_000_000),
            ),
            (
                b"1795864874129112345",
                Wanted::Scaled(-3),
                Some(1_795_864_874_129_112),
            ),
            (
                b"1795864874129112345.9",
                Wanted::Scaled(-3),
                Some(1_795_864_874_129_112),
            ),
            (b"1e-30", ms, Some(0)),
            (b"-1", ms, None),
            (b"NaN", ms, None),
            (
                b"18446744073709551616",
                Wanted::Scaled(-3),
                Some(18_446_744_073_709_551),
            ),
            (b"18446744073709552", ms, None),
            (b"1e300", Wanted::Scaled(-3), None),
        ] {
            assert_eq!(
                read(text, wanted),
                want,
                "{} {wanted:?}",
                String::from_utf8_lossy(text)
            );
        }
        assert_eq!(Wanted::Scaled(6).of_integer(u64::MAX), None);
        assert_eq!(Wanted::Scaled(-30).of_integer(u64::MAX), Some(0));
    }
}
