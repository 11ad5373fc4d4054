//! Judging the imports: each module's against the levels, circles among
//! modules, and the CLI's rules (the public API only, no circle among its
//! files).

use std::collections::{BTreeMap, BTreeSet};

use super::Layer;
use super::parse::{
    absolute, code, declared_modules, first_segment, module_of, paths, paths_after, root_exports,
    sub_entries,
};

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

/// Each module (an entry of `layers`, or a top-level module) with the
/// modules it imports (`crate::x`, `super::…`, `self::…`, or a name the
/// root re-exports from `x`), itself left out. `files` maps each file's
/// module path to its code.
pub(super) fn import_graph(
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
pub(super) fn find_circle(
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
pub(super) fn library_problems(
    layers: &[Layer],
    on_top: &[&str],
    root: &str,
    files: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut wrong = Vec::new();
    for module in declared_modules(&code(root)) {
        if place(layers, &module).is_none() && !on_top.contains(&module.as_str()) {
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
    // A folder is one room: its parts on levels of their own must not close
    // a circle through the rest of the crate either (`a::run` importing
    // `b`, which imports `a`).
    if let Some(circle) = find_circle(&folders(&graph), &[]) {
        wrong.push(format!("folders import one another in a circle: {circle}"));
    }
    wrong
}

/// `graph` with each folder's parts taken together as the folder (`a::b`
/// as `a`), leaving out a folder's imports of itself.
fn folders(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeSet<String>> {
    let folder = |module: &str| module.split("::").next().unwrap_or(module).to_owned();
    let mut folders: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, deps) in graph {
        let own = folder(module);
        let deps = deps.iter().map(|dep| folder(dep)).filter(|dep| *dep != own);
        folders.entry(own.clone()).or_default().extend(deps);
    }
    folders
}

/// The names the CLI may use after `quorumlock::`: what the library's
/// root (`lib_root`, its code) re-exports, and the modules it declares
/// `pub mod`.
fn public_api(lib_root: &str) -> BTreeSet<String> {
    root_exports(lib_root, &[])
        .into_keys()
        .chain(
            lib_root
                .lines()
                .filter(|line| line.trim().starts_with("pub mod "))
                .flat_map(declared_modules),
        )
        .collect()
}

/// What is wrong with a binary's imports: `lib_root` is the library's
/// `lib.rs`, `library_modules` the library's modules, `files` the binary's
/// files by module (`main` for its root), `allowed` the imports allowed to
/// close a circle. Empty when all is well.
pub(super) fn binary_problems(
    lib_root: &str,
    library_modules: &BTreeSet<String>,
    files: &BTreeMap<String, String>,
    allowed: &[(&str, &str)],
) -> Vec<String> {
    let public = public_api(&code(lib_root));
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_circle_through_a_folders_part_fails() {
        // a::top on a level above b, b above a: no circle among the parts,
        // but folder a imports b and b imports a.
        const SPLIT: [Layer; 1] = [("low", &[&["a"], &["b"], &["a::top"]])];
        let report = library_problems(
            &SPLIT,
            &[],
            "mod a;\nmod b;\n",
            &sources(&[
                ("a", "mod top;\n"),
                ("a::top", "use crate::b::X;\n"),
                ("b", "use crate::a::Y;\n"),
            ]),
        )
        .join("\n");
        assert!(
            report.contains("folders import one another in a circle: a -> b -> a"),
            "{report}"
        );
        assert!(!report.contains("modules import one another"), "{report}");
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
}
