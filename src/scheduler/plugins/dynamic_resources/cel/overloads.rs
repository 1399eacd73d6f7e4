//! What every overload of the CEL libraries shares (the extension functions here, quantity's
//! and semver's): its arguments taken and typed, its answers made values.

use std::cmp::Ordering;

use ::cel::ExecutionError;
use ::cel::common::types::{CelBool, CelInt};
use ::cel::common::value::{CowVal, FromVal, Val};

/// `args` as the `N` arguments of an overload.
pub(super) fn take_args<'b, 'v, const N: usize>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<[CowVal<'b, 'v>; N], ExecutionError> {
    args.try_into()
        .map_err(|args: Vec<_>| ExecutionError::invalid_argument_count(N, args.len()))
}

/// `val` as the `T` its overload was declared for.
pub(super) fn downcast<'a, 'v, T: FromVal<'a, 'v> + Val>(
    val: &'a CowVal<'_, 'v>,
) -> Result<&'a T, ExecutionError> {
    val.downcast_ref::<T>()
        .ok_or_else(|| ExecutionError::UnexpectedType {
            got: val.get_type().name().to_owned(),
            want: T::cel_type().name().to_owned(),
        })
}

pub(super) fn boolean<'b, 'v>(b: bool) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(CowVal::owned(CelBool::from(b)))
}

pub(super) fn int<'b, 'v>(i: i64) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(CowVal::owned(CelInt::from(i)))
}

/// `compareTo`'s result: -1, 0 or 1.
pub(super) fn ordering<'b, 'v>(o: Ordering) -> Result<CowVal<'b, 'v>, ExecutionError> {
    int(o as i64)
}
