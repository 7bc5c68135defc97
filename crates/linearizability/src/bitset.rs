//! A fixed-size set of small numbers, one bit each: the operations the search has linearized,
//! keys of its cache.

/// A set of numbers below the length it was made with.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub(crate) struct BitSet(Vec<u64>);

impl BitSet {
    pub(crate) fn new(len: usize) -> Self {
        Self(vec![0; len.div_ceil(64)])
    }

    pub(crate) fn insert(&mut self, n: usize) {
        self.0[n / 64] |= 1 << (n % 64);
    }

    pub(crate) fn remove(&mut self, n: usize) {
        self.0[n / 64] &= !(1 << (n % 64));
    }

    pub(crate) fn contains(&self, n: usize) -> bool {
        self.0[n / 64] & (1 << (n % 64)) != 0
    }

    /// Whether every member of `self` is a member of `other` (a set as long).
    pub(crate) fn is_subset(&self, other: &BitSet) -> bool {
        self.0.iter().zip(&other.0).all(|(mine, theirs)| mine & !theirs == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_with_the_same_members_are_equal() {
        let mut a = BitSet::new(130);
        let mut b = BitSet::new(130);
        a.insert(0);
        a.insert(129);
        a.insert(64);
        a.remove(64);
        b.insert(129);
        assert_ne!(a, b);
        assert!(!a.contains(64) && a.contains(129));
        b.insert(0);
        assert_eq!(a, b);
    }

    #[test]
    fn subsets() {
        let mut small = BitSet::new(100);
        let mut big = BitSet::new(100);
        assert!(small.is_subset(&big));
        big.insert(3);
        big.insert(70);
        small.insert(70);
        assert!(small.is_subset(&big) && !big.is_subset(&small));
        small.insert(71);
        assert!(!small.is_subset(&big));
    }
}
