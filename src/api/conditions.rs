//! kstatus conditions, built by one helper so that every condition tether writes has a type,
//! status, reason, message, observedGeneration, and a lastTransitionTime that moves only when
//! the status changes.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Sets condition `type_` in `conditions`, keeping its lastTransitionTime when the status
/// did not change. Returns whether anything changed.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
) -> bool {
    let status = if status { "True" } else { "False" };
    let previous = conditions.iter().position(|c| c.type_ == type_);
    let transition = match previous.map(|i| &conditions[i]) {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => Time(jiff::Timestamp::now()),
    };
    let new = Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        observed_generation,
        last_transition_time: transition,
    };
    match previous {
        Some(i) if conditions[i] == new => false,
        Some(i) => {
            conditions[i] = new;
            true
        }
        None => {
            conditions.push(new);
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_with_the_status() {
        let mut cs = Vec::new();
        assert!(set_condition(
            &mut cs,
            "Ready",
            true,
            "Serving",
            "",
            Some(1)
        ));
        let first = cs[0].last_transition_time.clone();
        assert!(
            !set_condition(&mut cs, "Ready", true, "Serving", "", Some(1)),
            "no change"
        );
        assert!(
            set_condition(&mut cs, "Ready", true, "Serving", "", Some(2)),
            "new generation"
        );
        assert_eq!(
            cs[0].last_transition_time, first,
            "same status, same transition time"
        );
        assert!(set_condition(
            &mut cs,
            "Ready",
            false,
            "InvalidSpec",
            "x",
            Some(3)
        ));
        assert_eq!(cs.len(), 1);
        assert_eq!(cs[0].status, "False");
    }
}
