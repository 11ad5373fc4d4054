//! Reading the sources and parsing the import paths in them.
//!
//! A folder may stand on several levels: an entry `a::b` of
//! [`LAYERS`](super::LAYERS) is the part of module `a` in `src/a/b.rs` or
//! `src/a/b/`, placed at a level of its own, and `a` is then the rest of
//! its folder. An import of `crate::a::b::…` (or `super::b::…` from `a`'s
//! files, or `b::…` from `a`'s root file) is an import of `a::b`; one of
//! `super::…` from `a::b`'s files is an import of `a`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::Layer;

pub(super) fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

pub(super) fn read(file: &Path) -> String {
    std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

/// Every `.rs` file in `dir` and below, sorted.
pub(super) fn rust_files(dir: &Path) -> Vec<PathBuf> {
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
pub(super) fn file_module(relative: &Path) -> String {
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
pub(super) fn library() -> (String, BTreeMap<String, String>) {
    let src = src_dir();
    let lib = read(&src.join("lib.rs"));
    let mut files = BTreeMap::new();
    for module in declared_modules(&code(&lib)) {
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
pub(super) fn binaries() -> BTreeMap<String, BTreeMap<String, String>> {
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
pub(super) fn code(source: &str) -> String {
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
pub(super) fn declared_modules(root: &str) -> Vec<String> {
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
pub(super) fn paths(code: &str) -> Vec<String> {
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

pub(super) fn is_name_start(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

pub(super) fn is_name(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths of one path starting at `chars[start]` (groups expanded), and
/// where it ends; `nested` inside a group, where a lone name is a path.
pub(super) fn path_tree(chars: &[char], start: usize, nested: bool) -> (Vec<String>, usize) {
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
pub(super) fn paths_after(code: &str, first: &str) -> Vec<String> {
    paths(code)
        .iter()
        .filter_map(|path| path.strip_prefix(first)?.strip_prefix("::"))
        .map(first_segment)
        .filter(|name| !name.is_empty())
        .collect()
}

pub(super) fn first_segment(path: &str) -> String {
    path.trim().chars().take_while(|c| is_name(*c)).collect()
}

/// The parent of a module path: `a::b` gives `a`, `a` the crate root (``).
pub(super) fn parent(module: &str) -> &str {
    module.rsplit_once("::").map_or("", |(parent, _)| parent)
}

/// The crate path that `path`, written in a file of module `file`, names:
/// `crate::a::X` is `a::X`; `super::X` in `a::b` is `a::X`; `self::X` in
/// `a` is `a::X`, and so is `b::X` there when `a::b` is one of `entries`
/// (a sub-module the check places). `None` for any other path: another
/// crate's, or a local name's.
pub(super) fn absolute(path: &str, file: &str, entries: &[&str]) -> Option<String> {
    absolute_in(path, file, |child| entries.contains(&child))
}

/// The crate path that `path`, written in a file of module `file` (`` for
/// the crate root), names, as [`absolute`] resolves it, where a first
/// name `b` is `file`'s sub-module `file::b` when `is_child` says so.
pub(super) fn absolute_in(
    path: &str,
    file: &str,
    is_child: impl Fn(&str) -> bool,
) -> Option<String> {
    let (first, rest) = path.split_once("::").unwrap_or((path, ""));
    let mut base: Vec<&str> = match first {
        "crate" => Vec::new(),
        "self" => file.split("::").collect(),
        "super" => parent(file).split("::").collect(),
        child if is_child(&join(file, child)) => {
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

/// `parent::name`, or `name` in the crate root (``).
pub(super) fn join(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_owned()
    } else {
        format!("{parent}::{name}")
    }
}

/// The module a crate path belongs to: the longest of `entries` it is in,
/// or else its first segment (`a::b::X` is `a::b` if `a::b` is an entry,
/// else `a`).
pub(super) fn module_of(path: &str, entries: &[&str]) -> String {
    entries
        .iter()
        .filter(|entry| path == **entry || path.starts_with(&format!("{entry}::")))
        .max_by_key(|entry| entry.len())
        .map_or_else(|| first_segment(path), |entry| entry.to_string())
}

/// The sub-module entries of `layers` (`a::b`).
pub(super) fn sub_entries(layers: &[Layer]) -> Vec<&'static str> {
    layers
        .iter()
        .flat_map(|(_, levels)| levels.iter().flat_map(|l| l.iter()))
        .copied()
        .filter(|entry| entry.contains("::"))
        .collect()
}

/// `code` split into its re-exports (`pub use …`, `pub(crate) use …`, any
/// visibility; each statement's text after `use`) and the rest of it.
pub(super) fn split_reexports(code: &str) -> (Vec<String>, String) {
    let mut reexports = Vec::new();
    let mut rest = String::new();
    for statement in code.split_inclusive(';') {
        let mut start = 0;
        let found = statement.split_inclusive('\n').find_map(|line| {
            let at = start;
            start += line.len();
            let after_pub = line.trim_start().strip_prefix("pub")?;
            let after_vis = match after_pub.strip_prefix('(') {
                Some(inner) => &inner[inner.find(')')? + 1..],
                None => after_pub,
            };
            after_vis
                .strip_prefix(char::is_whitespace)?
                .trim_start()
                .starts_with("use ")
                .then_some(at)
        });
        match found {
            Some(at) => {
                rest.push_str(&statement[..at]);
                // The rest of the statement after its `use `, over as many
                // lines as it takes.
                let text = &statement[at..];
                let used = text.find("use ").map_or("", |i| &text[i + 4..]);
                reexports.push(used.trim_end_matches(';').to_owned());
            }
            None => rest.push_str(statement),
        }
    }
    (reexports, rest)
}

/// What the file of module `file` (`` for the crate root) re-exports, by
/// the name it goes by there: the crate path of each (`pub(crate) use
/// b::{X, y as z}` in `a` gives `X` → `a::b::X`, `z` → `a::b::y`). A first
/// name `b` is `file`'s sub-module when `is_child(file::b)` says so.
pub(super) fn reexports(
    code: &str,
    file: &str,
    is_child: impl Fn(&str) -> bool,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for statement in split_reexports(code).0 {
        // `y as z`: the names this statement renames.
        let words: Vec<&str> = statement
            .split(|c: char| !is_name(c))
            .filter(|w| !w.is_empty())
            .collect();
        let renamed: BTreeMap<&str, &str> = words
            .windows(3)
            .filter(|w| w[1] == "as")
            .map(|w| (w[0], w[2]))
            .collect();
        for path in paths(&statement) {
            let Some(absolute) = absolute_in(&path, file, &is_child) else {
                continue;
            };
            let last = absolute.rsplit("::").next().unwrap_or_default();
            let name = renamed.get(last).copied().unwrap_or(last);
            if !name.is_empty() {
                out.insert(name.to_owned(), absolute.clone());
            }
        }
    }
    out
}

/// The file (by module path, as `files` holds them) that defines what the
/// crate path `path` names: the longest start of it that is a file,
/// followed through that file's re-exports (`exports`, by file; `` the
/// crate root's) to the file the item comes from. `None` for the crate
/// root's own items, and for a path of no file.
pub(super) fn defining_file(
    path: &str,
    files: &BTreeSet<String>,
    exports: &BTreeMap<String, BTreeMap<String, String>>,
) -> Option<String> {
    let mut path = path.to_owned();
    let mut found = None;
    // A few re-exports deep at most (a re-export of a re-export …).
    for _ in 0..8 {
        let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
        let n = (0..=segments.len())
            .rev()
            .find(|&n| n == 0 || files.contains(&segments[..n].join("::")))?;
        let file = segments[..n].join("::");
        found = (n > 0).then(|| file.clone());
        let Some(target) = segments
            .get(n)
            .and_then(|name| exports.get(&file)?.get(*name))
        else {
            return found;
        };
        let mut next = vec![target.as_str()];
        next.extend(&segments[(n + 1).min(segments.len())..]);
        path = next.join("::");
    }
    found
}

/// What a crate root re-exports (`pub use`), by name: the module each
/// comes from (of `entries`, or a top-level one).
pub(super) fn root_exports(root: &str, entries: &[&str]) -> BTreeMap<String, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
