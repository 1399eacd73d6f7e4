//! Tests of the selector environment: the expression table, the device conversions, sharing.

use super::*;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

/// A device with owned maps, viewed as the allocator views a slice's device.
struct TestDevice {
    driver: String,
    attributes: BTreeMap<String, DeviceAttribute>,
    capacity: BTreeMap<String, DeviceCapacity>,
    allow_multiple_allocations: Option<bool>,
}

impl TestDevice {
    fn new(driver: &str) -> Self {
        TestDevice {
            driver: driver.to_owned(),
            attributes: BTreeMap::new(),
            capacity: BTreeMap::new(),
            allow_multiple_allocations: None,
        }
    }

    fn attr(mut self, name: &str, attribute: DeviceAttribute) -> Self {
        self.attributes.insert(name.to_owned(), attribute);
        self
    }

    fn cap(mut self, name: &str, value: &str) -> Self {
        let capacity = DeviceCapacity {
            value: ApiQuantity(value.to_owned()),
            ..Default::default()
        };
        self.capacity.insert(name.to_owned(), capacity);
        self
    }

    fn view(&self) -> DeviceView<'_> {
        DeviceView {
            driver: &self.driver,
            attributes: &self.attributes,
            capacity: &self.capacity,
            allow_multiple_allocations: self.allow_multiple_allocations,
        }
    }
}

fn int(i: i64) -> DeviceAttribute {
    DeviceAttribute {
        int: Some(i),
        ..Default::default()
    }
}
fn boolean(b: bool) -> DeviceAttribute {
    DeviceAttribute {
        bool: Some(b),
        ..Default::default()
    }
}
fn string(s: &str) -> DeviceAttribute {
    DeviceAttribute {
        string: Some(s.to_owned()),
        ..Default::default()
    }
}
fn version(v: &str) -> DeviceAttribute {
    DeviceAttribute {
        version: Some(v.to_owned()),
        ..Default::default()
    }
}
fn ints(values: &[i64]) -> DeviceAttribute {
    DeviceAttribute {
        ints: Some(values.to_vec()),
        ..Default::default()
    }
}
fn strings(values: &[&str]) -> DeviceAttribute {
    DeviceAttribute {
        strings: Some(values.iter().map(|s| (*s).to_owned()).collect()),
        ..Default::default()
    }
}
fn versions(values: &[&str]) -> DeviceAttribute {
    DeviceAttribute {
        versions: Some(values.iter().map(|s| (*s).to_owned()).collect()),
        ..Default::default()
    }
}

/// A GPU of driver dra.example.com: unqualified attributes (the driver's domain), one
/// qualified with the driver's domain, one of another domain, and two capacities.
fn gpu() -> TestDevice {
    TestDevice::new("dra.example.com")
        .attr("model", string("a100"))
        .attr("dra.example.com/cores", int(108))
        .attr("ext.example.com/family", string("ampere"))
        .attr("ecc", boolean(true))
        .attr("driverVersion", version("1.2.3"))
        .attr("pcieLanes", ints(&[8, 16]))
        .attr("modes", strings(&["mig", "full"]))
        .attr("firmware", versions(&["1.0.0", "2.0.0-rc.1"]))
        .cap("memory", "40Gi")
        .cap("ext.example.com/slots", "4")
}

#[derive(Debug)]
enum Want {
    Match(bool),
    /// A compile error containing the text.
    CompileError(&'static str),
    /// An evaluation error containing the text.
    MatchError(&'static str),
}
use Want::*;

fn run(expression: &str, device: &TestDevice) -> Result<Result<bool, String>, String> {
    let selector = Selector::compile(expression).map_err(|e| e.to_string())?;
    Ok(selector.matches(&device.view()).map_err(|e| e.to_string()))
}

#[test]
fn selectors_evaluate_as_upstreams() {
    let gpu = gpu();
    let long = format!(
        "{}true",
        "true && ".repeat(CEL_SELECTOR_EXPRESSION_MAX_LENGTH / 8)
    );
    let cases: Vec<(&str, &str, Want)> = vec![
        (
            "driver matches",
            r#"device.driver == "dra.example.com""#,
            Match(true),
        ),
        (
            "driver differs",
            r#"device.driver == "other.example.com""#,
            Match(false),
        ),
        (
            "unqualified attribute is in the driver's domain",
            r#"device.attributes["dra.example.com"].model == "a100""#,
            Match(true),
        ),
        (
            "attribute qualified with the driver's domain",
            r#"device.attributes["dra.example.com"].cores > 100"#,
            Match(true),
        ),
        (
            "attribute of another domain",
            r#"device.attributes["ext.example.com"].family == "ampere""#,
            Match(true),
        ),
        (
            "index syntax for the name",
            r#"device.attributes["dra.example.com"]["model"] == "a100""#,
            Match(true),
        ),
        (
            "bool attribute",
            r#"device.attributes["dra.example.com"].ecc"#,
            Match(true),
        ),
        (
            "missing name is a runtime error",
            r#"device.attributes["dra.example.com"].missing == 1"#,
            MatchError("no such key: missing"),
        ),
        (
            "missing domain reads as an empty map",
            r#"device.attributes["nope.example.com"].model == "a100""#,
            MatchError("no such key: model"),
        ),
        (
            "in on the domains",
            r#""nope.example.com" in device.attributes || !("ext.example.com" in device.attributes)"#,
            Match(false),
        ),
        (
            "in on a domain's names, the missing domain's included",
            r#""model" in device.attributes["dra.example.com"] && !("model" in device.attributes["nope.example.com"])"#,
            Match(true),
        ),
        (
            "has on a name",
            r#"has(device.attributes["dra.example.com"].model) && !has(device.attributes["dra.example.com"].missing)"#,
            Match(true),
        ),
        (
            "guarded lookup of a missing capacity",
            r#"!("memory" in device.capacity["nope.example.com"]) || device.capacity["nope.example.com"].memory.isGreaterThan(quantity("1"))"#,
            Match(true),
        ),
        (
            "optional chaining",
            r#"device.attributes["dra.example.com"].?missing.orValue(7) == 7"#,
            Match(true),
        ),
        (
            "version attribute",
            r#"device.attributes["dra.example.com"].driverVersion.isGreaterThan(semver("1.2.0"))"#,
            Match(true),
        ),
        (
            "version equality ignores build metadata",
            r#"device.attributes["dra.example.com"].driverVersion == semver("1.2.3+build.7")"#,
            Match(true),
        ),
        (
            "prerelease ordering",
            r#"semver("1.0.0-alpha").isLessThan(semver("1.0.0")) && semver("1.0.0-alpha.1").compareTo(semver("1.0.0-alpha.beta")) == -1 && semver("1.0.0-rc.11").compareTo(semver("1.0.0-rc.2")) == 1"#,
            Match(true),
        ),
        (
            "version components",
            r#"semver("2.5.7").major() == 2 && semver("2.5.7").minor() == 5 && semver("2.5.7").patch() == 7"#,
            Match(true),
        ),
        (
            "normalized versions",
            r#"semver("v1.02", true) == semver("1.2.0") && isSemver("v1.2", true) && !isSemver("v1.2") && !isSemver("01.2.3")"#,
            Match(true),
        ),
        (
            "invalid version",
            r#"semver("1.2").major() == 1"#,
            MatchError("No Major.Minor.Patch elements found"),
        ),
        (
            "capacity compared to a quantity",
            r#"device.capacity["dra.example.com"].memory.compareTo(quantity("10Gi")) >= 0"#,
            Match(true),
        ),
        (
            "capacity of another domain",
            r#"device.capacity["ext.example.com"].slots.isLessThan(quantity("5")) && !device.capacity["ext.example.com"].slots.isGreaterThan(quantity("4"))"#,
            Match(true),
        ),
        (
            "quantities compare by value",
            r#"quantity("1Gi") == quantity("1024Mi") && quantity("200M").compareTo(quantity("0.2G")) == 0 && quantity("50M").compareTo(quantity("50Mi")) == -1"#,
            Match(true),
        ),
        (
            "quantity arithmetic",
            r#"quantity("50k").add(20).sub(quantity("100k")).sub(-50000) == quantity("20") && quantity("50k").add(quantity("20k")) == quantity("70k")"#,
            Match(true),
        ),
        (
            "quantity conversions",
            r#"quantity("50k").asInteger() == 50000 && quantity("1000m").isInteger() && !quantity("1.5").isInteger() && quantity("50k").sub(20000).asApproximateFloat() == 30000.0"#,
            Match(true),
        ),
        (
            "quantity that is no integer",
            r#"quantity("1.5").asInteger() == 1"#,
            MatchError("cannot convert value to integer"),
        ),
        (
            "quantity sign",
            r#"quantity("-1").sign() == -1 && quantity("0").sign() == 0 && quantity("3m").sign() == 1"#,
            Match(true),
        ),
        (
            "quantities compare exactly, below a milli too",
            r#"quantity("1n").isLessThan(quantity("2n")) && quantity("2n").isGreaterThan(quantity("1n")) && quantity("1.0001").compareTo(quantity("1")) == 1 && quantity("1") != quantity("1.0001") && quantity("999999999n").compareTo(quantity("1")) == -1"#,
            Match(true),
        ),
        (
            "a capacity compared to the nano",
            r#"device.capacity["ext.example.com"].slots.isGreaterThan(quantity("3999999999n")) && device.capacity["ext.example.com"].slots.isLessThan(quantity("4000000001n"))"#,
            Match(true),
        ),
        (
            "sign and isInteger below a milli",
            r#"quantity("1n").sign() == 1 && quantity("-1n").sign() == -1 && !quantity("1.000000001").isInteger() && quantity("1000000000n").isInteger() && quantity("1n").add(quantity("999999999n")).asInteger() == 1"#,
            Match(true),
        ),
        (
            "quantities are rounded up to a nano, away from zero, as upstream's parser rounds",
            r#"quantity("0.1n") == quantity("1n") && quantity("-0.1n") == quantity("-1n") && quantity("1.0000000001").compareTo(quantity("1.000000001")) == 0"#,
            Match(true),
        ),
        (
            "binary quantities are capped at the largest int64 units, decimal ones are not, as upstream's parser caps",
            r#"quantity("8Ei") == quantity("9223372036854775807") && quantity("-8Ei") == quantity("-9223372036854775807") && quantity("10000000000000000000").isGreaterThan(quantity("9223372036854775807")) && quantity("1e25").compareTo(quantity("9999999999999999999999999")) == 1"#,
            Match(true),
        ),
        (
            "isQuantity",
            r#"isQuantity("1.3Gi") && isQuantity("10000k") && !isQuantity("200K") && !isQuantity("Mi") && !isQuantity("1,3G")"#,
            Match(true),
        ),
        (
            "invalid quantity",
            r#"quantity("200K").sign() == 1"#,
            MatchError("unable to parse quantity's suffix"),
        ),
        (
            "quantities have no < operator",
            r#"quantity("1") < quantity("2")"#,
            MatchError("found no matching overload for '_<_'"),
        ),
        (
            "list attribute with a macro",
            r#"device.attributes["dra.example.com"].pcieLanes.exists(l, l == 16) && "mig" in device.attributes["dra.example.com"].modes"#,
            Match(true),
        ),
        (
            "list of versions",
            r#"device.attributes["dra.example.com"].firmware.all(v, v.isGreaterThan(semver("0.9.0")))"#,
            Match(true),
        ),
        (
            "includes on a scalar and on a list",
            r#"device.attributes["dra.example.com"].model.includes("a100") && device.attributes["dra.example.com"].modes.includes("full") && !device.attributes["dra.example.com"].pcieLanes.includes(4)"#,
            Match(true),
        ),
        (
            "macro on a scalar",
            r#"device.attributes["dra.example.com"].cores.exists(x, x > 0)"#,
            MatchError("expected iterable type"),
        ),
        (
            "allowMultipleAllocations defaults to false",
            "device.allowMultipleAllocations == false",
            Match(true),
        ),
        (
            "cel.bind",
            r#"cel.bind(dra, device.attributes["dra.example.com"], dra.model == "a100" && dra.ecc)"#,
            Match(true),
        ),
        (
            "comprehensions over domains and names",
            r#"device.attributes.exists_one(d, d == "ext.example.com") && size(device.attributes["dra.example.com"]) == 7 && device.capacity.all(d, d.endsWith("example.com"))"#,
            Match(true),
        ),
        (
            "regular expression",
            r#"device.attributes["dra.example.com"].model.matches("^a[0-9]+$")"#,
            Match(true),
        ),
        (
            "strings extension",
            r#"device.attributes["ext.example.com"].family.split("p").size() == 2"#,
            Match(true),
        ),
        (
            "non-bool result",
            r#"device.attributes["dra.example.com"].modes"#,
            MatchError("CEL result of type list could not be converted to bool"),
        ),
        (
            "non-bool literal",
            "1",
            CompileError("must evaluate to bool or the unknown type, not int"),
        ),
        ("syntax error", "?!", CompileError("Syntax error")),
        (
            "unbalanced",
            "device.driver == (",
            CompileError("compilation failed"),
        ),
        (
            "undeclared reference",
            r#"devices.driver == "x""#,
            CompileError("undeclared reference to 'devices'"),
        ),
        (
            "undeclared reference placed as cel-go places it",
            "device.driver == \"é\" &&\n  foo == 1",
            CompileError("ERROR: <input>:2:3: undeclared reference to 'foo' (in container '')"),
        ),
        (
            "a function not ported, named with its library",
            r#"device.attributes["x"].ips.exists(a, ip(a).isLoopback())"#,
            CompileError(
                "function 'isLoopback' of Kubernetes' CEL IP library is not supported by tether yet",
            ),
        ),
        (
            "a worst case past upstream's cost limit is refused (10^6 iterations)",
            "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(a, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(b, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(c, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(d, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(e, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(f, true))))))",
            CompileError("exceeds the limit of 1000000"),
        ),
        (
            "a worst case within it is evaluated (10^4 iterations)",
            "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(a, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(b, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(c, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(d, true))))",
            Match(true),
        ),
        (
            "a sets function not ported",
            r#"sets.contains([1, 2], [1])"#,
            CompileError(
                "function 'sets.contains' of CEL's sets library is not supported by tether yet",
            ),
        ),
        (
            "undefined field",
            r#"device.drivers == "x""#,
            CompileError("undefined field 'drivers'"),
        ),
        (
            "comprehension variables are declared",
            r#"[1, 2].all(x, x > 0) && device.attributes["dra.example.com"].pcieLanes.map(l, l * 2).exists(d, d == 32)"#,
            Match(true),
        ),
        (
            "too long",
            &long,
            CompileError("Too long: may not be more than 10240 bytes"),
        ),
    ];
    assert!(cases.len() >= 20);
    for (name, expression, want) in cases {
        let got = run(expression, &gpu);
        match (&want, &got) {
            (Match(w), Ok(Ok(g))) if w == g => {}
            (CompileError(w), Err(g)) if g.contains(w) => {}
            (MatchError(w), Ok(Err(g))) if g.contains(w) => {}
            _ => panic!("{name}: `{expression}`: want {want:?}, got {got:?}"),
        }
    }
}

#[test]
fn the_maximum_length_compiles() {
    let expression = format!(
        "{:<width$}",
        "true",
        width = CEL_SELECTOR_EXPRESSION_MAX_LENGTH
    );
    assert_eq!(expression.len(), CEL_SELECTOR_EXPRESSION_MAX_LENGTH);
    assert!(Selector::compile(&expression).is_ok());
    assert_eq!(
        Selector::compile(&format!("{expression} ")).err(),
        Some(CelError::TooLong {
            max: CEL_SELECTOR_EXPRESSION_MAX_LENGTH
        })
    );
}

#[test]
fn attributes_that_cannot_be_values_are_errors_whatever_the_expression() {
    let cases = [
        (
            TestDevice::new("d").attr("empty", DeviceAttribute::default()),
            "attribute empty: unsupported attribute value",
        ),
        (
            TestDevice::new("d").attr("v", version("1.02.3")),
            "attribute v: parse semantic version: Minor number must not contain leading zeroes \"02\"",
        ),
        (
            TestDevice::new("d").cap("memory", "1 Gi"),
            "capacity memory: quantities must match the regular expression",
        ),
    ];
    let selector = Selector::compile("true").expect("compiles");
    for (device, want) in cases {
        let got = selector
            .matches(&device.view())
            .expect_err(want)
            .to_string();
        assert!(got.starts_with(want), "want {want:?}, got {got:?}");
    }
}

#[test]
fn a_missing_key_reads_as_upstreams_enhanced_runtime_error() {
    let selector = Selector::compile(r#"device.attributes["d"].missing"#).expect("compiles");
    let err = selector
        .matches(&TestDevice::new("d").view())
        .expect_err("no such key");
    assert_eq!(
        err,
        CelError::NoSuchKey {
            key: "missing".to_owned()
        }
    );
    assert_eq!(
        err.to_string(),
        "no such key: missing. consider using CEL optional chaining (.? followed by orValue()) or guarding the check with has() for optional fields"
    );
}

#[test]
fn allow_multiple_allocations_is_the_devices() {
    let mut device = TestDevice::new("d");
    device.allow_multiple_allocations = Some(true);
    let selector = Selector::compile("device.allowMultipleAllocations").expect("compiles");
    assert_eq!(selector.matches(&device.view()), Ok(true));
}

#[test]
fn selectors_are_shared_across_threads() {
    fn shared<T: Clone + Send + Sync + 'static>(_: &T) {}
    let selector = Selector::compile(r#"device.driver == "d""#).expect("compiles");
    shared(&selector);
    let device = TestDevice::new("d");
    let clone = selector.clone();
    let handle = std::thread::spawn(move || clone.matches(&TestDevice::new("d").view()));
    assert_eq!(handle.join().expect("thread"), Ok(true));
    assert_eq!(selector.matches(&device.view()), Ok(true));
    assert_eq!(selector.expression(), r#"device.driver == "d""#);
}
