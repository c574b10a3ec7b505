//! The one copy of each container image name the store's nodes share (upstream's
//! scheduler-cache `imageStates` keys): a name thousands of nodes list is held once, and
//! the snapshots' image indexes group names by that copy's address.
use std::collections::HashMap;
use std::sync::Arc;

use loadstar_framework::snapshot::KubeNode;

/// Image names → how many nodes list them (a name no node lists is dropped).
#[derive(Debug, Default)]
pub(crate) struct ImageBook {
    counts: HashMap<Arc<str>, u32>,
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
        if before.same(&after) || before == after {
            return;
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
        let count = |book: &ImageBook, name: &str| book.counts.get(name).copied();
        let (a, b) = (node(&["app:v1", "pause:3"]), node(&["pause:3"]));
        book.replace(None, Some(&a));
        book.replace(None, Some(&b));
        book.replace(None, Some(&KubeNode::default()));
        assert_eq!(
            (count(&book, "pause:3"), count(&book, "app:v1")),
            (Some(2), Some(1))
        );
        let a2 = node(&["app:v2", "pause:3"]);
        book.replace(Some(&a), Some(&a2));
        book.replace(Some(&a2), Some(&a2.clone()));
        assert_eq!(
            (count(&book, "app:v1"), count(&book, "app:v2")),
            (None, Some(1)),
            "names no node lists are dropped; an unchanged list counts once"
        );
        book.replace(Some(&b), None);
        assert_eq!(count(&book, "pause:3"), Some(1));
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
