//! Container images on nodes, for `ImageLocality`: each node's images as its kubelet lists
//! them in `status.images`, and an index of which nodes hold each image name — what
//! kube-scheduler's cache keeps as each node's `ImageStates` and their `NumNodes`.
use std::cmp::Ordering;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex, OnceLock};

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

    /// Whether `other` is this very list (not an equal copy): what an index compares to
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

/// One indexed node: its name, and its images (`None`: a node without Kubernetes facts,
/// which neither holds images nor counts among the nodes).
type Indexed = (Arc<str>, Option<NodeImages>);

/// A node as a snapshot shows it to [`ImageIndex`]: borrowed, so that comparing a
/// snapshot's nodes with an index's costs no reference count.
type NodeRef<'a> = (&'a Arc<str>, Option<&'a NodeImages>);

fn owned<'a>(nodes: impl IntoIterator<Item = NodeRef<'a>>) -> Vec<Indexed> {
    nodes
        .into_iter()
        .map(|(name, images)| (name.clone(), images.cloned()))
        .collect()
}

/// The nodes holding one image: (slot, size in bytes), by slot. A slot names a node for as
/// long as the index and those patched from it carry it; [`ImageIndex`] maps slots to the
/// snapshot's positions.
type Slots = Vec<(u32, i64)>;

/// [`Slots`] shared between an index and the one patched from it until the image's
/// holders change.
type Holders = Arc<Slots>;

/// Marks a slot no node holds (in [`ImageIndex::positions`]).
const FREE: u32 = u32::MAX;

/// Which nodes of one snapshot hold each image name, with the image's size there, and how
/// many nodes have Kubernetes facts: all that `ImageLocality` reads (an image's share of
/// nodes is `holder_count(name) / nodes()`), so scoring a pod costs the nodes that hold its
/// images rather than a search of every node's list (a cache miss or more per node).
///
/// Built in one pass over the nodes' lists ([`ImageIndex::build`]), or patched from an
/// earlier snapshot's index where few nodes changed ([`ImageIndex::after`]); it records the
/// nodes it indexes so that the patch needs nothing else.
///
/// Holder lists name nodes by *slot*, not by position: a node keeps its slot while it stays
/// (a build gives slot `i` to position `i`), so a node that joins or leaves touches only the
/// lists of its own images and the slot-to-position map (one `u32` per node), where lists
/// by position would all be rewritten (every later node moves): 2.6 ms for one join at
/// 5 000 nodes with 56 names each, each time on the next scheduling cycle.
#[derive(Debug)]
pub struct ImageIndex {
    holders: HashMap<Arc<str>, Holders>,
    /// What was indexed, in snapshot order.
    nodes: Vec<Indexed>,
    /// Position → slot.
    slots: Vec<u32>,
    /// Slot → position ([`FREE`]: no node has it).
    positions: Vec<u32>,
    /// Slots no node has, reused by the next nodes to join.
    free: Vec<u32>,
    /// `slots[i] == i` for every position.
    slots_are_positions: bool,
    /// Nodes with Kubernetes facts.
    with_facts: u32,
}

impl Default for ImageIndex {
    /// The index of no nodes.
    fn default() -> ImageIndex {
        ImageIndex::build_owned(Vec::new())
    }
}

impl ImageIndex {
    /// The index of `nodes`' images, in snapshot order (name, images; `None`: a node
    /// without Kubernetes facts).
    ///
    /// Names are grouped by the address of their `Arc` first: the store gives every node
    /// the one copy of a name it holds, so hashing an address replaces hashing a string
    /// per entry (hundreds of thousands at 5 000 nodes); groups of equal names under
    /// different copies are merged by name at the end.
    pub fn build<'a>(
        nodes: impl IntoIterator<Item = (&'a Arc<str>, Option<&'a NodeImages>)>,
    ) -> ImageIndex {
        Self::build_owned(owned(nodes))
    }

    fn build_owned(nodes: Vec<Indexed>) -> ImageIndex {
        let mut by_copy: HashMap<usize, (Arc<str>, Slots), AddressHash> = HashMap::default();
        for (i, (_, images)) in nodes.iter().enumerate() {
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
        let mut holders: HashMap<Arc<str>, Slots> = HashMap::new();
        for (name, list) in by_copy.into_values() {
            match holders.entry(name) {
                Entry::Vacant(e) => {
                    e.insert(list);
                }
                Entry::Occupied(mut e) => {
                    e.get_mut().extend(list);
                    e.get_mut().sort_unstable_by_key(|&(i, _)| i);
                }
            }
        }
        let identity: Vec<u32> = (0..u32::try_from(nodes.len()).unwrap_or(u32::MAX)).collect();
        ImageIndex {
            holders: holders.into_iter().map(|(n, l)| (n, Arc::new(l))).collect(),
            with_facts: facts(&nodes),
            slots: identity.clone(),
            positions: identity,
            free: Vec::new(),
            slots_are_positions: true,
            nodes,
        }
    }

    /// The index of `nodes` (as for [`ImageIndex::build`]) made from `previous`, an earlier
    /// snapshot's: `previous` itself where no node came, went or changed its images (the
    /// store keeps an equal list as the same allocation, so a pointer compare tells);
    /// patched where few did — the holders of the images those nodes dropped, gained or
    /// came or went with, and the map of slots to positions; built anew otherwise.
    ///
    /// The walk over both node lists compares names by pointer first (the store hands
    /// every snapshot the same name), so an unchanged cluster costs a pass of pointer
    /// compares: no hashing, no string compare.
    pub fn after<'a>(
        previous: &Arc<ImageIndex>,
        nodes: impl IntoIterator<Item = (&'a Arc<str>, Option<&'a NodeImages>)>,
    ) -> Arc<ImageIndex> {
        let nodes: Vec<NodeRef<'a>> = nodes.into_iter().collect();
        // Past a quarter of the nodes, a build (one pass) beats patching node by node.
        let limit = nodes.len() / 4 + 1;
        Self::patched(previous, &nodes, limit)
    }

    /// [`ImageIndex::after`], patching only where at most `limit` nodes came, went or
    /// changed their images.
    fn patched(previous: &Arc<ImageIndex>, nodes: &[NodeRef<'_>], limit: usize) -> Arc<ImageIndex> {
        let walk = Walk::of(previous, nodes);
        if walk.is_empty() && walk.moved.is_none() {
            return previous.clone();
        }
        // A build where patching could not name every node by a `u32` slot (never at any
        // real cluster's size, but no input may panic the index).
        if walk.touched() > limit
            || nodes.len() >= FREE as usize
            || previous.slots.len() != previous.nodes.len()
        {
            return Arc::new(Self::build_owned(owned(nodes.iter().copied())));
        }
        let mut holders = previous.holders.clone();
        let none = NodeImages::default();
        let (slots, positions, free) = match &walk.moved {
            None => (
                previous.slots.clone(),
                previous.positions.clone(),
                previous.free.clone(),
            ),
            Some(moved) => {
                // Nodes came or went: the nodes that stay keep their slots at their new
                // positions; the slots of the nodes that went are freed (their entries
                // leave their images' lists first, so a node joining now may take one).
                let mut free = previous.free.clone();
                let mut slots = vec![FREE; nodes.len()];
                for (old, to) in moved.iter().enumerate() {
                    let Some(&slot) = previous.slots.get(old) else {
                        continue;
                    };
                    match to.and_then(|new| slots.get_mut(new)) {
                        Some(at) => *at = slot,
                        None => {
                            let images = previous.nodes.get(old).and_then(|n| n.1.as_ref());
                            patch_holders(
                                &mut holders,
                                slot,
                                images.unwrap_or(&none).entries(),
                                &[],
                            );
                            free.push(slot);
                        }
                    }
                }
                // The smallest free slot first (popped from the end of a descending
                // list): nodes that leave the end of the name order and others that join
                // there leave slots as positions.
                free.sort_unstable_by(|x, y| y.cmp(x));
                let mut count = previous.positions.len();
                for &new in &walk.added {
                    let slot = free.pop().unwrap_or_else(|| {
                        count += 1;
                        u32::try_from(count - 1).unwrap_or(FREE)
                    });
                    if let Some(at) = slots.get_mut(new) {
                        *at = slot;
                    }
                }
                // Free slots above every slot in use are dropped: the map is never longer
                // than the most nodes indexed at once since the last build.
                let count = slots.iter().map(|&s| s as usize + 1).max().unwrap_or(0);
                free.retain(|&s| (s as usize) < count);
                let mut positions = vec![FREE; count];
                for (position, &slot) in slots.iter().enumerate() {
                    if let Some(p) = positions.get_mut(slot as usize) {
                        *p = u32::try_from(position).unwrap_or(FREE);
                    }
                }
                (slots, positions, free)
            }
        };
        let changes = walk
            .changed
            .iter()
            .map(|&(old, new)| (previous.nodes[old].1.as_ref(), new))
            .chain(walk.added.iter().map(|&new| (None, new)));
        for (old, new) in changes {
            let before = old.unwrap_or(&none).entries();
            let after = nodes[new].1.unwrap_or(&none).entries();
            if let Some(&slot) = slots.get(new) {
                patch_holders(&mut holders, slot, before, after);
            }
        }
        holders.retain(|_, list| !list.is_empty());
        let nodes = owned(nodes.iter().copied());
        let slots_are_positions = match walk.moved {
            None => previous.slots_are_positions,
            Some(_) => slots.iter().enumerate().all(|(i, &s)| s as usize == i),
        };
        Arc::new(ImageIndex {
            holders,
            with_facts: facts(&nodes),
            nodes,
            slots,
            positions,
            free,
            slots_are_positions,
        })
    }

    /// The nodes (snapshot positions) that list `name`, with its size on each: in no
    /// particular order (by slot; ascending positions in an index built afresh).
    pub fn holders(&self, name: &str) -> impl ExactSizeIterator<Item = (u32, i64)> + '_ {
        self.holders
            .get(name)
            .map_or(&[][..], |l| l.as_slice())
            .iter()
            .map(|&(slot, size)| {
                // Every listed slot has a position (a freed slot leaves its lists first).
                let position = self.positions.get(slot as usize).copied().unwrap_or(FREE);
                (position, size)
            })
    }

    /// The slots of the nodes that list `name`, ascending, with its size on each: for
    /// sums over many names, kept by slot and read by position through
    /// [`ImageIndex::slot_of`] (one map per node read rather than per entry summed).
    pub fn slot_holders(&self, name: &str) -> &[(u32, i64)] {
        self.holders.get(name).map_or(&[], |l| l.as_slice())
    }

    /// How many slots there are, used and free: every listed slot is below it.
    pub fn slot_count(&self) -> usize {
        self.positions.len()
    }

    /// The slot of the node at snapshot position `position`.
    pub fn slot_of(&self, position: usize) -> Option<u32> {
        self.slots.get(position).copied()
    }

    /// Whether every node's slot is its position, as in an index built afresh: sums by slot
    /// are then sums by position, read without the map. A node that joins or leaves before
    /// the end of the name order usually ends it until the next build (the first snapshot,
    /// or one where more than a quarter of the nodes changed).
    pub fn slots_are_positions(&self) -> bool {
        self.slots_are_positions
    }

    /// How many nodes list `name`.
    pub fn holder_count(&self, name: &str) -> usize {
        self.holders.get(name).map_or(0, |l| l.len())
    }

    /// How many nodes have Kubernetes facts (upstream's `totalNumNodes`).
    pub fn nodes(&self) -> u32 {
        self.with_facts
    }
}

fn facts(nodes: &[Indexed]) -> u32 {
    u32::try_from(nodes.iter().filter(|(_, i)| i.is_some()).count()).unwrap_or(u32::MAX)
}

/// Moves the node at `slot` in the lists of `holders` from `before` to `after` (its image
/// lists then and now, sorted by name): only the names dropped, gained or resized touch a
/// list (a node that pulls one image leaves the others alone).
fn patch_holders(
    holders: &mut HashMap<Arc<str>, Holders>,
    slot: u32,
    before: &[(Arc<str>, i64)],
    after: &[(Arc<str>, i64)],
) {
    let (mut i, mut j) = (0, 0);
    while i < before.len() || j < after.len() {
        let order = match (before.get(i), after.get(j)) {
            (Some(a), Some(b)) if Arc::ptr_eq(&a.0, &b.0) => Ordering::Equal,
            (Some(a), Some(b)) => a.0.cmp(&b.0),
            (Some(_), None) => Ordering::Less,
            (None, _) => Ordering::Greater,
        };
        match order {
            Ordering::Less => {
                if let Some(list) = holders.get_mut(&*before[i].0)
                    && let Ok(k) = list.binary_search_by_key(&slot, |&(s, _)| s)
                {
                    Arc::make_mut(list).remove(k);
                }
                i += 1;
            }
            Ordering::Greater => {
                let (name, size) = &after[j];
                let list = Arc::make_mut(holders.entry(name.clone()).or_default());
                // No entry at `slot` yet: the node's old names were `before`'s (and a
                // freed slot left every list it was in).
                if let Err(k) = list.binary_search_by_key(&slot, |&(s, _)| s) {
                    list.insert(k, (slot, *size));
                }
                j += 1;
            }
            Ordering::Equal => {
                let (name, size) = &after[j];
                if before[i].1 != *size
                    && let Some(list) = holders.get_mut(&**name)
                    && let Ok(k) = list.binary_search_by_key(&slot, |&(s, _)| s)
                {
                    Arc::make_mut(list)[k].1 = *size;
                }
                i += 1;
                j += 1;
            }
        }
    }
}

/// How a snapshot's nodes differ from those an index was made of.
struct Walk {
    /// Old position → new position (`None`: the node went); `None` when every node kept
    /// its position.
    moved: Option<Vec<Option<usize>>>,
    /// Nodes in both whose images changed: (old position, new position).
    changed: Vec<(usize, usize)>,
    /// Nodes that came (new positions).
    added: Vec<usize>,
    /// How many went.
    removed: usize,
}

impl Walk {
    /// Walks `previous`'s nodes and `nodes` side by side, pairing equal names (a
    /// snapshot's nodes are sorted by name, so every node is paired or found new or gone).
    /// Pairs are made only forwards in both lists, so each node is paired at most once
    /// whatever the lists hold: unsorted lists cost more nodes touched (or a build), never
    /// a wrong index.
    fn of(previous: &ImageIndex, nodes: &[NodeRef<'_>]) -> Walk {
        let old = &previous.nodes;
        let mut walk = Walk {
            moved: None,
            changed: Vec::new(),
            added: Vec::new(),
            removed: 0,
        };
        let same_images = |a: &Option<NodeImages>, b: Option<&NodeImages>| match (a, b) {
            (Some(a), Some(b)) => a.same(b) || a == b,
            (None, None) => true,
            _ => false,
        };
        // Until the first node that came or went, every node keeps its position: the map
        // of positions is made only then (never, for the common case of the same nodes).
        let shift = |moved: &mut Option<Vec<Option<usize>>>, paired: usize| {
            moved.get_or_insert_with(|| {
                let mut m = vec![None; old.len()];
                for (k, to) in m.iter_mut().enumerate().take(paired) {
                    *to = Some(k);
                }
                m
            });
        };
        let (mut i, mut j) = (0, 0);
        while i < old.len() || j < nodes.len() {
            let order = match (old.get(i), nodes.get(j)) {
                // The store hands every snapshot the same name: a pointer compare, no
                // string compare, for every node of an unchanged cluster.
                (Some(a), Some(b)) if Arc::ptr_eq(&a.0, b.0) => Ordering::Equal,
                (Some(a), Some(b)) => a.0.cmp(b.0),
                (Some(_), None) => Ordering::Less,
                (None, _) => Ordering::Greater,
            };
            match order {
                Ordering::Less => {
                    shift(&mut walk.moved, i);
                    walk.removed += 1;
                    i += 1;
                }
                Ordering::Greater => {
                    shift(&mut walk.moved, i);
                    walk.added.push(j);
                    j += 1;
                }
                Ordering::Equal => {
                    if let Some(moved) = walk.moved.as_mut() {
                        moved[i] = Some(j);
                    }
                    if !same_images(&old[i].1, nodes[j].1) {
                        walk.changed.push((i, j));
                    }
                    i += 1;
                    j += 1;
                }
            }
        }
        walk
    }

    /// Nodes that came, went or changed their images.
    fn touched(&self) -> usize {
        self.changed.len() + self.added.len() + self.removed
    }

    fn is_empty(&self) -> bool {
        self.touched() == 0
    }
}

/// A snapshot's image index: made on first use, from `seed` (an earlier snapshot's) where
/// there is one. Clones of a snapshot share the cell, so whichever uses it first makes the
/// index for all (their nodes' images are the same: in-place edits leave them alone).
#[derive(Debug, Clone, Default)]
pub(crate) struct IndexCell(Arc<CellInner>);

#[derive(Debug, Default)]
struct CellInner {
    built: OnceLock<Arc<ImageIndex>>,
    /// The index to patch from, let go once this one is made. A snapshot that never makes
    /// its index passes its seed on to the next (so an index is patched, not rebuilt, after
    /// a stretch of snapshots nobody scored images with): at most one earlier index, with
    /// the node lists it recorded, is kept alive that way.
    seed: Mutex<Option<Arc<ImageIndex>>>,
}

impl IndexCell {
    /// A cell to be made from `seed`.
    pub(crate) fn seeded(seed: Option<Arc<ImageIndex>>) -> IndexCell {
        IndexCell(Arc::new(CellInner {
            built: OnceLock::new(),
            seed: Mutex::new(seed),
        }))
    }

    /// What a later snapshot should make its index from: the index made here, else this
    /// one's seed.
    pub(crate) fn seed(&self) -> Option<Arc<ImageIndex>> {
        self.0.built.get().cloned().or_else(|| {
            self.0
                .seed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone()
        })
    }

    /// The index of `nodes`, made on first call.
    pub(crate) fn get<'a>(
        &self,
        nodes: impl IntoIterator<Item = (&'a Arc<str>, Option<&'a NodeImages>)>,
    ) -> Arc<ImageIndex> {
        self.0
            .built
            .get_or_init(|| {
                let seed = self
                    .0
                    .seed
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take();
                match seed {
                    Some(seed) => ImageIndex::after(&seed, nodes),
                    None => Arc::new(ImageIndex::build(nodes)),
                }
            })
            .clone()
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
    use proptest::prelude::*;

    fn images(entries: &[(&str, i64)]) -> NodeImages {
        NodeImages::new(entries.iter().map(|(n, s)| (Arc::from(*n), *s)))
    }

    fn names(n: &[&str]) -> Vec<Arc<str>> {
        n.iter().map(|s| Arc::from(*s)).collect()
    }

    fn view(v: &[Indexed]) -> Vec<(&Arc<str>, Option<&NodeImages>)> {
        v.iter().map(|(n, i)| (n, i.as_ref())).collect()
    }

    /// Every name's holders by position, sorted: what two indexes must agree on.
    fn contents(index: &ImageIndex) -> Vec<(String, Vec<(u32, i64)>)> {
        let mut v: Vec<_> = index
            .holders
            .keys()
            .map(|n| (n.to_string(), held(index, n)))
            .collect();
        v.sort();
        v
    }

    /// The holders of `name` by position, ascending.
    fn held(index: &ImageIndex, name: &str) -> Vec<(u32, i64)> {
        let mut v: Vec<_> = index.holders(name).collect();
        v.sort_unstable();
        v
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
    fn the_index_lists_holders_by_position_and_counts_nodes_with_facts() {
        // Equal names under different copies (nodes built apart) still group together.
        let n = names(&["n1", "n2", "n3"]);
        let (a, c) = (images(&[("a", 1), ("b", 2)]), images(&[("a", 3)]));
        let index = ImageIndex::build([(&n[0], Some(&a)), (&n[1], None), (&n[2], Some(&c))]);
        assert_eq!(held(&index, "a"), [(0, 1), (2, 3)]);
        assert_eq!(held(&index, "b"), [(0, 2)]);
        assert_eq!(index.holder_count("a"), 2);
        assert_eq!(index.holders("c").len(), 0);
        assert_eq!(index.nodes(), 2);
    }

    #[test]
    fn an_unchanged_cluster_keeps_its_index_and_a_change_patches_only_what_moved() {
        let n = names(&["n1", "n2", "n3", "n4"]);
        let lists: Vec<NodeImages> = (0..4)
            .map(|i| images(&[("pause", 1), (["a", "b", "c", "d"][i], 10)]))
            .collect();
        let nodes = |l: &[NodeImages]| -> Vec<(Arc<str>, Option<NodeImages>)> {
            n.iter().cloned().zip(l.iter().cloned().map(Some)).collect()
        };
        let first = Arc::new(ImageIndex::build(view(&nodes(&lists))));
        let same = ImageIndex::after(&first, view(&nodes(&lists)));
        assert!(
            Arc::ptr_eq(&first, &same),
            "nothing changed: the same index"
        );
        let mut changed = lists.clone();
        changed[1] = images(&[("pause", 1), ("e", 10)]);
        let patched = ImageIndex::after(&first, view(&nodes(&changed)));
        assert_eq!(held(&patched, "b"), []);
        assert_eq!(held(&patched, "e"), [(1, 10)]);
        assert!(
            Arc::ptr_eq(&first.holders["c"], &patched.holders["c"]),
            "an image no changed node lists keeps its list"
        );
        // A node joins before the others, one goes: every later position moves, yet only
        // the lists of the images they list change.
        let joined: Vec<(Arc<str>, Option<NodeImages>)> =
            [(Arc::from("n0"), Some(images(&[("pause", 1), ("f", 10)])))]
                .into_iter()
                .chain(
                    nodes(&lists)
                        .into_iter()
                        .filter(|(name, _)| &**name != "n2"),
                )
                .collect();
        let moved = ImageIndex::after(&first, view(&joined));
        assert_eq!(held(&moved, "pause"), [(0, 1), (1, 1), (2, 1), (3, 1)]);
        assert_eq!(held(&moved, "f"), [(0, 10)]);
        assert_eq!(held(&moved, "a"), [(1, 10)]);
        assert_eq!(held(&moved, "b"), []);
        assert_eq!(held(&moved, "d"), [(3, 10)]);
        for kept in ["a", "c", "d"] {
            assert!(
                Arc::ptr_eq(&first.holders[kept], &moved.holders[kept]),
                "{kept}: listed by no node that came or went, its list is kept"
            );
        }
        assert_eq!(
            moved.free,
            [] as [u32; 0],
            "the joining node took the slot freed"
        );
    }

    /// A cluster of up to 12 nodes named from 16, each holding some of 6 images (or having
    /// no Kubernetes facts), sorted by name as a snapshot is.
    fn cluster() -> impl Strategy<Value = Vec<(Arc<str>, Option<NodeImages>)>> {
        proptest::collection::btree_map(
            0u8..16,
            proptest::option::weighted(0.9, proptest::collection::vec((0u8..6, 1i64..4), 0..5)),
            0..12,
        )
        .prop_map(|m| {
            m.into_iter()
                .map(|(n, imgs)| {
                    let imgs = imgs.map(|v| {
                        NodeImages::new(
                            v.into_iter()
                                .map(|(i, s)| (Arc::<str>::from(format!("img{i}")), s)),
                        )
                    });
                    (Arc::<str>::from(format!("node{n:02}")), imgs)
                })
                .collect()
        })
    }

    /// `nodes` with every name and list an equal copy (as snapshots built apart from the
    /// store have).
    fn copies(nodes: &[Indexed]) -> Vec<Indexed> {
        nodes
            .iter()
            .map(|(n, i)| {
                let list = i
                    .as_ref()
                    .map(|i| NodeImages::new(i.entries().iter().cloned()));
                (Arc::from(&**n), list)
            })
            .collect()
    }

    proptest! {
        /// However nodes come, go and change their images, the index made from an earlier
        /// one equals an index built afresh; an unchanged cluster keeps its index.
        #[test]
        fn an_index_made_after_another_equals_one_built_anew(
            before in cluster(),
            after in cluster(),
            how in proptest::collection::vec(0u8..3, 16),
            reversed in any::<bool>(),
        ) {
            // A node named in both keeps its name's `Arc` (as the store's do) and its very
            // image list (0), takes new images (1), or comes as equal copies (2).
            let mut after: Vec<Indexed> = after
                .into_iter()
                .enumerate()
                .map(|(k, (name, imgs))| match (before.iter().find(|(n, _)| *n == name), how[k]) {
                    (Some((held, old)), 0) => (held.clone(), old.clone()),
                    (Some((held, _)), 1) => (held.clone(), imgs),
                    (Some(node), _) => copies(std::slice::from_ref(node)).remove(0),
                    (None, _) => (name, imgs),
                })
                .collect();
            // Out of name order, as no snapshot is: still right, if dearer.
            if reversed {
                after.reverse();
            }
            let first = Arc::new(ImageIndex::build(view(&before)));
            let built = ImageIndex::build(view(&after));
            // As `after` chooses (mostly a build, in clusters this small), and patched
            // however many nodes changed.
            let made = ImageIndex::after(&first, view(&after));
            let patched = ImageIndex::patched(&first, &view(&after), usize::MAX);
            for made in [&made, &patched] {
                prop_assert_eq!(contents(made), contents(&built));
                prop_assert_eq!(made.nodes(), built.nodes());
            }
            // And patched again, back to where it started, and forth once more (nodes
            // joining take the slots of those that went).
            let back = ImageIndex::patched(&patched, &view(&before), usize::MAX);
            prop_assert_eq!(contents(&back), contents(&first));
            prop_assert_eq!(back.nodes(), first.nodes());
            let again = ImageIndex::patched(&back, &view(&after), usize::MAX);
            prop_assert_eq!(contents(&again), contents(&built));
            // Then only images change, no node comes or goes: patched at the slots the
            // nodes have (which may no longer be their positions).
            let changed: Vec<Indexed> = after
                .iter()
                .enumerate()
                .map(|(k, (name, imgs))| match (k % 2, imgs) {
                    (0, Some(_)) => {
                        let other = Arc::<str>::from(format!("img{}", k % 6));
                        (name.clone(), Some(NodeImages::new([(other, 5)])))
                    }
                    _ => (name.clone(), imgs.clone()),
                })
                .collect();
            let images_only = ImageIndex::patched(&again, &view(&changed), usize::MAX);
            prop_assert_eq!(contents(&images_only), contents(&ImageIndex::build(view(&changed))));
            // Slots and positions stay one map: every position has a slot mapped back
            // to it, and the slots no node has are the free ones.
            for index in [&patched, &back, &again, &images_only] {
                prop_assert_eq!(index.slots.len(), index.nodes.len());
                // Every list by slot, each slot once: what the patch's searches rely on.
                for list in index.holders.values() {
                    prop_assert!(list.windows(2).all(|w| w[0].0 < w[1].0));
                }
                for (position, &slot) in index.slots.iter().enumerate() {
                    prop_assert_eq!(index.positions[slot as usize] as usize, position);
                }
                let mut free: Vec<u32> = (0..index.positions.len() as u32)
                    .filter(|&s| index.positions[s as usize] == FREE)
                    .collect();
                let mut listed = index.free.clone();
                free.sort_unstable();
                listed.sort_unstable();
                prop_assert_eq!(free, listed);
                prop_assert_eq!(
                    index.slots_are_positions(),
                    index.slots.iter().enumerate().all(|(i, &s)| s as usize == i)
                );
            }
            // Nothing changed, even under other copies of every name and list: the same index.
            let same = ImageIndex::after(&first, view(&copies(&before)));
            prop_assert!(Arc::ptr_eq(&same, &first));
        }
    }

    #[test]
    fn clones_of_a_cell_share_the_index_and_a_made_index_lets_its_seed_go() {
        let n = names(&["a", "b"]);
        let x = images(&[("x", 1)]);
        let nodes = [(&n[0], Some(&x)), (&n[1], None)];
        let seed = Arc::new(ImageIndex::build(nodes));
        let cell = IndexCell::seeded(Some(seed.clone()));
        let clone = cell.clone();
        let index = clone.get(nodes);
        assert!(Arc::ptr_eq(&index, &seed), "unchanged: the seed itself");
        assert!(
            Arc::ptr_eq(&cell.get(nodes), &index),
            "clones share what was made"
        );
        assert!(cell.0.seed.lock().expect("lock").is_none(), "seed let go");
        // A later cell seeded from one that never made its index takes that one's seed.
        let unscored = IndexCell::seeded(cell.seed());
        let later = IndexCell::seeded(unscored.seed());
        assert!(Arc::ptr_eq(&later.get(nodes), &seed));
    }
}
