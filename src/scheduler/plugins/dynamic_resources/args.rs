//! DynamicResources' args, as kube-scheduler's DynamicResourcesArgs with its 1.37 gates on:
//! `filterTimeout` (default 10 s; 0 turns it off) and `bindingTimeout` (default 600 s, at
//! least 1 s), both Go durations (`10s`, `1m30s`, `1.5h`) as `metav1.Duration` reads them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::scheduler::framework::validation::{FieldErrors, FieldPath};

/// How long Filter may take to allocate a pod's claims on one node (upstream's
/// DynamicResourcesFilterTimeoutDefault).
pub const DEFAULT_FILTER_TIMEOUT: Duration = Duration::from_secs(10);

/// The plugin's args.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct DynamicResourcesArgs {
    /// How long allocating the pod's claims on one node may take before the attempt fails
    /// (`node <name>: timed out trying to allocate devices`); `0s` never. Default `10s`.
    pub filter_timeout: Option<String>,
    /// How long PreBind waits for devices' binding conditions from the allocation on. Default
    /// `600s`; at least `1s`.
    pub binding_timeout: Option<String>,
}

/// The args as the plugin uses them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// `None`: no timeout.
    pub filter: Option<Duration>,
    pub binding: Duration,
}

impl DynamicResourcesArgs {
    /// Checks the args as kube-scheduler's ValidateDynamicResourcesArgs, naming fields under
    /// `path`, and gives the timeouts with the defaults filled in.
    pub fn validate(&self, path: &FieldPath) -> Result<Timeouts, FieldErrors> {
        let mut errs = FieldErrors::new();
        let mut read = |field: &str, text: &Option<String>| -> Option<Duration> {
            let text = text.as_deref()?;
            match go_duration(text) {
                Ok(d) => Some(d),
                Err(e) => {
                    errs.push(path.child(field), format!("Invalid value: {text:?}: {e}"));
                    None
                }
            }
        };
        let filter = read("filterTimeout", &self.filter_timeout);
        let binding = read("bindingTimeout", &self.binding_timeout);
        if let (Some(b), Some(text)) = (binding, &self.binding_timeout)
            && b < Duration::from_secs(1)
        {
            errs.push(
                path.child("bindingTimeout"),
                format!("Invalid value: {text:?}: must be at least 1 second"),
            );
        }
        errs.into_result()?;
        let filter = match filter {
            None => Some(DEFAULT_FILTER_TIMEOUT),
            Some(d) if d.is_zero() => None,
            Some(d) => Some(d),
        };
        Ok(Timeouts {
            filter,
            binding: binding.unwrap_or(super::binding::BINDING_TIMEOUT),
        })
    }
}

/// A duration as Go's time.ParseDuration reads it: an optional sign, then numbers (with an
/// optional fraction) each followed by a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`); `0`
/// alone is zero. A negative duration is refused here, as upstream's validation refuses it.
pub fn go_duration(text: &str) -> Result<Duration, String> {
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err("not a duration".into());
    }
    let mut nanos: u128 = 0;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .ok_or("missing unit in duration")?;
        let (number, tail) = rest.split_at(number_end);
        if number.is_empty() || number == "." {
            return Err("not a duration".into());
        }
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_end);
        let per: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err("missing unit in duration".into()),
            other => return Err(format!("unknown unit {other:?} in duration")),
        };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| "not a duration".to_string())?
        };
        let mut part = whole.checked_mul(per).ok_or("duration out of range")?;
        let mut scale = per;
        for digit in fraction.chars() {
            scale /= 10;
            let d = u128::from(digit.to_digit(10).ok_or("not a duration")?);
            part = part.checked_add(d * scale).ok_or("duration out of range")?;
        }
        nanos = nanos.checked_add(part).ok_or("duration out of range")?;
        rest = tail;
    }
    if negative && nanos > 0 {
        return Err("must be zero or positive".into());
    }
    // Go's durations are i64 nanoseconds: about 292 years at the most.
    if nanos > u128::from(i64::MAX.unsigned_abs()) {
        return Err("duration out of range".into());
    }
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| "duration out of range")?;
    let sub = u32::try_from(nanos % 1_000_000_000).map_err(|_| "duration out of range")?;
    Ok(Duration::new(secs, sub))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_go_reads_them() {
        for (text, want) in [
            ("10s", Ok(Duration::from_secs(10))),
            ("1m30s", Ok(Duration::from_secs(90))),
            ("1.5h", Ok(Duration::from_secs(5400))),
            ("250ms", Ok(Duration::from_millis(250))),
            ("0", Ok(Duration::ZERO)),
            ("0s", Ok(Duration::ZERO)),
            ("10", Err("missing unit in duration".to_string())),
            ("10d", Err("unknown unit \"d\" in duration".to_string())),
            ("-1s", Err("must be zero or positive".to_string())),
            (
                "3000000000000000h",
                Err("duration out of range".to_string()),
            ),
            ("2562047h", Ok(Duration::from_secs(2_562_047 * 3600))),
            ("", Err("not a duration".to_string())),
        ] {
            assert_eq!(go_duration(text), want, "{text:?}");
        }
    }

    #[test]
    fn defaults_and_bounds_are_kube_schedulers() {
        let path = FieldPath::new("pluginConfig[0].args");
        let none = DynamicResourcesArgs::default()
            .validate(&path)
            .expect("valid");
        assert_eq!(
            none,
            Timeouts {
                filter: Some(Duration::from_secs(10)),
                binding: Duration::from_secs(600)
            }
        );
        let off = DynamicResourcesArgs {
            filter_timeout: Some("0s".into()),
            binding_timeout: Some("2m".into()),
        }
        .validate(&path)
        .expect("valid");
        assert_eq!(off.filter, None, "0 turns the filter timeout off");
        assert_eq!(off.binding, Duration::from_secs(120));
        let errs = DynamicResourcesArgs {
            filter_timeout: Some("-1s".into()),
            binding_timeout: Some("500ms".into()),
        }
        .validate(&path)
        .expect_err("refused")
        .to_string();
        assert!(
            errs.contains("pluginConfig[0].args.filterTimeout")
                && errs.contains("pluginConfig[0].args.bindingTimeout: Invalid value: \"500ms\": must be at least 1 second"),
            "{errs}"
        );
    }
}
