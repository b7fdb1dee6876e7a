//! The retry policy for transient provider errors: exponential backoff
//! from `base_delay`, doubling per retry, capped at `max_delay`; a server's
//! `Retry-After` wins when given (capped at a minute).

use std::time::Duration;

use super::ProviderError;

/// How often and how patiently to retry transient errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (0: never retry).
    pub max_retries: u32,
    /// The wait before the first retry.
    pub base_delay: Duration,
    /// The longest wait between attempts.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    /// 4 retries: 1 s, 2 s, 4 s, 8 s.
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_retries: 4,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(8),
        }
    }
}

impl RetryPolicy {
    /// No retries.
    pub fn none() -> RetryPolicy {
        RetryPolicy {
            max_retries: 0,
            base_delay: Duration::ZERO,
            max_delay: Duration::ZERO,
        }
    }

    /// Whether retry number `retry` (0-based) may follow `error`.
    pub fn should_retry(&self, retry: u32, error: &ProviderError) -> bool {
        retry < self.max_retries && error.is_transient()
    }

    /// The wait before retry number `retry` (0-based) after `error`.
    pub fn delay(&self, retry: u32, error: &ProviderError) -> Duration {
        if let ProviderError::Http {
            retry_after: Some(d),
            ..
        } = error
        {
            return (*d).min(Duration::from_secs(60));
        }
        let factor = 1u32.checked_shl(retry.min(16)).unwrap_or(u32::MAX);
        self.base_delay.saturating_mul(factor).min(self.max_delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_and_retry_after_wins() {
        let p = RetryPolicy::default();
        let e = ProviderError::Connection("reset".into());
        let waits: Vec<u64> = (0..6).map(|r| p.delay(r, &e).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 8, 8]);
        let limited = ProviderError::Http {
            status: 429,
            message: "slow down".into(),
            retry_after: Some(Duration::from_secs(3)),
        };
        assert_eq!(p.delay(0, &limited), Duration::from_secs(3));
        assert!(p.should_retry(0, &limited));
        assert!(!p.should_retry(4, &limited));
        let bad = ProviderError::Http {
            status: 400,
            message: "bad".into(),
            retry_after: None,
        };
        assert!(!p.should_retry(0, &bad));
        assert!(!p.should_retry(0, &ProviderError::Malformed("x".into())));
    }
}
