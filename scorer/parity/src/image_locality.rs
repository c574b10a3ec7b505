//! `ImageLocality`: prefer nodes that already hold the pod's images, so it starts without
//! pulling them — kube-scheduler's default score plugin of that name
//! (`pkg/scheduler/framework/plugins/imagelocality`), as current releases run it.
//!
//! - Each image the pod pulls (init containers, sidecars included, then containers, then
//!   `image` volumes: upstream since 1.30 and 1.33) that the node lists adds its size
//!   scaled by the share of nodes that list it (`size · nodes with it / nodes`), so an image
//!   every node holds counts in full and one that only a few hold counts little — upstream's
//!   guard against piling pods onto the few nodes that pulled an image first.
//! - The sum is clamped to [23 MiB, 1000 MiB × the number of images] and scaled to 0–100
//!   with integer division (`calculatePriority`). No normalisation over the nodes.
//! - An image written without a tag is looked up as `:latest` (`normalizedImageName`); a
//!   node's names are taken as its kubelet lists them.
//! - Scoring reads the snapshot's index of which nodes hold which image, so a pod costs
//!   the nodes holding its images, not a search of every node's list.
//! - How many nodes hold an image is the cluster's count when the snapshot was taken (read
//!   from the same index), as upstream since 1.28 (kubernetes#116938); 1.20's cache froze
//!   each node's count when that node last changed. 1.20 also read containers only.
use std::borrow::Cow;

use loadstar_framework::snapshot::{ImageIndex, NodeView, PodInfo};
use loadstar_framework::{CycleContext, MAX_NODE_SCORE, ScorePlugin};

use crate::args::{NoArgs, PluginError, parse_args};

/// Plugin name.
pub const NAME: &str = "ImageLocality";

/// Below this sum a node scores 0 (upstream's `minThreshold`, 23 MiB).
pub const MIN_THRESHOLD: i64 = 23 << 20;
/// Per image, the sum from which a node scores 100 (upstream's `maxContainerThreshold`,
/// 1000 MiB).
pub const MAX_IMAGE_THRESHOLD: i64 = 1000 << 20;

/// The name a node would list an image under: `:latest` added when the reference has no
/// tag (no `:` after its last `/`), as upstream's `normalizedImageName`. A digest reference
/// (`name@sha256:…`) has one and is left as written.
pub fn normalized_image_name(name: &str) -> Cow<'_, str> {
    let last = |c: char| name.rfind(c).map_or(-1, |i| i as i64);
    if last(':') <= last('/') {
        Cow::Owned(format!("{name}:latest"))
    } else {
        Cow::Borrowed(name)
    }
}

/// A node's score from the sum of its scaled image sizes for a pod pulling `images` images
/// (upstream's `calculatePriority`).
pub fn calculate_priority(sum: i64, images: usize) -> i64 {
    let max = MAX_IMAGE_THRESHOLD.saturating_mul(i64::try_from(images).unwrap_or(i64::MAX));
    let sum = if sum < MIN_THRESHOLD {
        MIN_THRESHOLD
    } else if sum > max {
        max
    } else {
        sum
    };
    // In i128: 100 × a sum near i64::MAX must not overflow.
    let score = i128::from(MAX_NODE_SCORE) * i128::from(sum - MIN_THRESHOLD)
        / i128::from(max - MIN_THRESHOLD);
    i64::try_from(score).unwrap_or(0)
}

/// The image-locality score.
#[derive(Debug, Clone, Default)]
pub struct ImageLocality;

impl ImageLocality {
    /// Builds it; it takes no arguments.
    pub fn from_args(args: &serde_norway::Value) -> Result<Self, PluginError> {
        parse_args::<NoArgs>(NAME, args)?;
        Ok(ImageLocality)
    }
}

impl ImageLocality {
    /// The pod's images some node holds, each once, with the share of nodes holding it and
    /// how many times the pod names it: one lookup per image and cycle, so a pod naming an
    /// image thousands of times costs no more per node than naming it once.
    fn held<'p>(index: &ImageIndex, pod: &'p PodInfo) -> Vec<(Cow<'p, str>, f64, i64)> {
        let total = f64::from(index.nodes());
        let mut names: Vec<Cow<'_, str>> = pod
            .images
            .iter()
            .map(|i| normalized_image_name(i))
            .collect();
        names.sort_unstable();
        let mut held: Vec<(Cow<'_, str>, f64, i64)> = Vec::new();
        for name in names {
            match held.last_mut() {
                Some((last, _, times)) if *last == name => *times += 1,
                _ => {
                    let with = index.holder_count(&name) as f64;
                    held.push((name, with / total, 1));
                }
            }
        }
        held.retain(|(_, share, _)| *share > 0.0);
        held
    }
}

/// One container's (or volume's) part for an image of `size` bytes held by `share` of the
/// nodes, times the containers naming it: upstream's `int64(float64(size) * spread)`,
/// truncated, once per container.
fn scaled(size: i64, share: f64, times: i64) -> i64 {
    ((size as f64 * share) as i64).saturating_mul(times)
}

impl ScorePlugin for ImageLocality {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Node by node: a binary search of each node's list per image (the fallback where
    /// the nodes' snapshot indices are not known; the shares still come from the
    /// snapshot's index, made here if no score made it yet).
    fn score(&self, ctx: &CycleContext<'_>, pod: &PodInfo, nodes: &[&NodeView], out: &mut [i64]) {
        let images = pod.images.len();
        if images == 0 {
            out.fill(calculate_priority(0, 0));
            return;
        }
        let held = Self::held(&ctx.snapshot.image_index(), pod);
        for (o, node) in out.iter_mut().zip(nodes) {
            let sum = match &node.kube {
                Some(k) if !held.is_empty() => held
                    .iter()
                    .filter_map(|(name, share, times)| {
                        Some(scaled(k.images.size(name)?, *share, *times))
                    })
                    .fold(0i64, i64::saturating_add),
                _ => 0,
            };
            *o = calculate_priority(sum, images);
        }
    }

    /// Over the snapshot's [`ImageIndex`](loadstar_framework::snapshot::ImageIndex): only
    /// the nodes that hold one of the pod's images are touched, in contiguous lists.
    fn score_indexed(
        &self,
        ctx: &CycleContext<'_>,
        pod: &PodInfo,
        _nodes: &[&NodeView],
        indices: &[usize],
        out: &mut [i64],
    ) {
        let images = pod.images.len();
        if images == 0 {
            out.fill(calculate_priority(0, 0));
            return;
        }
        let index = ctx.snapshot.image_index();
        let held = Self::held(&index, pod);
        if held.is_empty() {
            out.fill(calculate_priority(0, images));
            return;
        }
        // Summed by slot, read by position: the index's lists name nodes by slot.
        let mut sums = vec![0i64; index.slot_count()];
        for (name, share, times) in &held {
            for &(slot, size) in index.slot_holders(name) {
                if let Some(sum) = sums.get_mut(slot as usize) {
                    *sum = sum.saturating_add(scaled(size, *share, *times));
                }
            }
        }
        if index.slots_are_positions() {
            for (o, &i) in out.iter_mut().zip(indices) {
                *o = calculate_priority(sums.get(i).copied().unwrap_or(0), images);
            }
        } else {
            for (o, &i) in out.iter_mut().zip(indices) {
                let sum = index.slot_of(i).and_then(|s| sums.get(s as usize));
                *o = calculate_priority(sum.copied().unwrap_or(0), images);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use loadstar_framework::snapshot::{ClusterSnapshot, NodeImages};
    use loadstar_testkit::snapshot::*;

    fn with_images(name: &str, images: &[(&[&str], i64)]) -> NodeView {
        edit_kube(kube_node(name, 4000, 16 * GIB), |k| {
            k.images = NodeImages::new(images.iter().flat_map(|(names, mib)| {
                names.iter().map(move |n| (Arc::<str>::from(*n), mib * MIB))
            }));
        })
    }

    fn pulling(containers: &[&str]) -> PodInfo {
        PodInfo {
            images: containers.iter().map(|s| s.to_string()).collect(),
            ..pod(100, 100)
        }
    }

    /// kube-scheduler's nodes of its image-locality tests: sizes in MiB.
    fn n1() -> NodeView {
        with_images(
            "n1",
            &[
                (&["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"], 40),
                (&["gcr.io/300:latest", "gcr.io/300:v1"], 300),
                (&["gcr.io/2000:latest"], 2000),
            ],
        )
    }
    fn n2() -> NodeView {
        with_images(
            "n2",
            &[
                (&["gcr.io/250:latest"], 250),
                (&["gcr.io/10:latest", "gcr.io/10:v1"], 10),
            ],
        )
    }

    #[test]
    fn scores_follow_upstreams_worked_examples() {
        let plugin = ImageLocality;
        // 40 MiB on one of two nodes: 20 < 23, floor; 250/2 = 125: 100·(125−23)/(2000−23).
        let snap = snapshot(vec![n1(), n2()]);
        assert_eq!(
            score_all(&plugin, &snap, &pulling(&["gcr.io/40", "gcr.io/250"])),
            [0, 5]
        );
        // (40 + 300)/2 − 23 over 1977.
        assert_eq!(
            score_all(&plugin, &snap, &pulling(&["gcr.io/40", "gcr.io/300"])),
            [7, 0]
        );
        // A 4000 MiB image on one of two nodes reaches the cap: 100.
        let big = with_images(
            "n1",
            &[(&["gcr.io/4000:latest"], 4000), (&["gcr.io/30:latest"], 30)],
        );
        let snap = snapshot(vec![big.clone(), n2()]);
        assert_eq!(
            score_all(&plugin, &snap, &pulling(&["gcr.io/10", "gcr.io/4000"])),
            [100, 0]
        );
        // One of three nodes (one with no images): 4000/3 − 23 over 1977 = 66.
        let snap = snapshot(vec![big, n2(), kube_node("n3", 4000, 16 * GIB)]);
        assert_eq!(
            score_all(&plugin, &snap, &pulling(&["gcr.io/10", "gcr.io/4000"])),
            [66, 0, 0]
        );
        // Three images: 600·2/3 + 900·2/3 vs 300/3 + the same, over 3000 − 23.
        let a = with_images(
            "n1",
            &[
                (&["gcr.io/600:latest"], 600),
                (&["gcr.io/40:latest"], 40),
                (&["gcr.io/900:latest"], 900),
            ],
        );
        let b = with_images(
            "n2",
            &[
                (&["gcr.io/300:latest"], 300),
                (&["gcr.io/600:latest"], 600),
                (&["gcr.io/900:latest"], 900),
            ],
        );
        let snap = snapshot(vec![a, b, kube_node("n3", 4000, 16 * GIB)]);
        assert_eq!(
            score_all(
                &plugin,
                &snap,
                &pulling(&["gcr.io/300", "gcr.io/600", "gcr.io/900"])
            ),
            [32, 36, 0]
        );
    }

    #[test]
    fn scores_stay_right_after_nodes_join_and_leave_the_index() {
        // Each snapshot's index is patched from the previous one's (few of its nodes
        // changed), so slots stop following positions. `score_all` checks the indexed
        // scores against the node-by-node ones each time.
        let filler = |i: usize| with_images(&format!("n{i}"), &[(&["gcr.io/10:v1"], 10)]);
        // n8, with the last slot, holds the pod's second image at 1 000 MiB.
        let n8 = with_images("n8", &[(&["gcr.io/250:latest"], 1000)]);
        let three = with_images("n3", &[(&["gcr.io/40:v1"], 40)]);
        let mut nodes = vec![n1(), n2(), three];
        nodes.extend((4..8).map(filler));
        nodes.push(n8.clone());
        let first = snapshot(nodes);
        let pod = pulling(&["gcr.io/40", "gcr.io/250"]);
        score_all(&ImageLocality, &first, &pod);
        // n0 joins before the others (taking the slot n3 frees), n3 leaves.
        let n0 = with_images("n0", &[(&["gcr.io/250:latest"], 500)]);
        let mut nodes = vec![n0.clone(), n1(), n2()];
        nodes.extend((4..8).map(filler));
        nodes.push(n8.clone());
        let next = ClusterSnapshot::new_after(nodes, 2, &first);
        assert!(!next.image_index().slots_are_positions());
        // gcr.io/40:latest on one node of eight (5 MiB, under the floor); gcr.io/250:latest
        // on three: 500, 250 and 1 000 MiB × 3/8, less 23, over 2 000 − 23.
        let scores = score_all(&ImageLocality, &next, &pod);
        assert_eq!(scores, [8, 0, 3, 0, 0, 0, 0, 17]);
        // n4 leaves and nobody joins: eight slots for seven nodes, n8 still on the last.
        let mut nodes = vec![n0, n1(), n2()];
        nodes.extend((5..8).map(filler));
        nodes.push(n8);
        let last = ClusterSnapshot::new_after(nodes, 3, &next);
        let index = last.image_index();
        assert_eq!((index.slot_count(), index.nodes()), (8, 7));
        // The same images over seven nodes: × 3/7.
        assert_eq!(
            score_all(&ImageLocality, &last, &pod),
            [9, 0, 4, 0, 0, 0, 20]
        );
    }

    #[test]
    fn init_containers_and_image_volumes_count_as_images_too() {
        // The pod's list (conversion puts init containers and image volumes in it) sets
        // both the sum and the cap: a second, absent image halves what the first is worth.
        let snap = snapshot(vec![
            with_images("n1", &[(&["big:latest"], 1000)]),
            kube_node("n2", 4000, 16 * GIB),
        ]);
        let one = score_all(&ImageLocality, &snap, &pulling(&["big"]));
        let two = score_all(&ImageLocality, &snap, &pulling(&["big", "elsewhere:v1"]));
        assert_eq!(one, [100 * (500 - 23) / (1000 - 23), 0]);
        assert_eq!(two, [100 * (500 - 23) / (2000 - 23), 0]);
    }

    #[test]
    fn an_image_named_by_several_containers_counts_once_per_container() {
        let snap = snapshot(vec![
            with_images("n1", &[(&["a:latest"], 300), (&["b:v1"], 300)]),
            kube_node("n2", 4000, 16 * GIB),
        ]);
        // Each of 3 containers adds 150 (300 on one node of two): 450 − 23 over 3000 − 23.
        let three = score_all(&ImageLocality, &snap, &pulling(&["a", "a:latest", "b:v1"]));
        assert_eq!(three, [100 * (450 - 23) / (3000 - 23), 0]);
        // Thousands of mentions of one image: one lookup per node, the cap holds.
        let many: Vec<&str> = std::iter::repeat_n("a", 5000).collect();
        assert_eq!(
            score_all(&ImageLocality, &snap, &pulling(&many)),
            [100 * (150 * 5000 - 23) / (1000 * 5000 - 23), 0]
        );
    }

    #[test]
    fn names_are_normalised_like_upstreams() {
        assert_eq!(normalized_image_name("nginx"), "nginx:latest");
        assert_eq!(normalized_image_name("gcr.io/a/b"), "gcr.io/a/b:latest");
        assert_eq!(
            normalized_image_name("localhost:5000/app"),
            "localhost:5000/app:latest"
        );
        assert_eq!(
            normalized_image_name("localhost:5000/app:v2"),
            "localhost:5000/app:v2"
        );
        assert_eq!(normalized_image_name("app@sha256:ab12"), "app@sha256:ab12");
    }

    #[test]
    fn a_pod_whose_images_no_node_holds_scores_zero_everywhere_and_odd_input_never_panics() {
        let snap = snapshot(vec![n1(), n2()]);
        assert_eq!(
            score_all(&ImageLocality, &snap, &pulling(&["nowhere"])),
            [0, 0]
        );
        assert_eq!(score_all(&ImageLocality, &snap, &pulling(&[])), [0, 0]);
        assert_eq!(calculate_priority(i64::MAX, 1), 100);
        assert_eq!(calculate_priority(i64::MAX, usize::MAX), 100);
        assert_eq!(calculate_priority(0, 0), 0);
        // A node without Kubernetes facts (agent only) scores 0 and is not one of the
        // nodes an image's share is taken over.
        let mut bare = kube_node("bare", 4000, 16 * GIB);
        bare.kube = None;
        let snap = snapshot(vec![n1(), bare]);
        assert_eq!(
            score_all(&ImageLocality, &snap, &pulling(&["gcr.io/2000"])),
            [0, 100]
        );
    }
}
