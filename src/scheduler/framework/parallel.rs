//! Folding over the nodes of a snapshot on every worker thread, one accumulator per thread.
//!
//! Plugins that sum something per topology domain over the whole cluster fold nodes into maps.
//! rayon's adaptive `fold` starts a fresh accumulator for every piece it splits off, and each
//! piece's map is then grown and merged again; cutting the nodes into one slice per thread
//! keeps that to one map per thread and one merge each.

use rayon::prelude::*;

/// Folds `items` with `fold` into one accumulator per slice (about one slice per thread, at
/// least `MIN_SLICE` items each), in parallel; returns the accumulators in slice order.
pub fn fold_per_thread<T, A>(
    items: &[T],
    init: impl Fn() -> A + Sync + Send,
    fold: impl Fn(&mut A, &T) + Sync + Send,
) -> Vec<A>
where
    T: Sync,
    A: Send,
{
    const MIN_SLICE: usize = 256;
    let slice = items
        .len()
        .div_ceil(rayon::current_num_threads())
        .max(MIN_SLICE);
    items
        .par_chunks(slice)
        .map(|slice| {
            let mut acc = init();
            for item in slice {
                fold(&mut acc, item);
            }
            acc
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_is_folded_once() {
        let items: Vec<u64> = (1..=10_000).collect();
        let sums = fold_per_thread(&items, || 0u64, |acc, x| *acc += x);
        assert_eq!(sums.iter().sum::<u64>(), 10_000 * 10_001 / 2);
        assert!(fold_per_thread(&[] as &[u64], || 0u64, |acc, x| *acc += x).is_empty());
    }
}
