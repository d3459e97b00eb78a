//! The Bloom filter of a semi-join: built by the host from the join keys of one relation,
//! shipped to every disk scanning the other, probed there by `bloom_probe`.
//!
//! `k` probe positions come from double hashing of one stable 64-bit key hash
//! ([`crate::hash`]): `h1 + i·h2 (mod m)`. `k` is chosen from the expected key count to minimise
//! the false-positive rate, `k = round(m/n · ln 2)`, clamped to 1..=16.
use serde::{Deserialize, Serialize};

/// Upper bound on one filter's size (a declared limit); the disks also check it against their grant.
pub const MAX_BLOOM_BYTES: usize = 256 * 1024 * 1024;

/// A Bloom filter over 64-bit key hashes.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BloomFilter {
    /// Number of bits (a multiple of 64).
    pub bits: u64,
    /// Number of probes per key.
    pub hashes: u32,
    /// Keys inserted (for reporting).
    pub inserted: u64,
    /// The bit words (little-endian bit order within a word).
    #[serde(with = "words_b64")]
    pub words: Vec<u64>,
}

mod words_b64 {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(words: &[u64], s: S) -> Result<S::Ok, S::Error> {
        let mut bytes = Vec::with_capacity(words.len() * 8);
        for w in words {
            bytes.extend_from_slice(&w.to_le_bytes());
        }
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
        let text = String::deserialize(d)?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)?;
        if bytes.len() % 8 != 0 {
            return Err(serde::de::Error::custom("bloom words are not a multiple of 8 bytes"));
        }
        Ok(bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect())
    }
}

impl BloomFilter {
    /// A filter of `bytes` bytes (rounded up to 8) sized for about `expected_keys` keys.
    pub fn with_size(bytes: usize, expected_keys: u64) -> Self {
        let words = bytes.clamp(8, MAX_BLOOM_BYTES).div_ceil(8);
        let bits = (words as u64) * 64;
        let per_key = bits as f64 / expected_keys.max(1) as f64;
        let hashes = (per_key * std::f64::consts::LN_2).round().clamp(1.0, 16.0) as u32;
        BloomFilter { bits, hashes, inserted: 0, words: vec![0; words] }
    }

    /// Size of the bit array in bytes.
    pub fn size_bytes(&self) -> usize {
        self.words.len() * 8
    }

    /// Checks the internal consistency of a filter received over the wire.
    pub fn validate(&self) -> Result<(), String> {
        if self.words.is_empty() || self.bits != self.words.len() as u64 * 64 {
            return Err(format!("bloom filter has {} bits but {} words", self.bits, self.words.len()));
        }
        if self.hashes == 0 || self.hashes > 16 {
            return Err(format!("bloom filter has {} hashes (1..=16 allowed)", self.hashes));
        }
        Ok(())
    }

    #[inline]
    fn positions(&self, hash: u64) -> impl Iterator<Item = u64> + '_ {
        let h1 = hash;
        let h2 = crate::hash::mix64(hash ^ 0x5851_f42d_4c95_7f2d) | 1;
        (0..u64::from(self.hashes)).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) % self.bits)
    }

    /// Adds a key hash.
    pub fn insert(&mut self, hash: u64) {
        let positions: Vec<u64> = self.positions(hash).collect();
        for p in positions {
            self.words[(p / 64) as usize] |= 1 << (p % 64);
        }
        self.inserted += 1;
    }

    /// True if the key hash may have been inserted; false if it certainly was not.
    #[inline]
    pub fn may_contain(&self, hash: u64) -> bool {
        self.positions(hash).all(|p| self.words[(p / 64) as usize] & (1 << (p % 64)) != 0)
    }

    /// Expected false-positive rate for the keys inserted so far.
    pub fn expected_fpr(&self) -> f64 {
        let k = f64::from(self.hashes);
        (1.0 - (-k * self.inserted as f64 / self.bits as f64).exp()).powf(k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::hash_i128;

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        let mut f = BloomFilter::with_size(16 * 1024, 10_000);
        for k in 0..10_000 {
            f.insert(hash_i128(k));
        }
        assert!((0..10_000).all(|k| f.may_contain(hash_i128(k))));
        let fp = (1_000_000..1_100_000).filter(|k| f.may_contain(hash_i128(*k))).count();
        let rate = fp as f64 / 100_000.0;
        assert!(rate < 3.0 * f.expected_fpr() + 0.001, "fpr {rate} vs expected {}", f.expected_fpr());
        let json = serde_json::to_string(&f).unwrap();
        let back: BloomFilter = serde_json::from_str(&json).unwrap();
        assert_eq!(back, f);
    }
}
