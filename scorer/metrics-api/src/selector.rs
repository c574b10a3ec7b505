//! Kubernetes label selectors in their string form (`app=web,tier!=db,env in (a,b),!canary`),
//! as `?labelSelector=` carries them and as a workload's scale subresource states them.
//! Hand-written: the grammar is small and no maintained crate parses it (kube-rs only renders
//! selectors to strings). Pure.
use std::collections::BTreeMap;

use thiserror::Error;

/// A selector that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid label selector {input:?}: {reason}")]
pub struct SelectorError {
    /// The selector as given (at most 200 characters of it).
    pub input: String,
    /// What is wrong.
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed selector; the empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector(Vec<Requirement>);

/// Splits at commas outside parentheses.
fn terms(s: &str) -> Result<Vec<&str>, String> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err("unbalanced ')'".into());
                }
            }
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".into());
    }
    out.push(&s[start..]);
    Ok(out)
}

fn key(k: &str) -> Result<String, String> {
    let k = k.trim();
    let ok = !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if ok {
        Ok(k.to_string())
    } else {
        Err(format!("{k:?} is not a label key"))
    }
}

fn value(v: &str) -> Result<String, String> {
    let v = v.trim();
    let ok = v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(v.to_string())
    } else {
        Err(format!("{v:?} is not a label value"))
    }
}

fn set(rest: &str) -> Result<Vec<String>, String> {
    let inner = rest
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesised set, got {:?}", rest.trim()))?;
    inner.split(',').map(value).collect()
}

fn requirement(term: &str) -> Result<Requirement, String> {
    let t = term.trim();
    if t.is_empty() {
        return Err("empty requirement".into());
    }
    if let Some(k) = t.strip_prefix('!') {
        return Ok(Requirement::DoesNotExist(key(k)?));
    }
    if let Some((k, v)) = t.split_once("!=") {
        return Ok(Requirement::NotEquals(key(k)?, value(v)?));
    }
    if let Some((k, v)) = t.split_once("==") {
        return Ok(Requirement::Equals(key(k)?, value(v)?));
    }
    if let Some((k, v)) = t.split_once('=') {
        return Ok(Requirement::Equals(key(k)?, value(v)?));
    }
    let mut words = t.splitn(2, char::is_whitespace);
    let k = words.next().unwrap_or_default();
    let rest = words.next().unwrap_or_default().trim_start();
    if let Some(r) = rest.strip_prefix("notin") {
        return Ok(Requirement::NotIn(key(k)?, set(r)?));
    }
    if let Some(r) = rest.strip_prefix("in") {
        return Ok(Requirement::In(key(k)?, set(r)?));
    }
    if rest.is_empty() {
        return Ok(Requirement::Exists(key(k)?));
    }
    Err(format!("cannot read {t:?}"))
}

impl Selector {
    /// Parses `input`; empty or blank matches everything.
    pub fn parse(input: &str) -> Result<Selector, SelectorError> {
        if input.trim().is_empty() {
            return Ok(Selector::default());
        }
        let fail = |reason: String| SelectorError {
            input: input.chars().take(200).collect(),
            reason,
        };
        let reqs = terms(input)
            .map_err(fail)?
            .into_iter()
            .map(requirement)
            .collect::<Result<Vec<_>, _>>()
            .map_err(fail)?;
        Ok(Selector(reqs))
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|x| vs.contains(x)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|x| !vs.contains(x)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn every_operator() {
        let l = labels(&[
            ("app", "web"),
            ("tier", "front"),
            ("app.kubernetes.io/name", "x"),
        ]);
        for (s, want) in [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app=db", false),
            ("app!=db", true),
            ("missing!=db", true),
            ("tier in (front, back)", true),
            ("tier in (back)", false),
            ("tier notin (back)", true),
            ("missing notin (back)", true),
            ("tier notin (front)", false),
            ("app", true),
            ("missing", false),
            ("!missing", true),
            ("!app", false),
            ("app=web,tier in (front),app.kubernetes.io/name=x", true),
            ("app=web,tier=back", false),
        ] {
            assert_eq!(Selector::parse(s).expect(s).matches(&l), want, "{s}");
        }
    }

    #[test]
    fn garbage_is_named() {
        for s in [
            "app=(",
            "tier in front",
            "a b c",
            "=web",
            "app=web,",
            "tier in (a",
            "x=a b",
        ] {
            let e = Selector::parse(s).expect_err(s);
            assert!(e.to_string().starts_with("invalid label selector"), "{e}");
        }
        let long = "x".repeat(10_000);
        let e = Selector::parse(&format!("{long} in nothing")).expect_err("long");
        assert!(e.input.len() <= 200);
    }
}
