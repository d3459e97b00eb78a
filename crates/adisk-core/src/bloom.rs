//! The Bloom filter of a semi-join: built by the host from the join keys of one relation,
//! shipped to every disk scanning the other, probed there by `bloom_probe`.
//!
//! The filter is *split-block* (Putze, Sanders and Singler's blocked Bloom filter, in the
//! layout Parquet uses): the bit array is cut into 256-bit blocks of eight 32-bit lanes. A key
//! hash picks one block from its high 32 bits and sets one bit in each of the block's eight
//! lanes, chosen by multiplying its low 32 bits with eight odd constants. A probe therefore
//! touches one cache line and needs no division, where a classic filter touches `k` random
//! lines; the price is a slightly higher false-positive rate at equal size, which the host
//! pays for by sizing filters generously (see [`BloomFilter::expected_fpr`]).
use arrow::buffer::BooleanBuffer;
use serde::{Deserialize, Serialize};

/// Upper bound on one filter's size (a declared limit); the disks also check it against their grant.
pub const MAX_BLOOM_BYTES: usize = 256 * 1024 * 1024;

/// 64-bit words per 256-bit block.
const BLOCK_WORDS: usize = 4;
/// Bits set per key: one in each 32-bit lane of its block.
pub const BITS_PER_KEY_SET: u32 = 8;
/// Odd multipliers choosing the bit in each lane.
const SALT: [u32; 8] = [
    0x47b6_137b,
    0x4497_4d91,
    0x8824_ad5b,
    0xa2b7_289d,
    0x7054_95c7,
    0x2df1_424b,
    0x9efc_4947,
    0x5c6b_fb31,
];

/// A split-block Bloom filter over 64-bit key hashes.
#[derive(Clone, Debug, Deserialize)]
pub struct BloomFilter {
    /// Number of bits (a multiple of 256).
    pub bits: u64,
    /// Bits set per key (always [`BITS_PER_KEY_SET`]; carried for reports and checked on receipt).
    pub hashes: u32,
    /// Keys inserted (for reporting).
    pub inserted: u64,
    /// The bit words, block after block (lane `2j` is the low half of word `j` of a block).
    /// Change them through [`BloomFilter::insert`] and [`BloomFilter::fold_to`]: the encoded
    /// form is kept between serializations.
    #[serde(with = "words_b64")]
    pub words: Vec<u64>,
    /// The words in base64, made at the first serialization and shared by clones: a filter
    /// shipped to every disk of a scan is encoded once, not once per disk's job spec (which
    /// cost a Bloom-filtered TPC-H query's host a quarter of its CPU; what is left is the
    /// JSON writer's pass over the string, once per disk). Reset by every change.
    #[serde(skip)]
    encoded: std::sync::Arc<std::sync::OnceLock<(usize, String)>>,
}

impl PartialEq for BloomFilter {
    fn eq(&self, other: &Self) -> bool {
        (self.bits, self.hashes, self.inserted, &self.words)
            == (other.bits, other.hashes, other.inserted, &other.words)
    }
}

impl Serialize for BloomFilter {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("BloomFilter", 4)?;
        st.serialize_field("bits", &self.bits)?;
        st.serialize_field("hashes", &self.hashes)?;
        st.serialize_field("inserted", &self.inserted)?;
        let (len, text) = self
            .encoded
            .get_or_init(|| (self.words.len(), words_b64::encode(&self.words)));
        if *len == self.words.len() {
            st.serialize_field("words", text)?;
        } else {
            // Words changed behind the methods' back: encode what is there now.
            st.serialize_field("words", &words_b64::encode(&self.words))?;
        }
        st.end()
    }
}

mod words_b64 {
    use base64::Engine;
    use serde::{Deserialize, Deserializer};

    /// The words' little-endian bytes in standard base64.
    pub fn encode(words: &[u64]) -> String {
        let mut bytes = Vec::with_capacity(words.len() * 8);
        for w in words {
            bytes.extend_from_slice(&w.to_le_bytes());
        }
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
        let text = String::deserialize(d)?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)?;
        if bytes.len() % 8 != 0 {
            return Err(serde::de::Error::custom(
                "bloom words are not a multiple of 8 bytes",
            ));
        }
        Ok(bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect())
    }
}

/// The four words of `hash`'s bits within its block.
#[inline]
fn block_mask(hash: u64) -> [u64; BLOCK_WORDS] {
    let x = hash as u32;
    let lane = |i: usize| 1u64 << (x.wrapping_mul(SALT[i]) >> 27);
    [
        lane(0) | lane(1) << 32,
        lane(2) | lane(3) << 32,
        lane(4) | lane(5) << 32,
        lane(6) | lane(7) << 32,
    ]
}

impl BloomFilter {
    /// A filter of `bytes` bytes (rounded up to a whole 32-byte block, at most
    /// [`MAX_BLOOM_BYTES`]). `_expected_keys` is kept for callers that size by key count.
    pub fn with_size(bytes: usize, _expected_keys: u64) -> Self {
        let blocks = bytes.clamp(32, MAX_BLOOM_BYTES).div_ceil(32);
        let words = blocks * BLOCK_WORDS;
        BloomFilter {
            bits: words as u64 * 64,
            hashes: BITS_PER_KEY_SET,
            inserted: 0,
            words: vec![0; words],
            encoded: Default::default(),
        }
    }

    /// Size of the bit array in bytes.
    pub fn size_bytes(&self) -> usize {
        self.words.len() * 8
    }

    fn blocks(&self) -> u64 {
        (self.words.len() / BLOCK_WORDS) as u64
    }

    /// Checks the internal consistency of a filter received over the wire.
    pub fn validate(&self) -> Result<(), String> {
        if self.words.is_empty()
            || self.words.len() % BLOCK_WORDS != 0
            || self.bits != self.words.len() as u64 * 64
        {
            return Err(format!(
                "bloom filter has {} bits in {} words (whole 256-bit blocks needed)",
                self.bits,
                self.words.len()
            ));
        }
        if self.hashes != BITS_PER_KEY_SET {
            return Err(format!(
                "bloom filter sets {} bits per key (split-block filters set {BITS_PER_KEY_SET})",
                self.hashes
            ));
        }
        Ok(())
    }

    /// First word of `hash`'s block.
    #[inline]
    fn block_start(&self, hash: u64) -> usize {
        (((hash >> 32) * self.blocks()) >> 32) as usize * BLOCK_WORDS
    }

    /// Adds a key hash.
    #[inline]
    pub fn insert(&mut self, hash: u64) {
        let start = self.block_start(hash);
        let mask = block_mask(hash);
        for (w, m) in self.words[start..start + BLOCK_WORDS].iter_mut().zip(mask) {
            *w |= m;
        }
        self.inserted += 1;
        self.changed();
    }

    /// Drops the encoded form after a change (clones made before keep theirs).
    fn changed(&mut self) {
        if self.encoded.get().is_some() {
            self.encoded = Default::default();
        }
    }

    /// True if the key hash may have been inserted; false if it certainly was not.
    #[inline]
    pub fn may_contain(&self, hash: u64) -> bool {
        let start = self.block_start(hash);
        let mask = block_mask(hash);
        let block = &self.words[start..start + BLOCK_WORDS];
        (block[0] & mask[0] == mask[0])
            & (block[1] & mask[1] == mask[1])
            & (block[2] & mask[2] == mask[2])
            & (block[3] & mask[3] == mask[3])
    }

    /// Probes many hashes at once: bit `i` of the result is `may_contain(hashes[i])`.
    pub fn probe(&self, hashes: &[u64]) -> BooleanBuffer {
        BooleanBuffer::collect_bool(hashes.len(), |i| self.may_contain(hashes[i]))
    }

    /// Halves the filter while it keeps at least `bits_per_key` bits per inserted key: blocks
    /// `2i` and `2i + 1` are OR-ed into block `i`. A key's block is the top bits of its hash's
    /// high half when the number of blocks is a power of two, so the result is exactly the
    /// filter that size would have been had it been built directly (a filter of another number
    /// of blocks is left as it is). Returns the halvings made.
    pub fn fold_to(&mut self, bits_per_key: u64) -> u32 {
        let mut folds = 0;
        loop {
            let blocks = self.blocks();
            let half_bits = (blocks / 2) * (BLOCK_WORDS as u64 * 64);
            if blocks < 2
                || !blocks.is_power_of_two()
                || half_bits < self.inserted.max(1).saturating_mul(bits_per_key)
            {
                return folds;
            }
            let half = (blocks / 2) as usize;
            let folded: Vec<u64> = (0..half * BLOCK_WORDS)
                .map(|i| {
                    let (block, word) = (i / BLOCK_WORDS, i % BLOCK_WORDS);
                    self.words[2 * block * BLOCK_WORDS + word]
                        | self.words[(2 * block + 1) * BLOCK_WORDS + word]
                })
                .collect();
            self.words = folded;
            self.bits = self.words.len() as u64 * 64;
            self.changed();
            folds += 1;
        }
    }

    /// Expected false-positive rate for the keys inserted so far: a probe's block holds a
    /// Poisson number `j` of keys (mean keys ÷ blocks), and each of the probe's eight lanes
    /// has its bit set with probability `1 − (31/32)^j`.
    pub fn expected_fpr(&self) -> f64 {
        let mean = self.inserted as f64 / self.blocks().max(1) as f64;
        let fpr_at = |j: f64| (1.0 - (31.0f64 / 32.0).powf(j)).powi(BITS_PER_KEY_SET as i32);
        if mean > 1000.0 {
            return fpr_at(mean);
        }
        let (mut p, mut total, mut j) = ((-mean).exp(), 0.0, 0.0);
        let last = mean + 12.0 * mean.sqrt() + 30.0;
        while j <= last {
            total += p * fpr_at(j);
            j += 1.0;
            p *= mean / j;
        }
        total.min(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::hash_i128;

    #[test]
    fn a_folded_filter_is_the_filter_built_at_that_size() {
        let keys: Vec<u64> = (0..3_000).map(hash_i128).collect();
        let mut big = BloomFilter::with_size(1 << 20, 0);
        keys.iter().for_each(|h| big.insert(*h));
        // 3 000 keys at ≥ 32 bits each: 96 000 bits, so 512 blocks (131 072 bits).
        assert_eq!(big.fold_to(32), 6);
        assert_eq!(big.size_bytes(), 16 * 1024);
        let mut direct = BloomFilter::with_size(16 * 1024, 0);
        keys.iter().for_each(|h| direct.insert(*h));
        assert_eq!(big, direct, "the same bits as built at that size");
        assert!(keys.iter().all(|h| big.may_contain(*h)));
        assert!(big.expected_fpr() < 0.002, "{}", big.expected_fpr());
        // Nothing inserted: down to one block. A size that is not a power of two of blocks:
        // left alone.
        let mut empty = BloomFilter::with_size(1 << 20, 0);
        empty.fold_to(32);
        assert_eq!(empty.size_bytes(), 32);
        assert!(!empty.may_contain(hash_i128(7)));
        let mut odd = BloomFilter::with_size(3 * 32, 0);
        assert_eq!(odd.fold_to(32), 0);
        // Full enough already: left alone.
        let mut full = BloomFilter::with_size(4 * 1024, 0);
        keys.iter().for_each(|h| full.insert(*h));
        assert_eq!(full.fold_to(32), 0);
        assert!(full.validate().is_ok() && big.validate().is_ok());
    }

    #[test]
    fn no_false_negatives_and_few_false_positives() {
        for bytes in [4 * 1024, 16 * 1024, 40 * 1024] {
            let mut f = BloomFilter::with_size(bytes, 10_000);
            for k in 0..10_000 {
                f.insert(hash_i128(k));
            }
            assert!((0..10_000).all(|k| f.may_contain(hash_i128(k))));
            let probes: Vec<u64> = (1_000_000..1_200_000).map(hash_i128).collect();
            let fp = f.probe(&probes).count_set_bits();
            let rate = fp as f64 / probes.len() as f64;
            let expected = f.expected_fpr();
            assert!(
                rate < 1.5 * expected + 0.0005 && rate > expected / 1.5 - 0.0005,
                "{bytes} bytes: fpr {rate} vs expected {expected}"
            );
        }
        // 32 bits per key, the host's sizing: well under 1 % false positives.
        let mut f = BloomFilter::with_size(40_000, 10_000);
        (0..10_000).for_each(|k| f.insert(hash_i128(k)));
        assert!(f.expected_fpr() < 0.002, "{}", f.expected_fpr());
    }

    #[test]
    fn wire_round_trip_and_validation() {
        let mut f = BloomFilter::with_size(100, 10);
        assert_eq!(f.size_bytes(), 128);
        f.insert(hash_i128(7));
        let json = serde_json::to_string(&f).unwrap();
        let back: BloomFilter = serde_json::from_str(&json).unwrap();
        assert_eq!(back, f);
        assert!(back.validate().is_ok());
        let mut bad = f.clone();
        bad.words.pop();
        assert!(bad.validate().is_err());
        let mut bad = f;
        bad.hashes = 3;
        assert!(bad.validate().is_err());
    }

    #[test]
    fn the_encoded_words_are_reused_until_the_filter_changes() {
        let mut f = BloomFilter::with_size(1024, 10);
        f.insert(hash_i128(1));
        let first = serde_json::to_string(&f).unwrap();
        let shipped = f.clone();
        assert_eq!(
            serde_json::to_string(&shipped).unwrap(),
            first,
            "a clone shares it"
        );
        // A change after serializing: the next serialization holds it.
        f.insert(hash_i128(2));
        let back: BloomFilter = serde_json::from_str(&serde_json::to_string(&f).unwrap()).unwrap();
        assert_eq!(back, f);
        assert!(back.may_contain(hash_i128(2)));
        // The clone made before keeps what it was.
        let old: BloomFilter =
            serde_json::from_str(&serde_json::to_string(&shipped).unwrap()).unwrap();
        assert_eq!(old, shipped);
        f.fold_to(8);
        let folded: BloomFilter =
            serde_json::from_str(&serde_json::to_string(&f).unwrap()).unwrap();
        assert_eq!(folded, f);
        assert!(folded.may_contain(hash_i128(1)) && folded.may_contain(hash_i128(2)));
    }
}
