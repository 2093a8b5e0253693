//! The workspace's shape, held by tests: which crate may depend on which, and no circles between
//! the modules of a crate. See ARCHITECTURE.md.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The names in a manifest's `[dependencies]` (not dev- or build-dependencies).
fn dependencies(manifest: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(manifest).unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    let mut names = BTreeSet::new();
    let mut in_dependencies = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]";
            continue;
        }
        if in_dependencies && !line.is_empty() && !line.starts_with('#') {
            let name = line.split(['=', '.', ' ']).next().unwrap().trim();
            names.insert(name.to_owned());
        }
    }
    names
}

fn crate_dependencies(name: &str) -> BTreeSet<String> {
    dependencies(&root().join("crates").join(name).join("Cargo.toml"))
}

#[test]
fn the_domain_is_pure() {
    // schemars only describes types (optional, for the MCP tools' input schemas): no I/O.
    let allowed: BTreeSet<&str> = ["chrono", "schemars", "serde", "serde_json", "uuid"].into();
    for dependency in crate_dependencies("domain") {
        assert!(
            allowed.contains(dependency.as_str()),
            "haggle-domain must not depend on `{dependency}`: the rules do no I/O (allowed: {allowed:?})"
        );
    }
}

#[test]
fn the_wire_knows_nothing_of_the_database_or_the_network() {
    for dependency in crate_dependencies("api") {
        assert!(
            !["sqlx", "tokio", "axum", "reqwest", "hyper", "tower", "haggle-server", "haggle-client"]
                .contains(&dependency.as_str()),
            "haggle-api must not depend on `{dependency}`"
        );
    }
}

#[test]
fn crates_depend_only_downwards() {
    // Each crate, and the workspace crates it may use. The server sees the client only through
    // the MCP server and the A2A service it mounts, whose calls are the REST API's as their
    // agents' are; the tools
    // never see the server, except the bench (which starts PostgreSQL and reads the server's
    // duration syntax), and the chaos run (which finds PostgreSQL's programs as the server does).
    let allowed: BTreeMap<&str, &[&str]> = BTreeMap::from([
        ("domain", &[][..]),
        ("api", &["haggle-domain"][..]),
        ("server", &["haggle-domain", "haggle-api", "haggle-mcp", "haggle-a2a"][..]),
        ("client", &["haggle-domain", "haggle-api"][..]),
        ("mcp", &["haggle-domain", "haggle-api", "haggle-client"][..]),
        ("a2a", &["haggle-domain", "haggle-api", "haggle-client"][..]),
        ("sim", &["haggle-domain", "haggle-api", "haggle-client"][..]),
        ("bench", &["haggle-domain", "haggle-api", "haggle-client", "haggle-server"][..]),
        ("chaos", &["haggle-domain", "haggle-api", "haggle-server"][..]),
    ]);
    let present: BTreeSet<String> = std::fs::read_dir(root().join("crates"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(present, allowed.keys().map(|name| name.to_string()).collect(), "crates/ holds exactly these crates");
    for (name, may_use) in &allowed {
        for dependency in crate_dependencies(name).into_iter().filter(|d| d.starts_with("haggle")) {
            assert!(may_use.contains(&dependency.as_str()), "haggle-{name} must not depend on {dependency}");
        }
    }
    // Editing the simulator must not rebuild the server: nothing the server builds on depends on
    // the simulator.
    assert!(!crate_dependencies("server").contains("haggle-sim"));
    // The server reaches the client only through the MCP server, never directly.
    assert!(!crate_dependencies("server").contains("haggle-client"));
}

#[test]
fn the_typed_client_has_no_command_line() {
    // The terminal commands live in the binary (`src/terminal/`), so the client library, which
    // the MCP server and the simulator build on, does not bring a command-line parser with it.
    let client = crate_dependencies("client");
    assert!(!client.contains("clap"), "haggle-client must not depend on clap: {client:?}");
    assert!(!root().join("crates/client/src/cli.rs").exists());
    assert!(root().join("src/terminal/mod.rs").exists(), "the terminal client is the binary's");
}

#[test]
fn the_dockerfile_copies_every_crate() {
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            dockerfile.contains(&format!("COPY crates/{name}/Cargo.toml")),
            "the Dockerfile's dependency layer must copy crates/{name}/Cargo.toml"
        );
    }
}

/// The top-level module a source file belongs to (`None` for the crate root).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).unwrap();
    let first = relative.components().next()?.as_os_str().to_string_lossy().into_owned();
    let name = first.trim_end_matches(".rs").to_owned();
    (name != "lib" && name != "main").then_some(name)
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
}

/// The sibling modules a file names through `crate::x` (or `super::x` from a top-level file),
/// outside comments.
fn modules_named(source: &str, top_level: bool) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for line in source.lines() {
        let code = line.split("//").next().unwrap();
        for prefix in ["crate::", "super::"] {
            if prefix == "super::" && !top_level {
                continue;
            }
            for (at, _) in code.match_indices(prefix) {
                let rest = &code[at + prefix.len()..];
                let rest = rest.trim_start_matches('{');
                let names: Vec<&str> = if code[at + prefix.len()..].starts_with('{') {
                    rest.split('}').next().unwrap().split(',').collect()
                } else {
                    vec![rest]
                };
                for name in names {
                    let name: String =
                        name.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                    if name.chars().next().is_some_and(|c| c.is_ascii_lowercase()) && name != "self" {
                        named.insert(name);
                    }
                }
            }
        }
    }
    named
}

/// A circle in the graph, if there is one.
fn find_circle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|n| n == node) {
            let mut circle = path[start..].to_vec();
            circle.push(node.to_owned());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, edges, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    edges.keys().find_map(|node| visit(node, edges, &mut Vec::new(), &mut done))
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let crates = std::fs::read_dir(root().join("crates")).unwrap().map(|entry| entry.unwrap().path().join("src"));
    // The binary's own modules too (`src/`: the command line and the terminal client).
    for src in crates.chain([root().join("src")]) {
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let modules: BTreeSet<String> = files.iter().filter_map(|file| module_of(&src, file)).collect();
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for file in &files {
            let Some(module) = module_of(&src, file) else { continue };
            let top_level = file.parent() == Some(src.as_path())
                || file.file_name().is_some_and(|name| name == "mod.rs")
                    && file.parent().unwrap().parent() == Some(&src);
            let source = std::fs::read_to_string(file).unwrap();
            let named = modules_named(&source, top_level);
            let targets = edges.entry(module.clone()).or_default();
            targets.extend(named.into_iter().filter(|name| *name != module && modules.contains(name)));
        }
        if let Some(circle) = find_circle(&edges) {
            panic!("{}: modules import each other in a circle: {}", src.display(), circle.join(" -> "));
        }
    }
}

#[test]
fn the_circle_finder_finds_circles() {
    let edges = |pairs: &[(&str, &str)]| {
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (from, to) in pairs {
            edges.entry(from.to_string()).or_default().insert(to.to_string());
        }
        edges
    };
    assert_eq!(find_circle(&edges(&[("a", "b"), ("b", "c")])), None);
    assert!(find_circle(&edges(&[("a", "b"), ("b", "c"), ("c", "a")])).is_some());
    assert_eq!(
        modules_named("use crate::{db, events::Outbox};\n// crate::http\nuse super::market::X;", true),
        BTreeSet::from(["db".to_owned(), "events".to_owned(), "market".to_owned()])
    );
}

/// The source files of one crate (`src/` and below), by the module each one holds.
struct SourceTree {
    /// A module's path from the crate root (empty for the root) and the file that holds it.
    files: BTreeMap<Vec<String>, PathBuf>,
    facts: BTreeMap<PathBuf, FileFacts>,
}

/// What one file declares and names, read with `syn`.
#[derive(Default)]
struct FileFacts {
    module: Vec<String>,
    /// The names of the items the file defines at its top level.
    defines: BTreeSet<String>,
    /// The names its `use` items bring in, each with the path it names and the module it was
    /// written in.
    aliases: BTreeMap<String, (Vec<String>, Vec<String>)>,
    /// The paths of its glob imports (`use x::*`), with the module each was written in.
    globs: Vec<(Vec<String>, Vec<String>)>,
    /// Every path the file's own code names (a `use` that is not a re-export, a path in a type
    /// or an expression), with the module it was written in.
    named: Vec<(Vec<String>, Vec<String>)>,
    /// The modules it declares in files of their own for tests only (`#[cfg(test)] mod x;`).
    test_modules: Vec<Vec<String>>,
}

/// Collects a file's facts; `inline` is the path of the inline module being visited.
struct Reader<'a> {
    facts: &'a mut FileFacts,
    inline: Vec<String>,
}

impl Reader<'_> {
    fn module(&self) -> Vec<String> {
        self.facts.module.iter().chain(&self.inline).cloned().collect()
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree, reexport: bool) {
        match tree {
            syn::UseTree::Path(path) => {
                prefix.push(path.ident.to_string());
                self.use_tree(prefix, &path.tree, reexport);
                prefix.pop();
            }
            syn::UseTree::Name(name) => self.use_leaf(prefix, &name.ident, &name.ident, reexport),
            syn::UseTree::Rename(rename) => self.use_leaf(prefix, &rename.ident, &rename.rename, reexport),
            syn::UseTree::Glob(_) => {
                let module = self.module();
                self.facts.globs.push((prefix.clone(), module.clone()));
                if !reexport {
                    self.facts.named.push((prefix.iter().cloned().chain(["*".to_owned()]).collect(), module));
                }
            }
            syn::UseTree::Group(group) => {
                for tree in &group.items {
                    self.use_tree(prefix, tree, reexport);
                }
            }
        }
    }

    fn use_leaf(&mut self, prefix: &[String], ident: &syn::Ident, alias: &syn::Ident, reexport: bool) {
        let mut path = prefix.to_vec();
        if ident != "self" {
            path.push(ident.to_string());
        }
        let alias = if alias == "self" { prefix.last().cloned().unwrap_or_default() } else { alias.to_string() };
        let module = self.module();
        if !reexport {
            self.facts.named.push((path.clone(), module.clone()));
        }
        self.facts.aliases.insert(alias, (path, module));
    }
}

impl<'ast> syn::visit::Visit<'ast> for Reader<'_> {
    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        // A re-export only gives a name another place: whoever names it depends on the file
        // that defines it, not on the one that passes it on.
        let reexport = !matches!(item.vis, syn::Visibility::Inherited);
        self.use_tree(&mut Vec::new(), &item.tree, reexport);
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        // Tests may reach anywhere: the shape held here is the program's.
        let for_tests = item.attrs.iter().any(|attr| {
            attr.path().is_ident("cfg")
                && matches!(&attr.meta, syn::Meta::List(list) if list.tokens.to_string() == "test")
        });
        if for_tests {
            if item.content.is_none() {
                let module = self.module();
                self.facts.test_modules.push(module.into_iter().chain([item.ident.to_string()]).collect());
            }
        } else if item.content.is_some() {
            self.inline.push(item.ident.to_string());
            syn::visit::visit_item_mod(self, item);
            self.inline.pop();
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            let segments = path.segments.iter().map(|segment| segment.ident.to_string()).collect();
            let module = self.module();
            self.facts.named.push((segments, module));
        }
        syn::visit::visit_path(self, path);
    }
}

impl SourceTree {
    fn read(src: &Path) -> SourceTree {
        let mut paths = Vec::new();
        rust_files(src, &mut paths);
        let mut tree = SourceTree { files: BTreeMap::new(), facts: BTreeMap::new() };
        for file in paths {
            let relative = file.strip_prefix(src).unwrap();
            let mut module: Vec<String> =
                relative.iter().map(|part| part.to_string_lossy().trim_end_matches(".rs").to_owned()).collect();
            if module.last().is_some_and(|last| last == "mod") || module == ["lib"] || module == ["main"] {
                module.pop();
            }
            let text = std::fs::read_to_string(&file).unwrap();
            let syntax = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let mut facts = FileFacts { module: module.clone(), ..FileFacts::default() };
            for item in &syntax.items {
                let name = match item {
                    syn::Item::Const(item) => Some(&item.ident),
                    syn::Item::Enum(item) => Some(&item.ident),
                    syn::Item::Fn(item) => Some(&item.sig.ident),
                    syn::Item::Macro(item) => item.ident.as_ref(),
                    syn::Item::Mod(item) => Some(&item.ident),
                    syn::Item::Static(item) => Some(&item.ident),
                    syn::Item::Struct(item) => Some(&item.ident),
                    syn::Item::Trait(item) => Some(&item.ident),
                    syn::Item::Type(item) => Some(&item.ident),
                    syn::Item::Union(item) => Some(&item.ident),
                    _ => None,
                };
                facts.defines.extend(name.map(ToString::to_string));
            }
            syn::visit::Visit::visit_file(&mut Reader { facts: &mut facts, inline: Vec::new() }, &syntax);
            tree.files.insert(module, file.clone());
            tree.facts.insert(file, facts);
        }
        let for_tests: Vec<Vec<String>> = tree.facts.values().flat_map(|facts| facts.test_modules.clone()).collect();
        for module in for_tests {
            if let Some(file) = tree.files.get(&module) {
                tree.facts.get_mut(file).unwrap().named.clear();
            }
        }
        tree
    }

    /// The path from the crate root that `path`, written in `module` of `file`, names; `None`
    /// outside the crate (another crate, the standard library, a local name).
    fn absolute(&self, file: &Path, path: &[String], module: &[String]) -> Option<Vec<String>> {
        let (first, rest) = path.split_first()?;
        match first.as_str() {
            "crate" => Some(rest.to_vec()),
            "self" => Some(module.iter().chain(rest).cloned().collect()),
            "super" => {
                let mut base = module.to_vec();
                let mut rest = path;
                while let Some(("super", tail)) = rest.split_first().map(|(first, tail)| (first.as_str(), tail)) {
                    base.pop()?;
                    rest = tail;
                }
                Some(base.into_iter().chain(rest.iter().cloned()).collect())
            }
            _ => {
                let child: Vec<String> = module.iter().chain([first]).cloned().collect();
                if self.files.contains_key(&child) {
                    return Some(child.into_iter().chain(rest.iter().cloned()).collect());
                }
                let (target, written_in) = self.facts[file].aliases.get(first)?;
                if target.first() == Some(first) && written_in == module {
                    return None; // `use x;` of an outside crate
                }
                let target = self.absolute(file, target, written_in)?;
                Some(target.into_iter().chain(rest.iter().cloned()).collect())
            }
        }
    }

    /// The file that defines what the absolute `path` names, following re-exports and globs;
    /// `None` for a module itself or something outside the crate.
    fn defining_file(&self, path: &[String], depth: usize) -> Option<&PathBuf> {
        if depth > 16 {
            return None;
        }
        let held = (0..=path.len()).rev().find(|at| self.files.contains_key(&path[..*at]))?;
        let file = &self.files[&path[..held]];
        let name = path.get(held)?;
        let facts = &self.facts[file];
        if name == "*" || facts.defines.contains(name) {
            return Some(file);
        }
        if let Some((target, written_in)) = facts.aliases.get(name) {
            let target = self.absolute(file, target, written_in)?;
            return self.defining_file(&target, depth + 1);
        }
        for (glob, written_in) in &facts.globs {
            if let Some(module) = self.absolute(file, glob, written_in)
                && let Some(found) = self.defining_file(&[module, vec![name.clone()]].concat(), depth + 1)
                && self.facts[found].defines.contains(name)
            {
                return Some(found);
            }
        }
        Some(file)
    }

    /// For each file, the files it takes names from, with the names.
    fn edges(&self) -> BTreeMap<PathBuf, BTreeMap<PathBuf, BTreeSet<String>>> {
        let mut edges: BTreeMap<PathBuf, BTreeMap<PathBuf, BTreeSet<String>>> = BTreeMap::new();
        for (file, facts) in &self.facts {
            let targets = edges.entry(file.clone()).or_default();
            for (path, module) in &facts.named {
                if let Some(absolute) = self.absolute(file, path, module)
                    && let Some(target) = self.defining_file(&absolute, 0)
                    && target != file
                {
                    targets.entry(target.clone()).or_default().insert(path.join("::"));
                }
            }
        }
        edges
    }
}

/// The groups of files that import each other in a circle (strongly connected components of
/// more than one file), by Tarjan's algorithm.
fn circles<N: Ord + Clone>(edges: &BTreeMap<N, BTreeSet<N>>) -> Vec<Vec<N>> {
    struct State<N> {
        index: BTreeMap<N, usize>,
        low: BTreeMap<N, usize>,
        stack: Vec<N>,
        found: Vec<Vec<N>>,
    }
    fn visit<N: Ord + Clone>(node: &N, edges: &BTreeMap<N, BTreeSet<N>>, state: &mut State<N>) {
        let at = state.index.len();
        state.index.insert(node.clone(), at);
        state.low.insert(node.clone(), at);
        state.stack.push(node.clone());
        for next in edges.get(node).into_iter().flatten() {
            if !state.index.contains_key(next) {
                visit(next, edges, state);
                let low = state.low[node].min(state.low[next]);
                state.low.insert(node.clone(), low);
            } else if state.stack.contains(next) {
                let low = state.low[node].min(state.index[next]);
                state.low.insert(node.clone(), low);
            }
        }
        if state.low[node] == state.index[node] {
            let start = state.stack.iter().rposition(|n| n == node).unwrap();
            let group = state.stack.split_off(start);
            if group.len() > 1 {
                state.found.push(group);
            }
        }
    }
    let mut state = State { index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), found: Vec::new() };
    for node in edges.keys() {
        if !state.index.contains_key(node) {
            visit(node, edges, &mut state);
        }
    }
    state.found
}

/// Every circle of files in the crate whose sources are in `src`, described with the names that
/// tie each file to the next.
fn file_circles(src: &Path) -> Vec<String> {
    let tree = SourceTree::read(src);
    let edges = tree.edges();
    let graph = edges.iter().map(|(from, to)| (from.clone(), to.keys().cloned().collect())).collect();
    let show = |file: &Path| file.strip_prefix(root()).unwrap_or(file).display().to_string();
    circles(&graph)
        .into_iter()
        .map(|group| {
            let mut lines = vec![format!("{} files import each other:", group.len())];
            for from in &group {
                for (to, names) in &edges[from] {
                    if group.contains(to) {
                        let names: Vec<&str> = names.iter().map(String::as_str).collect();
                        lines.push(format!("  {} -> {}: {}", show(from), show(to), names.join(", ")));
                    }
                }
            }
            lines.join("\n")
        })
        .collect()
}

#[test]
fn no_file_imports_a_file_that_imports_it_back() {
    let mut sources: Vec<PathBuf> =
        std::fs::read_dir(root().join("crates")).unwrap().map(|entry| entry.unwrap().path().join("src")).collect();
    sources.push(root().join("src"));
    let found: Vec<String> = sources.iter().flat_map(|src| file_circles(src)).collect();
    assert!(
        found.is_empty(),
        "files import each other in a circle (a name two files need has one owner below both):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_circle_finder_finds_circles_between_files() {
    let dir = tempfile::tempdir().unwrap();
    let write = |path: &str, text: &str| {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("src/lib.rs", "mod db;\nmod http;\n");
    write("src/db/mod.rs", "pub mod events;\npub mod policies;\npub use events::NewEvent;\n");
    // A group over several lines, naming a sibling of the same module.
    write(
        "src/db/events.rs",
        "use crate::{\n    db::policies::{\n        Requeue,\n    },\n};\npub struct NewEvent;\n",
    );
    // A re-export followed to the file that defines the name.
    write("src/db/policies.rs", "use super::NewEvent;\npub struct Requeue;\n");
    write("src/http/mod.rs", "pub mod console;\npub mod extract;\n");
    write("src/http/extract.rs", "pub fn address_of() {}\npub fn check() { super::console::session::is_open(); }\n");
    write("src/http/console/mod.rs", "pub mod session;\n");
    // `super::` below the top level, in an expression.
    write("src/http/console/session.rs", "pub fn is_open() { super::super::extract::address_of(); }\n");
    let found = file_circles(&dir.path().join("src"));
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found.iter().any(|c| c.contains("db/events.rs -> ") && c.contains("db/policies.rs -> ")), "{found:#?}");
    assert!(found.iter().any(|c| c.contains("extract.rs -> ") && c.contains("session.rs -> ")), "{found:#?}");

    // Taking the names from a file below both breaks the circles.
    write("src/db/policies.rs", "pub struct Requeue;\n");
    write("src/http/console/session.rs", "pub fn is_open() {}\n");
    assert_eq!(file_circles(&dir.path().join("src")), Vec::<String>::new());
}
