//! Kubernetes' semver library for CEL (k8s.io/apiserver/pkg/cel/library's semverlib.go):
//! `semver`, `isSemver` and the member functions of `kubernetes.Semver`.

use std::any::Any;
use std::cmp::Ordering;

use ::cel::common::types::{BOOL_TYPE, CelBool, CelString, STRING_TYPE, Type};
use ::cel::common::value::{CowVal, StaticVal, Val};
use ::cel::{DeclarationError, Env, ExecutionError};

use super::overloads::{boolean, downcast, int, ordering, take_args};

static SEMVER_TYPE: Type = Type::new_unspecified_type("kubernetes.Semver");

/// ordered as blang/semver v4 (semver.org 2.0.0; build metadata is checked, then ignored).
///
/// Written here rather than taken from the `semver` crate: that crate is only in Cargo.lock
/// through other crates, and it orders versions by their build metadata, which upstream
/// ignores.
#[derive(Clone, Debug)]
pub(super) struct Semver {
    major: u64,
    minor: u64,
    patch: u64,
    pre: Vec<Prerelease>,
}

/// One dot-separated prerelease identifier. Numeric ones sort before alphanumeric ones, each
/// kind in its own order, as the derived ordering does.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Prerelease {
    Numeric(u64),
    Alphanumeric(String),
}

fn is_identifier_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-'
}

/// A version component: digits, without a leading zero (blang's texts).
fn version_number(s: &str, what: &str) -> Result<u64, String> {
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("Invalid character(s) found in {what} number {s:?}"));
    }
    if s.len() > 1 && s.starts_with('0') {
        let capitalized = what[..1].to_uppercase() + &what[1..];
        return Err(format!(
            "{capitalized} number must not contain leading zeroes {s:?}"
        ));
    }
    parse_uint(s)
}

/// Go's strconv.ParseUint, with its error texts.
fn parse_uint(s: &str) -> Result<u64, String> {
    s.parse::<u64>().map_err(|e| {
        let why = if s.is_empty() || e.kind() == &std::num::IntErrorKind::InvalidDigit {
            "invalid syntax"
        } else {
            "value out of range"
        };
        format!("strconv.ParseUint: parsing {s:?}: {why}")
    })
}

impl Semver {
    /// Parses `s` strictly, as blang/semver's Parse.
    pub(super) fn parse(s: &str) -> Result<Semver, String> {
        if s.is_empty() {
            return Err("Version string empty".to_owned());
        }
        let parts: Vec<&str> = s.splitn(3, '.').collect();
        let [major, minor, rest] = parts[..] else {
            return Err("No Major.Minor.Patch elements found".to_owned());
        };
        let (rest, build) = match rest.split_once('+') {
            Some((rest, build)) => (rest, Some(build)),
            None => (rest, None),
        };
        let (patch, pre) = match rest.split_once('-') {
            Some((patch, pre)) => (patch, Some(pre)),
            None => (rest, None),
        };
        let mut version = Semver {
            major: version_number(major, "major")?,
            minor: version_number(minor, "minor")?,
            patch: version_number(patch, "patch")?,
            pre: Vec::new(),
        };
        for id in pre.map(|p| p.split('.')).into_iter().flatten() {
            version.pre.push(prerelease(id)?);
        }
        for id in build.map(|b| b.split('.')).into_iter().flatten() {
            if id.is_empty() {
                return Err("Build meta data is empty".to_owned());
            }
            if !id.chars().all(is_identifier_char) {
                return Err(format!(
                    "Invalid character(s) found in build meta data {id:?}"
                ));
            }
        }
        Ok(version)
    }

    /// Parses `s` after upstream's normalization (semver(s, true)): no leading "v", no
    /// leading zeros, and a missing minor or patch taken as 0.
    fn parse_normalized(s: &str) -> Result<Semver, String> {
        let s = s.strip_prefix('v').unwrap_or(s);
        let mut parts: Vec<String> = s
            .splitn(3, '.')
            .map(|part| {
                if part.len() <= 1 {
                    return part.to_owned();
                }
                let trimmed = part.trim_start_matches('0');
                if trimmed.starts_with(|c: char| c.is_ascii_digit()) {
                    trimmed.to_owned()
                } else {
                    format!("0{trimmed}")
                }
            })
            .collect();
        if parts.len() < 3 {
            if parts.last().is_some_and(|p| p.contains(['+', '-'])) {
                return Err("short version cannot contain PreRelease/Build meta data".to_owned());
            }
            parts.resize(3, "0".to_owned());
        }
        Semver::parse(&parts.join("."))
    }

    /// The semver.org precedence of two versions (blang's Compare).
    fn compare(&self, other: &Semver) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => self.pre.cmp(&other.pre),
            })
    }
}

/// One prerelease identifier, as blang's NewPRVersion.
fn prerelease(id: &str) -> Result<Prerelease, String> {
    if id.is_empty() {
        return Err("Prerelease is empty".to_owned());
    }
    if id.bytes().all(|b| b.is_ascii_digit()) {
        if id.len() > 1 && id.starts_with('0') {
            return Err(format!(
                "Numeric PreRelease version must not contain leading zeroes {id:?}"
            ));
        }
        return parse_uint(id).map(Prerelease::Numeric);
    }
    if id.chars().all(is_identifier_char) {
        return Ok(Prerelease::Alphanumeric(id.to_owned()));
    }
    Err(format!("Invalid character(s) found in prerelease {id:?}"))
}

impl Val for Semver {
    fn get_type(&self) -> &Type {
        &SEMVER_TYPE
    }

    fn cel_type() -> &'static Type {
        &SEMVER_TYPE
    }

    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<Semver>()
            .is_some_and(|o| self.compare(o) == Ordering::Equal)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(self.clone())
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for Semver {}

pub(super) fn add_semver_library(env: &mut Env) -> Result<(), DeclarationError> {
    let v = || SEMVER_TYPE.to_owned();
    env.add_type(v())?;
    env.add_overload("semver", "string_to_semver", vec![STRING_TYPE], semver_of)?;
    env.add_overload(
        "semver",
        "string_bool_to_semver",
        vec![STRING_TYPE, BOOL_TYPE],
        semver_of,
    )?;
    env.add_overload("isSemver", "is_semver_string", vec![STRING_TYPE], is_semver)?;
    env.add_overload(
        "isSemver",
        "is_semver_string_bool",
        vec![STRING_TYPE, BOOL_TYPE],
        is_semver,
    )?;
    env.add_member_overload(
        "isGreaterThan",
        "semver_is_greater_than",
        v(),
        vec![v()],
        semver_greater,
    )?;
    env.add_member_overload(
        "isLessThan",
        "semver_is_less_than",
        v(),
        vec![v()],
        semver_less,
    )?;
    env.add_member_overload(
        "compareTo",
        "semver_compare_to",
        v(),
        vec![v()],
        semver_compare,
    )?;
    env.add_member_overload("major", "semver_major", v(), vec![], semver_major)?;
    env.add_member_overload("minor", "semver_minor", v(), vec![], semver_minor)?;
    env.add_member_overload("patch", "semver_patch", v(), vec![], semver_patch)?;
    Ok(())
}

/// The version of `semver(s)` or `semver(s, normalize)`.
fn parse_semver_args(args: &[CowVal<'_, '_>]) -> Result<Result<Semver, String>, ExecutionError> {
    let (s, normalize) = match args {
        [s] => (s, false),
        [s, normalize] => (s, *downcast::<CelBool>(normalize)?.inner()),
        _ => return Err(ExecutionError::invalid_argument_count(2, args.len())),
    };
    let s = downcast::<CelString>(s)?.inner();
    Ok(if normalize {
        Semver::parse_normalized(s)
    } else {
        Semver::parse(s)
    })
}

fn semver_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let version =
        parse_semver_args(&args)?.map_err(|e| ExecutionError::function_error("semver", e))?;
    Ok(CowVal::owned(version))
}

fn is_semver<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    boolean(parse_semver_args(&args)?.is_ok())
}

fn one_semver(args: Vec<CowVal<'_, '_>>) -> Result<Semver, ExecutionError> {
    let [v] = take_args(args)?;
    Ok(downcast::<Semver>(&v)?.clone())
}

fn compare_semvers(args: Vec<CowVal<'_, '_>>) -> Result<Ordering, ExecutionError> {
    let [a, b] = take_args(args)?;
    Ok(downcast::<Semver>(&a)?.compare(downcast::<Semver>(&b)?))
}

fn semver_greater<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    boolean(compare_semvers(args)? == Ordering::Greater)
}

fn semver_less<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    boolean(compare_semvers(args)? == Ordering::Less)
}

fn semver_compare<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    ordering(compare_semvers(args)?)
}

/// A version component as a CEL int; upstream converts the uint64 as it is, this saturates.
fn component<'b, 'v>(n: u64) -> Result<CowVal<'b, 'v>, ExecutionError> {
    int(i64::try_from(n).unwrap_or(i64::MAX))
}

fn semver_major<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    component(one_semver(args)?.major)
}

fn semver_minor<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    component(one_semver(args)?.minor)
}

fn semver_patch<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    component(one_semver(args)?.patch)
}
