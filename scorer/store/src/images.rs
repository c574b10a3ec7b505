//! The store's count of which nodes hold which container images (upstream's scheduler-cache
//! `imageStates`), kept as nodes' Kubernetes facts change so a snapshot carries the
//! cluster's [`ImageSpread`] without a pass over every node's images.
use std::collections::HashMap;
use std::sync::Arc;

use loadstar_framework::snapshot::{ImageSpread, KubeNode};

/// Image names → how many nodes list them, and how many nodes have Kubernetes facts.
#[derive(Debug, Default)]
pub(crate) struct ImageBook {
    counts: HashMap<Arc<str>, u32>,
    nodes: u32,
    /// The spread last handed out; `None` once a count changed since.
    published: Option<Arc<ImageSpread>>,
}

impl ImageBook {
    /// `kube` with each image name replaced by the copy the book already holds, so a name
    /// that thousands of nodes list (the pause image, a DaemonSet's) is stored once.
    pub(crate) fn intern(&self, kube: &mut KubeNode) {
        if kube.images.is_empty() {
            return;
        }
        kube.images = kube.images.with_names(|name| {
            self.counts
                .get_key_value(&**name)
                .map_or_else(|| name.clone(), |(held, _)| held.clone())
        });
    }

    /// A node's facts went from `old` to `new` (`None`: none).
    pub(crate) fn replace(&mut self, old: Option<&KubeNode>, new: Option<&KubeNode>) {
        let images = |k: Option<&KubeNode>| k.map(|k| k.images.clone()).unwrap_or_default();
        let (before, after) = (images(old), images(new));
        if old.is_some() == new.is_some() && before == after {
            return;
        }
        self.published = None;
        if old.is_some() {
            self.nodes = self.nodes.saturating_sub(1);
        }
        if new.is_some() {
            self.nodes += 1;
        }
        for (name, _) in before.entries() {
            if let Some(c) = self.counts.get_mut(&**name) {
                *c = c.saturating_sub(1);
                if *c == 0 {
                    self.counts.remove(&**name);
                }
            }
        }
        for (name, _) in after.entries() {
            *self.counts.entry(name.clone()).or_default() += 1;
        }
    }

    /// The current spread (rebuilt only after a change).
    pub(crate) fn spread(&mut self) -> Arc<ImageSpread> {
        self.published
            .get_or_insert_with(|| {
                Arc::new(ImageSpread::new(
                    self.nodes,
                    self.counts.iter().map(|(n, c)| (n.clone(), *c)),
                ))
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_framework::snapshot::NodeImages;

    fn node(names: &[&str]) -> KubeNode {
        KubeNode {
            images: NodeImages::new(names.iter().map(|n| (Arc::from(*n), 100))),
            ..KubeNode::default()
        }
    }

    #[test]
    fn counts_follow_nodes_added_changed_and_removed() {
        let mut book = ImageBook::default();
        let (a, b) = (node(&["app:v1", "pause:3"]), node(&["pause:3"]));
        book.replace(None, Some(&a));
        book.replace(None, Some(&b));
        book.replace(None, Some(&KubeNode::default()));
        let s = book.spread();
        assert_eq!(
            (s.nodes(), s.nodes_with("pause:3"), s.nodes_with("app:v1")),
            (3, 2, 1)
        );
        let a2 = node(&["app:v2", "pause:3"]);
        book.replace(Some(&a), Some(&a2));
        let s = book.spread();
        assert_eq!(
            (s.nodes(), s.nodes_with("app:v1"), s.nodes_with("app:v2")),
            (3, 0, 1)
        );
        book.replace(Some(&b), None);
        let s = book.spread();
        assert_eq!((s.nodes(), s.nodes_with("pause:3")), (2, 1));
        assert!(
            !book.counts.contains_key("app:v1"),
            "names no node lists are dropped"
        );
    }

    #[test]
    fn the_spread_is_shared_until_a_count_changes() {
        let mut book = ImageBook::default();
        let a = node(&["app:v1"]);
        book.replace(None, Some(&a));
        let first = book.spread();
        book.replace(Some(&a), Some(&a.clone()));
        assert!(
            Arc::ptr_eq(&first, &book.spread()),
            "same images: nothing rebuilt"
        );
        book.replace(Some(&a), None);
        assert_eq!(book.spread().nodes(), 0);
    }

    #[test]
    fn interned_names_are_the_books_copies() {
        let mut book = ImageBook::default();
        let a = node(&["pause:3"]);
        book.replace(None, Some(&a));
        let mut b = node(&["pause:3", "other"]);
        book.intern(&mut b);
        let held = &a.images.entries()[0].0;
        let given = &b.images.entries()[1].0;
        assert_eq!(&**given, "pause:3");
        assert!(Arc::ptr_eq(held, given));
    }
}
