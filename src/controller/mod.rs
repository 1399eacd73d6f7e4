//! Reconcilers, one file each: read → compile/validate (pure) → apply → status.

pub mod scheduling_profile;
pub mod sticky_binding;
