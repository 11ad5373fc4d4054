//! The docs agree with [`LAYERS`](super::LAYERS): the crate docs' "How
//! the code is organised" (every entry) and the comments over `lib.rs`'s
//! `mod` lines (the modules `lib.rs` declares) list the same layers.

use std::collections::BTreeSet;

use super::Layer;
use super::parse::declared_modules;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::parse::{read, src_dir};
    use crate::layers::{LAYERS, UNDOCUMENTED};

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
}
