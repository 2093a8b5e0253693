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
    // the MCP server it mounts, whose tools call the REST API as their agents do; the tools
    // never see the server, except the bench (which starts PostgreSQL and reads the server's
    // duration syntax), and the chaos run (which finds PostgreSQL's programs as the server does).
    let allowed: BTreeMap<&str, &[&str]> = BTreeMap::from([
        ("domain", &[][..]),
        ("api", &["haggle-domain"][..]),
        ("server", &["haggle-domain", "haggle-api", "haggle-mcp"][..]),
        ("client", &["haggle-domain", "haggle-api"][..]),
        ("mcp", &["haggle-domain", "haggle-api", "haggle-client"][..]),
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
