//! The CEL environment of DRA device selectors, as kube-scheduler v1.37.2's DynamicResources
//! plugin compiles and evaluates them (k8s.io/dynamic-resource-allocation/cel: the compiler's
//! stored-expressions environment, the one the scheduler's selector cache uses).
//!
//! An expression sees one variable, `device`, with the fields upstream's `kubernetes.DRADevice`
//! has in 1.37 (every feature's fields: stored expressions ignore the feature gates):
//!
//! - `device.driver`: the driver's name;
//! - `device.allowMultipleAllocations`: the device's field, `false` when unset;
//! - `device.attributes[domain].name`: an attribute whose name is `domain/name`, or just
//!   `name` when its domain is the driver's. Ints, bools and strings are CEL values of those
//!   types, versions are `kubernetes.Semver` values, and the list attributes (`ints`, `bools`,
//!   `strings`, `versions`) are lists of them;
//! - `device.capacity[domain].name`: a capacity, as a `kubernetes.Quantity`.
//!
//! A domain the device has nothing in reads as an empty map, as upstream's map with a default:
//! `"d" in device.attributes` is false (yet `has(device.attributes.d)` is true, as upstream's),
//! and only the lookup of a name in it fails, with "no such key". `"name" in
//! device.attributes["d"]`, `has(device.attributes["d"].name)` and optional chaining
//! (`device.attributes["d"].?name.orValue(x)`) test a name without failing.
//!
//! Besides CEL's standard functions and macros (cel-rust's: `has`, `all`, `exists`,
//! `exists_one`, `map`, `filter`, `size`, `matches`, `startsWith`, ...), the environment has
//! what upstream's has for selectors: the strings extension (`split`, `lowerAscii`, ...),
//! `cel.bind`, `includes` (a list contains a value, or a scalar equals it), and Kubernetes'
//! quantity and semver libraries (`quantity`, `isQuantity`, `semver`, `isSemver` and their
//! member functions).
//!
//! # What is not as upstream
//!
//! - Upstream type-checks an expression when it compiles. cel-rust has no checker: compiling
//!   refuses what can be seen without types (a syntax error, an expression over the maximum
//!   length, an undeclared identifier, a field `device` does not have, a literal that is not a
//!   bool), and the rest (a call with no matching overload, a result that is not a bool) fails
//!   when the expression is evaluated.
//! - Quantities are held in thousandths of their unit, rounded up, which is what
//!   `crate::k8s::quantity` offers: upstream keeps nanos, so quantities less than 1m apart
//!   compare equal here, and values past `i64::MAX` units saturate. `1e99`-style exponents
//!   beyond 30 do not parse.
//! - Not ported: Kubernetes' other CEL libraries (lists' `isSorted`/`sum`/`min`/`max`/
//!   `indexOf`, sets, URLs, IP/CIDR, format, authz, regex's `find`), the quantity library's
//!   `mul`/`div`/`divInt`, and two-variable comprehensions.
//!
//! # Cost
//!
//! Upstream stops an evaluation past CELSelectorExpressionMaxCost (1,000,000 units, about a
//! tenth of a second) and the API server refuses, when an expression is created, one whose
//! estimated worst case is above it. cel-rust tracks no cost, so what is bounded here is the
//! expression's length (upstream's 10 KiB, refused at compile time), its nesting (cel-rust's
//! parser refuses more than 96 levels of recursion) and the input (a device has at most
//! upstream's attribute and capacity limits). Loops are not: nested comprehensions over
//! literal lists (`[1, ..., 10].all(x, [1, ..., 10].all(y, ...))`, seven deep) run to the end
//! instead of failing "actual cost limit exceeded". Expressions reach the scheduler through the API server's
//! validation, whose cost estimate refuses such expressions when they are written.

use std::any::Any;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock};

use ::cel::common::ast::{ComprehensionExpr, EntryExpr, Expr, IdedExpr, ListExpr, LiteralValue};
use ::cel::common::traits::{Container, Indexer, Iterable, Iterator as CelIterator, Sizer};
use ::cel::common::types::{
    BOOL_TYPE, CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelString, DYN_TYPE,
    INT_TYPE, Kind, MAP_TYPE, STRING_TYPE, Type,
};
use ::cel::common::value::{CowVal, FromVal, StaticVal, Val};
use ::cel::parser::{Macro, MacroExprHelper, ParseError};
use ::cel::{Context, DeclarationError, Env, ExecutionError, Program, Value};
use k8s_openapi::api::resource::v1::{DeviceAttribute, DeviceCapacity};

use crate::k8s::quantity;

/// Upstream's CELSelectorExpressionMaxLength: the longest selector expression, in bytes.
pub const CEL_SELECTOR_EXPRESSION_MAX_LENGTH: usize = 10 * 1024;

const DEVICE_VAR: &str = "device";
const DRIVER_VAR: &str = "driver";
const MULTI_ALLOC_VAR: &str = "allowMultipleAllocations";
const ATTRIBUTES_VAR: &str = "attributes";
const CAPACITY_VAR: &str = "capacity";
/// The fields of upstream's `kubernetes.DRADevice`.
const DEVICE_FIELDS: [&str; 4] = [DRIVER_VAR, MULTI_ALLOC_VAR, ATTRIBUTES_VAR, CAPACITY_VAR];
/// Names an expression may use without declaring them: CEL's type names.
const TYPE_NAMES: [&str; 12] = [
    "bool",
    "bytes",
    "double",
    "dyn",
    "int",
    "list",
    "map",
    "null_type",
    "optional_type",
    "string",
    "type",
    "uint",
];
/// Roots of qualified names the environment knows: function namespaces (`optional.of`,
/// `strings.quote`) and type packages (`kubernetes.Quantity`).
const NAMESPACES: [&str; 4] = ["optional", "strings", "kubernetes", "google"];

/// Upstream's EnhanceRuntimeError hint, which the allocator adds to a missing key's error.
const NO_SUCH_KEY_HINT: &str = "consider using CEL optional chaining (.? followed by orValue()) or guarding the check with has() for optional fields";

/// Why a selector did not compile, or could not be evaluated on a device.
#[derive(thiserror::Error, Debug, Clone, PartialEq)]
pub enum CelError {
    /// The expression is longer than upstream's CELSelectorExpressionMaxLength (the API
    /// server's field.TooLong).
    #[error("Too long: may not be more than {max} bytes")]
    TooLong { max: usize },
    /// The expression does not compile; `detail` is in cel-go's issue format
    /// (`ERROR: <input>:line:column: message`).
    #[error("compilation failed: {detail}")]
    Compile { detail: String },
    /// The expression is seen, when compiled, not to evaluate to a bool.
    #[error("must evaluate to bool or the unknown type, not {found}")]
    OutputType { found: String },
    /// The environment could not be built: a bug here, not in the expression.
    #[error("unexpected error loading CEL environment: {0}")]
    Environment(String),
    /// A device attribute without a value, or with a version that does not parse.
    #[error("attribute {name}: {reason}")]
    Attribute { name: String, reason: String },
    /// A device capacity whose value does not parse as a quantity.
    #[error("capacity {name}: {reason}")]
    Capacity { name: String, reason: String },
    /// A map lookup of a missing key, with the hint upstream's allocator adds to it
    /// (EnhanceRuntimeError), so that the allocator's message reads as upstream's.
    #[error("no such key: {key}. {NO_SUCH_KEY_HINT}")]
    NoSuchKey { key: String },
    /// Any other evaluation error, in cel-go's words where they are known.
    #[error("{0}")]
    Runtime(String),
    /// The expression evaluated to a value that is not a bool.
    #[error("CEL result of type {found} could not be converted to bool")]
    NotBool { found: String },
}

/// The device a selector is evaluated on, borrowed from its ResourceSlice (upstream's
/// `cel.Device`). Attribute and capacity names are qualified (`domain/name`) or not (then
/// their domain is the driver's name).
#[derive(Clone, Copy, Debug)]
pub struct DeviceView<'a> {
    pub driver: &'a str,
    pub attributes: &'a BTreeMap<String, DeviceAttribute>,
    pub capacity: &'a BTreeMap<String, DeviceCapacity>,
    pub allow_multiple_allocations: Option<bool>,
}

/// A compiled device selector expression (upstream's CompilationResult), cheap to clone and
/// shared across threads.
#[derive(Clone, Debug)]
pub struct Selector {
    expression: Arc<str>,
    program: Arc<Program>,
}

impl Selector {
    /// Compiles `expression`, refusing what upstream refuses when it compiles and this
    /// environment can see without type-checking: see the module documentation.
    pub fn compile(expression: &str) -> Result<Selector, CelError> {
        if expression.len() > CEL_SELECTOR_EXPRESSION_MAX_LENGTH {
            return Err(CelError::TooLong {
                max: CEL_SELECTOR_EXPRESSION_MAX_LENGTH,
            });
        }
        let program = environment()?
            .compile(expression)
            .map_err(|errors| CelError::Compile {
                detail: errors.to_string(),
            })?;
        let root = program.expression();
        if let Err((id, message)) = check_names(root, &mut Vec::new()) {
            return Err(CelError::Compile {
                detail: located(&program, expression, id, &message),
            });
        }
        if let Some(found) = literal_type(&root.expr) {
            return Err(CelError::OutputType {
                found: found.to_owned(),
            });
        }
        Ok(Selector {
            expression: expression.into(),
            program: Arc::new(program),
        })
    }

    /// The expression as written.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// Evaluates the selector on `device`, as upstream's DeviceMatches: every attribute and
    /// capacity is converted first (one that cannot be is an error even if the expression does
    /// not use it), and a result that is not a bool is an error.
    pub fn matches(&self, device: &DeviceView<'_>) -> Result<bool, CelError> {
        let env = environment()?;
        let value = device_value(device)?;
        let mut context = Context::with_env(Arc::clone(env));
        context.add_variable_as_val(DEVICE_VAR, Box::new(value));
        let result =
            Value::resolve_val(self.program.expression(), &context).map_err(runtime_error)?;
        match result.downcast_ref::<CelBool>() {
            Some(matched) => Ok(*matched.inner()),
            None => Err(CelError::NotBool {
                found: result.get_type().name().to_owned(),
            }),
        }
    }
}

/// The environment every selector compiles and runs in, built once.
static ENVIRONMENT: LazyLock<Result<Arc<Env>, DeclarationError>> =
    LazyLock::new(|| new_environment().map(Arc::new));

fn environment() -> Result<&'static Arc<Env>, CelError> {
    ENVIRONMENT
        .as_ref()
        .map_err(|e| CelError::Environment(e.to_string()))
}

fn new_environment() -> Result<Env, DeclarationError> {
    let mut env = Env::stdlib();
    env.add_extension(::cel::extensions::strings)?;
    env.add_macro(Macro::receiver("bind", 3, expand_bind))?;
    env.add_member_overload(
        "includes",
        "list_includes_dyn_dyn",
        DYN_TYPE,
        vec![DYN_TYPE],
        includes,
    )?;
    add_quantity_library(&mut env)?;
    add_semver_library(&mut env)?;
    Ok(env)
}

/// Expands `cel.bind(name, init, result)` as cel-go's bindings extension: `result` with
/// `name` bound to `init`, evaluated once. A `bind` on anything but `cel` is left alone.
fn expand_bind(
    helper: &mut MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
) -> Result<Option<IdedExpr>, ParseError> {
    if !matches!(target.as_ref().map(|t| &t.expr), Some(Expr::Ident(ns)) if ns == "cel") {
        return Ok(None);
    }
    let name = match args.first() {
        Some(IdedExpr {
            expr: Expr::Ident(name),
            ..
        }) => name.clone(),
        other => {
            let id = other.map_or(0, |a| a.id);
            return Err(
                helper.new_error(id, "cel.bind() variable names must be simple identifiers")
            );
        }
    };
    let (Some(result), Some(init)) = (args.pop(), args.pop()) else {
        return Err(helper.new_error(0, "cel.bind() takes three arguments"));
    };
    target.take();
    let bind = ComprehensionExpr {
        iter_range: helper.next_expr(Expr::List(ListExpr::new(Vec::new()))),
        iter_var: "#unused".to_owned(),
        iter_var2: None,
        accu_var: name.clone(),
        accu_init: init,
        loop_cond: helper.next_expr(Expr::Literal(LiteralValue::Boolean(false.into()))),
        loop_step: helper.next_expr(Expr::Ident(name)),
        result,
    };
    Ok(Some(helper.next_expr(Expr::Comprehension(Box::new(bind)))))
}

/// Finds the first identifier the environment does not declare, and the first field `device`
/// does not have, as upstream's checker refuses them: the id of the expression and the message.
fn check_names<'e>(expr: &'e IdedExpr, scope: &mut Vec<&'e str>) -> Result<(), (u64, String)> {
    let declared = |name: &str, scope: &[&str]| {
        name == DEVICE_VAR || scope.contains(&name) || TYPE_NAMES.contains(&name)
    };
    match &expr.expr {
        Expr::Ident(name) if !declared(name, scope) => Err((
            expr.id,
            format!("undeclared reference to '{name}' (in container '')"),
        )),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => Ok(()),
        Expr::Select(select) => match &select.operand.expr {
            Expr::Ident(root)
                if root == DEVICE_VAR
                    && !scope.contains(&root.as_str())
                    && !DEVICE_FIELDS.contains(&select.field.as_str()) =>
            {
                Err((expr.id, format!("undefined field '{}'", select.field)))
            }
            Expr::Ident(root) if NAMESPACES.contains(&root.as_str()) => Ok(()),
            _ => check_names(&select.operand, scope),
        },
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                match &target.expr {
                    Expr::Ident(root) if NAMESPACES.contains(&root.as_str()) => {}
                    _ => check_names(target, scope)?,
                }
            }
            call.args.iter().try_for_each(|arg| check_names(arg, scope))
        }
        Expr::Comprehension(c) => {
            check_names(&c.iter_range, scope)?;
            check_names(&c.accu_init, scope)?;
            let outer = scope.len();
            scope.push(&c.iter_var);
            scope.extend(c.iter_var2.as_deref());
            scope.push(&c.accu_var);
            check_names(&c.loop_cond, scope)?;
            check_names(&c.loop_step, scope)?;
            check_names(&c.result, scope)?;
            scope.truncate(outer);
            Ok(())
        }
        Expr::List(list) => list.elements.iter().try_for_each(|e| check_names(e, scope)),
        Expr::Map(map) => map.entries.iter().try_for_each(|e| match &e.expr {
            EntryExpr::MapEntry(entry) => {
                check_names(&entry.key, scope)?;
                check_names(&entry.value, scope)
            }
            EntryExpr::StructField(field) => check_names(&field.value, scope),
        }),
        Expr::Struct(fields) => fields.entries.iter().try_for_each(|e| match &e.expr {
            EntryExpr::MapEntry(entry) => check_names(&entry.value, scope),
            EntryExpr::StructField(field) => check_names(&field.value, scope),
        }),
    }
}

/// `message` about expression `id`, placed in `source` as cel-go places its issues.
fn located(program: &Program, source: &str, id: u64, message: &str) -> String {
    let Some((start, _)) = program.source_info().offset_for(id) else {
        return format!("ERROR: <input>: {message}");
    };
    // The offset is in bytes; cel-go counts columns in characters.
    let before = usize::try_from(start)
        .ok()
        .and_then(|start| source.get(..start))
        .unwrap_or(source);
    let line = before.matches('\n').count() + 1;
    let column = before.chars().rev().take_while(|&c| c != '\n').count() + 1;
    format!("ERROR: <input>:{line}:{column}: {message}")
}

/// The type of a root expression that is a literal other than a bool: what upstream's checker
/// refuses as the output of a selector.
fn literal_type(expr: &Expr) -> Option<&'static str> {
    match expr {
        Expr::Literal(LiteralValue::Boolean(_)) => None,
        Expr::Literal(LiteralValue::Int(_)) => Some("int"),
        Expr::Literal(LiteralValue::UInt(_)) => Some("uint"),
        Expr::Literal(LiteralValue::Double(_)) => Some("double"),
        Expr::Literal(LiteralValue::String(_)) => Some("string"),
        Expr::Literal(LiteralValue::Bytes(_)) => Some("bytes"),
        Expr::Literal(LiteralValue::Null) => Some("null_type"),
        Expr::List(_) => Some("list"),
        Expr::Map(_) => Some("map"),
        _ => None,
    }
}

/// An evaluation error in upstream's words: cel-go's texts where cel-rust's differ.
fn runtime_error(e: ExecutionError) -> CelError {
    match e {
        ExecutionError::NoSuchKey(key) => CelError::NoSuchKey {
            key: key.to_string(),
        },
        ExecutionError::FunctionError { message, .. } => CelError::Runtime(message),
        ExecutionError::UndeclaredReference(name) => {
            CelError::Runtime(format!("undeclared reference to '{name}'"))
        }
        ExecutionError::UnexpectedType { got, want } => {
            CelError::Runtime(format!("got '{got}', expected {want} type"))
        }
        ExecutionError::DivisionByZero(_) => CelError::Runtime("division by zero".to_owned()),
        ExecutionError::RemainderByZero(_) => CelError::Runtime("modulus by zero".to_owned()),
        other => CelError::Runtime(other.to_string()),
    }
}

// ---------------------------------------------------------------------------------------------
// The `device` variable.

/// `device`: a map of its four fields, the attributes and capacities grouped by domain.
fn device_value<'a>(device: &DeviceView<'a>) -> Result<CelMap<'a>, CelError> {
    let mut attributes: BTreeMap<&'a str, HashMap<CelMapKey<'a>, Box<dyn Val + 'a>>> =
        BTreeMap::new();
    for (name, attribute) in device.attributes {
        let value = attribute_value(attribute).map_err(|reason| CelError::Attribute {
            name: name.clone(),
            reason,
        })?;
        let (domain, id) = split_qualified_name(name, device.driver);
        attributes
            .entry(domain)
            .or_default()
            .insert(CelMapKey::from(id), value);
    }
    let mut capacity: BTreeMap<&'a str, HashMap<CelMapKey<'a>, Box<dyn Val + 'a>>> =
        BTreeMap::new();
    for (name, cap) in device.capacity {
        let value = Quantity::parse(&cap.value.0).map_err(|reason| CelError::Capacity {
            name: name.clone(),
            reason: reason.to_owned(),
        })?;
        let (domain, id) = split_qualified_name(name, device.driver);
        capacity
            .entry(domain)
            .or_default()
            .insert(CelMapKey::from(id), Box::new(value));
    }
    let fields: [(&str, Box<dyn Val + 'a>); 4] = [
        (DRIVER_VAR, Box::new(CelString::from(device.driver))),
        (
            MULTI_ALLOC_VAR,
            Box::new(CelBool::from(
                device.allow_multiple_allocations.unwrap_or(false),
            )),
        ),
        (ATTRIBUTES_VAR, Box::new(DomainMap::of(attributes))),
        (CAPACITY_VAR, Box::new(DomainMap::of(capacity))),
    ];
    Ok(CelMap::from(
        fields
            .into_iter()
            .map(|(name, value)| (CelMapKey::from(name), value))
            .collect::<HashMap<_, _>>(),
    ))
}

/// Splits a qualified name into its domain and name; an unqualified name's domain is the
/// driver's (upstream's parseQualifiedName).
fn split_qualified_name<'a>(name: &'a str, driver: &'a str) -> (&'a str, &'a str) {
    name.split_once('/').unwrap_or((driver, name))
}

/// The CEL value of an attribute: its one value, lists first, as upstream's getAttributeValue.
fn attribute_value(attribute: &DeviceAttribute) -> Result<Box<dyn Val + '_>, String> {
    fn list<'a>(items: impl Iterator<Item = Box<dyn Val + 'a>>) -> Box<dyn Val + 'a> {
        Box::new(CelList::from(items.collect::<Vec<_>>()))
    }
    let version = |v: &str| Semver::parse(v).map_err(|e| format!("parse semantic version: {e}"));
    if let Some(ints) = &attribute.ints {
        return Ok(list(
            ints.iter()
                .map(|&i| Box::new(CelInt::from(i)) as Box<dyn Val>),
        ));
    }
    if let Some(bools) = &attribute.bools {
        return Ok(list(
            bools
                .iter()
                .map(|&b| Box::new(CelBool::from(b)) as Box<dyn Val>),
        ));
    }
    if let Some(strings) = &attribute.strings {
        return Ok(list(
            strings
                .iter()
                .map(|s| Box::new(CelString::from(s.as_str())) as Box<dyn Val>),
        ));
    }
    if let Some(versions) = &attribute.versions {
        let parsed = versions
            .iter()
            .map(|v| version(v).map(|v| Box::new(v) as Box<dyn Val>))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(list(parsed.into_iter()));
    }
    if let Some(i) = attribute.int {
        return Ok(Box::new(CelInt::from(i)));
    }
    if let Some(b) = attribute.bool {
        return Ok(Box::new(CelBool::from(b)));
    }
    if let Some(s) = &attribute.string {
        return Ok(Box::new(CelString::from(s.as_str())));
    }
    if let Some(v) = &attribute.version {
        return Ok(Box::new(version(v)?));
    }
    Err("unsupported attribute value".to_owned())
}

/// `device.attributes` and `device.capacity`: a map from domain to the map of its names, where
/// looking up a domain the device has nothing in gives an empty map (upstream's
/// newStringInterfaceMapWithDefault). `in`, `size` and the comprehensions see only the
/// domains the device has.
#[derive(Clone, Debug, Default)]
struct DomainMap<'v>(CelMap<'v>);

impl<'v> DomainMap<'v> {
    fn of(domains: BTreeMap<&'v str, HashMap<CelMapKey<'v>, Box<dyn Val + 'v>>>) -> Self {
        DomainMap(CelMap::from(
            domains
                .into_iter()
                .map(|(domain, names)| {
                    let names: Box<dyn Val + 'v> = Box::new(CelMap::from(names));
                    (CelMapKey::from(domain), names)
                })
                .collect::<HashMap<_, _>>(),
        ))
    }
}

impl Val for DomainMap<'_> {
    fn get_type(&self) -> &Type {
        &MAP_TYPE
    }

    fn cel_type() -> &'static Type {
        &MAP_TYPE
    }

    fn as_container(&self) -> Option<&dyn Container> {
        Some(self)
    }

    fn as_indexer<'b, 'w>(&'b self) -> Option<&'b (dyn Indexer + 'w)>
    where
        Self: 'w,
    {
        Some(self)
    }

    fn as_iterable<'b, 'w>(&'b self) -> Option<&'b (dyn Iterable + 'w)>
    where
        Self: 'w,
    {
        Some(self)
    }

    fn as_sizer(&self) -> Option<&dyn Sizer> {
        Some(self)
    }

    fn equals(&self, other: &dyn Val) -> bool {
        self.0.equals(other)
    }

    fn clone_as_boxed<'w>(&self) -> Box<dyn Val + 'w>
    where
        Self: 'w,
    {
        Box::new(self.clone())
    }
}

impl Indexer for DomainMap<'_> {
    fn get<'b, 'w>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'w>, ExecutionError>
    where
        Self: 'w,
    {
        match Indexer::get(&self.0, idx) {
            Err(ExecutionError::NoSuchKey(_)) => Ok(CowVal::owned(CelMap::default())),
            found => found,
        }
    }

    fn steal<'w>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'w>, ExecutionError>
    where
        Self: 'w,
    {
        let value = self.get(idx)?.into_owned();
        Ok(value)
    }
}

impl Container for DomainMap<'_> {
    fn contains(&self, value: &dyn Val) -> Result<bool, ExecutionError> {
        Container::contains(&self.0, value)
    }
}

impl Iterable for DomainMap<'_> {
    fn iter<'b, 'w>(&'b self) -> Box<dyn CelIterator<'b, 'w> + 'b>
    where
        Self: 'w,
    {
        Iterable::iter(&self.0)
    }
}

impl Sizer for DomainMap<'_> {
    fn size(&self) -> CelInt {
        Sizer::size(&self.0)
    }
}

// ---------------------------------------------------------------------------------------------
// Overloads: the helpers they share, `includes`, the quantity and semver libraries.

/// `args` as the `N` arguments of an overload.
fn take_args<'b, 'v, const N: usize>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<[CowVal<'b, 'v>; N], ExecutionError> {
    args.try_into()
        .map_err(|args: Vec<_>| ExecutionError::invalid_argument_count(N, args.len()))
}

/// `val` as the `T` its overload was declared for.
fn downcast<'a, 'v, T: FromVal<'a, 'v> + Val>(
    val: &'a CowVal<'_, 'v>,
) -> Result<&'a T, ExecutionError> {
    val.downcast_ref::<T>()
        .ok_or_else(|| ExecutionError::UnexpectedType {
            got: val.get_type().name().to_owned(),
            want: T::cel_type().name().to_owned(),
        })
}

fn boolean<'b, 'v>(b: bool) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(CowVal::owned(CelBool::from(b)))
}

fn int<'b, 'v>(i: i64) -> Result<CowVal<'b, 'v>, ExecutionError> {
    Ok(CowVal::owned(CelInt::from(i)))
}

/// `compareTo`'s result: -1, 0 or 1.
fn ordering<'b, 'v>(o: Ordering) -> Result<CowVal<'b, 'v>, ExecutionError> {
    int(o as i64)
}

/// `target.includes(item)`: whether the list `target` has an element equal to `item`, or the
/// scalar `target` equals it (upstream's lists library, version 1).
fn includes<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [target, item] = take_args(args)?;
    let target: &(dyn Val + 'v) = target.as_ref();
    if target.get_type().kind() != Kind::List {
        return boolean(target.equals(item.as_ref()));
    }
    let Some(list) = target.as_iterable() else {
        return boolean(false);
    };
    let mut elements = list.iter();
    while let Some(element) = elements.next() {
        if element.equals(item.as_ref()) {
            return boolean(true);
        }
    }
    boolean(false)
}

static QUANTITY_TYPE: Type = Type::new_unspecified_type("kubernetes.Quantity");
static SEMVER_TYPE: Type = Type::new_unspecified_type("kubernetes.Semver");

/// Upstream's quantity parse errors (apimachinery's ErrFormatWrong, ErrNumeric, ErrSuffix).
const ERR_FORMAT_WRONG: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
const ERR_NUMERIC: &str = "unable to parse numeric part of quantity";
const ERR_SUFFIX: &str = "unable to parse quantity's suffix";

/// A Kubernetes quantity as a CEL value, of type `kubernetes.Quantity` as upstream's. It is
/// held in thousandths of its unit, rounded up, as `crate::k8s::quantity` parses it: see the
/// module documentation for what that changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Quantity {
    milli: i128,
}

impl Quantity {
    /// Parses `s` as apimachinery's ParseQuantity, with its error texts.
    fn parse(s: &str) -> Result<Quantity, &'static str> {
        // Upstream takes the string as it is: surrounding blanks do not match its format.
        if s.is_empty() || s.trim() != s {
            return Err(ERR_FORMAT_WRONG);
        }
        let refused = |_| quantity_error(s);
        let milli = quantity::parse_milli(s).map_err(refused)?;
        if milli != i64::MAX && milli != i64::MIN {
            return Ok(Quantity {
                milli: i128::from(milli),
            });
        }
        // Too large for thousandths in an i64: whole units are exact up to i64::MAX.
        let value = quantity::parse_value(s).map_err(refused)?;
        Ok(Quantity {
            milli: i128::from(value) * 1000,
        })
    }

    fn checked(milli: Option<i128>) -> Result<Quantity, ExecutionError> {
        milli
            .map(|milli| Quantity { milli })
            .ok_or_else(|| ExecutionError::function_error("quantity", "quantity overflow"))
    }

    /// The quantity as an int64, if it is a whole number that fits (upstream's AsInt64).
    fn as_int64(self) -> Option<i64> {
        (self.milli % 1000 == 0)
            .then(|| i64::try_from(self.milli / 1000).ok())
            .flatten()
    }
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

fn add_quantity_library(env: &mut Env) -> Result<(), DeclarationError> {
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
        i128::from(*downcast::<CelInt>(&i)?.inner()) * 1000,
    ))
}

fn quantity_sign<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    int(one_quantity(args)?.milli.signum() as i64)
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
    Ok(CowVal::owned(CelDouble::from(q.milli as f64 / 1000.0)))
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
        a.milli.checked_add(b.milli),
    )?))
}

fn quantity_add_int<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, milli) = quantity_and_int(args)?;
    Ok(CowVal::owned(Quantity::checked(
        a.milli.checked_add(milli),
    )?))
}

fn quantity_sub<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, b) = two_quantities(args)?;
    Ok(CowVal::owned(Quantity::checked(
        a.milli.checked_sub(b.milli),
    )?))
}

fn quantity_sub_int<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (a, milli) = quantity_and_int(args)?;
    Ok(CowVal::owned(Quantity::checked(
        a.milli.checked_sub(milli),
    )?))
}

/// A semantic version as a CEL value, of type `kubernetes.Semver` as upstream's, parsed and
/// ordered as blang/semver v4 (semver.org 2.0.0; build metadata is checked, then ignored).
///
/// Written here rather than taken from the `semver` crate: that crate is only in Cargo.lock
/// through other crates, and it orders versions by their build metadata, which upstream
/// ignores.
#[derive(Clone, Debug)]
struct Semver {
    major: u64,
    minor: u64,
    patch: u64,
    pre: Vec<Prerelease>,
}

/// One dot-separated prerelease identifier. Numeric ones sort before alphanumeric ones, each
/// kind in its own order, as the derived ordering does.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Prerelease {
    Numeric(u64),
    Alphanumeric(String),
}

fn is_identifier_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-'
}

/// A version component: digits, without a leading zero (blang's texts).
fn version_number(s: &str, what: &str) -> Result<u64, String> {
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("Invalid character(s) found in {what} number {s:?}"));
    }
    if s.len() > 1 && s.starts_with('0') {
        let capitalized = what[..1].to_uppercase() + &what[1..];
        return Err(format!(
            "{capitalized} number must not contain leading zeroes {s:?}"
        ));
    }
    parse_uint(s)
}

/// Go's strconv.ParseUint, with its error texts.
fn parse_uint(s: &str) -> Result<u64, String> {
    s.parse::<u64>().map_err(|e| {
        let why = if s.is_empty() || e.kind() == &std::num::IntErrorKind::InvalidDigit {
            "invalid syntax"
        } else {
            "value out of range"
        };
        format!("strconv.ParseUint: parsing {s:?}: {why}")
    })
}

impl Semver {
    /// Parses `s` strictly, as blang/semver's Parse.
    fn parse(s: &str) -> Result<Semver, String> {
        if s.is_empty() {
            return Err("Version string empty".to_owned());
        }
        let parts: Vec<&str> = s.splitn(3, '.').collect();
        let [major, minor, rest] = parts[..] else {
            return Err("No Major.Minor.Patch elements found".to_owned());
        };
        let (rest, build) = match rest.split_once('+') {
            Some((rest, build)) => (rest, Some(build)),
            None => (rest, None),
        };
        let (patch, pre) = match rest.split_once('-') {
            Some((patch, pre)) => (patch, Some(pre)),
            None => (rest, None),
        };
        let mut version = Semver {
            major: version_number(major, "major")?,
            minor: version_number(minor, "minor")?,
            patch: version_number(patch, "patch")?,
            pre: Vec::new(),
        };
        for id in pre.map(|p| p.split('.')).into_iter().flatten() {
            version.pre.push(prerelease(id)?);
        }
        for id in build.map(|b| b.split('.')).into_iter().flatten() {
            if id.is_empty() {
                return Err("Build meta data is empty".to_owned());
            }
            if !id.chars().all(is_identifier_char) {
                return Err(format!(
                    "Invalid character(s) found in build meta data {id:?}"
                ));
            }
        }
        Ok(version)
    }

    /// Parses `s` after upstream's normalization (semver(s, true)): no leading "v", no
    /// leading zeros, and a missing minor or patch taken as 0.
    fn parse_normalized(s: &str) -> Result<Semver, String> {
        let s = s.strip_prefix('v').unwrap_or(s);
        let mut parts: Vec<String> = s
            .splitn(3, '.')
            .map(|part| {
                if part.len() <= 1 {
                    return part.to_owned();
                }
                let trimmed = part.trim_start_matches('0');
                if trimmed.starts_with(|c: char| c.is_ascii_digit()) {
                    trimmed.to_owned()
                } else {
                    format!("0{trimmed}")
                }
            })
            .collect();
        if parts.len() < 3 {
            if parts.last().is_some_and(|p| p.contains(['+', '-'])) {
                return Err("short version cannot contain PreRelease/Build meta data".to_owned());
            }
            parts.resize(3, "0".to_owned());
        }
        Semver::parse(&parts.join("."))
    }

    /// The semver.org precedence of two versions (blang's Compare).
    fn compare(&self, other: &Semver) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => self.pre.cmp(&other.pre),
            })
    }
}

/// One prerelease identifier, as blang's NewPRVersion.
fn prerelease(id: &str) -> Result<Prerelease, String> {
    if id.is_empty() {
        return Err("Prerelease is empty".to_owned());
    }
    if id.bytes().all(|b| b.is_ascii_digit()) {
        if id.len() > 1 && id.starts_with('0') {
            return Err(format!(
                "Numeric PreRelease version must not contain leading zeroes {id:?}"
            ));
        }
        return parse_uint(id).map(Prerelease::Numeric);
    }
    if id.chars().all(is_identifier_char) {
        return Ok(Prerelease::Alphanumeric(id.to_owned()));
    }
    Err(format!("Invalid character(s) found in prerelease {id:?}"))
}

impl Val for Semver {
    fn get_type(&self) -> &Type {
        &SEMVER_TYPE
    }

    fn cel_type() -> &'static Type {
        &SEMVER_TYPE
    }

    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<Semver>()
            .is_some_and(|o| self.compare(o) == Ordering::Equal)
    }

    fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v>
    where
        Self: 'v,
    {
        Box::new(self.clone())
    }

    fn as_any(&self) -> Option<&dyn Any> {
        Some(self)
    }
}

impl StaticVal for Semver {}

fn add_semver_library(env: &mut Env) -> Result<(), DeclarationError> {
    let v = || SEMVER_TYPE.to_owned();
    env.add_type(v())?;
    env.add_overload("semver", "string_to_semver", vec![STRING_TYPE], semver_of)?;
    env.add_overload(
        "semver",
        "string_bool_to_semver",
        vec![STRING_TYPE, BOOL_TYPE],
        semver_of,
    )?;
    env.add_overload("isSemver", "is_semver_string", vec![STRING_TYPE], is_semver)?;
    env.add_overload(
        "isSemver",
        "is_semver_string_bool",
        vec![STRING_TYPE, BOOL_TYPE],
        is_semver,
    )?;
    env.add_member_overload(
        "isGreaterThan",
        "semver_is_greater_than",
        v(),
        vec![v()],
        semver_greater,
    )?;
    env.add_member_overload(
        "isLessThan",
        "semver_is_less_than",
        v(),
        vec![v()],
        semver_less,
    )?;
    env.add_member_overload(
        "compareTo",
        "semver_compare_to",
        v(),
        vec![v()],
        semver_compare,
    )?;
    env.add_member_overload("major", "semver_major", v(), vec![], semver_major)?;
    env.add_member_overload("minor", "semver_minor", v(), vec![], semver_minor)?;
    env.add_member_overload("patch", "semver_patch", v(), vec![], semver_patch)?;
    Ok(())
}

/// The version of `semver(s)` or `semver(s, normalize)`.
fn parse_semver_args(args: &[CowVal<'_, '_>]) -> Result<Result<Semver, String>, ExecutionError> {
    let (s, normalize) = match args {
        [s] => (s, false),
        [s, normalize] => (s, *downcast::<CelBool>(normalize)?.inner()),
        _ => return Err(ExecutionError::invalid_argument_count(2, args.len())),
    };
    let s = downcast::<CelString>(s)?.inner();
    Ok(if normalize {
        Semver::parse_normalized(s)
    } else {
        Semver::parse(s)
    })
}

fn semver_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let version =
        parse_semver_args(&args)?.map_err(|e| ExecutionError::function_error("semver", e))?;
    Ok(CowVal::owned(version))
}

fn is_semver<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    boolean(parse_semver_args(&args)?.is_ok())
}

fn one_semver(args: Vec<CowVal<'_, '_>>) -> Result<Semver, ExecutionError> {
    let [v] = take_args(args)?;
    Ok(downcast::<Semver>(&v)?.clone())
}

fn compare_semvers(args: Vec<CowVal<'_, '_>>) -> Result<Ordering, ExecutionError> {
    let [a, b] = take_args(args)?;
    Ok(downcast::<Semver>(&a)?.compare(downcast::<Semver>(&b)?))
}

fn semver_greater<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    boolean(compare_semvers(args)? == Ordering::Greater)
}

fn semver_less<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    boolean(compare_semvers(args)? == Ordering::Less)
}

fn semver_compare<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    ordering(compare_semvers(args)?)
}

/// A version component as a CEL int; upstream converts the uint64 as it is, this saturates.
fn component<'b, 'v>(n: u64) -> Result<CowVal<'b, 'v>, ExecutionError> {
    int(i64::try_from(n).unwrap_or(i64::MAX))
}

fn semver_major<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    component(one_semver(args)?.major)
}

fn semver_minor<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    component(one_semver(args)?.minor)
}

fn semver_patch<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    component(one_semver(args)?.patch)
}

#[cfg(test)]
mod tests {
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
}
