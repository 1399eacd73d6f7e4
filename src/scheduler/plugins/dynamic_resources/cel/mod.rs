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
//! - Quantities are held in nanos as apimachinery's ParseQuantity holds them (rounded up, away
//!   from zero, to a whole nano; binary-suffixed ones capped at `i64::MAX` units) and compared
//!   exactly, but a decimal quantity past what an i128 of nanos holds (about 1.7e29 units)
//!   saturates, and exponents beyond 30 (`1e99`) and numbers of more than 30 digits do not
//!   parse. `isInteger` and `asInteger` answer by value, where upstream's answer no for any
//!   quantity its parser holds as a big decimal (more than 18 digits, `1.5Gi`, `1Pi`, ...),
//!   even a whole one.
//! - Not ported: Kubernetes' other CEL libraries (lists' `isSorted`/`sum`/`min`/`max`/
//!   `indexOf`, sets, URLs, IP/CIDR, format, authz, regex's `find`), the quantity library's
//!   `mul`/`div`/`divInt`, and two-variable comprehensions. An expression calling a function
//!   of the lists, sets, URL, regex, IP or CIDR libraries is refused when it is compiled,
//!   naming the function and its library (the claim's pod fails with that message, and
//!   `tether explain` shows it), not evaluated half-way.
//!
//! # Cost
//!
//! Upstream stops an evaluation past CELSelectorExpressionMaxCost (1,000,000 units, about a
//! tenth of a second) and the API server refuses, when an expression is created, one whose
//! estimated worst case is above it. cel-rust tracks no cost, so what is bounded here is the
//! expression's length (upstream's 10 KiB, refused at compile time), its nesting (cel-rust's
//! parser refuses more than 96 levels of recursion) and the input (a device has at most
//! upstream's attribute and capacity limits). Loops are not, as they run: nested comprehensions
//! over literal lists (`[1, ..., 10].all(x, [1, ..., 10].all(y, ...))`, seven deep) would run
//! to the end instead of failing "actual cost limit exceeded". So the cost is bounded when an expression is
//! compiled instead: a worst-case estimate (each comprehension's body once per element of the
//! largest collection it may iterate: a literal list's length, else 32, which a device's data
//! bounds as upstream's estimator bounds it) past upstream's 1,000,000 is refused (`estimated cost … exceeds the limit`), as the
//! API server's own estimate refuses such expressions when they are written.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock};

use ::cel::common::ast::{ComprehensionExpr, EntryExpr, Expr, IdedExpr, ListExpr, LiteralValue};
use ::cel::common::traits::{Container, Indexer, Iterable, Iterator as CelIterator, Sizer};
use ::cel::common::types::{
    CelBool, CelInt, CelList, CelMap, CelMapKey, CelString, DYN_TYPE, Kind, MAP_TYPE, Type,
};
use ::cel::common::value::{CowVal, Val};
use ::cel::parser::{Macro, MacroExprHelper, ParseError};
use ::cel::{Context, DeclarationError, Env, ExecutionError, Program, Value};
use k8s_openapi::api::resource::v1::{DeviceAttribute, DeviceCapacity};

mod overloads;
mod quantity;
mod semver;
#[cfg(test)]
mod tests;

use self::overloads::{boolean, take_args};
use self::quantity::{Quantity, add_quantity_library};
use self::semver::{Semver, add_semver_library};

/// Upstream's CELSelectorExpressionMaxLength: the longest selector expression, in bytes.
pub const CEL_SELECTOR_EXPRESSION_MAX_LENGTH: usize = 10 * 1024;

/// Upstream's CELSelectorExpressionMaxCost: the cost at which an evaluation is stopped.
pub const CEL_SELECTOR_EXPRESSION_MAX_COST: u64 = 1_000_000;

/// The most elements a collection an expression iterates over can have when the expression
/// alone does not say, as upstream's size estimator bounds a device's data: a device has at most
/// 32 attributes and capacities.
const MAX_UNKNOWN_SIZE: u64 = 32;

/// The most parts `split` makes of an attribute's string (at most 64 characters).
const MAX_SPLIT_SIZE: u64 = 64;

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
    /// The expression's estimated worst-case cost is past upstream's
    /// CELSelectorExpressionMaxCost: an evaluation could run past the limit upstream stops it
    /// at.
    #[error(
        "estimated cost {cost} exceeds the limit of {max}: the expression could run past the cost at which an evaluation is stopped"
    )]
    TooCostly { cost: u64, max: u64 },
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
        let cost = estimated_cost(root);
        if cost > CEL_SELECTOR_EXPRESSION_MAX_COST {
            return Err(CelError::TooCostly {
                cost,
                max: CEL_SELECTOR_EXPRESSION_MAX_COST,
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
        self.matches_prepared(&Prepared::new(device)?)
    }

    /// As [`Selector::matches`], on a device whose `device` variable is built already: the
    /// allocator asks a device the class's selectors and then the request's.
    pub fn matches_prepared(&self, device: &Prepared<'_>) -> Result<bool, CelError> {
        let result = Value::resolve_val(self.program.expression(), &device.context)
            .map_err(runtime_error)?;
        match result.downcast_ref::<CelBool>() {
            Some(matched) => Ok(*matched.inner()),
            None => Err(CelError::NotBool {
                found: result.get_type().name().to_owned(),
            }),
        }
    }
}

/// A device's `device` variable, built once (its attributes typed, its capacities parsed) for
/// every selector asked about it.
pub struct Prepared<'a> {
    context: Context<'a, 'a>,
}

impl<'a> Prepared<'a> {
    pub fn new(device: &DeviceView<'a>) -> Result<Self, CelError> {
        let env = environment()?;
        let value = device_value(device)?;
        let mut context = Context::with_env(Arc::clone(env));
        context.add_variable_as_val(DEVICE_VAR, Box::new(value));
        Ok(Prepared { context })
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
            if let Some(library) = unported_library(&call.func_name) {
                return Err((
                    expr.id,
                    format!(
                        "function '{}' of Kubernetes' CEL {library} library is not supported by tether yet",
                        call.func_name
                    ),
                ));
            }
            if let Some(target) = &call.target {
                if let Expr::Ident(ns) = &target.expr
                    && ns == "sets"
                    && !scope.contains(&ns.as_str())
                {
                    return Err((
                        expr.id,
                        format!(
                            "function 'sets.{}' of CEL's sets library is not supported by tether yet",
                            call.func_name
                        ),
                    ));
                }
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

/// The Kubernetes CEL library a function upstream's selector environment has belongs to, for
/// the functions this environment does not port (refused when an expression is compiled, with
/// this name, rather than failing when it is evaluated). Lists' `indexOf`/`lastIndexOf` are
/// not here: the strings extension's, on strings, are ported.
fn unported_library(function: &str) -> Option<&'static str> {
    Some(match function {
        "isSorted" | "sum" | "min" | "max" => "lists",
        "url" | "isURL" | "getScheme" | "getHost" | "getHostname" | "getPort"
        | "getEscapedPath" | "getQuery" => "URL",
        "find" | "findAll" => "regex",
        "ip"
        | "isIP"
        | "family"
        | "isUnspecified"
        | "isLoopback"
        | "isLinkLocalMulticast"
        | "isLinkLocalUnicast"
        | "isGlobalUnicast"
        | "isCanonical" => "IP",
        "cidr" | "isCIDR" | "containsIP" | "containsCIDR" | "prefixLength" | "masked" => "CIDR",
        _ => return None,
    })
}

/// The worst-case cost of evaluating `expr`, in cel-go's units roughly (a variable, a field or
/// a call 1, a list 10, a map 30, a literal 0), a comprehension costing its body once per
/// element of the largest collection it may iterate over ([`worst_size`]). cel-rust counts no
/// cost as it evaluates, so an expression whose worst case is past upstream's limit is refused
/// when compiled instead of stopped when evaluated.
fn estimated_cost(expr: &IdedExpr) -> u64 {
    let sum = |items: &mut dyn Iterator<Item = &IdedExpr>| {
        items.fold(0u64, |total, e| total.saturating_add(estimated_cost(e)))
    };
    match &expr.expr {
        Expr::Literal(_) | Expr::Unspecified => 0,
        Expr::Ident(_) => 1,
        Expr::Select(select) => estimated_cost(&select.operand).saturating_add(1),
        Expr::Call(call) => {
            sum(&mut call.target.iter().map(|t| &**t).chain(&call.args)).saturating_add(1)
        }
        Expr::List(list) => sum(&mut list.elements.iter()).saturating_add(10),
        Expr::Map(map) => map.entries.iter().fold(30u64, |total, e| match &e.expr {
            EntryExpr::MapEntry(entry) => total
                .saturating_add(estimated_cost(&entry.key))
                .saturating_add(estimated_cost(&entry.value)),
            EntryExpr::StructField(field) => total.saturating_add(estimated_cost(&field.value)),
        }),
        Expr::Struct(fields) => fields.entries.iter().fold(40u64, |total, e| match &e.expr {
            EntryExpr::MapEntry(entry) => total.saturating_add(estimated_cost(&entry.value)),
            EntryExpr::StructField(field) => total.saturating_add(estimated_cost(&field.value)),
        }),
        Expr::Comprehension(c) => {
            let body = estimated_cost(&c.loop_cond).saturating_add(estimated_cost(&c.loop_step));
            estimated_cost(&c.iter_range)
                .saturating_add(estimated_cost(&c.accu_init))
                .saturating_add(worst_size(&c.iter_range).saturating_mul(body))
                .saturating_add(estimated_cost(&c.result))
        }
    }
}

/// The most elements the collection `expr` evaluates to may have: a literal list's length, a
/// `map`/`filter` result's range's, a `split`'s [`MAX_SPLIT_SIZE`], and otherwise what a
/// device's data bounds ([`MAX_UNKNOWN_SIZE`]).
fn worst_size(expr: &IdedExpr) -> u64 {
    match &expr.expr {
        Expr::List(list) => u64::try_from(list.elements.len()).unwrap_or(u64::MAX),
        Expr::Map(map) => u64::try_from(map.entries.len()).unwrap_or(u64::MAX),
        Expr::Comprehension(c) => worst_size(&c.iter_range),
        Expr::Call(call) if call.func_name == "split" => MAX_SPLIT_SIZE,
        _ => MAX_UNKNOWN_SIZE,
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
// Overloads: `includes` (the helpers shared with the quantity and semver libraries are in
// `overloads.rs`).

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
