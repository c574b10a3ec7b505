//! Container images on nodes, for `ImageLocality`: each node's images as its kubelet lists
//! them in `status.images`, and how many nodes hold each image name — what kube-scheduler's
//! cache keeps as each node's `ImageStates` and their `NumNodes`.
use std::collections::HashMap;
use std::sync::Arc;

/// One node's images: every name the node lists for an image, with that image's size in
/// bytes, sorted by name, one entry per name (a name the node lists twice keeps its first
/// size). Cheap to clone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeImages(Arc<[(Arc<str>, i64)]>);

impl NodeImages {
    /// The images of `entries` (name, size in bytes), in any order, duplicates allowed.
    pub fn new(entries: impl IntoIterator<Item = (Arc<str>, i64)>) -> NodeImages {
        let mut v: Vec<(Arc<str>, i64)> = entries.into_iter().collect();
        // Stable: among equal names the first listed stays first and is the one kept.
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v.dedup_by(|later, first| later.0 == first.0);
        NodeImages(v.into())
    }

    /// The size of the image the node lists under `name`, if it lists it.
    pub fn size(&self, name: &str) -> Option<i64> {
        self.0
            .binary_search_by(|(n, _)| (**n).cmp(name))
            .ok()
            .map(|i| self.0[i].1)
    }

    /// Every (name, size), sorted by name.
    pub fn entries(&self) -> &[(Arc<str>, i64)] {
        &self.0
    }

    /// Whether `other` is this very list (not an equal copy): what snapshots compare to
    /// tell that a node's images did not change.
    pub fn same(&self, other: &NodeImages) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// No image listed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The same images with each name replaced by `f(name)` (an equal string: the store
    /// hands every node the one copy of a name it already holds).
    pub fn with_names(&self, mut f: impl FnMut(&Arc<str>) -> Arc<str>) -> NodeImages {
        NodeImages(self.0.iter().map(|(n, s)| (f(n), *s)).collect())
    }
}

/// How many nodes list each image name, and how many nodes there are: what
/// `ImageLocality` scales an image's size by (upstream's `NumNodes / totalNumNodes`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageSpread {
    nodes_with: HashMap<Arc<str>, u32>,
    nodes: u32,
}

impl ImageSpread {
    /// A spread of `nodes` nodes where each name is listed by the given number of them
    /// (entries with no node are left out).
    pub fn new(nodes: u32, nodes_with: impl IntoIterator<Item = (Arc<str>, u32)>) -> ImageSpread {
        ImageSpread {
            nodes_with: nodes_with.into_iter().filter(|(_, c)| *c > 0).collect(),
            nodes,
        }
    }

    /// The spread over these nodes' images.
    pub fn of<'a>(nodes: impl IntoIterator<Item = &'a NodeImages>) -> ImageSpread {
        let mut spread = ImageSpread::default();
        for images in nodes {
            spread.nodes += 1;
            for (name, _) in images.entries() {
                *spread.nodes_with.entry(name.clone()).or_default() += 1;
            }
        }
        spread
    }

    /// How many nodes list `name`.
    pub fn nodes_with(&self, name: &str) -> u32 {
        self.nodes_with.get(name).copied().unwrap_or(0)
    }

    /// How many nodes there are (with or without images).
    pub fn nodes(&self) -> u32 {
        self.nodes
    }

    /// Whether any node lists any image.
    pub fn is_empty(&self) -> bool {
        self.nodes_with.is_empty()
    }
}

/// Which nodes of one snapshot hold each image name, by the node's index in the snapshot,
/// with the image's size there: what `ImageLocality` reads, so that scoring a pod costs the
/// nodes that hold its images rather than a search of every node's list (a cache miss or
/// more per node). Built in one pass over the nodes' lists, once per snapshot whose nodes or
/// images changed ([`ClusterSnapshot::image_index`](crate::snapshot::ClusterSnapshot::image_index)).
#[derive(Debug, Default)]
pub struct ImageIndex {
    holders: HashMap<Arc<str>, Holders>,
}

/// The nodes holding one image: (snapshot index, size in bytes), by index.
type Holders = Vec<(u32, i64)>;

impl ImageIndex {
    /// The index of `nodes`' images (`None`: a node without Kubernetes facts).
    ///
    /// Names are grouped by the address of their `Arc` first: the store gives every node
    /// the one copy of a name it holds, so hashing an address replaces hashing a string
    /// per entry (hundreds of thousands at 5 000 nodes); groups of equal names under
    /// different copies are merged by name at the end.
    pub fn build<'a>(nodes: impl IntoIterator<Item = Option<&'a NodeImages>>) -> ImageIndex {
        let mut by_copy: HashMap<usize, (Arc<str>, Holders), AddressHash> = HashMap::default();
        for (i, images) in nodes.into_iter().enumerate() {
            let (Some(images), Ok(i)) = (images, u32::try_from(i)) else {
                continue;
            };
            for (name, size) in images.entries() {
                let address = Arc::as_ptr(name).cast::<u8>() as usize;
                by_copy
                    .entry(address)
                    .or_insert_with(|| (name.clone(), Vec::new()))
                    .1
                    .push((i, *size));
            }
        }
        let mut holders: HashMap<Arc<str>, Holders> = HashMap::new();
        for (name, nodes) in by_copy.into_values() {
            match holders.entry(name) {
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(nodes);
                }
                std::collections::hash_map::Entry::Occupied(mut e) => {
                    e.get_mut().extend(nodes);
                    e.get_mut().sort_unstable_by_key(|&(i, _)| i);
                }
            }
        }
        ImageIndex { holders }
    }

    /// The nodes (snapshot indices, ascending) that list `name`, with its size on each.
    pub fn holders(&self, name: &str) -> &[(u32, i64)] {
        self.holders.get(name).map_or(&[], Vec::as_slice)
    }
}

/// Hashes an address as itself, mixed (a multiply by an odd constant, as FxHash does):
/// `ImageIndex::build` hashes hundreds of thousands of them, where SipHash would cost more
/// than the rest of the build. Hand-written: a hasher of one multiply is not worth a crate.
#[derive(Debug, Default, Clone, Copy)]
struct AddressHash;

impl std::hash::BuildHasher for AddressHash {
    type Hasher = AddressHasher;
    fn build_hasher(&self) -> AddressHasher {
        AddressHasher(0)
    }
}

#[derive(Debug)]
struct AddressHasher(u64);

const MIX: u64 = 0x517c_c1b7_2722_0a95;

impl std::hash::Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(*b)).wrapping_mul(MIX);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64).wrapping_mul(MIX).rotate_left(26);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn images(entries: &[(&str, i64)]) -> NodeImages {
        NodeImages::new(entries.iter().map(|(n, s)| (Arc::from(*n), *s)))
    }

    #[test]
    fn a_name_listed_twice_keeps_its_first_size_and_lookups_find_every_name() {
        let i = images(&[("b:v1", 2), ("a:latest", 1), ("b:v1", 3), ("c", 4)]);
        assert_eq!(i.entries().len(), 3);
        assert_eq!(i.size("b:v1"), Some(2));
        assert_eq!(i.size("a:latest"), Some(1));
        assert_eq!(i.size("c"), Some(4));
        assert_eq!(i.size("a"), None);
        assert!(NodeImages::default().size("a").is_none());
    }

    #[test]
    fn spread_counts_nodes_per_name_and_every_node() {
        let spread = ImageSpread::of(&[
            images(&[("a", 1), ("b", 2)]),
            images(&[("a", 1)]),
            NodeImages::default(),
        ]);
        assert_eq!(spread.nodes(), 3);
        assert_eq!(spread.nodes_with("a"), 2);
        assert_eq!(spread.nodes_with("b"), 1);
        assert_eq!(spread.nodes_with("c"), 0);
        // Equal names under different copies (nodes built apart) still group together.
        let index = ImageIndex::build([
            Some(&images(&[("a", 1), ("b", 2)])),
            None,
            Some(&images(&[("a", 3)])),
        ]);
        assert_eq!(index.holders("a"), [(0, 1), (2, 3)]);
        assert_eq!(index.holders("b"), [(0, 2)]);
        assert!(index.holders("c").is_empty());
        let built = ImageSpread::new(
            3,
            [
                (Arc::from("a"), 2),
                (Arc::from("b"), 1),
                (Arc::from("z"), 0),
            ],
        );
        assert_eq!(built, spread);
    }
}
