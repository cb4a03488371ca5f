//! Masking (RFC 6455 5.3): every frame a client sends is XORed with a 4-byte key.

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
}
