//! Keeps the crate's layers one-way: reads every module's source and checks
//! that it imports (`crate::…`, including through the crate root's
//! re-exports) only from its own layer or the ones below, and that no
//! modules import one another in a circle. Test code (`mod tests`) is not
//! checked. See "How the code is organised" in the crate docs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The layers, bottom first, with their modules.
const LAYERS: [(&str, &[&str]); 5] = [
    (
        "pure",
        &[
            "error", "health", "metrics", "quorum", "request", "retry", "scripts", "token",
        ],
    ),
    ("wire", &["node", "probe"]),
    (
        "round",
        &["calls", "coalesce", "elect", "primitive", "round", "tasks"],
    ),
    ("holding", &["guard", "lease", "renew", "wakeup"]),
    (
        "entry",
        &[
            "builder",
            "doctor",
            "election",
            "redlock",
            "rwlock",
            "semaphore",
        ],
    ),
];

/// Modules outside the layers: the test kit (a feature for tests, on top
/// of everything) and this check.
const OUTSIDE: [&str; 2] = ["testkit", "layers"];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS
        .iter()
        .position(|(_, modules)| modules.contains(&module))
}

fn source(module: &str) -> String {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let file = src.join(format!("{module}.rs"));
    let file = if file.exists() {
        file
    } else {
        src.join(module).join("mod.rs")
    };
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// The code of a module without comments and without its tests.
fn code(source: &str) -> String {
    let mut out = String::new();
    let mut lines = source.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().contains("mod tests"))
        {
            break;
        }
        let line = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The first path segments after each `crate::` in `code`: `crate::a::b`
/// gives `a`, `crate::{a::X, b}` gives `a` and `b`.
fn crate_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level items of the group, up to its closing brace.
            let mut depth = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(first_segment(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            out.push(first_segment(&item));
        } else {
            out.push(first_segment(rest));
        }
    }
    out.retain(|segment| !segment.is_empty());
    out
}

fn first_segment(path: &str) -> String {
    path.trim()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// What the crate root re-exports, by name: the module each comes from.
fn root_exports() -> BTreeMap<String, String> {
    let lib = code(&source("lib"));
    let mut exports = BTreeMap::new();
    for statement in lib.split(';') {
        let Some(rest) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let Some((module, names)) = rest.split_once("::") else {
            continue;
        };
        let names = names.trim().trim_start_matches('{').trim_end_matches('}');
        for name in names.split(',') {
            let name = first_segment(name);
            if !name.is_empty() {
                exports.insert(name, module.trim().to_owned());
            }
        }
    }
    exports
}

/// Every layered module, with the modules it imports.
fn imports() -> BTreeMap<&'static str, BTreeSet<String>> {
    let exports = root_exports();
    let mut graph = BTreeMap::new();
    for (_, modules) in LAYERS {
        for &module in modules {
            let deps = crate_paths(&code(&source(module)))
                .into_iter()
                .map(|segment| exports.get(&segment).cloned().unwrap_or(segment))
                .filter(|dep| dep != module)
                .collect();
            graph.insert(module, deps);
        }
    }
    graph
}

#[test]
fn every_module_is_in_a_layer() {
    let lib = code(&source("lib"));
    for line in lib.lines() {
        let line = line.trim();
        let Some(module) = line
            .strip_prefix("mod ")
            .or_else(|| line.strip_prefix("pub mod "))
        else {
            continue;
        };
        let module = first_segment(module);
        assert!(
            layer_of(&module).is_some() || OUTSIDE.contains(&module.as_str()),
            "module `{module}` is in no layer: add it to LAYERS"
        );
    }
}

#[test]
fn imports_point_down_only() {
    let mut wrong = Vec::new();
    for (module, deps) in imports() {
        let own = layer_of(module).unwrap_or(0);
        for dep in deps {
            match layer_of(&dep) {
                Some(layer) if layer > own => wrong.push(format!(
                    "{module} ({}) imports {dep} ({})",
                    LAYERS[own].0, LAYERS[layer].0
                )),
                Some(_) => {}
                None => wrong.push(format!("{module} imports `{dep}`, which is in no layer")),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_modules_import_one_another_in_a_circle() {
    let graph = imports();
    // Depth-first search for a back edge.
    fn visit<'a>(
        module: &'a str,
        graph: &'a BTreeMap<&'static str, BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<String> {
        if let Some(i) = path.iter().position(|&m| m == module) {
            let mut circle = path[i..].to_vec();
            circle.push(module);
            return Some(circle.join(" -> "));
        }
        if !done.insert(module) {
            return None;
        }
        path.push(module);
        for dep in graph.get(module).into_iter().flatten() {
            if let Some(circle) = visit(dep, graph, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    for &module in graph.keys() {
        if let Some(circle) = visit(module, &graph, &mut Vec::new(), &mut done) {
            panic!("modules import one another in a circle: {circle}");
        }
    }
}

#[test]
fn the_parser_sees_every_form_of_import() {
    let code = code(
        "use crate::a::B;\nuse crate::{c::D, e, f::{G, H}};\nfn x() { crate::i::j(); }\n// crate::k\n",
    );
    assert_eq!(crate_paths(&code), ["a", "c", "e", "f", "i"]);
}
