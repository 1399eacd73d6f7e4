//! Kubernetes resource quantities ("100m", "1.5Gi", "2e3") as integers, rounded up as
//! apimachinery's `Quantity.Value()` and `MilliValue()` round, or as the exact fraction they
//! denote.

/// A quantity that does not parse, named.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid quantity {0:?}")]
pub struct QuantityError(pub String);

/// Parses a quantity into thousandths of its unit (CPU millicores), rounded up.
/// Values beyond `i64` saturate; malformed input is an error naming the input.
pub fn parse_milli(s: &str) -> Result<i64, QuantityError> {
    let (num, den) = parse_ratio(s)?;
    Ok(ceil_div(num.saturating_mul(1000), den))
}

/// Parses a quantity into whole units (bytes, counts), rounded up.
pub fn parse_value(s: &str) -> Result<i64, QuantityError> {
    let (num, den) = parse_ratio(s)?;
    Ok(ceil_div(num, den))
}

fn ceil_div(num: i128, den: i128) -> i64 {
    let q = num.div_euclid(den) + i128::from(num.rem_euclid(den) != 0);
    q.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// Parses a quantity into the exact fraction `num / den` of its unit, nothing rounded: `num`
/// carries the sign and `den` is a power of ten (1 for whole numbers and binary suffixes), so
/// `1.5Gi` is `(15 * 2^30, 10)` and `1n` is `(1, 10^9)`. More than 30 digits, an exponent
/// beyond ±30, or a fraction past `i128` is an error naming the input, as malformed input is.
pub fn parse_ratio(input: &str) -> Result<(i128, i128), QuantityError> {
    let bad = || QuantityError(input.to_string());
    let s = input.trim();
    let (negative, s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err(bad());
    }
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    // More than 38 significant digits would overflow i128; real quantities never come close.
    if int_part.len() + frac_part.len() > 30 {
        return Err(bad());
    }
    let digits = format!("{int_part}{frac_part}");
    let mut num: i128 = digits.parse().map_err(|_| bad())?;
    let mut den: i128 = 10i128.pow(frac_part.len() as u32);

    let pow10 = |e: i32| -> Result<i128, QuantityError> {
        if e.unsigned_abs() > 30 {
            Err(bad())
        } else {
            Ok(10i128.pow(e.unsigned_abs()))
        }
    };
    let scale_by_pow10 = |e: i32, num: &mut i128, den: &mut i128| -> Result<(), QuantityError> {
        let p = pow10(e)?;
        if e >= 0 {
            *num = num.checked_mul(p).ok_or_else(bad)?;
        } else {
            *den = den.checked_mul(p).ok_or_else(bad)?;
        }
        Ok(())
    };
    match suffix {
        "" => {}
        "n" => scale_by_pow10(-9, &mut num, &mut den)?,
        "u" => scale_by_pow10(-6, &mut num, &mut den)?,
        "m" => scale_by_pow10(-3, &mut num, &mut den)?,
        "k" => scale_by_pow10(3, &mut num, &mut den)?,
        "M" => scale_by_pow10(6, &mut num, &mut den)?,
        "G" => scale_by_pow10(9, &mut num, &mut den)?,
        "T" => scale_by_pow10(12, &mut num, &mut den)?,
        "P" => scale_by_pow10(15, &mut num, &mut den)?,
        "E" => scale_by_pow10(18, &mut num, &mut den)?,
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
            let shift = 10 * (1 + "KMGTPE".find(&suffix[..1]).unwrap_or(0) as u32);
            num = num.checked_mul(1i128 << shift).ok_or_else(bad)?;
        }
        exp if exp.starts_with(['e', 'E']) => {
            let e: i32 = exp[1..].parse().map_err(|_| bad())?;
            scale_by_pow10(e, &mut num, &mut den)?;
        }
        _ => return Err(bad()),
    }
    if negative {
        num = -num;
    }
    Ok((num, den))
}

/// Compares two quantities exactly, as apimachinery's `Quantity.Cmp` does (nothing rounded:
/// `1.8` is more than `1.5`, though both are 2 as whole units). Malformed input is an error.
pub fn compare(a: &str, b: &str) -> Result<std::cmp::Ordering, QuantityError> {
    let (an, ad) = parse_ratio(a)?;
    let (bn, bd) = parse_ratio(b)?;
    // Both denominators are powers of ten of at most 10^60 together with the numerators'
    // 30 digits; a product past i128 is compared on the whole-unit values instead, which only
    // quantities far beyond any real one reach.
    match (an.checked_mul(bd), bn.checked_mul(ad)) {
        (Some(l), Some(r)) => Ok(l.cmp(&r)),
        _ => Ok(ceil_div(an, ad).cmp(&ceil_div(bn, bd))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_exactly_where_whole_units_would_round_alike() {
        use std::cmp::Ordering::*;
        assert_eq!(
            compare("1.8", "1.5"),
            Ok(Greater),
            "both are 2 as whole units"
        );
        assert_eq!(parse_value("1.8"), parse_value("1.5"));
        assert_eq!(compare("1Gi", "1073741824"), Ok(Equal));
        assert_eq!(compare("999m", "1"), Ok(Less));
        assert_eq!(compare("1e3", "1k"), Ok(Equal));
        assert_eq!(compare("-1", "0"), Ok(Less));
        assert!(compare("x", "1").is_err());
    }

    #[test]
    fn parses_the_quantity_forms_kubernetes_accepts() {
        let cases = [
            ("100m", 100, 1),
            ("1", 1000, 1),
            ("1.5", 1500, 2),
            ("0.1", 100, 1),
            ("1k", 1_000_000, 1000),
            ("1Ki", 1_024_000, 1024),
            ("64Gi", 64 * (1 << 30) * 1000, 64 * (1 << 30)),
            ("2e3", 2_000_000, 2000),
            ("1n", 1, 1),
            ("250u", 1, 1),
            ("-1", -1000, -1),
            ("200M", 200_000_000_000, 200_000_000),
        ];
        for (input, milli, value) in cases {
            assert_eq!(parse_milli(input), Ok(milli), "{input} milli");
            assert_eq!(parse_value(input), Ok(value), "{input} value");
        }
    }

    #[test]
    fn ratios_are_exact() {
        let cases = [
            ("1n", 1, 1_000_000_000),
            ("2n", 2, 1_000_000_000),
            ("1.0001", 10_001, 10_000),
            ("-1.5Gi", -15 * (1 << 30), 10),
            ("1e-30", 1, 10i128.pow(30)),
            ("250u", 250, 1_000_000),
            ("12e3", 12_000, 1),
        ];
        for (input, num, den) in cases {
            assert_eq!(parse_ratio(input), Ok((num, den)), "{input}");
        }
        assert!(parse_ratio("1e-31").is_err());
    }

    #[test]
    fn refuses_malformed_quantities() {
        for input in [
            "",
            "m",
            "1.2.3",
            "1Xi",
            "abc",
            "1e",
            "1e99",
            "12345678901234567890123456789012345",
        ] {
            assert!(parse_value(input).is_err(), "{input} should be refused");
        }
    }
}
