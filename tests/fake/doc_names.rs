//! The docs name only code that exists (issue 48): every backticked Rust path in `docs/*.md`
//! and the README (`Actor::start`, `core::pump::pump`, `Input::Written`, a test's
//! `real::claude::…::name`) is found in the code as it is, and every `Design rule N` a doc
//! comment claims is a rule of `docs/design.md`, each rule claimed at least once. A renamed or
//! removed function fails here, not in a reader's hands.
//!
//! The code is read with `syn`: each file's module path comes from where it lies (`src/a/b.rs`
//! is `a::b`, `tests/real/claude/x.rs` is `real::claude::x`), and each item is indexed under
//! its module (functions, types, constants, modules, macros), an enum's variants under the enum,
//! and the items of an `impl` or a trait under the type's or trait's own name. A doc path
//! resolves when some indexed path ends with its segments; a leading `crate::`, `botvisor::`,
//! `super::` or `self::` is dropped, and a path whose first segment is another crate's (`std`,
//! `tokio`, `zbus`, …) or a name the CLIs' protocols use is not ours to check.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crate's root folder.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file below `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The module path of `file`, relative to `base`: `lib.rs`, `main.rs` and `mod.rs` name their
/// folder, and a folder `src` names no module.
fn module_of(base: &Path, file: &Path) -> Vec<String> {
    let mut path: Vec<String> = Vec::new();
    let rel = file.strip_prefix(base).unwrap();
    let parts: Vec<String> = rel
        .iter()
        .map(|p| {
            p.to_string_lossy()
                .trim_end_matches(".rs")
                .replace('-', "_")
        })
        .collect();
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        if last && matches!(part.as_str(), "lib" | "main" | "mod") {
            break;
        }
        if part != "src" {
            path.push(part.clone());
        }
    }
    path
}

/// Every path of the code: module paths, items, variants, methods.
#[derive(Default)]
struct Index {
    /// Each indexed path's last segment → the whole paths ending with it.
    by_last: BTreeMap<String, Vec<Vec<String>>>,
}

impl Index {
    fn add(&mut self, path: Vec<String>) {
        if let Some(last) = path.last() {
            self.by_last.entry(last.clone()).or_default().push(path);
        }
    }

    fn add_under(&mut self, module: &[String], names: &[&str]) {
        let mut path = module.to_vec();
        path.extend(names.iter().map(|s| s.to_string()));
        self.add(path);
    }

    /// Whether `segments` name something: some indexed path ends with them, or they are a
    /// type's path and one of its members (`supervisor::Supervisor::bot_of_process`, where the
    /// `impl` is in another file of the module than the type).
    fn resolves(&self, segments: &[String]) -> bool {
        let n = segments.len();
        self.ends_with(segments)
            || (n >= 3 && self.ends_with(&segments[..n - 1]) && self.ends_with(&segments[n - 2..]))
    }

    /// Whether some indexed path ends with `segments`.
    fn ends_with(&self, segments: &[String]) -> bool {
        let Some(last) = segments.last() else {
            return true;
        };
        self.by_last.get(last).is_some_and(|paths| {
            paths
                .iter()
                .any(|p| p.len() >= segments.len() && p.ends_with(segments))
        })
    }

    fn items(&mut self, module: &[String], items: &[syn::Item]) {
        for item in items {
            self.item(module, item);
        }
    }

    fn item(&mut self, module: &[String], item: &syn::Item) {
        use syn::Item;
        match item {
            Item::Fn(f) => self.add_under(module, &[&f.sig.ident.to_string()]),
            Item::Struct(s) => {
                let name = s.ident.to_string();
                self.add_under(module, &[&name]);
                for field in &s.fields {
                    if let Some(field) = &field.ident {
                        self.add_under(module, &[&name, &field.to_string()]);
                    }
                }
            }
            Item::Enum(e) => {
                let name = e.ident.to_string();
                self.add_under(module, &[&name]);
                for v in &e.variants {
                    self.add_under(module, &[&name, &v.ident.to_string()]);
                }
            }
            Item::Trait(t) => {
                let name = t.ident.to_string();
                self.add_under(module, &[&name]);
                for i in &t.items {
                    let member = match i {
                        syn::TraitItem::Fn(f) => f.sig.ident.to_string(),
                        syn::TraitItem::Const(c) => c.ident.to_string(),
                        syn::TraitItem::Type(t) => t.ident.to_string(),
                        _ => continue,
                    };
                    self.add_under(module, &[&name, &member]);
                }
            }
            Item::Impl(i) => {
                let syn::Type::Path(ty) = &*i.self_ty else {
                    return;
                };
                let Some(name) = ty.path.segments.last().map(|s| s.ident.to_string()) else {
                    return;
                };
                for member in &i.items {
                    let member = match member {
                        syn::ImplItem::Fn(f) => f.sig.ident.to_string(),
                        syn::ImplItem::Const(c) => c.ident.to_string(),
                        syn::ImplItem::Type(t) => t.ident.to_string(),
                        _ => continue,
                    };
                    self.add_under(module, &[&name, &member]);
                }
            }
            Item::Mod(m) => {
                let mut inner = module.to_vec();
                inner.push(m.ident.to_string());
                self.add(inner.clone());
                if let Some((_, items)) = &m.content {
                    self.items(&inner, items);
                }
            }
            Item::Const(c) => self.add_under(module, &[&c.ident.to_string()]),
            Item::Static(s) => self.add_under(module, &[&s.ident.to_string()]),
            Item::Type(t) => self.add_under(module, &[&t.ident.to_string()]),
            Item::Union(u) => self.add_under(module, &[&u.ident.to_string()]),
            // A re-export names the item where it is re-exported too (`runtime::Protocol`).
            Item::Use(u) if !matches!(u.vis, syn::Visibility::Inherited) => {
                let mut names = Vec::new();
                use_leaves(&u.tree, &mut names);
                for name in names {
                    self.add_under(module, &[&name]);
                }
            }
            Item::Macro(m) => {
                if let Some(name) = &m.ident {
                    self.add_under(module, &[&name.to_string()]);
                }
            }
            _ => {}
        }
    }
}

/// The names a `use` tree brings in (its leaves, renamed where renamed; globs name nothing).
fn use_leaves(tree: &syn::UseTree, out: &mut Vec<String>) {
    match tree {
        syn::UseTree::Path(p) => use_leaves(&p.tree, out),
        syn::UseTree::Name(n) => out.push(n.ident.to_string()),
        syn::UseTree::Rename(r) => out.push(r.rename.to_string()),
        syn::UseTree::Group(g) => g.items.iter().for_each(|t| use_leaves(t, out)),
        syn::UseTree::Glob(_) => {}
    }
}

/// The index of the crate, its binaries, its tests and its benchmark.
fn index() -> Index {
    let root = root();
    let mut index = Index::default();
    // (`tests/support/src/lib.rs` is `support`: `src` names no module.)
    let trees = [root.join("src"), root.join("tests"), root.join("benches")];
    let mut seen = BTreeSet::new();
    for base in &trees {
        for file in rust_files(base) {
            let module = module_of(base, &file);
            if !seen.insert((module.clone(), file.clone())) {
                continue;
            }
            let text = std::fs::read_to_string(&file).unwrap();
            let parsed = syn::parse_file(&text)
                .unwrap_or_else(|e| panic!("{} does not parse: {e}", file.display()));
            for i in 0..module.len() {
                index.add(module[..=i].to_vec());
            }
            index.items(&module, &parsed.items);
        }
    }
    index
}

/// First segments that are not this crate's: other crates, and names of the CLIs' own
/// protocols that docs quote with `::`.
const NOT_OURS: &[&str] = &[
    "std",
    "core",
    "alloc",
    "tokio",
    "zbus",
    "rusqlite",
    "serde",
    "serde_json",
    "sd_notify",
    "libc",
    "rustix",
    "tracing",
    "uuid",
    "clap",
    "sysinfo",
    "rmcp",
    "ratatui",
    "crossterm",
    "futures_util",
    "notify",
    "toml",
    "syn",
    "axum",
    "tempfile",
];

/// Every backticked Rust path of `text`: `A::b`, `a::b::C`, with an optional `()`.
fn paths_in(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for span in text.split('`').skip(1).step_by(2) {
        let span = span.trim_end_matches("()");
        let ok = span.contains("::")
            && span
                .split("::")
                .all(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
            && span.chars().next().is_some_and(|c| c.is_ascii_alphabetic());
        if ok {
            out.push(span.to_owned());
        }
    }
    out
}

/// The markdown files whose names are checked.
fn docs() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    out.push(root().join("README.md"));
    out.sort();
    out
}

#[test]
fn every_rust_path_the_docs_name_is_in_the_code() {
    let index = index();
    let mut missing = Vec::new();
    for doc in docs() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for (n, line) in text.lines().enumerate() {
            for path in paths_in(line) {
                let mut segments: Vec<String> = path.split("::").map(str::to_owned).collect();
                while matches!(
                    segments.first().map(String::as_str),
                    Some("crate" | "botvisor" | "super" | "self")
                ) {
                    segments.remove(0);
                }
                if NOT_OURS.contains(&segments[0].as_str()) || index.resolves(&segments) {
                    continue;
                }
                missing.push(format!(
                    "{}:{}: `{path}`",
                    doc.strip_prefix(root()).unwrap().display(),
                    n + 1
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "{} names the docs give are not in the code (renamed or gone? fix the doc):\n{}",
        missing.len(),
        missing.join("\n")
    );
}

/// The numbered rules of `docs/design.md` (`N. **Title.**` under "## The rules").
fn design_rules() -> BTreeSet<u32> {
    let text = std::fs::read_to_string(root().join("docs/design.md")).unwrap();
    let rules = text
        .split("\n## The rules")
        .nth(1)
        .expect("docs/design.md has its rules")
        .split("\n## ")
        .next()
        .unwrap();
    rules
        .lines()
        .filter_map(|l| l.split_once(". **"))
        .filter_map(|(n, _)| n.parse().ok())
        .collect()
}

/// A `Design rule N` marker: the doc comment of the item that keeps rule `rule` begins with it
/// (`/// Design rule 8 …`, `//! Design rules 12 and 13 …`).
#[derive(Debug)]
struct Marker {
    rule: u32,
    /// What keeps it: `Type::method`, a free function's or a type's name, or, for a module's
    /// `//!`, its module path (`supervisor::core::start`).
    item: String,
    /// `file:line`.
    at: String,
}

/// The rule numbers right after `Design rule` or `Design rules` (`8`, `12 and 13`).
fn marker_rules(doc: &str) -> Vec<u32> {
    let Some(rest) = doc.strip_prefix("Design rule") else {
        return Vec::new();
    };
    let rest = rest.strip_prefix('s').unwrap_or(rest);
    rest.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .take_while(|w| w.parse::<u32>().is_ok() || *w == "and")
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// The item a `///` block above line `i` of module `module` documents: `Type::method` inside
/// an `impl` or a trait, or the item's path (`process::cgroup::kill`).
fn item_below(lines: &[&str], i: usize, module: &[String]) -> Option<String> {
    let line = lines[i..]
        .iter()
        .find(|l| !l.trim_start().starts_with("///") && !l.trim_start().starts_with("#["))?;
    let words: Vec<&str> = line
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    let kinds = [
        "fn", "struct", "enum", "trait", "type", "const", "static", "mod",
    ];
    let at = words.iter().position(|w| kinds.contains(w))?;
    let name = words.get(at + 1)?.to_string();
    if !line.starts_with(' ') {
        return Some(
            module
                .iter()
                .chain([&name])
                .cloned()
                .collect::<Vec<_>>()
                .join("::"),
        );
    }
    // A member: the owner is the nearest `impl … Type` or `trait Type` at the left margin above.
    let owner = lines[..i].iter().rev().find_map(|l| {
        let head = l
            .strip_prefix("impl")
            .or_else(|| l.strip_prefix("pub trait "))?;
        let head = head.split(" where").next()?.trim_end_matches(['{', ' ']);
        let head = head.rsplit(" for ").next()?;
        let ty = head.trim().trim_start_matches('<');
        let ty = ty.rsplit(['>', ' ']).find(|w| !w.is_empty())?;
        Some(ty.split('<').next()?.trim().to_owned())
    })?;
    Some(format!("{owner}::{name}"))
}

/// Every `Design rule N` marker in the doc comments of `src/`.
fn rule_markers() -> Vec<Marker> {
    let mut out = Vec::new();
    let root = root();
    let src = root.join("src");
    for file in rust_files(&src) {
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (n, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            let (module_doc, doc) = if let Some(d) = trimmed.strip_prefix("//! ") {
                (true, d)
            } else if let Some(d) = trimmed.strip_prefix("/// ") {
                (false, d)
            } else {
                continue;
            };
            let rules = marker_rules(doc);
            if rules.is_empty() {
                continue;
            }
            let item = if module_doc {
                module_of(&src, &file).join("::")
            } else {
                item_below(&lines, n, &module_of(&src, &file))
                    .unwrap_or_else(|| panic!("{}:{}: a marker on no item", file.display(), n + 1))
            };
            let at = format!("{}:{}", file.strip_prefix(&root).unwrap().display(), n + 1);
            for rule in rules {
                out.push(Marker {
                    rule,
                    item: item.clone(),
                    at: at.clone(),
                });
            }
        }
    }
    out
}

/// The text `docs/architecture.md` gives each rule under "## Where each design rule lives": its
/// bullet (`- **N …`), wrapped lines included.
fn architecture_rules() -> BTreeMap<u32, String> {
    let text = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let section = text
        .split("\n## Where each design rule lives")
        .nth(1)
        .expect("docs/architecture.md has the section \"Where each design rule lives\"");
    let section = section.split("\n## ").next().unwrap();
    let mut out = BTreeMap::new();
    let mut current: Option<u32> = None;
    for line in section.lines() {
        if let Some(rest) = line.strip_prefix("- **") {
            current = rest.split(' ').next().and_then(|n| n.parse().ok());
        } else if !line.starts_with("  ") {
            current = None;
        }
        if let Some(rule) = current {
            let entry: &mut String = out.entry(rule).or_default();
            entry.push_str(line);
            entry.push('\n');
        }
    }
    out
}

#[test]
fn every_design_rule_is_marked_on_the_code_that_keeps_it_and_listed_there() {
    let rules = design_rules();
    assert!(rules.len() >= 18, "docs/design.md's rules: {rules:?}");
    let markers = rule_markers();
    let unknown: Vec<_> = markers
        .iter()
        .filter(|m| !rules.contains(&m.rule))
        .collect();
    assert!(
        unknown.is_empty(),
        "markers of rules docs/design.md has not: {unknown:?}"
    );
    let marked: BTreeSet<u32> = markers.iter().map(|m| m.rule).collect();
    let unmarked: Vec<_> = rules.difference(&marked).collect();
    assert!(
        unmarked.is_empty(),
        "rules no doc comment claims (`/// Design rule N` on what keeps it): {unmarked:?}"
    );
    let listed = architecture_rules();
    let mut wanted: BTreeMap<u32, BTreeSet<&str>> = BTreeMap::new();
    for m in &markers {
        wanted.entry(m.rule).or_default().insert(&m.item);
    }
    let mut missing = Vec::new();
    for (rule, items) in &wanted {
        let text = listed.get(rule).map(String::as_str).unwrap_or("");
        for item in items {
            if !text.contains(&format!("`{item}`")) {
                let at = markers.iter().find(|m| m.rule == *rule && m.item == *item);
                missing.push(format!("rule {rule}: `{item}` ({})", at.unwrap().at));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/architecture.md's \"Where each design rule lives\" does not list what the code \
         marks:\n{}",
        missing.join("\n")
    );
}

#[test]
fn a_name_that_is_not_in_the_code_is_found_and_markers_are_read() {
    let index = index();
    let path = |s: &str| s.split("::").map(str::to_owned).collect::<Vec<_>>();
    assert!(index.resolves(&path("Actor::start")));
    assert!(index.resolves(&path("core::pump::pump")));
    assert!(index.resolves(&path("Input::Written")));
    assert!(!index.resolves(&path("Actor::note_reported_session")));
    assert!(!index.resolves(&path("State::while_limited")));
    assert!(index.resolves(&path("supervisor::Supervisor::bot_of_process")));
    assert!(index.resolves(&path("runtime::Protocol")));
    assert!(!index.resolves(&path("runtime::Supervisor::bot_of_process")));
    assert_eq!(marker_rules("Design rules 12 and 13 with no I/O"), [12, 13]);
    assert_eq!(marker_rules("Design rule 3 with rule 2's caution"), [3]);
    assert_eq!(marker_rules("Design rule 4's fallback"), [4]);
    assert!(
        marker_rules("design rule 4").is_empty(),
        "a cross-reference keeps nothing"
    );
    let lines = [
        "impl<T: Ord> Watch<T> {",
        "    /// Design rule 9.",
        "    #[must_use]",
        "    pub(super) async fn stop(&mut self) {",
    ];
    assert_eq!(item_below(&lines, 1, &[]).as_deref(), Some("Watch::stop"));
    let module = ["process".to_owned(), "cgroup".to_owned()];
    assert_eq!(
        item_below(&["/// Design rule 10.", "pub fn kill() {"], 0, &module).as_deref(),
        Some("process::cgroup::kill")
    );
    assert_eq!(
        paths_in("see `Actor::start()`, `a::b`, `not a path`, `x::`"),
        ["Actor::start", "a::b"]
    );
}
