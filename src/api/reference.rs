//! The API reference (docs/reference.md), generated from the CRDs' schemas, so that it says
//! what the API server enforces and `kubectl explain` prints, and cannot drift from them.

use std::fmt::Write as _;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray,
};

/// One line of a description: its paragraphs joined, with what would break a table escaped.
fn one_line(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// The type cell of a field: its type (`[]T` for a list, `map[string]T` for a map, the
/// format), then the constraints the API server checks.
fn type_of(schema: &JSONSchemaProps) -> String {
    let mut kind = match schema.type_.as_deref() {
        Some("array") => {
            let item = match &schema.items {
                Some(JSONSchemaPropsOrArray::Schema(s)) => type_name(s),
                _ => "any".to_string(),
            };
            format!("[]{item}")
        }
        _ => type_name(schema),
    };
    let mut constraints = Vec::new();
    if let Some(values) = &schema.enum_ {
        let values: Vec<String> = values.iter().map(|v| v.0.to_string()).collect();
        constraints.push(format!("one of {}", values.join(", ")));
    }
    if let Some(min) = schema.minimum {
        constraints.push(format!("≥ {min}"));
    }
    if let Some(max) = schema.maximum {
        constraints.push(format!("≤ {max}"));
    }
    if let Some(max) = schema.max_length {
        constraints.push(format!("at most {max} characters"));
    }
    if let Some(max) = schema.max_items {
        constraints.push(format!("at most {max} items"));
    }
    if let Some(pattern) = &schema.pattern {
        constraints.push(format!("matches `{pattern}`"));
    }
    if let Some(default) = &schema.default {
        constraints.push(format!("default `{}`", default.0));
    }
    if !constraints.is_empty() {
        let _ = write!(kind, " ({})", constraints.join("; "));
    }
    kind.replace('|', "\\|")
}

fn type_name(schema: &JSONSchemaProps) -> String {
    match (schema.type_.as_deref(), schema.format.as_deref()) {
        (Some("object"), _) if schema.properties.is_none() => match &schema.additional_properties {
            Some(_) => "map[string]string".to_string(),
            None => "object".to_string(),
        },
        (Some(t), Some(f)) => format!("{t} ({f})"),
        (Some(t), None) => t.to_string(),
        (None, _) if schema.x_kubernetes_int_or_string == Some(true) => "int or string".to_string(),
        (None, _) => "any".to_string(),
    }
}

/// The rows of `schema`'s fields under `path`, depth first.
fn rows(path: &str, schema: &JSONSchemaProps, out: &mut Vec<(String, String, String)>) {
    let required: Vec<&str> = schema
        .required
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(String::as_str)
        .collect();
    for (name, field) in schema.properties.iter().flatten() {
        let here = if path.is_empty() {
            name.clone()
        } else {
            format!("{path}.{name}")
        };
        let mut description = one_line(field.description.as_deref().unwrap_or_default());
        if required.contains(&name.as_str()) {
            description = format!("**Required.** {description}");
        }
        out.push((here.clone(), type_of(field), description));
        match (&field.items, &field.properties) {
            (Some(JSONSchemaPropsOrArray::Schema(item)), _) => {
                rows(&format!("{here}[]"), item, out)
            }
            (_, Some(_)) => rows(&here, field, out),
            _ => {}
        }
    }
}

/// The reference of `crds`, as Markdown.
pub fn markdown(crds: &[CustomResourceDefinition]) -> String {
    let mut out = String::from(
        "# API reference\n\n<!-- Generated from the CRDs' schemas by `tether crd --reference` (`make crds`); a unit test fails when it is stale. Do not edit. -->\n\nThe fields of tether's custom resources, as the API server enforces them and `kubectl explain` prints them. Rules that cross fields (CEL) are listed after each resource's fields.\n",
    );
    for crd in crds {
        let names = &crd.spec.names;
        for version in &crd.spec.versions {
            let _ = write!(
                out,
                "\n## {} ({}/{})\n\n",
                names.kind, crd.spec.group, version.name
            );
            let scope = crd.spec.scope.to_lowercase();
            let short = names.short_names.as_deref().unwrap_or_default().join(", ");
            let _ = writeln!(
                out,
                "{scope}-scoped; plural `{}`{}.\n",
                names.plural,
                if short.is_empty() {
                    String::new()
                } else {
                    format!(", short name `{short}`")
                }
            );
            let Some(schema) = version
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
            else {
                continue;
            };
            if let Some(description) = &schema.description {
                let _ = writeln!(out, "{}\n", one_line(description));
            }
            for part in ["spec", "status"] {
                let Some(section) = schema.properties.as_ref().and_then(|p| p.get(part)) else {
                    continue;
                };
                let _ = writeln!(
                    out,
                    "### {part}\n\n| Field | Type | Description |\n|---|---|---|"
                );
                let mut table = Vec::new();
                rows(part, section, &mut table);
                for (field, kind, description) in table {
                    let _ = writeln!(out, "| `{field}` | {kind} | {description} |");
                }
                out.push('\n');
                let mut rules = Vec::new();
                collect_rules(part, section, &mut rules);
                if !rules.is_empty() {
                    let _ = writeln!(out, "Rules of `{part}`:\n");
                    for (at, rule, message) in rules {
                        let _ = writeln!(out, "- `{at}`: `{rule}` — {message}");
                    }
                    out.push('\n');
                }
            }
        }
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

/// The CEL rules (`x-kubernetes-validations`) under `path`, with their messages.
fn collect_rules(path: &str, schema: &JSONSchemaProps, out: &mut Vec<(String, String, String)>) {
    for v in schema.x_kubernetes_validations.iter().flatten() {
        out.push((
            path.to_string(),
            v.rule.replace('|', "\\|"),
            one_line(v.message.as_deref().unwrap_or_default()),
        ));
    }
    for (name, field) in schema.properties.iter().flatten() {
        collect_rules(&format!("{path}.{name}"), field, out);
    }
    if let Some(JSONSchemaPropsOrArray::Schema(item)) = &schema.items {
        collect_rules(&format!("{path}[]"), item, out);
    }
}
