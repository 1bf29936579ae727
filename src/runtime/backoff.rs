//! Exponential backoff for transient failures: the `retry` policy ([`RetryPolicy`], a plain
//! value the config fills in and every retrying loop reads) and the pause it gives before each
//! retry, or a server's `Retry-After` capped by it. The loops that wait are `runtime::retry`
//! (transient faults) and `table::append::retry` (failed commits); the config re-exports the
//! policy as `config::RetryPolicy`.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::time::Duration;

use crate::error::Error;

/// `retry`: exponential backoff for transient failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The first delay. Default 1s; always > 0.
    pub initial: Duration,
    /// The cap. Default 60s; always >= `initial`.
    pub max: Duration,
    /// Whether delays are jittered. Default true.
    pub jitter: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(60),
            jitter: true,
        }
    }
}

impl RetryPolicy {
    /// The delay before retry number `attempt` (0 for the first retry).
    ///
    /// The base delay is `initial * 2^attempt`, capped at `max`. With `jitter`, the delay is
    /// drawn uniformly from `[base/2, base]` ("equal jitter"): registrars restarted together do
    /// not retry in lockstep, yet each still waits at least half the base delay, so a catalog
    /// that is down is not hammered the way full jitter (`[0, base]`) can. The randomness comes
    /// from std's randomly keyed `RandomState` (a fresh key per call), so no shared state is
    /// needed; it is not cryptographic and does not need to be.
    pub fn delay(&self, attempt: u32) -> Duration {
        let base = self.base(attempt);
        if !self.jitter {
            return base;
        }
        equal_jitter(base, RandomState::new().hash_one(attempt))
    }

    /// The delay before retry `attempt` without jitter: `initial * 2^attempt`, capped at `max`.
    fn base(&self, attempt: u32) -> Duration {
        // 2^31 already exceeds any sane max/initial ratio; past it, the cap applies.
        if attempt >= 31 {
            self.max
        } else {
            self.initial.saturating_mul(1u32 << attempt).min(self.max)
        }
    }
}

/// A delay in `[base/2, base]`, picked by `draw` (a uniform random number).
fn equal_jitter(base: Duration, draw: u64) -> Duration {
    let half = base / 2;
    let span = (base - half).as_nanos();
    let extra = u128::from(draw) % (span + 1);
    // Split into seconds and nanoseconds: a `max` of centuries overflows u64 nanoseconds.
    let secs = u64::try_from(extra / 1_000_000_000).unwrap_or(u64::MAX);
    let nanos = (extra % 1_000_000_000) as u32;
    half + Duration::new(secs, nanos)
}

/// The delay before retry `attempt` of `error`: its `Retry-After` (capped by `policy.max`) or the
/// backoff.
pub fn delay_for(policy: &RetryPolicy, attempt: u32, error: &Error) -> Duration {
    next_delay(policy.delay(attempt), error.retry_after(), policy.max)
}

/// The delay before the next attempt: the server's `Retry-After` when it sent one, capped by
/// the retry policy's `max` (a server asking for an hour must not park a table for an hour when
/// the operator allowed a minute), else the policy's backoff.
pub fn next_delay(backoff: Duration, retry_after: Option<Duration>, max: Duration) -> Duration {
    match retry_after {
        Some(after) => after.min(max),
        None => backoff,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_wins_over_the_backoff_but_not_over_the_cap() {
        let max = Duration::from_secs(60);
        let backoff = Duration::from_secs(4);
        assert_eq!(next_delay(backoff, None, max), backoff);
        assert_eq!(
            next_delay(backoff, Some(Duration::from_secs(1)), max),
            Duration::from_secs(1)
        );
        assert_eq!(
            next_delay(backoff, Some(Duration::from_secs(3600)), max),
            max
        );
        let policy = RetryPolicy {
            jitter: false,
            ..RetryPolicy::default()
        };
        let hinted = Error::unavailable("x").with_retry_hint("status_503", Some(max * 2));
        assert_eq!(delay_for(&policy, 0, &hinted), max);
        let plain = Error::unavailable("x").with_retry_hint("connect", None);
        assert_eq!(delay_for(&policy, 2, &plain), Duration::from_secs(4));
    }

    #[test]
    fn the_base_doubles_up_to_the_cap() {
        let fixed = RetryPolicy {
            initial: Duration::from_millis(250),
            max: Duration::from_secs(3),
            jitter: false,
        };
        let delays: Vec<u128> = (0..6).map(|a| fixed.delay(a).as_millis()).collect();
        assert_eq!(delays, [250, 500, 1000, 2000, 3000, 3000]);
        assert_eq!(fixed.delay(31), fixed.max);
        assert_eq!(fixed.delay(u32::MAX), fixed.max);
        // A cap of centuries does not overflow.
        let huge = RetryPolicy {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(u64::MAX / 4),
            jitter: true,
        };
        assert!(huge.delay(40) >= huge.max / 2);
    }

    #[test]
    fn equal_jitter_stays_within_half_and_all_of_the_base() {
        let base = Duration::from_secs(8);
        assert_eq!(equal_jitter(base, 0), Duration::from_secs(4));
        let span = u64::try_from((base - base / 2).as_nanos()).expect("fits");
        assert_eq!(equal_jitter(base, span), base);
        assert_eq!(equal_jitter(base, span + 1), base / 2);
        for draw in [1, 12_345, u64::MAX / 3, u64::MAX] {
            let d = equal_jitter(base, draw);
            assert!(d >= base / 2 && d <= base, "{draw}: {d:?}");
        }
        assert_eq!(equal_jitter(Duration::ZERO, u64::MAX), Duration::ZERO);
        let odd = Duration::new(0, 3);
        assert_eq!(equal_jitter(odd, 2), odd);
    }
}
