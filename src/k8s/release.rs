//! The Kubernetes release a cluster runs, as tether reads it from the API server's `/version`
//! at start: which minor's kube-scheduler tether schedules as. One binary serves every
//! supported minor; what differs between them is asked of [`Release`] where it differs.

use std::fmt;

use k8s_openapi::apimachinery::pkg::version::Info;

/// A Kubernetes minor release (1.x).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Release {
    minor: u32,
}

/// The oldest and newest minor tether schedules as.
pub const OLDEST: Release = Release { minor: 36 };
pub const NEWEST: Release = Release { minor: 38 };

/// The release tether's unit tests and the default local control plane pin (the newest whose
/// every component builds from the Go module proxy).
pub const REFERENCE: Release = Release { minor: 37 };

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReleaseError {
    #[error("the API server's version {version:?} does not name a Kubernetes 1.x release")]
    Unreadable { version: String },
    #[error(
        "the cluster runs Kubernetes {release}; this tether schedules as kube-scheduler of {oldest} to {newest} (see docs/install.md, \"Compatibility\")"
    )]
    Unsupported {
        release: Release,
        oldest: Release,
        newest: Release,
    },
}

impl Release {
    /// Release 1.`minor`, supported or not.
    pub const fn of_minor(minor: u32) -> Self {
        Release { minor }
    }

    /// The minor number (38 for 1.38).
    pub fn minor(self) -> u32 {
        self.minor
    }

    /// The release `/version` names: `gitVersion` first (`v1.38.0-beta.0`, a vendor's
    /// `v1.37.2-gke.1000`), else `major` and `minor` (a vendor's `minor` may end in `+`).
    pub fn from_info(info: &Info) -> Result<Self, ReleaseError> {
        Self::parse(&info.git_version)
            .or_else(|_| {
                let minor = info.minor.trim_end_matches('+');
                Self::parse(&format!("{}.{minor}", info.major))
            })
            .map_err(|_| ReleaseError::Unreadable {
                version: info.git_version.clone(),
            })
    }

    /// `v1.38.0-beta.0`, `1.37.2`, `1.36`: the minor of a 1.x version.
    pub fn parse(version: &str) -> Result<Self, ReleaseError> {
        let unreadable = || ReleaseError::Unreadable {
            version: version.to_string(),
        };
        let rest = version.strip_prefix('v').unwrap_or(version);
        let mut parts = rest.split('.');
        if parts.next() != Some("1") {
            return Err(unreadable());
        }
        let minor = parts.next().ok_or_else(unreadable)?;
        let digits = minor
            .find(|c: char| !c.is_ascii_digit())
            .map_or(minor, |end| &minor[..end]);
        let minor = digits.parse::<u32>().map_err(|_| unreadable())?;
        Ok(Release { minor })
    }

    /// This release, when tether schedules as its kube-scheduler; else why not.
    pub fn supported(self) -> Result<Self, ReleaseError> {
        if (OLDEST..=NEWEST).contains(&self) {
            Ok(self)
        } else {
            Err(ReleaseError::Unsupported {
                release: self,
                oldest: OLDEST,
                newest: NEWEST,
            })
        }
    }

    /// Whether this release is `minor` or newer.
    pub fn at_least(self, minor: u32) -> bool {
        self.minor >= minor
    }
}

impl Default for Release {
    fn default() -> Self {
        REFERENCE
    }
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1.{}", self.minor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(git_version: &str, major: &str, minor: &str) -> Info {
        Info {
            git_version: git_version.into(),
            major: major.into(),
            minor: minor.into(),
            ..Info::default()
        }
    }

    #[test]
    fn the_release_is_read_from_git_version_then_major_and_minor() {
        let of = |i: Info| Release::from_info(&i).map(Release::minor);
        assert_eq!(of(info("v1.38.0-beta.0", "1", "38")), Ok(38));
        assert_eq!(of(info("v1.37.2-gke.1000", "1", "37+")), Ok(37));
        assert_eq!(of(info("", "1", "36+")), Ok(36));
        assert_eq!(of(info("v1.36.5+k3s1", "", "")), Ok(36));
        assert!(matches!(
            Release::from_info(&info("dev", "", "")),
            Err(ReleaseError::Unreadable { .. })
        ));
        assert!(Release::parse("v2.0.0").is_err());
    }

    #[test]
    fn only_the_supported_minors_are_scheduled_as() {
        for minor in 36..=38 {
            assert_eq!(
                Release::of_minor(minor).supported(),
                Ok(Release::of_minor(minor))
            );
        }
        let refused = Release::of_minor(35).supported().expect_err("1.35");
        assert_eq!(
            refused.to_string(),
            "the cluster runs Kubernetes 1.35; this tether schedules as kube-scheduler of 1.36 to 1.38 (see docs/install.md, \"Compatibility\")"
        );
        assert!(Release::of_minor(39).supported().is_err());
    }
}
