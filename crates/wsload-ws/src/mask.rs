//! Masking (RFC 6455 5.3): every frame a client sends is XORed with a 4-byte key, a fresh
//! one per frame from a strong source of entropy.

use std::cell::RefCell;

/// Keys drawn from the thread's CSPRNG at once. Drawn one at a time (`rand::random::<[u8;
/// 4]>()`), a key took four 32-bit words (an array is sampled element by element) and the
/// generator's thread-local lookup each: 7% of the client's samples at 64 B echoes. One draw
/// of 64 keys (256 bytes, four ChaCha blocks) spends none of the words and one lookup.
const KEYS_PER_DRAW: usize = 64;

struct Keys {
    keys: [u32; KEYS_PER_DRAW],
    /// The next key not handed out; `KEYS_PER_DRAW` when a draw is due.
    next: usize,
}

thread_local! {
    static KEYS: RefCell<Keys> = const {
        RefCell::new(Keys {
            keys: [0; KEYS_PER_DRAW],
            next: KEYS_PER_DRAW,
        })
    };
}

/// A fresh masking key (RFC 6455 5.3: unpredictable, from the same thread-local CSPRNG
/// tungstenite draws from). Never handed out twice.
#[inline]
pub fn fresh_key() -> [u8; 4] {
    KEYS.with_borrow_mut(|k| {
        if k.next == KEYS_PER_DRAW {
            rand::fill(&mut k.keys[..]);
            k.next = 0;
        }
        let key = k.keys[k.next];
        k.next += 1;
        key.to_ne_bytes()
    })
}

/// XORs `buf` with the 4-byte `key` (RFC 6455 5.3), 8 bytes at a time: each client frame's
/// payload goes through this once, so it is most of the cost of sending large messages
/// (`benches/codec.rs` compares it with a byte loop).
pub fn mask(buf: &mut [u8], key: [u8; 4]) {
    let k = u64::from_ne_bytes([
        key[0], key[1], key[2], key[3], key[0], key[1], key[2], key[3],
    ]);
    let mut chunks = buf.chunks_exact_mut(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        c.copy_from_slice(&(u64::from_ne_bytes(w) ^ k).to_ne_bytes());
    }
    // The remainder starts at a multiple of 8, so the key restarts at its first byte.
    for (i, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b ^= key[i & 3];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masking_matches_the_bytewise_definition() {
        let key = [0x6d, 0xb6, 0xb2, 0x80];
        for len in 0..40 {
            let data: Vec<u8> = (0..len as u8).collect();
            let mut fast = data.clone();
            mask(&mut fast, key);
            let slow: Vec<u8> = data
                .iter()
                .enumerate()
                .map(|(i, b)| b ^ key[i % 4])
                .collect();
            assert_eq!(fast, slow, "{len}");
        }
    }

    #[test]
    fn fresh_keys_come_from_every_draw_and_repeat_by_chance_only() {
        // Three draws' worth: each key used once; 192 random 32-bit keys collide with
        // probability about 4e-6, and all zeros (an undrawn buffer) would collide at once.
        let keys: Vec<[u8; 4]> = (0..3 * KEYS_PER_DRAW).map(|_| fresh_key()).collect();
        let distinct: std::collections::HashSet<_> = keys.iter().collect();
        assert_eq!(distinct.len(), keys.len());
        // Another thread draws its own.
        let there = std::thread::spawn(|| (0..8).map(|_| fresh_key()).collect::<Vec<_>>())
            .join()
            .expect("thread");
        assert!(there.iter().all(|k| !keys.contains(k)));
    }
}
