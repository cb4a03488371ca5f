//! Unsigned decimal numbers read back from messages: a measured message's `${seq}` as its
//! answer carries it. Read once per answer, so the common lengths take no overflow checks,
//! and the functions are `#[inline]`: the load generator calls them from another crate.

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
}
