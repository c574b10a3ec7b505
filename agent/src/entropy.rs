//! Random numbers without a dependency: the per-process agent instance id and backoff jitter
//! need unpredictability, not cryptographic strength. `RandomState` keys SipHash with
//! OS-provided randomness; hashing a counter with it gives independent-looking 64-bit values.
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A random 64-bit value.
pub fn random_u64() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// A random value in [0, 1).
pub fn random_unit() -> f64 {
    (random_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// A random 128-bit identifier as 32 lower-case hex digits.
pub fn instance_id() -> String {
    format!("{:016x}{:016x}", random_u64(), random_u64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_differ_and_units_are_in_range() {
        let a = instance_id();
        assert_eq!(a.len(), 32);
        assert_ne!(a, instance_id());
        for _ in 0..1000 {
            let u = random_unit();
            assert!((0.0..1.0).contains(&u));
        }
    }
}
