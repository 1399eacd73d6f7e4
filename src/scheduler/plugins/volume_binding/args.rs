//! VolumeBinding's args, as kube-scheduler's VolumeBindingArgs.

use serde::{Deserialize, Serialize};

use crate::scheduler::framework::validation::{FieldErrors, FieldPath};

/// How long PreBind waits for the PV controller unless told otherwise (kube-scheduler's 600 s).
pub const DEFAULT_BIND_TIMEOUT_SECONDS: i64 = 600;

/// One point of the scoring shape: at `utilization` percent of a class's capacity on a node,
/// the node scores `score` (0–10).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShapePoint {
    pub utilization: i32,
    pub score: i32,
}

/// The plugin's args.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct VolumeBindingArgs {
    /// How long PreBind waits for the volumes it bound or asked to provision to be bound,
    /// before the pod fails and is retried (0 fails at once).
    pub bind_timeout_seconds: i64,
    /// Score nodes by how full the volumes a pod would take (static ones, or provisioned ones
    /// of a driver that reports CSIStorageCapacity) leave them: points of (utilization,
    /// score), utilization increasing. Absent or empty: [`default_shape`], so that a node
    /// scores 100 less the percentage used, as kube-scheduler 1.37 with its
    /// StorageCapacityScoring gate on (its default).
    pub shape: Option<Vec<ShapePoint>>,
}

impl Default for VolumeBindingArgs {
    fn default() -> Self {
        VolumeBindingArgs {
            bind_timeout_seconds: DEFAULT_BIND_TIMEOUT_SECONDS,
            shape: Some(default_shape()),
        }
    }
}

/// kube-scheduler 1.37's default shape: score 10 at 0% used, 0 at 100%.
pub fn default_shape() -> Vec<ShapePoint> {
    vec![
        ShapePoint {
            utilization: 0,
            score: 10,
        },
        ShapePoint {
            utilization: 100,
            score: 0,
        },
    ]
}

/// The longest `bindTimeoutSeconds` tether takes (upstream sets none; near `i64::MAX` the
/// deadline overflows).
pub const MAX_BIND_TIMEOUT_SECONDS: i64 = 86_400;

impl VolumeBindingArgs {
    /// The args with kube-scheduler's defaults filled in: an absent or empty shape is
    /// [`default_shape`] (defaulting comes before validation upstream, so `[]` is no error).
    pub fn defaulted(mut self) -> Self {
        if self.shape.as_ref().is_none_or(Vec::is_empty) {
            self.shape = Some(default_shape());
        }
        self
    }

    /// Checks the args as kube-scheduler's ValidateVolumeBindingArgs (the shape as with its
    /// StorageCapacityScoring gate on), naming fields under `path`.
    pub fn validate(&self, path: &FieldPath) -> Result<(), FieldErrors> {
        let mut errs = FieldErrors::new();
        if self.bind_timeout_seconds < 0 {
            errs.push(
                path.child("bindTimeoutSeconds"),
                format!(
                    "Invalid value: {}: invalid BindTimeoutSeconds, should not be a negative value",
                    self.bind_timeout_seconds
                ),
            );
        }
        if self.bind_timeout_seconds > MAX_BIND_TIMEOUT_SECONDS {
            errs.push(
                path.child("bindTimeoutSeconds"),
                format!(
                    "Invalid value: {}: must be at most {MAX_BIND_TIMEOUT_SECONDS} (a day): PreBind \
                     holds the pod's binding cycle that long",
                    self.bind_timeout_seconds
                ),
            );
        }
        if let Some(shape) = &self.shape {
            let at = path.child("shape");
            if shape.is_empty() {
                errs.push(&at, "Required value: at least one point must be specified");
            }
            if let Some(i) =
                (1..shape.len()).find(|&i| shape[i - 1].utilization >= shape[i].utilization)
            {
                errs.push(
                    at.index(i).child("utilization"),
                    format!(
                        "Invalid value: {}: values must be sorted in increasing order",
                        shape[i].utilization
                    ),
                );
            }
            for (i, p) in shape.iter().enumerate() {
                if !(0..=100).contains(&p.utilization) {
                    errs.push(
                        at.index(i).child("utilization"),
                        format!(
                            "Invalid value: {}: not in valid range [0, 100]",
                            p.utilization
                        ),
                    );
                }
                if !(0..=10).contains(&p.score) {
                    errs.push(
                        at.index(i).child("score"),
                        format!("Invalid value: {}: not in valid range [0, 10]", p.score),
                    );
                }
            }
        }
        if errs.is_empty() { Ok(()) } else { Err(errs) }
    }
}

/// The score for a utilization, on the broken line through the shape's points (their scores
/// scaled to 0–100): flat before the first point and after the last.
pub fn shape_score(shape: &[ShapePoint], utilization: i64) -> i64 {
    let scaled = |p: &ShapePoint| i64::from(p.score) * 10;
    for (i, p) in shape.iter().enumerate() {
        let u = i64::from(p.utilization);
        if utilization <= u {
            if i == 0 {
                return scaled(p);
            }
            let prev = &shape[i - 1];
            let pu = i64::from(prev.utilization);
            return scaled(prev) + (scaled(p) - scaled(prev)) * (utilization - pu) / (u - pu);
        }
    }
    shape.last().map(scaled).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::scheduler::framework::validation::decode_args;

    fn check(args: serde_json::Value) -> Result<VolumeBindingArgs, Vec<(String, String)>> {
        let path: FieldPath = "pluginConfig[0].args".into();
        let args = decode_args::<VolumeBindingArgs>(Some(&args), &path)
            .map_err(|e| {
                e.0.into_iter()
                    .map(|f| (f.path, f.message))
                    .collect::<Vec<_>>()
            })?
            .defaulted();
        args.validate(&path).map_err(|e| {
            e.0.into_iter()
                .map(|f| (f.path, f.message))
                .collect::<Vec<_>>()
        })?;
        Ok(args)
    }

    #[test]
    fn args_default_and_validate_as_upstream() {
        assert_eq!(
            check(json!({})).expect("defaults").bind_timeout_seconds,
            600
        );
        assert_eq!(
            check(json!({"bindTimeoutSeconds": -10})).unwrap_err(),
            [(
                "pluginConfig[0].args.bindTimeoutSeconds".to_string(),
                "Invalid value: -10: invalid BindTimeoutSeconds, should not be a negative value"
                    .to_string()
            )]
        );
        assert_eq!(
            check(json!({"bindTimeoutSeconds": i64::MAX})).unwrap_err()[0].0,
            "pluginConfig[0].args.bindTimeoutSeconds"
        );
        assert!(check(json!({"bindTimeoutSeconds": 86_400})).is_ok());
        assert_eq!(
            check(json!({"shape": []})).expect("defaulted").shape,
            Some(default_shape()),
            "an empty shape is defaulted before it is validated, as upstream"
        );
        assert_eq!(
            check(json!({})).expect("defaults").shape,
            Some(default_shape())
        );
        let errs = check(json!({"shape": [
            {"utilization": 50, "score": 1}, {"utilization": 40, "score": 11}
        ]}))
        .unwrap_err();
        assert_eq!(
            errs,
            [
                (
                    "pluginConfig[0].args.shape[1].utilization".to_string(),
                    "Invalid value: 40: values must be sorted in increasing order".to_string()
                ),
                (
                    "pluginConfig[0].args.shape[1].score".to_string(),
                    "Invalid value: 11: not in valid range [0, 10]".to_string()
                ),
            ]
        );
        assert!(
            check(json!({"shapes": []})).is_err(),
            "unknown fields are refused"
        );
    }

    #[test]
    fn the_shape_is_a_broken_line() {
        let default = [
            ShapePoint {
                utilization: 0,
                score: 10,
            },
            ShapePoint {
                utilization: 100,
                score: 0,
            },
        ];
        assert_eq!(shape_score(&default, 10), 90);
        assert_eq!(shape_score(&default, 50), 50);
        assert_eq!(shape_score(&default, 100), 0);
        let steps = [
            ShapePoint {
                utilization: 20,
                score: 2,
            },
            ShapePoint {
                utilization: 60,
                score: 8,
            },
        ];
        assert_eq!(shape_score(&steps, 0), 20);
        assert_eq!(shape_score(&steps, 40), 50);
        assert_eq!(shape_score(&steps, 90), 80);
    }
}
