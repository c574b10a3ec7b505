//! Weighted mixes written `class=weight,…` (node classes, trace classes): one parser for
//! every mix flag, so they all accept and refuse the same things.

/// Parses `spec` into (class, weight) pairs, looking each name up in `classes` by
/// `name_of`. A missing weight means 1; weights must be finite and ≥ 0, and at least one
/// positive. The error is a sentence naming the offending part.
pub fn parse<T: Clone>(
    spec: &str,
    classes: &[T],
    name_of: impl Fn(&T) -> &str,
) -> Result<Vec<(T, f64)>, String> {
    let mut entries = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, weight) = part.split_once('=').unwrap_or((part, "1"));
        let class = classes
            .iter()
            .find(|c| name_of(c) == name.trim())
            .ok_or_else(|| {
                let known: Vec<&str> = classes.iter().map(&name_of).collect();
                format!("unknown class {name:?} (known: {})", known.join(", "))
            })?;
        let w: f64 = weight
            .trim()
            .parse()
            .map_err(|_| format!("weight {weight:?} is not a number"))?;
        if !(w.is_finite() && w >= 0.0) {
            return Err(format!("weight {w} must be ≥ 0"));
        }
        entries.push((class.clone(), w));
    }
    if entries.iter().all(|(_, w)| *w <= 0.0) {
        return Err("no class has a positive weight".into());
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLASSES: &[&str] = &["a", "b"];

    #[test]
    fn parses_and_refuses() {
        assert_eq!(
            parse("a=2, b", CLASSES, |c| c),
            Ok(vec![("a", 2.0), ("b", 1.0)])
        );
        assert_eq!(
            parse("c=1", CLASSES, |c| c),
            Err("unknown class \"c\" (known: a, b)".into())
        );
        assert_eq!(
            parse("a=x", CLASSES, |c| c),
            Err("weight \"x\" is not a number".into())
        );
        assert_eq!(
            parse("a=-1", CLASSES, |c| c),
            Err("weight -1 must be ≥ 0".into())
        );
        assert_eq!(
            parse("a=0", CLASSES, |c| c),
            Err("no class has a positive weight".into())
        );
    }
}
