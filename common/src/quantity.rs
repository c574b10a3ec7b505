//! Exact parsing of Kubernetes resource quantities (`100m`, `1.5`, `2Gi`, `1e3`, `500M`, `0.1`)
//! into integer millicores or bytes, rounding up as Kubernetes' `MilliValue()`/`Value()` do.
//!
//! Why hand-written: k8s-openapi's `Quantity` is an unparsed string, and the crates that parse
//! it go through floating point or pull a decimal library for what is a small exact grammar.
//! Here the number is kept as an integer mantissa with decimal and binary exponents, and the
//! conversion is exact integer arithmetic (u128) with a clear error on overflow.
use thiserror::Error;

/// Errors of the quantity module; each carries the text that failed.
#[derive(Debug, Error, PartialEq, Eq, Clone)]
pub enum QuantityError {
    /// The text is not a quantity.
    #[error("invalid quantity {input:?}: {reason}")]
    Invalid {
        /// The offending text.
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The quantity does not fit in a 64-bit integer of the requested unit.
    #[error("quantity {input:?} is out of range")]
    OutOfRange {
        /// The offending text.
        input: String,
    },
    /// The quantity is negative where only non-negative amounts make sense.
    #[error("quantity {input:?} is negative")]
    Negative {
        /// The offending text.
        input: String,
    },
}

/// A parsed quantity: `sign · mantissa · 10^exp10 · 2^exp2`, exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    negative: bool,
    mantissa: u128,
    exp10: i32,
    exp2: u32,
}

/// Maximum significant digits kept exactly (u128 holds 38).
const MAX_DIGITS: usize = 36;

impl Quantity {
    /// Parses the Kubernetes quantity grammar:
    /// `[+-] (digits [. digits] | . digits) [suffix]`, with suffix one of the binary SI
    /// (`Ki Mi Gi Ti Pi Ei`), decimal SI (`n u m k M G T P E`) or an exponent (`e3`, `E-2`).
    pub fn parse(input: &str) -> Result<Quantity, QuantityError> {
        let invalid = |reason| QuantityError::Invalid {
            input: crate::text::truncate(input, 64),
            reason,
        };
        let s = input.trim();
        if s.is_empty() {
            return Err(invalid("empty"));
        }
        let bytes = s.as_bytes();
        let mut i = 0;
        let mut negative = false;
        if bytes[0] == b'+' || bytes[0] == b'-' {
            negative = bytes[0] == b'-';
            i = 1;
        }
        let mut mantissa: u128 = 0;
        let mut digits = 0usize;
        let mut frac_digits = 0i32;
        let mut seen_digit = false;
        let mut seen_dot = false;
        while i < bytes.len() {
            let c = bytes[i];
            if c.is_ascii_digit() {
                seen_digit = true;
                if mantissa == 0 && c == b'0' {
                    // Leading zeros are not significant.
                } else {
                    digits += 1;
                    if digits > MAX_DIGITS {
                        return Err(invalid("too many significant digits"));
                    }
                    mantissa = mantissa * 10 + u128::from(c - b'0');
                }
                if seen_dot {
                    frac_digits += 1;
                }
            } else if c == b'.' && !seen_dot {
                seen_dot = true;
            } else {
                break;
            }
            i += 1;
        }
        if !seen_digit {
            return Err(invalid("no digits"));
        }
        let suffix = &s[i..];
        let (exp10, exp2) = match suffix {
            "" => (0, 0),
            "n" => (-9, 0),
            "u" => (-6, 0),
            "m" => (-3, 0),
            "k" => (3, 0),
            "M" => (6, 0),
            "G" => (9, 0),
            "T" => (12, 0),
            "P" => (15, 0),
            "E" => (18, 0),
            "Ki" => (0, 10),
            "Mi" => (0, 20),
            "Gi" => (0, 30),
            "Ti" => (0, 40),
            "Pi" => (0, 50),
            "Ei" => (0, 60),
            _ if suffix.starts_with(['e', 'E']) => {
                let exp = &suffix[1..];
                let ok = !exp.is_empty()
                    && exp
                        .trim_start_matches(['+', '-'])
                        .bytes()
                        .all(|b| b.is_ascii_digit())
                    && exp.len() - exp.trim_start_matches(['+', '-']).len() <= 1
                    && !exp.trim_start_matches(['+', '-']).is_empty();
                if !ok {
                    return Err(invalid("malformed exponent"));
                }
                let e: i32 = exp.parse().map_err(|_| invalid("exponent out of range"))?;
                if e.abs() > 1000 {
                    return Err(QuantityError::OutOfRange {
                        input: crate::text::truncate(input, 64),
                    });
                }
                (e, 0)
            }
            _ => return Err(invalid("unknown suffix")),
        };
        Ok(Quantity {
            negative: negative && mantissa != 0,
            mantissa,
            exp10: exp10 - frac_digits,
            exp2,
        })
    }

    /// True when the quantity is below zero.
    pub fn is_negative(&self) -> bool {
        self.negative
    }

    /// The value scaled by `10^scale10`, rounded up (towards +∞), as an i64.
    fn scaled_ceil(&self, scale10: i32, input: &str) -> Result<i64, QuantityError> {
        let range = || QuantityError::OutOfRange {
            input: crate::text::truncate(input, 64),
        };
        if self.mantissa == 0 {
            return Ok(0);
        }
        let e = self.exp10 + scale10;
        let mut num = self
            .mantissa
            .checked_mul(1u128.checked_shl(self.exp2).ok_or_else(range)?)
            .ok_or_else(range)?;
        let den: u128;
        if e >= 0 {
            let p = 10u128.checked_pow(e as u32).ok_or_else(range)?;
            num = num.checked_mul(p).ok_or_else(range)?;
            den = 1;
        } else {
            match 10u128.checked_pow((-e) as u32) {
                Some(p) => den = p,
                // 10^-e exceeds u128 and so exceeds num: 0 < |value| < 1.
                None => return Ok(if self.negative { 0 } else { 1 }),
            }
        }
        let (q, r) = (num / den, num % den);
        let value = if self.negative {
            // Towards +∞ for a negative value is truncation.
            -(i64::try_from(q).map_err(|_| range())?)
        } else {
            let q = if r > 0 { q + 1 } else { q };
            i64::try_from(q).map_err(|_| range())?
        };
        Ok(value)
    }
}

/// Parses a quantity into thousandths of its unit, rounding up (`"100m"` → 100, `"1.5"` → 1500).
/// This is the CPU convention: millicores.
pub fn parse_millis(input: &str) -> Result<i64, QuantityError> {
    Quantity::parse(input)?.scaled_ceil(3, input)
}

/// Parses a quantity into whole units, rounding up (`"2Gi"` → 2147483648, `"0.1"` → 1).
/// This is the memory/storage convention: bytes; and the count convention (GPUs, pods).
pub fn parse_units(input: &str) -> Result<i64, QuantityError> {
    Quantity::parse(input)?.scaled_ceil(0, input)
}

/// Like [`parse_millis`] but rejects negative quantities (requests and limits).
pub fn parse_nonneg_millis(input: &str) -> Result<i64, QuantityError> {
    let q = Quantity::parse(input)?;
    if q.is_negative() {
        return Err(QuantityError::Negative {
            input: crate::text::truncate(input, 64),
        });
    }
    q.scaled_ceil(3, input)
}

/// Like [`parse_units`] but rejects negative quantities (requests and limits).
pub fn parse_nonneg_units(input: &str) -> Result<i64, QuantityError> {
    let q = Quantity::parse(input)?;
    if q.is_negative() {
        return Err(QuantityError::Negative {
            input: crate::text::truncate(input, 64),
        });
    }
    q.scaled_ceil(0, input)
}

/// Formats millicores the way Kubernetes would print them (`1500` → `"1500m"`, `2000` → `"2"`).
pub fn format_millis(millis: i64) -> String {
    if millis % 1000 == 0 {
        (millis / 1000).to_string()
    } else {
        format!("{millis}m")
    }
}

/// Formats bytes with the largest exact binary suffix (`2147483648` → `"2Gi"`).
pub fn format_bytes(bytes: i64) -> String {
    const SUFFIXES: [(&str, u32); 6] = [
        ("Ei", 60),
        ("Pi", 50),
        ("Ti", 40),
        ("Gi", 30),
        ("Mi", 20),
        ("Ki", 10),
    ];
    if bytes != 0 {
        for (s, shift) in SUFFIXES {
            let unit = 1i64 << shift;
            if bytes % unit == 0 {
                return format!("{}{s}", bytes / unit);
            }
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn examples_from_the_kubernetes_docs() {
        assert_eq!(parse_millis("100m"), Ok(100));
        assert_eq!(parse_millis("1.5"), Ok(1500));
        assert_eq!(parse_millis("0.1"), Ok(100));
        assert_eq!(parse_millis("1e3"), Ok(1_000_000));
        assert_eq!(parse_units("2Gi"), Ok(2 * 1024 * 1024 * 1024));
        assert_eq!(parse_units("500M"), Ok(500_000_000));
        assert_eq!(parse_units("1E3"), Ok(1000));
        assert_eq!(parse_units("1E"), Ok(1_000_000_000_000_000_000));
        assert_eq!(parse_units("128974848"), Ok(128974848));
        assert_eq!(parse_units("129e6"), Ok(129_000_000));
        assert_eq!(parse_units("123Mi"), Ok(123 * 1024 * 1024));
        assert_eq!(parse_units(".5Ki"), Ok(512));
        assert_eq!(parse_units("+1k"), Ok(1000));
        assert_eq!(parse_millis("1n"), Ok(1), "rounds up like MilliValue");
        assert_eq!(parse_units("0.1"), Ok(1), "rounds up like Value");
        assert_eq!(parse_units("-1.5"), Ok(-1));
        assert_eq!(parse_millis("0"), Ok(0));
        assert_eq!(parse_millis("-0"), Ok(0));
        assert_eq!(parse_units("1e-3"), Ok(1));
    }

    #[test]
    fn malformed_inputs_say_why() {
        for bad in [
            "", "m", "1.2.3", "1x", "1Ki2", "1e", "1e+", "1e1.5", "--1", "1 m", "Gi", "1KI",
            "1e--2",
        ] {
            let err = parse_units(bad).expect_err(bad);
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
        assert!(matches!(
            parse_units("10Ei"),
            Err(QuantityError::OutOfRange { .. })
        ));
        assert!(matches!(
            parse_millis("1e100"),
            Err(QuantityError::OutOfRange { .. })
        ));
        assert!(matches!(
            parse_nonneg_units("-1"),
            Err(QuantityError::Negative { .. })
        ));
    }

    #[test]
    fn formatting_round_trips() {
        assert_eq!(format_millis(1500), "1500m");
        assert_eq!(format_millis(2000), "2");
        assert_eq!(format_bytes(2 << 30), "2Gi");
        assert_eq!(format_bytes(1000), "1000");
        assert_eq!(format_bytes(0), "0");
    }

    const DEC: [(&str, i32); 10] = [
        ("n", -9),
        ("u", -6),
        ("m", -3),
        ("", 0),
        ("k", 3),
        ("M", 6),
        ("G", 9),
        ("T", 12),
        ("P", 15),
        ("E", 18),
    ];
    const BIN: [(&str, u32); 6] = [
        ("Ki", 10),
        ("Mi", 20),
        ("Gi", 30),
        ("Ti", 40),
        ("Pi", 50),
        ("Ei", 60),
    ];

    proptest! {
        /// Never panics, whatever the input.
        #[test]
        fn never_panics(s in ".{0,40}") {
            let _ = parse_millis(&s);
            let _ = parse_units(&s);
        }

        /// Integer × decimal suffix is exact, and rounding is a ceiling.
        #[test]
        fn decimal_suffixes_exact(n in 0u64..1_000_000, k in 0usize..10) {
            let (suffix, e) = DEC[k];
            let text = format!("{n}{suffix}");
            let exact = n as i128 * 10i128.pow((e + 3).max(0) as u32);
            let expected = if e + 3 >= 0 { exact } else {
                let d = 10i128.pow((-(e + 3)) as u32);
                (n as i128 + d - 1) / d
            };
            match i64::try_from(expected) {
                Ok(v) => prop_assert_eq!(parse_millis(&text), Ok(v)),
                Err(_) => prop_assert!(parse_millis(&text).is_err()),
            }
        }

        /// Integer × binary suffix is exact.
        #[test]
        fn binary_suffixes_exact(n in 0u64..100_000, k in 0usize..6) {
            let (suffix, shift) = BIN[k];
            let expected = (n as i128) << shift;
            let text = format!("{n}{suffix}");
            match i64::try_from(expected) {
                Ok(v) => prop_assert_eq!(parse_units(&text), Ok(v)),
                Err(_) => prop_assert!(parse_units(&text).is_err()),
            }
        }

        /// A decimal fraction with three or fewer fraction digits is exact in millis.
        #[test]
        fn decimal_fractions_exact(whole in 0u32..100_000, frac in 0u32..1000) {
            let text = format!("{whole}.{frac:03}");
            prop_assert_eq!(parse_millis(&text), Ok(whole as i64 * 1000 + frac as i64));
            prop_assert_eq!(parse_millis(&format!("{text}e0")), Ok(whole as i64 * 1000 + frac as i64));
        }

        /// Formatting then parsing gives the same number.
        #[test]
        fn format_parse_round_trip(m in 0i64..i64::MAX / 2, b in 0i64..(1i64 << 50)) {
            prop_assert_eq!(parse_millis(&format_millis(m)), Ok(m));
            prop_assert_eq!(parse_units(&format_bytes(b)), Ok(b));
        }
    }
}
