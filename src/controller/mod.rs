//! Reconcilers, one file each: read → compile/validate (pure) → apply → status.

pub mod conditions;
pub mod profile_set;
pub mod scheduling_profile;
pub mod sticky_binding;
