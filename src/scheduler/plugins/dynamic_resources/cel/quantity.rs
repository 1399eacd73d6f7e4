//! Kubernetes' quantity library for CEL (k8s.io/apiserver/pkg/cel/library's quantity.go):
//! `quantity`, `isQuantity` and the member functions of `kubernetes.Quantity`.

use std::any::Any;

use ::cel::common::types::{CelDouble, CelInt, CelString, INT_TYPE, STRING_TYPE, Type};
use ::cel::common::value::{CowVal, StaticVal, Val};
use ::cel::{DeclarationError, Env, ExecutionError};

use super::overloads::{boolean, downcast, int, ordering, take_args};
use crate::k8s::quantity;

static QUANTITY_TYPE: Type = Type::new_unspecified_type("kubernetes.Quantity");

/// Upstream's quantity parse errors (apimachinery's ErrFormatWrong, ErrNumeric, ErrSuffix).
const ERR_FORMAT_WRONG: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
const ERR_NUMERIC: &str = "unable to parse numeric part of quantity";
const ERR_SUFFIX: &str = "unable to parse quantity's suffix";

/// A nano, the smallest quantity upstream holds, in the quantity's unit.
const NANOS_PER_UNIT: i128 = 1_000_000_000;
/// The largest binary-suffixed quantity upstream's parser gives (apimachinery's maxAllowed,
/// `i64::MAX` units), in nanos.
const MAX_BINARY_NANOS: i128 = i64::MAX as i128 * NANOS_PER_UNIT;

/// A Kubernetes quantity as a CEL value, of type `kubernetes.Quantity` as upstream's. It is
/// held as upstream holds it, in whole nanos, so that comparing two quantities is exact as
/// resource.Quantity's Cmp: see the module documentation for where it is not as upstream's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Quantity {
    nanos: i128,
}

impl Quantity {
    /// Parses `s` as apimachinery's ParseQuantity, with its error texts.
    pub(super) fn parse(s: &str) -> Result<Quantity, &'static str> {
        // Upstream takes the string as it is: surrounding blanks do not match its format.
        if s.is_empty() || s.trim() != s {
            return Err(ERR_FORMAT_WRONG);
        }
        let (num, den) = quantity::parse_ratio(s).map_err(|_| quantity_error(s))?;
        // Upstream caps binary-suffixed quantities (`Ki` to `Ei`) only; a decimal one past
        // what i128 nanos hold saturates here.
        let max = if s.ends_with('i') {
            MAX_BINARY_NANOS
        } else {
            i128::MAX
        };
        Ok(Quantity {
            nanos: nanos(num, den, max),
        })
    }

    fn checked(nanos: Option<i128>) -> Result<Quantity, ExecutionError> {
        nanos
            .map(|nanos| Quantity { nanos })
            .ok_or_else(|| ExecutionError::function_error("quantity", "quantity overflow"))
    }

    /// The quantity as an int64, if it is a whole number that fits (upstream's AsInt64).
    fn as_int64(self) -> Option<i64> {
        (self.nanos % NANOS_PER_UNIT == 0)
            .then(|| i64::try_from(self.nanos / NANOS_PER_UNIT).ok())
            .flatten()
    }
}

/// The fraction `num / den` of a unit (`den` a power of ten, as `parse_ratio` gives it) in
/// nanos, as ParseQuantity holds it: the magnitude rounded up to a whole nano (whoever asks
/// for some of a resource gets some) and capped at `max` nanos, then the sign.
fn nanos(num: i128, den: i128, max: i128) -> i128 {
    const NANO: u128 = NANOS_PER_UNIT as u128;
    let magnitude = num.unsigned_abs();
    let den = den.unsigned_abs().max(1);
    let nanos = if den >= NANO {
        magnitude.div_ceil(den / NANO)
    } else {
        magnitude.saturating_mul(NANO / den)
    };
    let capped = nanos.min(max.unsigned_abs()) as i128;
    if num < 0 { -capped } else { capped }
}

/// Which of upstream's errors a quantity that does not parse gets: one that does not have the
/// shape of a quantity, one whose suffix is unknown, or (here, where the number is too large
/// for the parser) one whose number does not parse.
fn quantity_error(s: &str) -> &'static str {
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    let number = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let suffix = &unsigned[number..];
    let letters = suffix.trim_start_matches(|c: char| "eEinumkKMGTP".contains(c));
    let exponent = letters.strip_prefix(['+', '-']).unwrap_or(letters);
    if number == 0 || !exponent.bytes().all(|b| b.is_ascii_digit()) {
        return ERR_FORMAT_WRONG;
    }
    let known = [
        "", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
    ];
    if known.contains(&suffix) || suffix.starts_with(['e', 'E']) {
        ERR_NUMERIC
    } else {
        ERR_SUFFIX
    }
}

impl Val for Quantity {
    fn get_type(&self) -> &Type {
        &QUANTITY_TYPE
    }

    fn cel_type() -> &'static Type {
        &QUANTITY_TYPE
    }

    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<Quantity>() == Some(self)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(*self)
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for Quantity {}

pub(super) fn add_quantity_library(env: &mut Env) -> Result<(), DeclarationError> {
    let q = || QUANTITY_TYPE.to_owned();
    env.add_type(q())?;
    env.add_overload(
        "quantity",
        "string_to_quantity",
        vec![STRING_TYPE],
        quantity_of,
    )?;
    env.add_overload(
        "isQuantity",
        "is_quantity_string",
        vec![STRING_TYPE],
        is_quantity,
    )?;
    env.add_member_overload("sign", "quantity_sign", q(), vec![], quantity_sign)?;
    env.add_member_overload(
        "isGreaterThan",
        "quantity_is_greater_than",
        q(),
        vec![q()],
        quantity_greater,
    )?;
    env.add_member_overload(
        "isLessThan",
        "quantity_is_less_than",
        q(),
        vec![q()],
        quantity_less,
    )?;
    env.add_member_overload(
        "compareTo",
        "quantity_compare_to",
        q(),
        vec![q()],
        quantity_compare,
    )?;
    env.add_member_overload(
        "asApproximateFloat",
        "quantity_get_float",
        q(),
        vec![],
        quantity_float,
    )?;
    env.add_member_overload(
        "asInteger",
        "quantity_get_int",
        q(),
        vec![],
        quantity_integer,
    )?;
    env.add_member_overload(
        "isInteger",
        "quantity_is_integer",
        q(),
        vec![],
        quantity_is_integer,
    )?;
    env.add_member_overload("add", "quantity_add", q(), vec![q()], quantity_add)?;
    env.add_member_overload(
        "add",
        "quantity_add_int",
        q(),
        vec![INT_TYPE],
        quantity_add_int,
    )?;
    env.add_member_overload("sub", "quantity_sub", q(), vec![q()], quantity_sub)?;
    env.add_member_overload(
        "sub",
        "quantity_sub_int",
        q(),
        vec![INT_TYPE],
        quantity_sub_int,
    )?;
    Ok(())
}

fn quantity_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s] = take_args(args)?;
    let q = Quantity::parse(downcast::<CelString>(&s)?.inner())
        .map_err(|e| ExecutionError::function_error("quantity", e))?;
    Ok(CowVal::owned(q))
}

fn is_quantity<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [s] = take_args(args)?;
    boolean(Quantity::parse(downcast::<CelString>(&s)?.inner()).is_ok())
}

fn one_quantity(args: Vec<CowVal<'_, '_>>) -> Result<Quantity, ExecutionError> {
    let [q] = take_args(args)?;
    Ok(*downcast::<Quantity>(&q)?)
}

fn two_quantities(args: Vec<CowVal<'_, '_>>) -> Result<(Quantity, Quantity), ExecutionError> {
    let [a, b] = take_args(args)?;
    Ok((*downcast::<Quantity>(&a)?, *downcast::<Quantity>(&b)?))
}

fn quantity_and_int(args: Vec<CowVal<'_, '_>>) -> Result<(Quantity, i128), ExecutionError> {
    let [q, i] = take_args(args)?;
    Ok((
        *downcast::<Quantity>(&q)?,
        i128::from(*downcast::<CelInt>(&i)?.inner()) * NANOS_PER_UNIT,
    ))
}

fn quantity_sign<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    int(one_quantity(args)?.nanos.signum() as i64)
}

fn quantity_greater<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_quantities(args)?;
    boolean(a > b)
}

fn quantity_less<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_quantities(args)?;
    boolean(a < b)
}

fn quantity_compare<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_quantities(args)?;
    ordering(a.cmp(&b))
}

fn quantity_float<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let q = one_quantity(args)?;
    Ok(CowVal::owned(CelDouble::from(
        q.nanos as f64 / NANOS_PER_UNIT as f64,
    )))
}

fn quantity_integer<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    match one_quantity(args)?.as_int64() {
        Some(i) => int(i),
        None => Err(ExecutionError::function_error(
            "asInteger",
            "cannot convert value to integer",
        )),
    }
}

fn quantity_is_integer<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    boolean(one_quantity(args)?.as_int64().is_some())
}

fn quantity_add<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_quantities(args)?;
    Ok(CowVal::owned(Quantity::checked(
        a.nanos.checked_add(b.nanos),
    )?))
}

fn quantity_add_int<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, nanos) = quantity_and_int(args)?;
    Ok(CowVal::owned(Quantity::checked(
        a.nanos.checked_add(nanos),
    )?))
}

fn quantity_sub<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_quantities(args)?;
    Ok(CowVal::owned(Quantity::checked(
        a.nanos.checked_sub(b.nanos),
    )?))
}

fn quantity_sub_int<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, nanos) = quantity_and_int(args)?;
    Ok(CowVal::owned(Quantity::checked(
        a.nanos.checked_sub(nanos),
    )?))
}
