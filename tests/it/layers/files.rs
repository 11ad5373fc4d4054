//! Judging the imports file by file: circles among the library's files,
//! and the engine's imports from the primitives' folders.
//!
//! Each file of `src/` is a node of the file graph, named by its module
//! path (`a` is `a.rs` or `a/mod.rs`, `a::b` is `a/b.rs` or `a/b/mod.rs`).
//! An import (`crate::…`, `super::…`, `self::…`, or a sub-module's name in
//! the file that declares it) is an edge to the file that defines what it
//! names: a module's file for the module, or for an item of it. A file's
//! re-exports (`pub use …`, `pub(crate) use …`) are no edges of its own:
//! they are its module's front door, and an import through one is an
//! import of the file the item comes from (so `node/mod.rs` re-exporting
//! `caps::NativeDelete` while `caps/mod.rs` uses `super::Node` is no circle,
//! but `mod.rs` using `ordered::Ordered` while `ordered.rs` uses `Node`
//! is).

use std::collections::{BTreeMap, BTreeSet};

use super::check::find_circle;
use super::parse::{
    absolute_in, code, defining_file, first_segment, paths, reexports, split_reexports,
};

/// What the crate's files re-export, by file (`` for the crate root), and
/// the files: what [`defining_file`] follows.
struct Files {
    names: BTreeSet<String>,
    exports: BTreeMap<String, BTreeMap<String, String>>,
}

impl Files {
    fn new(root: &str, files: &BTreeMap<String, String>) -> Self {
        let names: BTreeSet<String> = files.keys().cloned().collect();
        let is_child = |module: &str| names.contains(module);
        let mut exports = BTreeMap::new();
        exports.insert(String::new(), reexports(&code(root), "", is_child));
        for (file, source) in files {
            exports.insert(file.clone(), reexports(&code(source), file, is_child));
        }
        Self { names, exports }
    }

    /// The files `text`, written in `file`, imports, each with the path
    /// that imports it (`file` itself left out).
    fn imports(&self, text: &str, file: &str) -> Vec<(String, String)> {
        paths(text)
            .into_iter()
            .filter_map(|path| {
                let absolute = absolute_in(&path, file, |m| self.names.contains(m))?;
                let target = defining_file(&absolute, &self.names, &self.exports)?;
                (target != file).then_some((target, path))
            })
            .collect()
    }
}

/// Each file (by module path) with the files it imports, its re-exports
/// left out (see this file's docs). `root` is `lib.rs`, `files` each
/// file's source by its module path.
pub(super) fn file_graph(
    root: &str,
    files: &BTreeMap<String, String>,
) -> BTreeMap<String, BTreeSet<String>> {
    let known = Files::new(root, files);
    files
        .iter()
        .map(|(file, source)| {
            let (_, rest) = split_reexports(&code(source));
            let deps = known.imports(&rest, file).into_iter().map(|(to, _)| to);
            (file.clone(), deps.collect())
        })
        .collect()
}

/// The circles in `graph`, one through each group of files that import
/// one another (each as `a -> b -> a`, followed by the whole group when
/// it has more files), leaving out the `allowed` edges.
pub(super) fn circles(
    graph: &BTreeMap<String, BTreeSet<String>>,
    allowed: &[(&str, &str)],
) -> Vec<String> {
    let mut found = Vec::new();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for start in graph.keys() {
        if seen.contains(start.as_str()) {
            continue;
        }
        // The files that both reach `start` and are reached from it.
        let from = reach(graph, start, allowed, false);
        let to = reach(graph, start, allowed, true);
        let group: BTreeSet<&str> = from.intersection(&to).copied().collect();
        seen.extend(&group);
        if group.len() < 2 {
            continue;
        }
        let within: BTreeMap<String, BTreeSet<String>> = group
            .iter()
            .map(|file| {
                let deps = graph[*file]
                    .iter()
                    .filter(|dep| group.contains(dep.as_str()))
                    .cloned();
                (file.to_string(), deps.collect())
            })
            .collect();
        if let Some(circle) = find_circle(&within, allowed) {
            let circle_files: BTreeSet<&str> = circle.split(" -> ").collect();
            found.push(if circle_files.len() < group.len() {
                let all: Vec<&str> = group.iter().copied().collect();
                format!("{circle} (one of the circles among {})", all.join(", "))
            } else {
                circle
            });
        }
    }
    found
}

/// Whether the edge `from -> to` of `graph` closes a circle: `to` reaches
/// `from`, leaving out the `allowed` edges.
pub(super) fn closes_circle(
    graph: &BTreeMap<String, BTreeSet<String>>,
    (from, to): (&str, &str),
    allowed: &[(&str, &str)],
) -> bool {
    graph.get(from).is_some_and(|deps| deps.contains(to))
        && graph.contains_key(to)
        && reach(graph, to, allowed, false).contains(from)
}

/// The files reachable from `start` along `graph`'s edges (against them,
/// `backward`), `start` with them; the `allowed` edges left out.
fn reach<'a>(
    graph: &'a BTreeMap<String, BTreeSet<String>>,
    start: &'a str,
    allowed: &[(&str, &str)],
    backward: bool,
) -> BTreeSet<&'a str> {
    let edge = |from: &str, to: &str| graph.get(from).is_some_and(|deps| deps.contains(to));
    let mut seen = BTreeSet::from([start]);
    let mut next = vec![start];
    while let Some(file) = next.pop() {
        for other in graph.keys().map(String::as_str) {
            let (from, to) = if backward {
                (other, file)
            } else {
                (file, other)
            };
            if edge(from, to) && !allowed.contains(&(from, to)) && seen.insert(other) {
                next.push(other);
            }
        }
    }
    seen
}

/// What is wrong with the library's files: their circles (leaving out the
/// `allowed` edges). `root` is `lib.rs`, `files` each file's source by its
/// module path. Empty when all is well.
pub(super) fn file_problems(
    root: &str,
    files: &BTreeMap<String, String>,
    allowed: &[(&str, &str)],
) -> Vec<String> {
    circles(&file_graph(root, files), allowed)
        .into_iter()
        .map(|circle| {
            format!(
                "files import one another in a circle (each by its module path: \
                 `a::b` is a/b.rs or a/b/mod.rs): {circle}"
            )
        })
        .collect()
}

/// Every import by a file of the `engine` folders of a file of the
/// `primitives`' folders (a part such as `lock::node` included): (file,
/// the file it imports, the path that imports it), re-exports and names
/// the crate root re-exports included.
pub(super) fn engine_imports(
    engine: &[&str],
    primitives: &[&str],
    root: &str,
    files: &BTreeMap<String, String>,
) -> Vec<(String, String, String)> {
    let known = Files::new(root, files);
    let mut found = Vec::new();
    for (file, source) in files {
        if !engine.contains(&first_segment(file).as_str()) {
            continue;
        }
        for (to, path) in known.imports(&code(source), file) {
            if primitives.contains(&first_segment(&to).as_str()) {
                found.push((file.clone(), to, path));
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// What is wrong with the engine's imports: each import of a primitive's
/// folder by an engine folder (see [`engine_imports`]) not among the
/// `allowed` (file, imported file) pairs. Empty when all is well.
pub(super) fn engine_problems(
    engine: &[&str],
    primitives: &[&str],
    root: &str,
    files: &BTreeMap<String, String>,
    allowed: &[(&str, &str)],
) -> Vec<String> {
    engine_imports(engine, primitives, root, files)
        .into_iter()
        .filter(|(file, to, _)| !allowed.contains(&(file.as_str(), to.as_str())))
        .map(|(file, to, path)| {
            format!(
                "{file} imports {to} (`{path}`): the engine folders ({}) import \
                 nothing from a primitive's folder ({}), its `::node` part included",
                engine.join(", "),
                primitives.join(", "),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(files: &[(&str, &str)]) -> BTreeMap<String, String> {
        files
            .iter()
            .map(|(name, text)| (name.to_string(), text.to_string()))
            .collect()
    }

    fn problems(root: &str, files: &[(&str, &str)]) -> String {
        file_problems(root, &sources(files), &[]).join("\n")
    }

    /// [`problems`] of files of folder `n`.
    fn problems_in_n(files: &[(&str, &str)]) -> String {
        problems("mod n;\n", files)
    }

    #[test]
    fn a_folders_files_importing_one_another_in_a_circle_fail() {
        // Two files of one folder: a folder's file and one beside it.
        let report = problems_in_n(&[
            ("n", "mod g;\nmod h;\n"),
            ("n::g", "use crate::n::h::native_delete;\n"),
            ("n::h", "use super::g::{Entry, SingleOp};\n"),
        ]);
        assert!(
            report.contains("files import one another in a circle")
                && report.contains("n::g -> n::h -> n::g"),
            "{report}"
        );
        // Three files, through the folder's root file, in every form.
        let report = problems_in_n(&[
            ("n", "mod o;\nmod u;\nuse self::o::Ordered;\n"),
            ("n::o", "use super::u::install;\n"),
            ("n::u", "fn f(o: &crate::n::Options) {}\n"),
        ]);
        assert!(report.contains("n -> n::o -> n::u -> n"), "{report}");
        // A sub-module's bare name in the file that declares it, and a
        // `super::` of a deeper file.
        let report = problems_in_n(&[
            ("n", "mod o;\nfn f() { o::deep::g(); }\n"),
            ("n::o", "mod deep;\n"),
            ("n::o::deep", "use super::super::Node;\n"),
        ]);
        assert!(report.contains("n -> n::o::deep -> n"), "{report}");
    }

    #[test]
    fn a_circle_through_a_reexport_is_one_of_the_file_the_item_comes_from() {
        // `n` re-exports `o::Ordered`, and `u` imports it through `n`: the
        // import is `o`'s.
        let report = problems_in_n(&[
            ("n", "mod o;\nmod u;\npub(crate) use o::Ordered;\n"),
            ("n::o", "use super::u::install;\n"),
            ("n::u", "use crate::n::Ordered;\n"),
        ]);
        assert!(report.contains("n::o -> n::u -> n::o"), "{report}");
        assert!(!report.contains("n -> "), "{report}");
        // Renamed (`as`), through the crate root's re-exports too.
        let report = problems(
            "mod n;\npub use n::Open;\n",
            &[
                ("n", "mod o;\nmod u;\npub(crate) use o::{x as Open};\n"),
                ("n::o", "use crate::n::u::Y;\n"),
                ("n::u", "use crate::Open;\n"),
            ],
        );
        assert!(report.contains("n::o -> n::u -> n::o"), "{report}");
    }

    #[test]
    fn a_folders_front_door_and_one_way_imports_pass() {
        // `n` re-exports from `c` and `d`, which use `n`'s own items: a
        // front door, no circle. Test code and comments are not read.
        let report = problems_in_n(&[
            (
                "n",
                "mod c;\nmod d;\npub(crate) use c::NativeDelete;\n\
                 #[cfg(test)]\npub(crate) use d::{\n    layout,\n    Deadline,\n};\n\
                 pub struct Node;\n// use self::c::X;\n",
            ),
            ("n::c", "use super::{Deadline, Node};\n"),
            (
                "n::d",
                "use crate::n::Node;\n#[cfg(test)]\nmod tests {\n    use super::super::c::X;\n}\n",
            ),
        ]);
        assert_eq!(report, "");
        let graph = file_graph(
            "mod n;\n",
            &sources(&[
                (
                    "n",
                    "mod c;\nmod d;\n#[cfg(test)]\npub(crate) use d::{\n    layout,\n    Deadline,\n};\n",
                ),
                ("n::c", "use super::{Deadline, Node};\nuse redis::Cmd;\n"),
                ("n::d", ""),
            ]),
        );
        assert_eq!(graph["n::c"], ["n", "n::d"].map(str::to_owned).into());
        assert!(graph["n"].is_empty());
    }

    #[test]
    fn an_allowed_edge_breaks_its_circle() {
        let files = sources(&[
            ("n", "mod g;\nmod h;\n"),
            ("n::g", "use super::h::X;\n"),
            ("n::h", "use super::g::Y;\n"),
        ]);
        assert!(!file_problems("mod n;\n", &files, &[]).is_empty());
        assert!(file_problems("mod n;\n", &files, &[("n::h", "n::g")]).is_empty());
        let graph = file_graph("mod n;\n", &files);
        assert!(closes_circle(&graph, ("n::h", "n::g"), &[]));
        assert!(!closes_circle(
            &graph,
            ("n::h", "n::g"),
            &[("n::g", "n::h")]
        ));
        assert!(!closes_circle(&graph, ("n", "n::g"), &[]));
    }

    #[test]
    fn every_circle_is_named() {
        let report = problems(
            "mod a;\nmod b;\n",
            &[
                ("a", "mod x;\nuse self::x::X;\n"),
                ("a::x", "use super::A;\n"),
                ("b", "mod y;\nuse self::y::Y;\n"),
                ("b::y", "use super::B;\n"),
            ],
        );
        assert!(report.contains("a -> a::x -> a"), "{report}");
        assert!(report.contains("b -> b::y -> b"), "{report}");
    }

    const ENGINE: [&str; 2] = ["node", "round"];
    const PRIMITIVES: [&str; 1] = ["lock"];

    #[test]
    fn the_engine_importing_a_primitive_fails() {
        let root = "mod lock;\nmod node;\nmod round;\nmod check;\npub use lock::Permit;\n";
        let files = sources(&[
            ("lock", "mod node;\npub struct Permit;\n"),
            ("lock::node", "pub(crate) struct LockShape;\n"),
            ("node", "mod holding;\n"),
            ("node::holding", "use crate::lock::node::LockShape;\n"),
            ("round", "fn f() -> crate::Permit { todo!() }\n"),
            // Not the engine: the node check may use a lock's commands.
            ("check", "use crate::lock::node::LockShape;\n"),
        ]);
        let report = engine_problems(&ENGINE, &PRIMITIVES, root, &files, &[]).join("\n");
        assert!(
            report.contains(
                "node::holding imports lock::node (`crate::lock::node::LockShape`): \
                 the engine folders (node, round) import nothing from a primitive's folder"
            ),
            "{report}"
        );
        assert!(
            report.contains("round imports lock (`crate::Permit`)"),
            "{report}"
        );
        assert!(!report.contains("check"), "{report}");
        // Unless allowed.
        let allowed = [("node::holding", "lock::node"), ("round", "lock")];
        assert!(engine_problems(&ENGINE, &PRIMITIVES, root, &files, &allowed).is_empty());
    }
}
