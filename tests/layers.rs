//! The layers of `src/`, enforced: every module belongs to one layer, and a layer uses only the
//! layers it names below it. docs/ARCHITECTURE.md draws the same table ("Layers").
//!
//! The test walks the module tree from `src/lib.rs` as the compiler does (`mod x;` to `x.rs` or
//! `x/mod.rs`), parses each file with syn, and resolves every `crate::`, `self::` and `super::`
//! path (in `use` trees and in code) to the module it names. Test code (`#[cfg(test)]` items and
//! modules) may use anything: fixtures build whole schedulers. A path that runs up, or sideways
//! into a layer not listed, fails the test with the file, the path and the rule it breaks.

use std::fs;
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// One layer: its name, the modules it holds (a module holds its submodules), and the layers it
/// may use besides itself.
struct Layer {
    name: &'static str,
    modules: &'static [&'static str],
    uses: Uses,
}

/// Which layers below a layer it may use.
enum Uses {
    /// Every layer below it in [`LAYERS`].
    AllBelow,
    /// These alone.
    Only(&'static [&'static str]),
}

/// The layers, from the bottom up.
const LAYERS: &[Layer] = &[
    Layer {
        name: "base",
        modules: &["api", "k8s", "locks"],
        uses: Uses::Only(&[]),
    },
    Layer {
        name: "runtime",
        modules: &[
            "watch",
            "leader",
            "gate",
            "recorder",
            "supervise",
            "inflight",
        ],
        uses: Uses::AllBelow,
    },
    Layer {
        name: "framework",
        modules: &["scheduler::framework"],
        uses: Uses::Only(&["base"]),
    },
    Layer {
        name: "metrics",
        modules: &["scheduler::metrics"],
        uses: Uses::Only(&["base", "framework"]),
    },
    Layer {
        name: "state",
        modules: &["scheduler::informers", "sticky"],
        uses: Uses::AllBelow,
    },
    Layer {
        name: "plugins",
        modules: &["scheduler::plugins"],
        uses: Uses::AllBelow,
    },
    Layer {
        name: "profile",
        modules: &["scheduler::profile"],
        uses: Uses::AllBelow,
    },
    Layer {
        // Beside plugins and profile, not above them: the backend knows the framework's
        // contracts only.
        name: "backend",
        modules: &["scheduler::backend"],
        uses: Uses::Only(&["base", "runtime", "framework", "metrics"]),
    },
    Layer {
        name: "scheduler",
        modules: &[
            "scheduler",
            "scheduler::algorithm",
            "scheduler::binder",
            "scheduler::binding",
            "scheduler::eventhandlers",
            "scheduler::explain",
            "scheduler::failure",
            "scheduler::group_status",
            "scheduler::handoff",
            "scheduler::outcome",
            "scheduler::schedule_one",
            "scheduler::schedule_one_group",
        ],
        uses: Uses::AllBelow,
    },
    Layer {
        name: "app",
        modules: &["controller", "simulate", "endpoints", "cli"],
        uses: Uses::AllBelow,
    },
    Layer {
        name: "process",
        modules: &["run"],
        uses: Uses::AllBelow,
    },
];

impl Layer {
    /// The names of the layers this one may use besides itself.
    fn may_use(&self) -> Vec<&'static str> {
        match self.uses {
            Uses::Only(names) => names.to_vec(),
            Uses::AllBelow => LAYERS
                .iter()
                .take_while(|l| l.name != self.name)
                .map(|l| l.name)
                .collect(),
        }
    }
}

/// The layer of a module path (`scheduler::framework::events`): the layer holding its longest
/// prefix.
fn layer_of(module: &[String]) -> Option<&'static Layer> {
    let mut best: Option<(usize, &'static Layer)> = None;
    for layer in LAYERS {
        for m in layer.modules {
            let parts: Vec<&str> = m.split("::").collect();
            let is_prefix = parts.len() <= module.len()
                && parts.iter().zip(module).all(|(a, b)| *a == b.as_str());
            if is_prefix && best.is_none_or(|(len, _)| parts.len() > len) {
                best = Some((parts.len(), layer));
            }
        }
    }
    best.map(|(_, l)| l)
}

/// A source file and the module path it defines.
struct SourceFile {
    path: PathBuf,
    module: Vec<String>,
    ast: syn::File,
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

fn parse(path: &Path) -> syn::File {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The non-test modules of the crate, from `lib.rs` down, each with its file.
fn modules(src: &Path) -> Vec<SourceFile> {
    let mut out = Vec::new();
    let mut todo = vec![(src.join("lib.rs"), Vec::<String>::new(), src.to_path_buf())];
    while let Some((path, module, dir)) = todo.pop() {
        let ast = parse(&path);
        for item in &ast.items {
            let syn::Item::Mod(m) = item else { continue };
            if m.content.is_some() || is_cfg_test(&m.attrs) {
                continue;
            }
            let name = m.ident.to_string();
            let flat = dir.join(format!("{name}.rs"));
            let nested = dir.join(&name).join("mod.rs");
            let file = if flat.exists() { flat } else { nested };
            assert!(file.exists(), "{}: mod {name} has no file", path.display());
            let mut child = module.clone();
            child.push(name.clone());
            todo.push((file, child, dir.join(&name)));
        }
        out.push(SourceFile { path, module, ast });
    }
    out
}

/// Collects the crate-relative module paths a file's non-test code names.
struct Paths<'a> {
    /// The module the visitor is in (a file's, or an inline module's inside it).
    module: Vec<String>,
    found: &'a mut Vec<(Vec<String>, String)>,
    /// The names the file's `use` items bring in from the crate (`use crate::scheduler::plugins;`
    /// makes `plugins` stand for it), resolved: a path that starts with one is the crate's too.
    aliases: std::collections::HashMap<String, Vec<String>>,
}

/// The names a file's top-level (non-test) `use` items bring in from the crate, each with the
/// crate path it stands for.
fn aliases(file: &SourceFile) -> std::collections::HashMap<String, Vec<String>> {
    let mut found = Vec::new();
    let paths = Paths {
        module: file.module.clone(),
        found: &mut found,
        aliases: Default::default(),
    };
    let mut names = Vec::new();
    for item in &file.ast.items {
        let syn::Item::Use(u) = item else { continue };
        if is_cfg_test(&u.attrs) {
            continue;
        }
        collect_names(&mut Vec::new(), &u.tree, &mut names);
    }
    let mut out = std::collections::HashMap::new();
    for (name, full) in names {
        if let Some(resolved) = paths.resolve(&full) {
            out.insert(name, resolved);
        }
    }
    out
}

/// Each name a use tree binds, with the path it binds.
fn collect_names(
    prefix: &mut Vec<String>,
    tree: &syn::UseTree,
    out: &mut Vec<(String, Vec<String>)>,
) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            collect_names(prefix, &p.tree, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let mut full = prefix.clone();
            let name = if n.ident == "self" {
                prefix.last().cloned().unwrap_or_default()
            } else {
                full.push(n.ident.to_string());
                n.ident.to_string()
            };
            out.push((name, full));
        }
        syn::UseTree::Rename(r) => {
            let mut full = prefix.clone();
            if r.ident != "self" {
                full.push(r.ident.to_string());
            }
            out.push((r.rename.to_string(), full));
        }
        syn::UseTree::Glob(_) => {}
        syn::UseTree::Group(g) => {
            for t in &g.items {
                collect_names(prefix, t, out);
            }
        }
    }
}

impl Paths<'_> {
    /// `segments` resolved against the current module when it starts with `crate`, `self` or
    /// `super`; other paths (std, external crates, names in scope) are not this test's concern.
    fn record(&mut self, segments: &[String]) {
        if let Some(resolved) = self.resolve(segments) {
            self.found.push((resolved, segments.join("::")));
        }
    }

    /// `segments` as a path from the crate's root, when it starts with `crate`, `self`, `super`
    /// or a name a `use` of the file brought in from the crate.
    fn resolve(&self, segments: &[String]) -> Option<Vec<String>> {
        let first = segments.first()?;
        let mut base = match first.as_str() {
            "crate" => Vec::new(),
            "self" | "super" => self.module.clone(),
            name => {
                let mut base = self.aliases.get(name)?.clone();
                base.extend(segments[1..].iter().cloned());
                return Some(base);
            }
        };
        let mut rest = &segments[1..];
        if first == "super" {
            base.pop();
        }
        while let Some(s) = rest.first() {
            match s.as_str() {
                "super" => {
                    base.pop();
                }
                "self" => {}
                _ => break,
            }
            rest = &rest[1..];
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut full = prefix.clone();
                if n.ident != "self" {
                    full.push(n.ident.to_string());
                }
                self.record(&full);
            }
            syn::UseTree::Rename(r) => {
                let mut full = prefix.clone();
                if r.ident != "self" {
                    full.push(r.ident.to_string());
                }
                self.record(&full);
            }
            syn::UseTree::Glob(_) => self.record(prefix),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Paths<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Macro(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            syn::Item::Type(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if is_cfg_test(attrs) {
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if m.content.is_none() {
            return;
        }
        self.module.push(m.ident.to_string());
        syn::visit::visit_item_mod(self, m);
        self.module.pop();
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &u.tree);
    }

    /// `pub(super)`, `pub(in crate::x)`: who may see an item, not a use of anything.
    fn visit_vis_restricted(&mut self, _: &'ast syn::VisRestricted) {}

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        self.record(&segments);
        syn::visit::visit_path(self, p);
    }
}

/// Every arrow that breaks the table, as one line each.
fn violations(src: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for file in modules(src) {
        let shown = file
            .path
            .strip_prefix(src.parent().unwrap_or(src))
            .unwrap_or(&file.path);
        if file.module.is_empty() {
            continue; // lib.rs declares the modules
        }
        let Some(from) = layer_of(&file.module) else {
            out.push(format!(
                "{}: module {} belongs to no layer; add it to LAYERS (and to ARCHITECTURE's table)",
                shown.display(),
                file.module.join("::")
            ));
            continue;
        };
        let mut found = Vec::new();
        Paths {
            module: file.module.clone(),
            found: &mut found,
            aliases: aliases(&file),
        }
        .visit_file(&file.ast);
        for (target, written) in found {
            let Some(to) = layer_of(&target) else {
                continue; // a crate-root item, or a name the crate does not define
            };
            let may_use = from.may_use();
            if to.name == from.name || may_use.contains(&to.name) {
                continue;
            }
            let below = may_use.join(", ");
            out.push(format!(
                "{}: `{written}` reaches layer {} from layer {} (which may use only: {})",
                shown.display(),
                to.name,
                from.name,
                if below.is_empty() { "nothing" } else { &below }
            ));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The circles of modules: each strongly connected set of two or more files whose non-test
/// code names one another (a file names the module of the longest known prefix of each path it
/// resolves), as `a -> b -> a` lines. A parent's `mod x;` is no arrow; a parent that uses what
/// its child defines and a child that uses what its parent defines are a circle.
fn circles(src: &Path) -> Vec<String> {
    let files = modules(src);
    let known: Vec<Vec<String>> = files.iter().map(|f| f.module.clone()).collect();
    let index = |module: &[String]| -> Option<usize> {
        (0..=module.len())
            .rev()
            .find_map(|n| known.iter().position(|k| k.as_slice() == &module[..n]))
    };
    let mut edges: Vec<std::collections::BTreeSet<usize>> = vec![Default::default(); files.len()];
    // One path written for each arrow, to show where a circle closes.
    let mut written: std::collections::BTreeMap<(usize, usize), String> = Default::default();
    for (i, file) in files.iter().enumerate() {
        if file.module.is_empty() {
            continue;
        }
        let mut found = Vec::new();
        Paths {
            module: file.module.clone(),
            found: &mut found,
            aliases: aliases(file),
        }
        .visit_file(&file.ast);
        for (target, path) in found {
            if let Some(j) = index(&target).filter(|&j| j != i && !known[j].is_empty()) {
                edges[i].insert(j);
                written.entry((i, j)).or_insert(path);
            }
        }
    }
    // Tarjan's strongly connected components.
    struct Tarjan<'e> {
        edges: &'e [std::collections::BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        found: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            for &w in self.edges[v].clone().iter() {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
        }
    }
    let mut t = Tarjan {
        edges: &edges,
        index: vec![None; files.len()],
        low: vec![0; files.len()],
        on_stack: vec![false; files.len()],
        stack: Vec::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in 0..files.len() {
        if t.index[v].is_none() {
            t.visit(v);
        }
    }
    let mut out: Vec<String> = t
        .found
        .into_iter()
        .map(|mut c| {
            c.sort_by_key(|&i| known[i].clone());
            let arrows: Vec<String> = c
                .iter()
                .flat_map(|&a| c.iter().map(move |&b| (a, b)))
                .filter_map(|(a, b)| {
                    let path = written.get(&(a, b))?;
                    Some(format!(
                        "  {} uses {} (`{path}`)",
                        known[a].join("::"),
                        known[b].join("::")
                    ))
                })
                .collect();
            let names: Vec<String> = c.iter().map(|&i| known[i].join("::")).collect();
            format!("{{{}}}:\n{}", names.join(", "), arrows.join("\n"))
        })
        .collect();
    out.sort();
    out
}

#[test]
fn no_circle_of_modules() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = circles(&src);
    assert!(
        found.is_empty(),
        "{} circle(s) of modules:\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn no_arrow_runs_up_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let broken = violations(&src);
    assert!(
        broken.is_empty(),
        "{} arrow(s) break the layers:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn the_table_names_only_layers_below() {
    for (i, layer) in LAYERS.iter().enumerate() {
        for used in layer.may_use() {
            let at = LAYERS.iter().position(|l| l.name == used);
            assert!(
                at.is_some_and(|j| j < i),
                "layer {} uses {used}, which is not a layer below it",
                layer.name
            );
        }
    }
}

#[test]
fn an_upward_arrow_is_caught() {
    // The checker itself, on a tree made for it: framework naming a plugin must fail, a plugin
    // naming the framework must not, and test code may name anything.
    let dir = std::env::temp_dir().join(format!("tether-layers-{}", std::process::id()));
    let src = dir.join("src");
    let write = |rel: &str, text: &str| {
        let path = src.join(rel);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, text).expect("write");
    };
    write("lib.rs", "pub mod scheduler;\n");
    write("scheduler/mod.rs", "pub mod framework;\npub mod plugins;\n");
    write(
        "scheduler/framework/mod.rs",
        "use super::plugins::Fit;\n#[cfg(test)]\nmod tests { use crate::scheduler::plugins::Fit; }\n",
    );
    write(
        "scheduler/plugins/mod.rs",
        "use crate::scheduler::framework::Status;\npub struct Fit;\n",
    );
    let broken = violations(&src);
    fs::remove_dir_all(&dir).ok();
    assert_eq!(broken.len(), 1, "{broken:?}");
    assert!(
        broken[0].contains("scheduler/framework/mod.rs: `super::plugins::Fit` reaches layer plugins from layer framework"),
        "{}",
        broken[0]
    );
}

#[test]
fn a_circle_of_modules_is_caught() {
    // A parent that uses its child's item while the child uses the parent's is a circle; a
    // child that uses a sibling the parent also uses is not.
    let dir = std::env::temp_dir().join(format!("tether-circles-{}", std::process::id()));
    let src = dir.join("src");
    let write = |rel: &str, text: &str| {
        let path = src.join(rel);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, text).expect("write");
    };
    write("lib.rs", "pub mod watch;\n");
    write(
        "watch/mod.rs",
        "mod lister;\nmod page;\nuse self::lister::Lister;\nuse self::page::SIZE;\npub struct Feed;\n",
    );
    write(
        "watch/lister.rs",
        "use super::Feed;\nuse super::page::SIZE;\npub struct Lister;\n",
    );
    write("watch/page.rs", "pub const SIZE: u32 = 500;\n");
    let found = circles(&src);
    fs::remove_dir_all(&dir).ok();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("{watch, watch::lister}")
            && found[0].contains("watch::lister uses watch (`super::Feed`)"),
        "{}",
        found[0]
    );
}

#[test]
fn a_circle_through_an_imported_module_name_is_caught() {
    // `use crate::plugins;` then `plugins::fit::NAME`: the path is the crate's all the same.
    let dir = std::env::temp_dir().join(format!("tether-aliases-{}", std::process::id()));
    let src = dir.join("src");
    let write = |rel: &str, text: &str| {
        let path = src.join(rel);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(path, text).expect("write");
    };
    write("lib.rs", "pub mod plugins;\n");
    write("plugins/mod.rs", "pub mod fit;\npub mod registry;\n");
    write(
        "plugins/registry.rs",
        "use crate::plugins;\npub struct Handle;\npub fn names() -> [&'static str; 1] { [plugins::fit::NAME] }\n",
    );
    write(
        "plugins/fit.rs",
        "use crate::plugins::registry::Handle;\npub const NAME: &str = \"Fit\";\n",
    );
    let found = circles(&src);
    fs::remove_dir_all(&dir).ok();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("plugins::registry uses plugins::fit (`plugins::fit::NAME`)"),
        "{}",
        found[0]
    );
}
