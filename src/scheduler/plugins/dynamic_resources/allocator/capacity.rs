//! Consumable capacity (DRAConsumableCapacity, beta and on in 1.37): a device that allows
//! multiple allocations is shared by several claims, each consuming part of its capacities
//! (a NIC's bandwidth, a GPU's memory), as upstream's CmpRequestOverCapacity. What a request
//! consumes of each capacity: what it asks, rounded up as the capacity's `requestPolicy` says
//! (to `validRange`'s next step from `min`, or to the next of `validValues`); a capacity it does
//! not ask for consumes the policy's `default`, else the whole capacity. A device takes the
//! request while what its shares and the ones being allocated consume stays within each
//! capacity's value and the policy holds. Ranges are stepped in whole units, as upstream with
//! DRAFractionalCapacityRange off (its default at 1.37's compatibility version); from 1.38
//! (`fractional`: the gate GA) in thousandths where the range's min, max and step are all exact
//! in thousandths and the step is at least `1m`.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{CapacityRequestPolicy, Device, DeviceCapacity};

use crate::k8s::quantity;

/// No capacities, for a device that names none.
pub(crate) static NO_CAPACITY: BTreeMap<String, DeviceCapacity> = BTreeMap::new();

/// A device's capacities (none when it names none).
pub fn of(device: &Device) -> &BTreeMap<String, DeviceCapacity> {
    device.capacity.as_ref().unwrap_or(&NO_CAPACITY)
}

/// An amount of a capacity: exact, in nano-units, and as the quantity the result shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Amount {
    pub nanos: i128,
    pub text: String,
}

const NANO: i128 = 1_000_000_000;

fn amount(q: &str) -> Result<Amount, String> {
    let (num, den) = quantity::parse_ratio(q).map_err(|e| e.to_string())?;
    let nanos = if den <= NANO {
        num.checked_mul(NANO / den).ok_or("quantity out of range")?
    } else {
        let per = den / NANO;
        num.div_euclid(per) + i128::from(num.rem_euclid(per) != 0)
    };
    Ok(Amount {
        nanos,
        text: q.to_string(),
    })
}

/// Whole units, rounded up (resource.Quantity's Value()).
fn whole(nanos: i128) -> i128 {
    nanos.div_euclid(NANO) + i128::from(nanos.rem_euclid(NANO) != 0)
}

/// What the request consumes of each of the device's capacities, or `None` when it asks for a
/// capacity the device lacks (another device may serve it). `Err`: a request the range
/// arithmetic cannot represent, which fails the attempt.
pub fn consumed(
    requests: &BTreeMap<String, String>,
    capacity: &BTreeMap<String, DeviceCapacity>,
    fractional: bool,
) -> Result<Option<BTreeMap<String, Amount>>, String> {
    if requests.keys().any(|name| !capacity.contains_key(name)) {
        return Ok(None);
    }
    let mut out = BTreeMap::new();
    for (name, cap) in capacity {
        let c = consumed_of(requests.get(name), cap, fractional)
            .map_err(|e| format!("capacity {name:?}: {e}"))?;
        if c.nanos < 0 {
            return Err(format!("capacity {name:?}: capacity value is negative"));
        }
        out.insert(name.clone(), c);
    }
    Ok(Some(out))
}

/// Nano-units per thousandth.
const PER_MILLI: i128 = 1_000_000;

/// `a` in thousandths, when that loses nothing and fits an i64 (upstream's safeMilliValue).
fn exact_milli(a: &Amount) -> Option<i128> {
    (a.nanos.rem_euclid(PER_MILLI) == 0)
        .then_some(a.nanos / PER_MILLI)
        .filter(|m| i64::try_from(*m).is_ok())
}

/// The range's (min, step) in thousandths when 1.38 steps it so (upstream's useMilli): min,
/// max and step all exact in thousandths, the step at least `1m`.
fn milli_range(
    range: &k8s_openapi::api::resource::v1::CapacityRequestPolicyRange,
    fractional: bool,
) -> Option<(i128, i128)> {
    if !fractional {
        return None;
    }
    let milli = |q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity| {
        amount(&q.0).ok().as_ref().and_then(exact_milli)
    };
    let min = milli(&range.min)?;
    if range.max.as_ref().is_some_and(|m| milli(m).is_none()) {
        return None;
    }
    let step = milli(range.step.as_ref()?)?;
    (step >= 1).then_some((min, step))
}

fn consumed_of(
    request: Option<&String>,
    cap: &DeviceCapacity,
    fractional: bool,
) -> Result<Amount, String> {
    let policy = cap.request_policy.as_ref();
    let Some(request) = request else {
        return match policy.and_then(|p| p.default.as_ref()) {
            Some(d) => amount(&d.0),
            None => amount(&cap.value.0),
        };
    };
    let request = amount(request)?;
    let Some(policy) = policy else {
        return Ok(request);
    };
    if let Some(range) = &policy.valid_range {
        let min = amount(&range.min.0)?;
        if request.nanos < min.nanos {
            return Ok(min);
        }
        let Some(step) = &range.step else {
            return Ok(request);
        };
        let step_text = &step.0;
        if let Some((min, step)) = milli_range(range, fractional) {
            let Some(req) = exact_milli(&request) else {
                return Err(format!(
                    "capacity request cannot be represented in the device's range arithmetic: request {} is not a representable milli value",
                    request.text
                ));
            };
            let added = req - min;
            let n = added.div_euclid(step) + i128::from(added.rem_euclid(step) != 0);
            let value = min + step * n;
            if value > i128::from(i64::MAX) {
                return Err(format!(
                    "capacity request cannot be represented in the device's range arithmetic: rounding request {} up to the next step passes the milli-value range",
                    request.text
                ));
            }
            let text = if value % 1000 == 0 {
                format_like(value / 1000, step_text)
            } else {
                format!("{value}m")
            };
            return Ok(Amount {
                nanos: value * PER_MILLI,
                text,
            });
        }
        let step = whole(amount(step_text)?.nanos);
        let (req, min) = (whole(request.nanos), whole(min.nanos));
        if request.nanos > i128::from(i64::MAX) * NANO {
            return Err(format!(
                "capacity request cannot be represented in the device's range arithmetic: request {} exceeds MaxInt64",
                request.text
            ));
        }
        if step <= 0 {
            return Ok(request);
        }
        let added = req - min;
        let n = added.div_euclid(step) + i128::from(added.rem_euclid(step) != 0);
        let value = min + step * n;
        if value > i128::from(i64::MAX) {
            return Err(format!(
                "capacity request cannot be represented in the device's range arithmetic: rounding request {} up to the next step passes MaxInt64",
                request.text
            ));
        }
        return Ok(Amount {
            nanos: value * NANO,
            text: format_like(value, step_text),
        });
    }
    if let Some(values) = &policy.valid_values {
        for v in values {
            let v = amount(&v.0)?;
            if request.nanos <= v.nanos {
                return Ok(v);
            }
        }
    }
    Ok(request)
}

/// Whether `c` breaks the capacity's policy (upstream's violatesPolicy).
fn violates(c: &Amount, policy: Option<&CapacityRequestPolicy>, fractional: bool) -> bool {
    let Some(policy) = policy else {
        return false;
    };
    if policy
        .default
        .as_ref()
        .and_then(|d| amount(&d.0).ok())
        .is_some_and(|d| d.nanos == c.nanos)
    {
        return false;
    }
    if let Some(range) = &policy.valid_range {
        if range
            .max
            .as_ref()
            .and_then(|m| amount(&m.0).ok())
            .is_some_and(|m| c.nanos > m.nanos)
        {
            return true;
        }
        if let Some((min, step)) = milli_range(range, fractional) {
            return exact_milli(c).is_none_or(|c| (c - min).rem_euclid(step) != 0);
        }
        if let (Some(step), Ok(min)) = (&range.step, amount(&range.min.0)) {
            let step = amount(&step.0).map(|s| whole(s.nanos)).unwrap_or(0);
            return step > 0 && (whole(c.nanos) - whole(min.nanos)).rem_euclid(step) != 0;
        }
        return false;
    }
    if let Some(values) = policy.valid_values.as_ref().filter(|v| !v.is_empty()) {
        return !values
            .iter()
            .filter_map(|v| amount(&v.0).ok())
            .any(|v| v.nanos == c.nanos);
    }
    false
}

/// Whether the device has room for `consumed` beside what its shares hold (`allocated`) and
/// what this search is allocating on it (`allocating`), within each capacity's policy.
pub fn fits(
    consumed: &BTreeMap<String, Amount>,
    capacity: &BTreeMap<String, DeviceCapacity>,
    allocated: Option<&BTreeMap<String, i128>>,
    allocating: Option<&BTreeMap<String, i128>>,
    fractional: bool,
) -> bool {
    capacity.iter().all(|(name, cap)| {
        let Some(c) = consumed.get(name) else {
            return true;
        };
        if violates(c, cap.request_policy.as_ref(), fractional) {
            return false;
        }
        let held =
            |m: Option<&BTreeMap<String, i128>>| m.and_then(|m| m.get(name)).copied().unwrap_or(0);
        let total = c
            .nanos
            .saturating_add(held(allocated))
            .saturating_add(held(allocating));
        amount(&cap.value.0).is_ok_and(|v| total <= v.nanos)
    })
}

/// `value` whole units written as resource.Quantity writes a quantity of `like`'s format: a
/// binary suffix (`Ki`…`Ei`) where `like` has one and it divides evenly, else a decimal one
/// (`k`…`E`) where it divides evenly, else the plain number.
pub fn format_like(value: i128, like: &str) -> String {
    let binary = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
        .iter()
        .any(|s| like.ends_with(s));
    if value == 0 {
        return "0".into();
    }
    let (base, suffixes): (i128, [&str; 6]) = if binary {
        (1024, ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"])
    } else {
        (1000, ["k", "M", "G", "T", "P", "E"])
    };
    let mut v = value;
    let mut used = None;
    for s in suffixes {
        if v % base != 0 {
            break;
        }
        v /= base;
        used = Some(s);
    }
    match used {
        Some(s) => format!("{v}{s}"),
        None => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::resource::v1::CapacityRequestPolicyRange;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;

    fn cap(value: &str, policy: Option<CapacityRequestPolicy>) -> BTreeMap<String, DeviceCapacity> {
        [(
            "bandwidth".to_string(),
            DeviceCapacity {
                value: Quantity(value.into()),
                request_policy: policy,
            },
        )]
        .into()
    }

    fn range(min: &str, step: &str, max: Option<&str>) -> CapacityRequestPolicy {
        CapacityRequestPolicy {
            default: None,
            valid_range: Some(CapacityRequestPolicyRange {
                min: Quantity(min.into()),
                step: Some(Quantity(step.into())),
                max: max.map(|m| Quantity(m.into())),
            }),
            valid_values: None,
        }
    }

    fn req(v: &str) -> BTreeMap<String, String> {
        [("bandwidth".to_string(), v.to_string())].into()
    }

    /// 1.38 (DRAFractionalCapacityRange GA) steps a range of thousandths in thousandths; 1.37
    /// rounds min, step and request up to whole units first.
    #[test]
    fn a_fractional_range_is_stepped_in_thousandths_from_1_38() {
        let c = cap("4", Some(range("500m", "500m", None)));
        let got = |fractional| {
            consumed(&req("1.2"), &c, fractional)
                .expect("ok")
                .expect("has it")["bandwidth"]
                .text
                .clone()
        };
        assert_eq!(got(true), "1500m");
        assert_eq!(got(false), "2");
        let whole = cap("4", Some(range("1", "1", None)));
        assert_eq!(
            consumed(&req("1.2"), &whole, true)
                .expect("ok")
                .expect("has it")["bandwidth"]
                .text,
            "2",
            "a whole range steps in whole units written plainly"
        );
        assert!(
            consumed(&req("1.0001"), &c, true).is_err(),
            "a request finer than a thousandth cannot be stepped"
        );
        let at = |q: &str, fractional| {
            fits(
                &consumed(&req(q), &c, fractional)
                    .expect("ok")
                    .expect("has it"),
                &c,
                None,
                None,
                fractional,
            )
        };
        assert!(at("1.5", true));
        assert!(at("1.5", false), "2 whole units, a whole step from 1");
    }

    #[test]
    fn a_request_is_rounded_up_as_the_policy_says() {
        let c = cap("100Gi", Some(range("10Gi", "10Gi", None)));
        let got = consumed(&req("25Gi"), &c, false)
            .expect("ok")
            .expect("has it");
        assert_eq!(got["bandwidth"].text, "30Gi");
        let got = consumed(&req("1Gi"), &c, false)
            .expect("ok")
            .expect("has it");
        assert_eq!(got["bandwidth"].text, "10Gi", "below min: min");
        let got = consumed(&BTreeMap::new(), &c, false)
            .expect("ok")
            .expect("has it");
        assert_eq!(
            got["bandwidth"].text, "100Gi",
            "not asked, no default: all of it"
        );
        assert_eq!(
            consumed(&[("other".to_string(), "1".to_string())].into(), &c, false),
            Ok(None)
        );
    }

    #[test]
    fn shares_fit_while_the_capacity_holds() {
        let c = cap("100Gi", Some(range("10Gi", "10Gi", Some("60Gi"))));
        let thirty = consumed(&req("25Gi"), &c, false)
            .expect("ok")
            .expect("has it");
        let sixty_gi = 60 * (1i128 << 30) * NANO;
        let held: BTreeMap<String, i128> = [("bandwidth".to_string(), sixty_gi)].into();
        assert!(fits(&thirty, &c, None, None, false));
        assert!(
            fits(&thirty, &c, Some(&held), None, false),
            "60 + 30 of 100"
        );
        let more: BTreeMap<String, i128> =
            [("bandwidth".to_string(), 20 * (1i128 << 30) * NANO)].into();
        assert!(
            !fits(&thirty, &c, Some(&held), Some(&more), false),
            "60 + 20 + 30 > 100"
        );
        let seventy = consumed(&req("70Gi"), &c, false)
            .expect("ok")
            .expect("has it");
        assert!(
            !fits(&seventy, &c, None, None, false),
            "past the range's max"
        );
    }

    #[test]
    fn quantities_are_written_as_kubernetes_writes_them() {
        assert_eq!(format_like(30 * 1024 * 1024 * 1024, "10Gi"), "30Gi");
        assert_eq!(format_like(4, "2"), "4");
        assert_eq!(format_like(4000, "1k"), "4k");
        assert_eq!(format_like(1536, "512"), "1536");
    }
}
