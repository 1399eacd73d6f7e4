//! ImageLocality: prefers nodes that already have the pod's container images, weighting each
//! image by its size and by how widely it has spread, as kube-scheduler's ImageLocality Score.

use std::sync::Arc;

use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::validation::{FieldErrors, FieldPath};
use crate::scheduler::framework::{
    CycleState, MAX_NODE_SCORE, Plugin, PreScorePlugin, ScorePlugin, Status,
};
use crate::scheduler::plugins::handle::Handle;

use crate::scheduler::plugins::helper::expect_no_args;

pub const NAME: &str = "ImageLocality";
/// Upstream's default weight of this plugin's score.
pub const DEFAULT_WEIGHT: i32 = 1;

const MB: i64 = 1024 * 1024;
/// Image sums below this score 0, so that tiny images do not decide placement.
const MIN_THRESHOLD: i64 = 23 * MB;
/// Per container: image sums at or above `MAX_CONTAINER_THRESHOLD × containers` score 100.
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

const PRE_SCORE_STATE_KEY: &str = "PreScoreImageLocality";

/// What Score needs, computed once per pod: each image of the pod that some node has, with how
/// many nodes have it.
struct PreScoreState {
    total_nodes: usize,
    num_containers: i64,
    images: Vec<(String, usize)>,
}

/// Upstream's normalizedImageName: `:latest` appended when the name has no tag (its last `:`
/// is not after its last `/`; a digest counts as a tag). Nothing else: no registry or
/// `library/` is added, so an image is found on a node only under the name the node reports.
fn normalized_image_name(name: &str) -> String {
    let last_colon = name.rfind(':');
    let last_slash = name.rfind('/');
    if last_colon <= last_slash {
        format!("{name}:latest")
    } else {
        name.to_string()
    }
}

/// `size × nodes having it / all nodes`, upstream's scaledImageScore: an image already on
/// most nodes says little about where to run.
fn scaled_image_score(size: i64, num_nodes: usize, total_nodes: usize) -> i64 {
    let spread = num_nodes as f64 / total_nodes as f64;
    (size as f64 * spread) as i64
}

/// Maps the summed image scores onto 0..=MAX_NODE_SCORE between the thresholds, as upstream's
/// calculatePriority.
fn calculate_priority(sum: i64, num_containers: i64) -> i64 {
    let max_threshold = MAX_CONTAINER_THRESHOLD * num_containers;
    let clamped = if sum < MIN_THRESHOLD {
        MIN_THRESHOLD
    } else if sum > max_threshold {
        max_threshold
    } else {
        sum
    };
    MAX_NODE_SCORE * (clamped - MIN_THRESHOLD) / (max_threshold - MIN_THRESHOLD)
}

/// Scores nodes by the container images of the pod they already hold.
#[derive(Clone, Copy, Debug, Default)]
pub struct ImageLocality {
    /// Whose threshold the sum is scaled by (image volumes count from 1.37).
    release: crate::k8s::release::Release,
}

impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        NAME
    }
    fn signs_pods(&self) -> bool {
        true
    }
    fn sign_pod(
        &self,
        pod: &PodInfo,
        signature: &mut crate::scheduler::framework::signature::Signature,
    ) -> bool {
        // What Score reads: every container's image and every image volume's reference, each
        // counted (a list, duplicates kept, in sorted order), and how many of each there are
        // (the threshold the sum is scaled by). Upstream signs the set of container images.
        let spec = pod.pod.spec.as_ref();
        let mut images: Vec<String> = spec
            .into_iter()
            .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
            .map(|c| normalized_image_name(c.image.as_deref().unwrap_or_default()))
            .collect();
        let containers = images.len();
        let mut volumes: Vec<String> = spec
            .into_iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .filter_map(|v| v.image.as_ref())
            .map(|i| normalized_image_name(i.reference.as_deref().unwrap_or_default()))
            .collect();
        images.sort_unstable();
        volumes.sort_unstable();
        signature.part(
            crate::scheduler::framework::signature::IMAGE_NAMES,
            &(containers, images, volumes),
        );
        true
    }

    fn pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }

    fn pre_score_is_own(&self) -> bool {
        true
    }

    fn score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl PreScorePlugin for ImageLocality {
    /// Normalizes the pod's image names once and looks up how many nodes of the snapshot have
    /// each. Skip when no node has any of them: every node would score 0.
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status {
        let Some(spec) = pod.pod.spec.as_ref() else {
            return Status::skip();
        };
        let containers = spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers);
        // From 1.37 every image volume counts too, towards the threshold the sum is scaled by.
        let image_volumes = spec.volumes.iter().flatten().filter(|v| v.image.is_some());
        let image_volumes = if self.release.at_least(37) {
            image_volumes.count()
        } else {
            0
        };
        let num_containers = (containers.clone().count() + image_volumes) as i64;
        // As upstream's sumImageScores: init containers, containers and image volumes.
        let volume_images = spec
            .volumes
            .iter()
            .flatten()
            .filter_map(|v| v.image.as_ref()?.reference.as_deref());
        let counts = &snapshot.image_node_counts;
        let images: Vec<(String, usize)> = containers
            .map(|c| c.image.as_deref().unwrap_or_default())
            .chain(volume_images)
            .map(normalized_image_name)
            .filter_map(|name| counts.get(name.as_str()).map(|&c| (name, c)))
            .filter(|(_, c)| *c > 0)
            .collect();
        if images.is_empty() || snapshot.is_empty() {
            return Status::skip();
        }
        state.write(
            PRE_SCORE_STATE_KEY,
            PreScoreState {
                total_nodes: snapshot.len(),
                num_containers,
                images,
            },
        );
        Status::success()
    }
}

impl ScorePlugin for ImageLocality {
    /// Already in 0..=MAX_NODE_SCORE, so NormalizeScore is the default no-op.
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let s = state
            .read::<PreScoreState>(PRE_SCORE_STATE_KEY)
            .ok_or_else(|| Status::error("ImageLocality: PreScore state not found"))?;
        let sum = s
            .images
            .iter()
            .filter_map(|(name, count)| node.images.get(name).map(|size| (size, *count)))
            .map(|(size, count)| scaled_image_score(size, count, s.total_nodes))
            .fold(0i64, i64::saturating_add);
        Ok(calculate_priority(sum, s.num_containers))
    }
}

/// Builds the plugin; it takes no args.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    handle: &Handle,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    expect_no_args(NAME, args, path)?;
    Ok(Arc::new(ImageLocality {
        release: handle.release,
    }))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ImageVolumeSource, Volume};

    use super::*;
    use crate::k8s::pod::Container;
    use crate::scheduler::testing::{NodeBuilder, PodBuilder, snapshot};

    /// kube-scheduler v1.36's TestNormalizedImageName.
    #[test]
    fn image_names_normalize_as_kube_scheduler() {
        let digest = "sha256:4813494d137e1631bba301d5acab6e7bb7aa74ce1185d456565ef51d737677b2";
        let cases = [
            (
                "add :latest postfix 1",
                "root".to_string(),
                "root:latest".to_string(),
            ),
            (
                "add :latest postfix 2",
                "gcr.io:5000/root".to_string(),
                "gcr.io:5000/root:latest".to_string(),
            ),
            (
                "keep it as is 1",
                "root:tag".to_string(),
                "root:tag".to_string(),
            ),
            (
                "keep it as is 2",
                format!("root@{digest}"),
                format!("root@{digest}"),
            ),
        ];
        for (name, input, want) in cases {
            assert_eq!(normalized_image_name(&input), want, "{name}");
        }
    }

    /// A pod with one container per image.
    fn pod(images: &[&str]) -> PodBuilder {
        images
            .iter()
            .fold(PodBuilder::new("p"), |b, image| b.container().image(image))
    }

    fn with_init_image(pod: PodBuilder, image: &str) -> PodBuilder {
        pod.with(|p| {
            if let Some(spec) = p.spec.as_mut() {
                spec.init_containers
                    .get_or_insert_with(Default::default)
                    .push(Container {
                        name: "init".into(),
                        image: Some(image.into()),
                        ..Default::default()
                    });
            }
        })
    }

    /// Runs PreScore and Score over a snapshot of `nodes`; `None` when PreScore skips.
    fn run_score(pod: PodBuilder, nodes: Vec<NodeBuilder>) -> Option<Vec<i64>> {
        let pod = pod.info();
        let snap = snapshot(nodes, vec![]);
        let mut state = CycleState::new();
        let status = PreScorePlugin::pre_score(
            &ImageLocality::default(),
            &mut state,
            &pod,
            snap.nodes(),
            &snap,
        );
        if status.is_skip() {
            return None;
        }
        assert!(status.is_success(), "{status}");
        Some(
            snap.nodes()
                .iter()
                .map(|n| {
                    ScorePlugin::score(&ImageLocality::default(), &state, &pod, n).expect("score")
                })
                .collect(),
        )
    }

    type ScoreCase = (&'static str, PodBuilder, Vec<NodeBuilder>, Option<Vec<i64>>);

    #[test]
    fn score_by_image_size_and_spread() {
        let node_40_300 = || {
            NodeBuilder::new("node1")
                .image("gcr.io/40:latest", 40 * MB)
                .image("gcr.io/300:latest", 300 * MB)
        };
        let node_250_10 = || {
            NodeBuilder::new("node2")
                .image("gcr.io/250:latest", 250 * MB)
                .image("gcr.io/10:v1", 10 * MB)
        };
        // (name, pod, nodes, scores; `None` when PreScore skips)
        let cases: Vec<ScoreCase> = vec![
            (
                "two images spread on two nodes, prefer the larger image one",
                pod(&["gcr.io/40", "gcr.io/250"]),
                vec![node_40_300(), node_250_10()],
                // node1: 40MB×1/2 = 20MB < 23MB → 0
                // node2: 250MB×1/2 = 125MB → 100×(125−23)/(2000−23) = 5
                Some(vec![0, 5]),
            ),
            (
                "two images on one node, prefer this node",
                pod(&["gcr.io/40", "gcr.io/300"]),
                vec![node_40_300(), node_250_10()],
                // node1: 20MB + 150MB = 170MB → 100×147/1977 = 7; node2: 0
                Some(vec![7, 0]),
            ),
            (
                "if exceed limit, use limit",
                pod(&["gcr.io/3000"]),
                vec![
                    NodeBuilder::new("node1").image("gcr.io/3000:latest", 3000 * MB),
                    NodeBuilder::new("node2"),
                ],
                // node1: 1500MB, clamped to 1000MB × 1 container → 100
                Some(vec![100, 0]),
            ),
            (
                "spread is over every node of the snapshot",
                pod(&["gcr.io/600"]),
                vec![
                    NodeBuilder::new("node1").image("gcr.io/600:latest", 600 * MB),
                    NodeBuilder::new("node2").image("gcr.io/600:latest", 600 * MB),
                    NodeBuilder::new("node3"),
                ],
                // 600MB×2/3 = 400MB → 100×(400−23)/(1000−23) = 38
                Some(vec![38, 38, 0]),
            ),
            (
                "no node has any image: PreScore skips",
                pod(&["gcr.io/40"]),
                vec![node_250_10()],
                None,
            ),
            (
                "a missing tag means latest, not another tag",
                pod(&["gcr.io/10"]),
                vec![node_40_300(), node_250_10()],
                None,
            ),
            (
                "a short name does not match the fully qualified name on the node, as upstream",
                pod(&["nginx"]),
                vec![
                    NodeBuilder::new("node1").image("docker.io/library/nginx:latest", 500 * MB),
                    NodeBuilder::new("node2").image("gcr.io/other:latest", 500 * MB),
                ],
                None,
            ),
            (
                "a short name reported by the node still matches",
                pod(&["busybox:1.36"]),
                vec![
                    NodeBuilder::new("node1").image("busybox:1.36", 300 * MB),
                    NodeBuilder::new("node2"),
                ],
                // 300MB×1/2 = 150MB → 100×127/977 = 12
                Some(vec![12, 0]),
            ),
            (
                "a digest is matched as is",
                pod(&["nginx@sha256:abcd"]),
                vec![
                    NodeBuilder::new("node1").image("nginx@sha256:abcd", 1000 * MB),
                    NodeBuilder::new("node2"),
                ],
                // 1000MB×1/2 = 500MB → 100×477/977 = 48
                Some(vec![48, 0]),
            ),
            (
                "an image volume counts, and raises the max threshold (1.37)",
                pod(&["gcr.io/250"]).with(|p| {
                    if let Some(spec) = p.spec.as_mut() {
                        spec.volumes.get_or_insert_with(Vec::new).push(Volume {
                            name: "data".into(),
                            image: Some(ImageVolumeSource {
                                reference: Some("gcr.io/300".into()),
                                ..Default::default()
                            }),
                            ..Default::default()
                        });
                    }
                }),
                vec![
                    NodeBuilder::new("node1").image("gcr.io/300:latest", 300 * MB),
                    NodeBuilder::new("node2"),
                ],
                // node1: 300MB×1/2 = 150MB → 100×127/1977 = 6
                Some(vec![6, 0]),
            ),
            (
                "init containers count, and raise the max threshold",
                with_init_image(pod(&["gcr.io/250"]), "gcr.io/300"),
                vec![
                    NodeBuilder::new("node1")
                        .image("gcr.io/300:latest", 300 * MB)
                        .image("gcr.io/250:latest", 250 * MB),
                    NodeBuilder::new("node2").image("gcr.io/300:latest", 300 * MB),
                ],
                // max threshold 2000MB
                // node1: 300MB×2/2 + 250MB×1/2 = 425MB → 100×402/1977 = 20
                // node2: 300MB → 100×277/1977 = 14
                Some(vec![20, 14]),
            ),
        ];
        for (name, pod, nodes, want) in cases {
            assert_eq!(run_score(pod, nodes), want, "{name}");
        }
    }
}
