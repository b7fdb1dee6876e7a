//! The tests' one random generator: deterministic, seedable, no dependency.

/// SplitMix64: small, fast, and the same sequence everywhere for a seed, so
/// that a failing seed reproduces its run.
///
/// ```
/// use cairn::testkit::Rng;
///
/// let (mut a, mut b) = (Rng::new(7), Rng::new(7));
/// assert_eq!(a.next_u64(), b.next_u64());
/// assert!(a.below(10) < 10);
/// ```
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    /// A generator for the seed in the environment variable `var` (a
    /// decimal number) if it is set, else for a seed from the operating
    /// system; and the seed, for the test to print with its findings so
    /// that setting `var` repeats the run.
    pub fn from_env_or_os(var: &str) -> (Rng, u64) {
        let seed = std::env::var(var)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                let mut b = [0u8; 8];
                crate::id::fill_random(&mut b);
                u64::from_le_bytes(b)
            });
        (Rng::new(seed), seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    ///
    /// # Panics
    ///
    /// If `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "Rng::below(0): the range is empty");
        self.next_u64() % n
    }

    /// An index into a slice of length `n`.
    ///
    /// # Panics
    ///
    /// If `n` is 0.
    pub fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    /// True with probability `num / den`.
    ///
    /// # Panics
    ///
    /// If `den` is 0.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }

    /// A number in `lo..=hi`.
    ///
    /// # Panics
    ///
    /// If `hi < lo`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo <= hi, "Rng::range({lo}, {hi}): the range is empty");
        lo + self.below(hi - lo + 1)
    }

    /// A generator derived from this one's next value (for sub-streams).
    pub fn fork(&mut self) -> Rng {
        Rng::new(self.next_u64())
    }
}
