//! A watched kind's objects by `namespace/name`, as its watch last listed and updated them:
//! a relist fills a fresh map beside the old one, which keeps serving until the list is
//! complete (kube-runtime's `Init`, `InitApply`, `InitDone`). Shared by the kinds whose
//! objects are converted on the way in (PodDisruptionBudgets, CSIStorageCapacities) and so
//! cannot live in a reflector store.
use std::collections::HashMap;

/// One watch event, its object already converted (`None`: unreadable, so left out of a
/// list and dropped on an update rather than kept stale).
#[derive(Debug, Clone, PartialEq)]
pub enum Listed<T> {
    /// A full list starts.
    Started,
    /// One object of the full list.
    One(String, Option<T>),
    /// The full list is complete: it replaces what was known.
    Done,
    /// An object was added or changed.
    Put(String, Option<T>),
    /// An object was deleted.
    Gone(String),
}

/// The objects, by `namespace/name`.
#[derive(Debug)]
pub struct Listing<T> {
    live: HashMap<String, T>,
    /// Filled during a relist, swapped in when it completes.
    relist: Option<HashMap<String, T>>,
}

impl<T> Default for Listing<T> {
    fn default() -> Self {
        Listing {
            live: HashMap::new(),
            relist: None,
        }
    }
}

impl<T> Listing<T> {
    /// Applies one event; returns the object an update or deletion replaced.
    pub fn apply(&mut self, ev: Listed<T>) -> Option<T> {
        match ev {
            Listed::Started => {
                self.relist = Some(HashMap::new());
                None
            }
            Listed::One(key, value) => {
                if let Some(v) = value {
                    self.relist.get_or_insert_with(HashMap::new).insert(key, v);
                }
                None
            }
            Listed::Done => {
                if let Some(fresh) = self.relist.take() {
                    self.live = fresh;
                }
                None
            }
            Listed::Put(key, Some(v)) => self.live.insert(key, v),
            Listed::Put(key, None) | Listed::Gone(key) => self.live.remove(&key),
        }
    }

    /// The objects as last listed and updated.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.live.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(l: &Listing<i32>) -> Vec<i32> {
        let mut v: Vec<i32> = l.values().copied().collect();
        v.sort();
        v
    }

    #[test]
    fn a_relist_serves_the_old_objects_until_it_completes_then_replaces_them() {
        let mut l = Listing::default();
        l.apply(Listed::Started);
        l.apply(Listed::One("a".into(), Some(1)));
        l.apply(Listed::One("b".into(), None));
        assert!(sorted(&l).is_empty(), "not complete yet");
        l.apply(Listed::Done);
        assert_eq!(sorted(&l), [1]);
        assert_eq!(l.apply(Listed::Put("a".into(), Some(2))), Some(1));
        assert_eq!(l.apply(Listed::Put("c".into(), Some(3))), None);
        // Unreadable now: dropped, not kept at its old value.
        assert_eq!(l.apply(Listed::Put("c".into(), None)), Some(3));
        l.apply(Listed::Started);
        l.apply(Listed::One("z".into(), Some(9)));
        assert_eq!(sorted(&l), [2]);
        l.apply(Listed::Done);
        assert_eq!(sorted(&l), [9]);
        assert_eq!(l.apply(Listed::Gone("z".into())), Some(9));
        assert!(sorted(&l).is_empty());
    }
}
