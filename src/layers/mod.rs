//! Keeps the crate's layers one-way. Reads every file of every module
//! (`src/X.rs` and everything under `src/X/`) and checks that each module
//! imports (`crate::…`, `super::…`, `self::…`, including through the crate
//! root's re-exports) only from a lower level: a lower layer, or a lower
//! level of its own layer. Reads the CLI (`src/bin/*`) too: it uses only
//! the library's public API (`quorumlock::…`), and its files import one
//! another in no circle. Test code (`mod tests`) and comments are not
//! checked.
//!
//! A folder may stand on several levels: an entry `a::b` of [`LAYERS`] is
//! the part of module `a` in `src/a/b.rs` or `src/a/b/`, placed at a level
//! of its own, and `a` is then the rest of its folder. An import of
//! `crate::a::b::…` (or `super::b::…` from `a`'s files, or `b::…` from
//! `a`'s root file) is an import of `a::b`; one of `super::…` from `a::b`'s
//! files is an import of `a`.
//!
//! [`LAYERS`] is the one list of the layers; the crate docs ("How the code
//! is organised", every entry) and the comments over `lib.rs`'s `mod` lines
//! (the modules `lib.rs` declares) are checked against it.
//!
//! The checks are pure functions of the sources (file's module path →
//! text), so the tests at the bottom feed them bad imports and check each
//! is reported.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A layer: its name (as the crate docs spell it) and its levels, bottom
/// first. A module imports only from the levels below its own, in its
/// layer or the ones below: never from its own level, so a new import
/// within a layer that points up, or sideways, fails until the list says
/// where the module now stands.
type Layer = (&'static str, &'static [&'static [&'static str]]);

/// The layers, bottom first, with their modules by level. The levels are
/// what the imports are today: a module stands one level above the highest
/// module of its own layer that it imports (the comments say which). An
/// entry `a::b` is a part of folder `a` placed on a level of its own (see
/// the module docs).
const LAYERS: [Layer; 5] = [
    (
        "pure",
        &[
            &["check", "error", "keys", "quorum", "scripts"],
            // metrics, retry, token: error; decide: error, quorum; request:
            // error, keys, quorum.
            &["decide", "metrics", "request", "retry", "token"],
        ],
    ),
    (
        "wire",
        &[
            &["node"],
            // lock::node: node.
            &["lock::node"],
            // probe: node, lock::node.
            &["probe"],
        ],
    ),
    (
        "round",
        &[
            &["calls", "tasks"],
            // lock::batch: tasks.
            &["lock::batch"],
            // round: calls, lock::batch, tasks.
            &["round"],
            // lock: lock::batch, round.
            &["lock"],
        ],
    ),
    (
        "holding",
        &[
            &["lease", "pubsub"],
            // renew: lease; wakeup: pubsub.
            &["renew", "wakeup"],
            // guard: lease, renew.
            &["guard"],
        ],
    ),
    (
        "entry points",
        &[
            &["redlock"],
            // builder, doctor, election, rwlock, semaphore: redlock.
            &["builder", "doctor", "election", "rwlock", "semaphore"],
            // inspect: redlock, semaphore.
            &["inspect"],
        ],
    ),
];

/// Modules on top of every layer: they may import from any layer, and no
/// layered module may import them. The test kit is a feature for tests.
const ON_TOP: [&str; 1] = ["testkit"];

/// Modules not checked: this check (its tests hold bad imports on purpose).
const UNCHECKED: [&str; 1] = ["layers"];

/// Imports between the CLI's files allowed to close a circle. Each must
/// still close one (a test fails once it does not, so the exception goes).
/// None today.
const CLI_CIRCLE_EXCEPTIONS: [(&str, &str); 0] = [];

/// Modules the crate docs' "How the code is organised" does not list yet,
/// though they are in [`LAYERS`]. A known finding, allowed here so the
/// check passes; a test fails once the docs list one, so it goes from here.
const UNDOCUMENTED: [&str; 1] = ["metrics"];

/// A module's place: (layer, level), ordered bottom first.
fn place(layers: &[Layer], module: &str) -> Option<(usize, usize)> {
    layers.iter().enumerate().find_map(|(layer, (_, levels))| {
        levels
            .iter()
            .position(|modules| modules.contains(&module))
            .map(|level| (layer, level))
    })
}

fn describe(layers: &[Layer], (layer, level): (usize, usize)) -> String {
    format!("{}, level {}", layers[layer].0, level + 1)
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn read(file: &Path) -> String {
    std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// Every `.rs` file in `dir` and below, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return files;
    };
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The module path of a file under `src/`: `a.rs` and `a/mod.rs` are
/// `a`, `a/b.rs` and `a/b/mod.rs` are `a::b`.
fn file_module(relative: &Path) -> String {
    let mut segments: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if let Some(last) = segments.last_mut() {
        *last = last.trim_end_matches(".rs").to_owned();
    }
    if segments.len() > 1 && segments.last().is_some_and(|last| last == "mod") {
        segments.pop();
    }
    segments.join("::")
}

/// The library's sources: `lib.rs`, and every file of each module
/// `lib.rs` declares (`src/X.rs`, and everything under `src/X/`) by its
/// module path, without comments and tests.
fn library() -> (String, BTreeMap<String, String>) {
    let src = src_dir();
    let lib = read(&src.join("lib.rs"));
    let mut files = BTreeMap::new();
    for module in declared_modules(&code(&lib)) {
        if UNCHECKED.contains(&module.as_str()) {
            continue;
        }
        let mut paths = rust_files(&src.join(&module));
        let single = src.join(format!("{module}.rs"));
        if single.exists() {
            paths.insert(0, single);
        }
        assert!(!paths.is_empty(), "module `{module}` has no source file");
        for path in paths {
            let relative = path.strip_prefix(&src).unwrap_or(&path);
            files.insert(file_module(relative), code(&read(&path)));
        }
    }
    (lib, files)
}

/// Each binary under `src/bin` (a folder, or one file) with its files by
/// module name: `main` for the root.
fn binaries() -> BTreeMap<String, BTreeMap<String, String>> {
    let bin = src_dir().join("bin");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&bin).unwrap_or_else(|e| panic!("{}: {e}", bin.display())) {
        let path = entry
            .unwrap_or_else(|e| panic!("{}: {e}", bin.display()))
            .path();
        let name = path.file_stem().unwrap_or_default().to_string_lossy();
        let files: BTreeMap<String, String> = if path.is_dir() {
            rust_files(&path)
                .iter()
                .map(|file| {
                    let module = file.file_stem().unwrap_or_default().to_string_lossy();
                    (module.into_owned(), code(&read(file)))
                })
                .collect()
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            [("main".to_owned(), code(&read(&path)))].into()
        } else {
            continue;
        };
        out.insert(name.into_owned(), files);
    }
    out
}

/// The code of a source without comments and without its tests.
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

/// The modules a crate root declares (`mod x;`, `pub mod x;`, …).
fn declared_modules(root: &str) -> Vec<String> {
    root.lines()
        .filter_map(|line| {
            let line = line.trim();
            let rest = line.strip_prefix("pub ").unwrap_or(line);
            let rest = rest.strip_prefix("pub(crate) ").unwrap_or(rest);
            let module = first_segment(rest.strip_prefix("mod ")?);
            (!module.is_empty()).then_some(module)
        })
        .collect()
}

/// Every path in `code`, each group expanded: `crate::a::{b::X, c}`
/// gives `crate::a::b::X` and `crate::a::c`, `x::{self, Y}` gives `x` and
/// `x::Y`; a glob's `*` is left out, and so is a name that ends another
/// (`my_crate::x` is not `crate::x`). A lone name is no path: `pub(super)`
/// imports nothing.
fn paths(code: &str) -> Vec<String> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts = is_name_start(chars[i])
            && !i.checked_sub(1).is_some_and(|before| {
                is_name(chars[before]) || matches!(chars[before], ':' | '\'')
            });
        if starts {
            let (found, end) = path_tree(&chars, i, false);
            out.extend(found);
            i = end.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

fn is_name_start(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

fn is_name(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths of one path starting at `chars[start]` (groups expanded), and
/// where it ends; `nested` inside a group, where a lone name is a path.
fn path_tree(chars: &[char], start: usize, nested: bool) -> (Vec<String>, usize) {
    let mut prefix: Vec<String> = Vec::new();
    let mut i = start;
    let join = |prefix: &[String], rest: &str| {
        let mut segments = prefix.to_vec();
        if !rest.is_empty() && rest != "self" {
            segments.push(rest.to_owned());
        }
        segments.join("::")
    };
    loop {
        match chars.get(i) {
            Some('{') => {
                i += 1;
                let mut out = Vec::new();
                loop {
                    while chars.get(i).is_some_and(|c| c.is_whitespace()) {
                        i += 1;
                    }
                    match chars.get(i) {
                        None => return (out, i),
                        Some('}') => return (out, i + 1),
                        Some(c) if is_name_start(*c) => {
                            let (inner, end) = path_tree(chars, i, true);
                            out.extend(inner.iter().map(|path| join(&prefix, path)));
                            i = end;
                        }
                        Some('*') => i += 1,
                        Some(_) => {}
                    }
                    // Past what follows the item (`as Name`) to its comma.
                    while chars.get(i).is_some_and(|c| !matches!(c, ',' | '}')) {
                        i += 1;
                    }
                    if chars.get(i) == Some(&',') {
                        i += 1;
                    }
                }
            }
            Some('*') => return (vec![join(&prefix, "")], i + 1),
            _ => {}
        }
        let name: String = chars[i..].iter().take_while(|c| is_name(**c)).collect();
        if name.is_empty() {
            return (vec![join(&prefix, "")], i);
        }
        i += name.chars().count();
        prefix.push(name);
        if chars.get(i) == Some(&':') && chars.get(i + 1) == Some(&':') {
            i += 2;
        } else if prefix.len() == 1 && !nested {
            return (Vec::new(), i);
        } else {
            let last = prefix.pop().unwrap_or_default();
            return (vec![join(&prefix, &last)], i);
        }
    }
}

/// The names right after `first::` in `code`'s paths: `crate::a::b` and
/// `crate::{a::X, b}` give `a` (and `b`) for `crate`.
fn paths_after(code: &str, first: &str) -> Vec<String> {
    paths(code)
        .iter()
        .filter_map(|path| path.strip_prefix(first)?.strip_prefix("::"))
        .map(first_segment)
        .filter(|name| !name.is_empty())
        .collect()
}

fn first_segment(path: &str) -> String {
    path.trim().chars().take_while(|c| is_name(*c)).collect()
}

/// The parent of a module path: `a::b` gives `a`, `a` the crate root (``).
fn parent(module: &str) -> &str {
    module.rsplit_once("::").map_or("", |(parent, _)| parent)
}

/// The crate path that `path`, written in a file of module `file`, names:
/// `crate::a::X` is `a::X`; `super::X` in `a::b` is `a::X`; `self::X` in
/// `a` is `a::X`, and so is `b::X` there when `a::b` is one of `entries`
/// (a sub-module the check places). `None` for any other path: another
/// crate's, or a local name's.
fn absolute(path: &str, file: &str, entries: &[&str]) -> Option<String> {
    let (first, rest) = path.split_once("::").unwrap_or((path, ""));
    let mut base: Vec<&str> = match first {
        "crate" => Vec::new(),
        "self" => file.split("::").collect(),
        "super" => parent(file).split("::").collect(),
        child if entries.contains(&format!("{file}::{child}").as_str()) => {
            let mut base: Vec<&str> = file.split("::").collect();
            base.push(child);
            base
        }
        _ => return None,
    };
    let mut rest = rest.split("::").filter(|s| !s.is_empty()).peekable();
    while rest.next_if_eq(&"super").is_some() {
        base.pop();
    }
    base.extend(rest);
    base.retain(|s| !s.is_empty());
    Some(base.join("::"))
}

/// The module a crate path belongs to: the longest of `entries` it is in,
/// or else its first segment (`a::b::X` is `a::b` if `a::b` is an entry,
/// else `a`).
fn module_of(path: &str, entries: &[&str]) -> String {
    entries
        .iter()
        .filter(|entry| path == **entry || path.starts_with(&format!("{entry}::")))
        .max_by_key(|entry| entry.len())
        .map_or_else(|| first_segment(path), |entry| entry.to_string())
}

/// The sub-module entries of `layers` (`a::b`).
fn sub_entries(layers: &[Layer]) -> Vec<&'static str> {
    layers
        .iter()
        .flat_map(|(_, levels)| levels.iter().flat_map(|l| l.iter()))
        .copied()
        .filter(|entry| entry.contains("::"))
        .collect()
}

/// What a crate root re-exports (`pub use`), by name: the module each
/// comes from (of `entries`, or a top-level one).
fn root_exports(root: &str, entries: &[&str]) -> BTreeMap<String, String> {
    let mut exports = BTreeMap::new();
    for statement in root.split(';') {
        let Some(rest) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        for path in paths(rest) {
            let Some((from, name)) = path.rsplit_once("::") else {
                continue;
            };
            let from = from.strip_prefix("crate::").unwrap_or(from);
            exports.insert(name.to_owned(), module_of(from, entries));
        }
    }
    exports
}

/// Each module (an entry of `layers`, or a top-level module) with the
/// modules it imports (`crate::x`, `super::…`, `self::…`, or a name the
/// root re-exports from `x`), itself left out. `files` maps each file's
/// module path to its code.
fn import_graph(
    layers: &[Layer],
    root: &str,
    files: &BTreeMap<String, String>,
) -> BTreeMap<String, BTreeSet<String>> {
    let entries = sub_entries(layers);
    let exports = root_exports(&code(root), &entries);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, source) in files {
        let module = module_of(file, &entries);
        let deps = paths(&code(source))
            .iter()
            .filter_map(|path| absolute(path, file, &entries))
            .filter(|path| !path.is_empty())
            .map(|path| {
                exports
                    .get(&first_segment(&path))
                    .cloned()
                    .unwrap_or_else(|| module_of(&path, &entries))
            })
            .filter(|dep| *dep != module)
            .collect::<Vec<_>>();
        graph.entry(module).or_default().extend(deps);
    }
    graph
}

/// A circle in `graph`, as `a -> b -> a`, leaving out the `allowed` edges.
fn find_circle(
    graph: &BTreeMap<String, BTreeSet<String>>,
    allowed: &[(&str, &str)],
) -> Option<String> {
    // Depth-first search for a back edge.
    fn visit<'a>(
        module: &'a str,
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        allowed: &[(&str, &str)],
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
            if allowed.contains(&(module, dep.as_str())) {
                continue;
            }
            if let Some(circle) = visit(dep, graph, allowed, path, done) {
                return Some(circle);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|module| visit(module, graph, allowed, &mut Vec::new(), &mut done))
}

/// What is wrong with the library's imports: `root` is `lib.rs`, `files`
/// each file's source by its module path (`a`, `a::b`). Empty when all is
/// well.
fn library_problems(
    layers: &[Layer],
    on_top: &[&str],
    root: &str,
    files: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut wrong = Vec::new();
    for module in declared_modules(&code(root)) {
        if place(layers, &module).is_none()
            && !on_top.contains(&module.as_str())
            && !UNCHECKED.contains(&module.as_str())
        {
            wrong.push(format!(
                "module `{module}` is in no layer: add it to LAYERS"
            ));
        }
    }
    let graph = import_graph(layers, root, files);
    for (module, deps) in &graph {
        let own = place(layers, module);
        if own.is_none() && !on_top.contains(&module.as_str()) {
            continue; // reported above
        }
        for dep in deps {
            match (own, place(layers, dep)) {
                (_, None) if on_top.contains(&dep.as_str()) => wrong.push(format!(
                    "{module} imports {dep}, which is on top of every layer: \
                     nothing in the layers may import it"
                )),
                (_, None) => wrong.push(format!("{module} imports `{dep}`, which is in no layer")),
                // On top: may import any layer.
                (None, Some(_)) => {}
                (Some(own), Some(theirs)) if theirs.0 > own.0 => wrong.push(format!(
                    "{module} ({}) imports {dep} ({}): a higher layer",
                    describe(layers, own),
                    describe(layers, theirs),
                )),
                (Some(own), Some(theirs)) if theirs >= own => wrong.push(format!(
                    "{module} ({}) imports {dep} ({}): within a layer, a module \
                     imports only from a lower level (move {module} up a level in \
                     LAYERS if this import is meant)",
                    describe(layers, own),
                    describe(layers, theirs),
                )),
                (Some(_), Some(_)) => {}
            }
        }
    }
    if let Some(circle) = find_circle(&graph, &[]) {
        wrong.push(format!("modules import one another in a circle: {circle}"));
    }
    wrong
}

/// What is wrong with a binary's imports: `lib_root` is the library's
/// `lib.rs`, `library_modules` the library's modules, `files` the binary's
/// files by module (`main` for its root), `allowed` the imports allowed to
/// close a circle. Empty when all is well.
fn binary_problems(
    lib_root: &str,
    library_modules: &BTreeSet<String>,
    files: &BTreeMap<String, String>,
    allowed: &[(&str, &str)],
) -> Vec<String> {
    let lib_root = code(lib_root);
    let public: BTreeSet<String> = root_exports(&lib_root, &[])
        .into_keys()
        .chain(
            lib_root
                .lines()
                .filter(|line| line.trim().starts_with("pub mod "))
                .flat_map(declared_modules),
        )
        .collect();
    let mut wrong = Vec::new();
    let mut graph = BTreeMap::new();
    for (file, source) in files {
        let code = code(source);
        for marker in ["#[path", "include!("] {
            if code.contains(marker) {
                wrong.push(format!(
                    "{file} uses `{marker}`: the CLI uses the library through \
                     `quorumlock::…` only, never its source files"
                ));
            }
        }
        for name in paths_after(&code, "quorumlock") {
            if !public.contains(&name) {
                wrong.push(format!(
                    "{file} imports quorumlock::{name}, which is not the library's \
                     public API (what lib.rs re-exports or declares `pub mod`)"
                ));
            }
        }
        let mut deps = BTreeSet::new();
        for name in paths_after(&code, "crate") {
            if files.contains_key(&name) {
                if &name != file {
                    deps.insert(name);
                }
            } else if library_modules.contains(&name) {
                wrong.push(format!(
                    "{file} imports crate::{name}, the library's internal module: \
                     the CLI uses the library through `quorumlock::…` only"
                ));
            } else if file != "main" {
                // An item of the binary's root. main is on top: it declares
                // and runs every other file, so its own uses are not edges.
                deps.insert("main".to_owned());
            }
        }
        graph.insert(file.clone(), deps);
    }
    if let Some(circle) = find_circle(&graph, allowed) {
        wrong.push(format!(
            "the CLI's files import one another in a circle: {circle}"
        ));
    }
    wrong
}

/// The layers as the crate docs' "How the code is organised" lists them,
/// (name, modules) in order, and the section's first line, which counts
/// them.
fn documented_layers(lib: &str) -> (Vec<(String, BTreeSet<String>)>, String) {
    let docs: Vec<&str> = lib
        .lines()
        .filter_map(|line| line.strip_prefix("//!"))
        .map(str::trim)
        .skip_while(|line| *line != "# How the code is organised")
        .skip(1)
        .take_while(|line| !line.starts_with('#'))
        .collect();
    let count = docs
        .iter()
        .find(|line| !line.is_empty())
        .map(|line| line.to_string())
        .unwrap_or_default();
    let mut layers: Vec<(String, BTreeSet<String>)> = Vec::new();
    for line in docs {
        if let Some((number, rest)) = line.split_once(". **")
            && number.parse::<usize>().is_ok()
        {
            let name = rest.split("**").next().unwrap_or_default();
            layers.push((name.to_lowercase(), BTreeSet::new()));
        } else if let Some(rest) = line.strip_prefix("- `")
            && let Some(layer) = layers.last_mut()
        {
            // A module, or a part of one (`a::b`).
            let entry = rest.split('`').next().unwrap_or_default();
            layer.1.insert(entry.to_owned());
        }
    }
    (layers, count)
}

/// The layers as the comments over `lib.rs`'s `mod` lines group them:
/// `// 1. pure: …` and the `mod` lines under it, up to a blank line.
fn commented_layers(lib: &str) -> Vec<(String, BTreeSet<String>)> {
    let mut layers: Vec<(String, BTreeSet<String>)> = Vec::new();
    let mut open = false;
    for line in lib.lines().map(str::trim) {
        if let Some(comment) = line.strip_prefix("// ")
            && let Some((number, rest)) = comment.split_once(". ")
            && number.parse::<usize>().is_ok()
        {
            let name = rest.split(':').next().unwrap_or_default();
            layers.push((name.to_lowercase(), BTreeSet::new()));
            open = true;
        } else if line.is_empty() {
            open = false;
        } else if open && let Some(layer) = layers.last_mut() {
            layer.1.extend(declared_modules(line));
        }
    }
    layers
}

fn listed_layers(layers: &[Layer]) -> Vec<(String, BTreeSet<String>)> {
    layers
        .iter()
        .map(|(name, levels)| {
            let modules = levels.iter().flat_map(|l| l.iter()).map(|m| m.to_string());
            (name.to_string(), modules.collect())
        })
        .collect()
}

#[test]
fn the_library_imports_only_from_lower_levels() {
    let (lib, files) = library();
    let wrong = library_problems(&LAYERS, &ON_TOP, &lib, &files);
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_module_is_declared_and_every_file_read() {
    let (lib, files) = library();
    let declared = declared_modules(&code(&lib));
    let entries = sub_entries(&LAYERS);
    for (_, levels) in LAYERS {
        for module in levels.iter().flat_map(|l| l.iter()) {
            // A part of a folder (`a::b`): its folder is declared.
            let top = first_segment(module);
            assert!(
                declared.contains(&top),
                "LAYERS lists `{module}`, which lib.rs does not declare"
            );
            assert!(
                files
                    .keys()
                    .any(|file| module_of(file, &entries) == *module),
                "LAYERS lists `{module}`, which has no source file"
            );
        }
    }
    // Every file under src/ is read as part of a module, or is lib.rs, the
    // CLI (read by its own check) or this check.
    let src = src_dir();
    for file in rust_files(&src) {
        let relative = file.strip_prefix(&src).unwrap_or(&file);
        let module = file_module(relative);
        assert!(
            files.contains_key(&module)
                || ["lib", "bin", "layers"].contains(&first_segment(&module).as_str()),
            "{} belongs to no module this check reads",
            relative.display()
        );
    }
}

#[test]
fn the_cli_uses_only_the_public_api_and_imports_in_no_circle() {
    let (lib, files) = library();
    let library_modules: BTreeSet<String> = files.keys().map(|f| first_segment(f)).collect();
    let binaries = binaries();
    assert!(
        binaries.contains_key("quorumlock"),
        "the CLI's sources were not found"
    );
    let mut wrong = Vec::new();
    for (name, files) in &binaries {
        for problem in binary_problems(&lib, &library_modules, files, &CLI_CIRCLE_EXCEPTIONS) {
            wrong.push(format!("src/bin/{name}: {problem}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn each_cli_exception_is_still_needed() {
    let cli = &binaries()["quorumlock"];
    for (from, to) in CLI_CIRCLE_EXCEPTIONS {
        let imports = paths_after(&code(&cli[from]), "crate");
        assert!(
            imports.iter().any(|m| m == to),
            "{from} no longer imports {to}: remove it from CLI_CIRCLE_EXCEPTIONS"
        );
        let back = paths_after(&code(&cli[to]), "crate");
        assert!(
            back.iter().any(|m| m == from),
            "{to} no longer imports {from}, so {from} -> {to} closes no circle: \
             remove it from CLI_CIRCLE_EXCEPTIONS"
        );
    }
}

#[test]
fn the_crate_docs_list_the_same_layers() {
    let lib = read(&src_dir().join("lib.rs"));
    let (documented, count) = documented_layers(&lib);
    let mut listed = listed_layers(&LAYERS);
    for module in UNDOCUMENTED {
        assert!(
            !documented
                .iter()
                .any(|(_, modules)| modules.contains(module)),
            "the crate docs list `{module}` now: remove it from UNDOCUMENTED"
        );
        for (_, modules) in &mut listed {
            modules.remove(module);
        }
    }
    assert_eq!(
        documented, listed,
        "\"How the code is organised\" in lib.rs lists other layers than LAYERS"
    );
    let words = [
        "zero", "one", "two", "three", "four", "five", "six", "seven",
    ];
    let number = words.get(LAYERS.len()).copied().unwrap_or_default();
    assert!(
        count
            .to_lowercase()
            .starts_with(&format!("{number} layers")),
        "\"How the code is organised\" counts the layers other than LAYERS: {count}"
    );
}

#[test]
fn the_comments_over_the_mod_lines_group_the_same_layers() {
    let lib = read(&src_dir().join("lib.rs"));
    // The modules lib.rs declares: a folder's parts (`a::b`) are in its
    // own `mod` lines.
    let mut listed = listed_layers(&LAYERS);
    for (_, modules) in &mut listed {
        modules.retain(|module| !module.contains("::"));
    }
    assert_eq!(
        commented_layers(&lib),
        listed,
        "the comments over lib.rs's `mod` lines group other layers than LAYERS"
    );
}

#[test]
fn the_parser_sees_every_form_of_import() {
    let code = code(
        "use crate::a::B;\nuse crate::{c::D, e, f::{G, H}};\nfn x() { crate::i::j(); }\n\
         // crate::k\nuse my_crate::l;\n#[cfg(test)]\nmod tests {\n    use crate::m;\n}\n",
    );
    assert_eq!(paths_after(&code, "crate"), ["a", "c", "e", "f", "f", "i"]);
    let crate_paths: Vec<String> = paths(&code)
        .into_iter()
        .filter(|path| path.starts_with("crate::"))
        .collect();
    assert_eq!(
        crate_paths,
        [
            "crate::a::B",
            "crate::c::D",
            "crate::e",
            "crate::f::G",
            "crate::f::H",
            "crate::i::j"
        ]
    );
    let code = "use crate::a::{self, b::{C, d::*}, e as f};\n\
                use super::{super::g, h};\npub(super) fn f() {}\n";
    assert_eq!(
        paths(code),
        [
            "crate::a",
            "crate::a::b::C",
            "crate::a::b::d",
            "crate::a::e",
            "super::super::g",
            "super::h"
        ]
    );
}

#[test]
fn paths_resolve_to_the_crate_and_to_folder_parts() {
    let entries = ["p::n", "p::m"];
    let resolve = |path: &str, file: &str| {
        absolute(path, file, &entries).map(|path| module_of(&path, &entries))
    };
    assert_eq!(resolve("crate::p::n::X", "q").as_deref(), Some("p::n"));
    assert_eq!(resolve("crate::p::X", "q").as_deref(), Some("p"));
    assert_eq!(resolve("crate::p::other::X", "q").as_deref(), Some("p"));
    assert_eq!(resolve("crate::p::n", "q").as_deref(), Some("p::n"));
    // super:: from a part's files is its folder; from a folder's files,
    // its part when it names one.
    assert_eq!(resolve("super::X", "p::n").as_deref(), Some("p"));
    assert_eq!(
        resolve("super::super::X", "p::n::deep").as_deref(),
        Some("p")
    );
    assert_eq!(resolve("super::m::X", "p::n").as_deref(), Some("p::m"));
    assert_eq!(resolve("super::n::X", "p::other").as_deref(), Some("p::n"));
    assert_eq!(resolve("self::n::X", "p").as_deref(), Some("p::n"));
    assert_eq!(resolve("self::X", "p::n").as_deref(), Some("p::n"));
    // A part's bare name in its folder's root file.
    assert_eq!(resolve("n::X", "p").as_deref(), Some("p::n"));
    assert_eq!(resolve("n::X", "q"), None);
    assert_eq!(resolve("redis::Value", "p"), None);
}

/// Tiny layers for the tests below: low has levels a, then b; high has c.
const TEST_LAYERS: [Layer; 2] = [("low", &[&["a"], &["b"]]), ("high", &[&["c"]])];

/// One layer whose one level holds a and b.
const SIDEWAYS: [Layer; 1] = [("low", &[&["a", "b"]])];

const TEST_ROOT: &str = "mod a;\nmod b;\nmod c;\npub mod kit;\n\
                         pub use a::Thing;\npub use c::{Top, Other};\n";

fn sources(files: &[(&str, &str)]) -> BTreeMap<String, String> {
    files
        .iter()
        .map(|(name, text)| (name.to_string(), text.to_string()))
        .collect()
}

fn library_report(files: &[(&str, &str)]) -> String {
    library_problems(&TEST_LAYERS, &["kit"], TEST_ROOT, &sources(files)).join("\n")
}

fn binary_report(files: &[(&str, &str)]) -> String {
    let modules = ["a", "b", "c", "kit"].map(str::to_owned).into();
    binary_problems(TEST_ROOT, &modules, &sources(files), &[]).join("\n")
}

#[test]
fn good_imports_pass() {
    let report = library_report(&[
        ("a", ""),
        ("b", "use crate::a::X;\n"),
        ("c", "use crate::{b::Y, Thing};\n"),
        ("kit", "use crate::c::Z;\n"),
    ]);
    assert_eq!(report, "");
    let report = binary_report(&[
        ("main", "mod x;\nmod y;\nuse quorumlock::{Thing, kit::K};\n"),
        ("x", "use crate::y::Y;\nfn f() { crate::Cli::parse(); }\n"),
        ("y", "use quorumlock::Top;\n"),
    ]);
    assert_eq!(report, "");
}

#[test]
fn an_import_from_a_higher_layer_fails() {
    let report = library_report(&[("a", "use crate::c::Z;\n"), ("b", ""), ("c", "")]);
    assert!(
        report.contains("a (low, level 1) imports c (high, level 1): a higher layer"),
        "{report}"
    );
    // Through a name the root re-exports, too.
    let report = library_report(&[("a", "use crate::Top;\n"), ("b", ""), ("c", "")]);
    assert!(report.contains("a (low, level 1) imports c"), "{report}");
}

#[test]
fn an_import_up_or_sideways_within_a_layer_fails() {
    let report = library_report(&[("a", "fn f() { crate::b::g(); }\n"), ("b", ""), ("c", "")]);
    assert!(
        report.contains(
            "a (low, level 1) imports b (low, level 2): within a layer, a module \
             imports only from a lower level"
        ),
        "{report}"
    );
    let report = library_problems(
        &SIDEWAYS,
        &[],
        "mod a;\nmod b;\n",
        &sources(&[("a", "use crate::b::X;\n"), ("b", "")]),
    )
    .join("\n");
    assert!(
        report.contains("a (low, level 1) imports b (low, level 1)"),
        "{report}"
    );
}

#[test]
fn a_circle_fails() {
    let report = library_problems(
        &SIDEWAYS,
        &[],
        "mod a;\nmod b;\n",
        &sources(&[("a", "use crate::b::X;\n"), ("b", "use crate::a::Y;\n")]),
    )
    .join("\n");
    assert!(
        report.contains("modules import one another in a circle: a -> b -> a"),
        "{report}"
    );
    let report = binary_report(&[
        ("main", "mod x;\nmod y;\n"),
        ("x", "use crate::y::Y;\n"),
        ("y", "use crate::x::X;\n"),
    ]);
    assert!(
        report.contains("the CLI's files import one another in a circle: x -> y -> x"),
        "{report}"
    );
    // Unless that import is an allowed exception.
    let files = sources(&[("x", "use crate::y::Y;\n"), ("y", "use crate::x::X;\n")]);
    assert!(binary_problems(TEST_ROOT, &BTreeSet::new(), &files, &[("y", "x")]).is_empty());
}

#[test]
fn importing_the_test_kit_or_an_unlisted_module_fails() {
    let report = library_report(&[("a", ""), ("b", ""), ("c", "use crate::kit::K;\n")]);
    assert!(
        report.contains("c imports kit, which is on top of every layer"),
        "{report}"
    );
    let report = library_problems(
        &TEST_LAYERS,
        &["kit"],
        &format!("{TEST_ROOT}mod d;\n"),
        &sources(&[("a", "use crate::d::D;\n"), ("b", ""), ("c", "")]),
    )
    .join("\n");
    assert!(report.contains("module `d` is in no layer"), "{report}");
    assert!(
        report.contains("a imports `d`, which is in no layer"),
        "{report}"
    );
}

#[test]
fn the_cli_importing_the_library_internals_fails() {
    let report = binary_report(&[
        ("main", "mod x;\n"),
        ("x", "use quorumlock::b::Inner;\nuse crate::a::Thing;\n"),
    ]);
    assert!(
        report.contains("x imports quorumlock::b, which is not the library's public API"),
        "{report}"
    );
    assert!(
        report.contains("x imports crate::a, the library's internal module"),
        "{report}"
    );
    let report = binary_report(&[("main", "#[path = \"../../a.rs\"]\nmod a;\n")]);
    assert!(report.contains("main uses `#[path`"), "{report}");
}

/// Layers where folder `p` stands on three levels: its part `p::n` on the
/// wire beside `n`, its part `p::m` low in the round, the rest of `p`
/// above it.
const FOLDER_LAYERS: [Layer; 2] = [
    ("wire", &[&["n"], &["p::n"]]),
    ("round", &[&["p::m"], &["p"]]),
];

const FOLDER_ROOT: &str = "mod n;\nmod p;\n";

fn folder_report(files: &[(&str, &str)]) -> String {
    library_problems(&FOLDER_LAYERS, &[], FOLDER_ROOT, &sources(files)).join("\n")
}

#[test]
fn a_folders_parts_import_down_in_every_form() {
    let report = folder_report(&[
        ("n", ""),
        ("p::n", "use crate::n::Node;\nuse super::super::n::Other;\n"),
        ("p::m", "use crate::{p::n::X, n};\nuse super::n::Y;\n"),
        (
            "p",
            "use crate::p::{n::X, m::Y};\nuse self::n::Z;\nuse m::W;\n",
        ),
        ("p::rest", "use super::m::V;\nuse super::*;\n"),
        ("p::m::inner", "use super::*;\npub(super) fn f() {}\n"),
    ]);
    assert_eq!(report, "");
    let graph = import_graph(
        &FOLDER_LAYERS,
        FOLDER_ROOT,
        &sources(&[
            ("p", "use m::W;\n"),
            ("p::rest", "use super::n::V;\n"),
            ("p::m", "use crate::p::n::X;\n"),
        ]),
    );
    assert_eq!(graph["p"], ["p::m", "p::n"].map(str::to_owned).into());
    assert_eq!(graph["p::m"], ["p::n"].map(str::to_owned).into());
}

#[test]
fn a_folders_part_importing_its_folder_upward_fails() {
    let upward = "p::n (wire, level 2) imports p (round, level 2): a higher layer";
    for import in [
        "use crate::p::Acquire;\n",
        "fn f() { crate::p::acquire(); }\n",
        "use crate::{n::Node, p::Acquire};\n",
        "use super::Acquire;\n",
        "use super::*;\n",
        "use super::{Acquire, m};\n",
    ] {
        let report = folder_report(&[("n", ""), ("p::n", import), ("p::m", ""), ("p", "")]);
        assert!(report.contains(upward), "{import}: {report}");
    }
    // From a file further down the part's folder, too.
    let report = folder_report(&[
        ("n", ""),
        ("p::n", ""),
        ("p::n::deep", "use super::super::Acquire;\n"),
        ("p::m", ""),
        ("p", ""),
    ]);
    assert!(report.contains(upward), "{report}");
    // A part importing another part above it, and the folder's file
    // importing a part beside the part's level.
    let report = folder_report(&[
        ("n", ""),
        ("p::n", "use super::m::Lane;\n"),
        ("p::m", ""),
        ("p", ""),
    ]);
    assert!(
        report.contains("p::n (wire, level 2) imports p::m (round, level 1): a higher layer"),
        "{report}"
    );
    let report = folder_report(&[
        ("n", "use crate::p::n::X;\n"),
        ("p::n", ""),
        ("p::m", ""),
        ("p", ""),
    ]);
    assert!(
        report.contains(
            "n (wire, level 1) imports p::n (wire, level 2): within a layer, a module \
             imports only from a lower level"
        ),
        "{report}"
    );
    // A circle through a folder's parts.
    let report = folder_report(&[
        ("n", ""),
        ("p::n", "use crate::p::Acquire;\n"),
        ("p::m", ""),
        ("p", "use self::n::Shape;\n"),
    ]);
    assert!(
        report.contains("modules import one another in a circle: p -> p::n -> p"),
        "{report}"
    );
}
