//! `quantity` target: Kubernetes resource quantities (common/src/quantity.rs) and resource
//! lists built from them (`ResourceList::from_quantities`, common/src/model.rs).
//!
//! Input: one quantity per line; lines of the form `name=quantity` also make a resource list
//! (later duplicates replace earlier ones, as in the string maps of pod specs).
//!
//! Properties: the non-negative parsers agree with the signed ones and never return a
//! negative; millicores and bytes survive format → parse; a resource list survives
//! `to_quantities` → `from_quantities`; saturating list arithmetic does not panic.
use std::collections::BTreeMap;

use loadstar_common::model::ResourceList;
use loadstar_common::quantity::{
    Quantity, format_bytes, format_millis, parse_millis, parse_nonneg_millis, parse_nonneg_units,
    parse_units,
};

fn one(s: &str) {
    let q = Quantity::parse(s);
    let millis = parse_millis(s);
    let units = parse_units(s);
    if q.is_err() {
        assert!(millis.is_err() && units.is_err(), "{s:?}");
    }
    if let Ok(m) = millis {
        let f = format_millis(m);
        assert_eq!(parse_millis(&f), Ok(m), "{s:?} -> {m} -> {f:?}");
    }
    if let Ok(u) = units {
        let f = format_bytes(u);
        assert_eq!(parse_units(&f), Ok(u), "{s:?} -> {u} -> {f:?}");
    }
    if let Ok(m) = parse_nonneg_millis(s) {
        assert!(m >= 0);
        assert_eq!(Ok(m), millis, "{s:?}");
    }
    if let Ok(u) = parse_nonneg_units(s) {
        assert!(u >= 0);
        assert_eq!(Ok(u), units, "{s:?}");
    }
    if let (Ok(q), Ok(m)) = (&q, &millis) {
        // Rounding towards +inf can bring a tiny negative to 0, never across it.
        if q.is_negative() {
            assert!(*m <= 0, "{s:?} is negative but gives {m}");
        } else {
            assert!(*m >= 0, "{s:?} is not negative but gives {m}");
        }
    }
}

/// One input.
pub fn fuzz(data: &[u8]) {
    let text = crate::text(data);
    one(&text);
    let mut map = BTreeMap::new();
    for line in text.lines() {
        one(line);
        if let Some((k, v)) = line.split_once('=') {
            map.insert(k.to_string(), v.to_string());
        }
    }
    let Ok(list) = ResourceList::from_quantities(map.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    else {
        return;
    };
    let printed = list.to_quantities();
    let again =
        ResourceList::from_quantities(printed.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .unwrap_or_else(|e| panic!("{printed:?} does not parse back: {e}"));
    assert_eq!(again.to_quantities(), printed);
    let mut sum = list.clone();
    sum.add(&again);
    sum.sub(&list);
    sum.max_with(&list);
    for k in map.keys() {
        let _ = sum.get(k);
    }
}
