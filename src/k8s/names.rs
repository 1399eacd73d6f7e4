//! Kubernetes' name rules, as apimachinery validates them: qualified names (label keys,
//! topology keys, resource names), DNS-1123 subdomains, extended resource names.

/// Why a string is not a qualified name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("prefix must be a DNS subdomain: lower-case alphanumerics, '-' and '.', at most 253")]
    Prefix,
    #[error(
        "name must be at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
    )]
    Name,
}

/// Checks a qualified name (a label key): an optional DNS-1123 subdomain prefix and '/', then
/// a name of at most 63 alphanumerics, '-', '_' or '.', alphanumeric at both ends.
pub fn check_qualified_name(s: &str) -> Result<(), NameError> {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if prefix.is_some_and(|p| !is_dns1123_subdomain(p, 253)) {
        return Err(NameError::Prefix);
    }
    if !is_qualified_name_part(name) {
        return Err(NameError::Name);
    }
    Ok(())
}

fn is_qualified_name_part(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Whether `s` is a label value: empty, or at most 63 alphanumerics, '-', '_' or '.',
/// alphanumeric at both ends.
pub fn is_label_value(s: &str) -> bool {
    s.is_empty() || is_qualified_name_part(s)
}

/// Whether `s` is a DNS-1123 subdomain of at most `max_len` characters.
pub fn is_dns1123_subdomain(s: &str, max_len: usize) -> bool {
    !s.is_empty()
        && s.len() <= max_len
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// Whether `name` is an extended resource (`example.com/gpu`), as kube-scheduler's
/// IsExtendedResourceName: a prefixed name outside the `kubernetes.io/` namespace that stays a
/// qualified name once quota's `requests.` is put in front of it.
pub fn is_extended_resource_name(name: &str) -> bool {
    let Some((prefix, rest)) = name.split_once('/') else {
        return false;
    };
    !name.contains("kubernetes.io/")
        && !name.starts_with("requests.")
        && is_dns1123_subdomain(prefix, 253 - "requests.".len())
        && is_qualified_name_part(rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names_follow_apimachinery() {
        let cases = [
            ("zone", Ok(())),
            ("topology.kubernetes.io/zone", Ok(())),
            ("example.com/my_key.v1", Ok(())),
            ("", Err(NameError::Name)),
            ("-zone", Err(NameError::Name)),
            ("Example.com/zone", Err(NameError::Prefix)),
            ("/zone", Err(NameError::Prefix)),
            ("example.com/", Err(NameError::Name)),
        ];
        for (name, want) in cases {
            assert_eq!(check_qualified_name(name), want, "{name:?}");
        }
        assert!(check_qualified_name(&"a".repeat(64)).is_err(), "too long");
    }
}
