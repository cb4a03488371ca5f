//! Which of a connection's measured messages were answered, by the `${seq}` each answer
//! carries: the first answer to a message counts, a copy of it (a server that sends an echo
//! twice) is told apart and never counted as an answer. Sixteen bytes per connection, a few
//! instructions per answer, no allocation.

/// How many messages above the oldest unanswered one are remembered: far more than a window
/// of answers in flight. An answer further ahead gives up the oldest (see [`Answered::first`]).
const SPAN: u64 = u128::BITS as u64;

/// Every message at or below `floor` answered (or given up), and above it those whose bit
/// is set: bit `i` is message `floor + 1 + i`.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Answered {
    floor: u64,
    above: u128,
}

impl Answered {
    /// Notes an answer to message `seq` (counted from 1): `true` if it is the first, `false`
    /// for a copy of one counted before. An answer more than [`SPAN`] messages above the
    /// oldest unanswered one gives up those it leaves behind (their answers were lost, or
    /// come so late that they are counted as copies, never twice).
    #[inline]
    pub(super) fn first(&mut self, seq: u64) -> bool {
        // In turn with nothing answered ahead (nearly always): no 128-bit shift.
        if self.above == 0 && seq.checked_sub(1) == Some(self.floor) {
            self.floor = seq;
            return true;
        }
        if seq <= self.floor {
            return false;
        }
        let mut at = seq - self.floor - 1;
        if at >= SPAN {
            let give_up = at - (SPAN - 1);
            self.above = self.above.checked_shr(give_up as u32).unwrap_or(0);
            self.floor += give_up;
            at = SPAN - 1;
        }
        let bit = 1u128 << at;
        if self.above & bit != 0 {
            return false;
        }
        self.above |= bit;
        // In turn (nearly always): the floor moves up over every answered one at its bottom.
        let run = self.above.trailing_ones();
        self.floor += u64::from(run);
        self.above = self.above.checked_shr(run).unwrap_or(0);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_in_turn_count_once_and_copies_never() {
        let mut a = Answered::default();
        for seq in 1..=1000 {
            assert!(a.first(seq), "{seq}");
            assert!(!a.first(seq), "a copy of {seq}");
        }
        assert_eq!((a.floor, a.above), (1000, 0));
        // A copy of an old one.
        assert!(!a.first(3));
    }

    #[test]
    fn answers_out_of_turn_count_once_each() {
        let mut a = Answered::default();
        for seq in [2, 4, 3, 1, 6, 5] {
            assert!(a.first(seq), "{seq}");
        }
        assert_eq!(a.floor, 6);
        for seq in 1..=6 {
            assert!(!a.first(seq), "{seq} again");
        }
        // One lost (7): the others count, and copies of them do not.
        for seq in 8..=100 {
            assert!(a.first(seq));
        }
        assert_eq!(a.floor, 6);
        assert!(!a.first(50));
        assert!(a.first(7), "the late one, within the span");
        assert_eq!((a.floor, a.above), (100, 0));
    }

    #[test]
    fn an_answer_far_ahead_gives_up_the_oldest_and_still_tells_copies() {
        let mut a = Answered::default();
        assert!(a.first(2));
        // 1 never answered; 2..=500 answered: the span slides past it, giving it up.
        for seq in 3..=500 {
            assert!(a.first(seq), "{seq}");
        }
        assert_eq!((a.floor, a.above), (500, 0));
        assert!(!a.first(1), "given up: a late answer is not counted");
        assert!(!a.first(499), "a copy within the span");
        assert!(a.first(501));
        // Far ahead at once: all below it given up.
        assert!(a.first(10_000));
        assert!(!a.first(10_000));
        assert!(!a.first(600));
        assert!(a.first(9_999));
    }
}
