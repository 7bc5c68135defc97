//! What each request of a run is: the workloads of the first prototype (`docs/sizing.md`:
//! `noop`, `select`, `update`, `insert`, `mix`), the key choice (uniform or zipfian over the loaded key space `0..records`)
//! and the fresh key indices inserts take. One seeded [`OpGen`] per connection, so a run is
//! reproducible from its seed apart from the interleaving of connections.

use std::{
    fmt,
    str::FromStr,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
};

use serde::Serialize;

/// A workload of the first prototype's (`docs/sizing.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// `GET /healthz`: no storage work, the yardstick.
    Noop,
    /// `GET /kv/{key}` of existing keys.
    Select,
    /// `PUT /kv/{key}` of existing keys.
    Update,
    /// `PUT /kv/{key}` of fresh keys.
    Insert,
    /// Inserts, updates and selects in the proportions of [`Mix`].
    Mix,
}

impl Workload {
    /// Every workload, in the order of the first prototype's results.
    pub const ALL: [Workload; 5] = [Self::Noop, Self::Select, Self::Update, Self::Insert, Self::Mix];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Noop => "noop",
            Self::Select => "select",
            Self::Update => "update",
            Self::Insert => "insert",
            Self::Mix => "mix",
        }
    }

    /// Whether the workload reads existing keys, so needs a loaded key space.
    pub fn reads_existing(self) -> bool {
        matches!(self, Self::Select | Self::Update | Self::Mix)
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Workload {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| format!("unknown workload `{s}` (noop, select, update, insert, mix)"))
    }
}

/// The proportions of `mix`, in percent; the rest are selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Mix {
    /// Percent of inserts.
    pub insert_pct: u8,
    /// Percent of updates.
    pub update_pct: u8,
}

impl Default for Mix {
    /// The first prototype's mix: 10% insert, 10% update, 80% select.
    fn default() -> Self {
        Self { insert_pct: 10, update_pct: 10 }
    }
}

/// How keys of existing records are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum KeyDist {
    /// Every key equally likely.
    Uniform,
    /// Zipfian with exponent `theta` (YCSB uses 0.99): a few keys take most requests.
    Zipfian {
        /// The exponent, 0 < theta < 1.
        theta: f64,
    },
}

/// One request to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `GET /healthz`.
    Noop,
    /// `GET /kv/{key i}`.
    Select(u64),
    /// `PUT /kv/{key i}` of an existing key.
    Update(u64),
    /// `PUT /kv/{key i}` of a fresh key.
    Insert(u64),
}

/// SplitMix64: tiny, fast and statistically fine for choosing keys.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0), without modulo bias worth mentioning (Lemire's multiply-shift).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Zipfian ranks over `0..n` (Gray et al., "Quickly generating billion-record synthetic
/// databases", as in YCSB), with rank r mapped to key index `r * mult mod n` so the hot keys are
/// not simply the first ones loaded (which sit together at the start of each partition's file).
#[derive(Debug, Clone)]
pub struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    mult: u64,
}

/// Above this many items, ζ(n) is completed with an integral instead of summed term by term.
const ZETA_EXACT_TERMS: u64 = 1_000_000;

fn zeta(n: u64, theta: f64) -> f64 {
    let exact = n.min(ZETA_EXACT_TERMS);
    let mut sum: f64 = (1..=exact).map(|i| (i as f64).powf(-theta)).sum();
    if n > exact {
        // ∫ x^-θ dx from exact+½ to n+½: the midpoint rule's error is negligible this far out.
        let f = |x: f64| x.powf(1.0 - theta) / (1.0 - theta);
        sum += f(n as f64 + 0.5) - f(exact as f64 + 0.5);
    }
    sum
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl Zipf {
    /// Zipfian over `0..n` (n > 0) with exponent `theta` in (0, 1).
    pub fn new(n: u64, theta: f64) -> Self {
        let zeta2 = zeta(2, theta);
        let zetan = zeta(n, theta);
        let alpha = 1.0 / (1.0 - theta);
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        // A multiplier coprime with n makes `r * mult mod n` a bijection of 0..n.
        let mut mult = 0x9e37_79b9_7f4a_7c15 % n.max(1);
        while n > 1 && gcd(mult, n) != 1 {
            mult += 1;
        }
        Self { n, theta, alpha, zetan, eta, mult: mult.max(1) }
    }

    /// The rank drawn: 0 is the most popular.
    pub fn rank(&self, rng: &mut Rng) -> u64 {
        let u = rng.unit();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.n - 1);
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n - 1)
    }

    /// The key index drawn.
    pub fn index(&self, rng: &mut Rng) -> u64 {
        ((u128::from(self.rank(rng)) * u128::from(self.mult)) % u128::from(self.n)) as u64
    }
}

/// The key chooser over the loaded key space.
#[derive(Debug, Clone)]
pub enum Keys {
    /// Uniform over `0..n`.
    Uniform(u64),
    /// Zipfian over `0..n` (shared: ζ(n) is computed once per run).
    Zipfian(Arc<Zipf>),
}

impl Keys {
    /// The chooser for `dist` over `0..records`.
    pub fn new(dist: KeyDist, records: u64) -> Self {
        match dist {
            KeyDist::Uniform => Self::Uniform(records),
            KeyDist::Zipfian { theta } => Self::Zipfian(Arc::new(Zipf::new(records.max(1), theta))),
        }
    }

    fn index(&self, rng: &mut Rng) -> u64 {
        match self {
            Self::Uniform(n) => rng.below(*n),
            Self::Zipfian(z) => z.index(rng),
        }
    }
}

/// The source of fresh key indices for inserts, shared by every connection of a run: each
/// index is handed out once, so no two connections insert the same key. It starts at the
/// server's record count (or above it, see the report's `insert_first_index`), so an earlier
/// run's inserts, which continued the same key space, are not reused.
#[derive(Debug)]
pub struct FreshKeys(AtomicU64);

impl FreshKeys {
    /// Hands out `first`, `first + 1`, ...
    pub fn starting_at(first: u64) -> Self {
        Self(AtomicU64::new(first))
    }

    /// The next fresh index.
    pub fn take(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }

    /// The index the next `take` would return.
    pub fn next(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The operation generator of one connection.
#[derive(Debug)]
pub struct OpGen {
    workload: Workload,
    mix: Mix,
    keys: Keys,
    fresh: Arc<FreshKeys>,
    rng: Rng,
}

/// The seed of connection `c`'s [`OpGen`] in a run of `workload` with `connections`, from the
/// key space's `seed`: a hash of all four, so that no two connections, nor two runs of an
/// invocation, draw the same keys. (SplitMix streams from seeds a multiple of its increment
/// apart are the same stream shifted: connection seeds such as `seed ^ c * increment` made
/// every second connection repeat another's keys.)
pub fn connection_seed(seed: u64, workload: Workload, connections: usize, c: usize) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(format!("{workload} {connections} {c}").as_bytes(), seed)
}

impl OpGen {
    /// A generator for `workload`; `seed` should differ per connection ([`connection_seed`]).
    pub fn new(workload: Workload, mix: Mix, keys: Keys, fresh: Arc<FreshKeys>, seed: u64) -> Self {
        Self { workload, mix, keys, fresh, rng: Rng::new(seed) }
    }

    /// The next operation.
    pub fn next_op(&mut self) -> Op {
        match self.workload {
            Workload::Noop => Op::Noop,
            Workload::Select => Op::Select(self.keys.index(&mut self.rng)),
            Workload::Update => Op::Update(self.keys.index(&mut self.rng)),
            Workload::Insert => Op::Insert(self.fresh.take()),
            Workload::Mix => {
                let roll = self.rng.below(100) as u8;
                if roll < self.mix.insert_pct {
                    Op::Insert(self.fresh.take())
                } else if roll < self.mix.insert_pct.saturating_add(self.mix.update_pct) {
                    Op::Update(self.keys.index(&mut self.rng))
                } else {
                    Op::Select(self.keys.index(&mut self.rng))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gen(workload: Workload, mix: Mix, keys: Keys, first_fresh: u64) -> OpGen {
        OpGen::new(workload, mix, keys, Arc::new(FreshKeys::starting_at(first_fresh)), 7)
    }

    #[test]
    fn the_mix_has_its_proportions() {
        let mut g = gen(Workload::Mix, Mix::default(), Keys::Uniform(1000), 1000);
        let (mut ins, mut upd, mut sel) = (0, 0, 0);
        for _ in 0..100_000 {
            match g.next_op() {
                Op::Insert(i) => {
                    assert!(i >= 1000);
                    ins += 1;
                }
                Op::Update(i) => {
                    assert!(i < 1000);
                    upd += 1;
                }
                Op::Select(i) => {
                    assert!(i < 1000);
                    sel += 1;
                }
                Op::Noop => panic!("no noop in a mix"),
            }
        }
        // 100,000 draws: each share within 1 point of its percentage.
        assert!((9_000..11_000).contains(&ins), "{ins}");
        assert!((9_000..11_000).contains(&upd), "{upd}");
        assert!((79_000..81_000).contains(&sel), "{sel}");

        let mut only_inserts = gen(Workload::Mix, Mix { insert_pct: 100, update_pct: 0 }, Keys::Uniform(10), 0);
        assert!((0..100).all(|_| matches!(only_inserts.next_op(), Op::Insert(_))));
        let mut only_selects = gen(Workload::Mix, Mix { insert_pct: 0, update_pct: 0 }, Keys::Uniform(10), 0);
        assert!((0..100).all(|_| matches!(only_selects.next_op(), Op::Select(_))));
    }

    #[test]
    fn connections_and_runs_draw_different_keys() {
        let keys = |workload, connections, c| {
            let seed = connection_seed(1, workload, connections, c);
            let fresh = Arc::new(FreshKeys::starting_at(0));
            let mut gen = OpGen::new(workload, Mix::default(), Keys::Uniform(20_000_000), fresh, seed);
            (0..1000).map(|_| gen.next_op()).collect::<Vec<_>>()
        };
        let drawn: Vec<Op> = (0..100).flat_map(|c| keys(Workload::Select, 100, c)).collect();
        let distinct = drawn.iter().collect::<std::collections::HashSet<_>>().len();
        // 100,000 uniform draws of 20 million repeat about 250 times by chance.
        assert!(distinct > 99_000, "{distinct} distinct keys of {}", drawn.len());
        assert_ne!(keys(Workload::Select, 100, 0), keys(Workload::Select, 64, 0), "another run, other keys");
    }

    #[test]
    fn inserts_are_fresh_across_connections() {
        let fresh = Arc::new(FreshKeys::starting_at(500));
        let mut a = OpGen::new(Workload::Insert, Mix::default(), Keys::Uniform(500), Arc::clone(&fresh), 1);
        let mut b = OpGen::new(Workload::Mix, Mix::default(), Keys::Uniform(500), Arc::clone(&fresh), 2);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            for op in [a.next_op(), b.next_op()] {
                if let Op::Insert(i) = op {
                    assert!(i >= 500, "an insert reused a loaded key");
                    assert!(seen.insert(i), "index {i} inserted twice");
                }
            }
        }
        // Contiguous: the next run, starting at the record count, reuses none of them.
        assert_eq!(fresh.next(), 500 + seen.len() as u64);
    }

    #[test]
    fn uniform_covers_the_key_space_evenly() {
        let keys = Keys::new(KeyDist::Uniform, 10);
        let mut rng = Rng::new(3);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[keys.index(&mut rng) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| (9_000..11_000).contains(&c)), "{counts:?}");
    }

    #[test]
    fn zipfian_is_skewed_and_stays_in_range() {
        let n = 10_000;
        let z = Zipf::new(n, 0.99);
        let mut rng = Rng::new(5);
        let mut ranks = vec![0u32; n as usize];
        let mut indices = std::collections::HashSet::new();
        for _ in 0..200_000 {
            ranks[z.rank(&mut rng) as usize] += 1;
            let i = z.index(&mut rng);
            assert!(i < n);
            indices.insert(i);
        }
        // Rank 0 has probability 1/ζ(n) ≈ 0.1 for n = 10^4, θ = 0.99; rank 1 about half that.
        let p0 = f64::from(ranks[0]) / 200_000.0;
        assert!((0.08..0.12).contains(&p0), "{p0}");
        assert!(ranks[1] < ranks[0] && ranks[1] > ranks[0] / 3);
        // The top 1% of ranks take well over a third of the draws; uniform would give them 1%.
        let top: u32 = ranks[..100].iter().sum();
        assert!(f64::from(top) / 200_000.0 > 0.4, "{top}");
        // Ranks map to spread-out indices, not 0, 1, 2, ...
        assert!(indices.len() > 1000);
        assert_ne!(z.index(&mut Rng::new(0)), 1);
    }

    #[test]
    fn zeta_tail_integral_is_close_to_the_sum() {
        let exact: f64 = (1..=3_000_000u64).map(|i| (i as f64).powf(-0.99)).sum();
        let approx = zeta(3_000_000, 0.99);
        assert!((exact - approx).abs() / exact < 1e-6, "{exact} {approx}");
    }

    #[test]
    fn workload_names_round_trip() {
        for w in Workload::ALL {
            assert_eq!(w.name().parse::<Workload>(), Ok(w));
        }
        assert!("delete".parse::<Workload>().is_err());
    }
}
