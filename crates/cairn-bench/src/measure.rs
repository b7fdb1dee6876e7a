//! Timing helpers: medians and minima of repeated runs, and timing of a closure.

use std::time::Instant;

use anyhow::Result;

/// The median of `v` (the mean of the middle two for an even count; NaN if empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The smallest of `v` (NaN if empty): the best estimate of a CPU-bound
/// cost on a machine whose other tenants only ever add time.
pub fn best(v: Vec<f64>) -> f64 {
    v.into_iter().reduce(f64::min).unwrap_or(f64::NAN)
}

/// The `p` quantile (0 to 1) of `v`, nearest rank (NaN if empty).
pub fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((v.len() as f64) * p).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// Runs `f` and returns its result with the seconds it took. Whatever `f`
/// returns is dropped *after* the clock stops.
///
/// # Errors
///
/// Whatever `f` returns.
pub fn timed<T>(f: impl FnOnce() -> Result<T>) -> Result<(f64, T)> {
    let start = Instant::now();
    let out = f()?;
    Ok((start.elapsed().as_secs_f64(), out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(vec![]).is_nan());
    }

    #[test]
    fn percentile_is_the_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(v.clone(), 0.5), 50.0);
        assert_eq!(percentile(v.clone(), 0.99), 99.0);
        assert_eq!(percentile(v, 1.0), 100.0);
        assert!(percentile(vec![], 0.5).is_nan());
    }

    #[test]
    fn best_is_the_minimum() {
        assert_eq!(best(vec![3.0, 1.0, 2.0]), 1.0);
        assert!(best(vec![]).is_nan());
    }
}
