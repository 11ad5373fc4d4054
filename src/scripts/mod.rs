//! The Lua scripts, each in its own `.lua` file in the folder of the
//! primitive that runs it, beside its commands, sent as EVAL until a node
//! is known to cache them, then as EVALSHA (a NOSCRIPT — a restarted node
//! has an empty script cache — sends EVAL again) — or,
//! in [`ScriptMode::Functions`], called with FCALL as the functions of
//! `functions.lua`, the same scripts wrapped as one Redis Functions library.
//! Scripts are constant text: keys only in KEYS, token and ttl only in ARGV.

use std::sync::atomic::{AtomicU32, Ordering};

use redis::Script;

/// How the library runs its Lua scripts on the nodes.
///
/// A lone plain acquisition is a `SET NX PX` command in either mode;
/// concurrent ones bound for the same node go out together as one script
/// call, and release, extension, fenced and multi-resource locks run
/// scripts.
///
/// # Examples
///
/// ```
/// use quorumlock::{Redlock, ScriptMode};
///
/// # fn main() -> Result<(), quorumlock::Error> {
/// // The lock user may run FCALL, but not EVAL, EVALSHA or SCRIPT.
/// let locks = Redlock::builder()
///     .node("redis://locker:secret@127.0.0.1:6379")
///     .script_mode(ScriptMode::Functions)
///     .build()?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum ScriptMode {
    /// `EVAL` until the node is known to cache the script, then `EVALSHA`;
    /// on `NOSCRIPT` (a restarted node has an empty script cache) `EVAL`
    /// again. A user refused `EVAL` falls back to `EVALSHA` with
    /// `SCRIPT LOAD`.
    /// Works on any Redis from 2.6 on with nothing installed beforehand,
    /// but the lock user needs `+evalsha +script|load +eval`: permission
    /// to run *any* script, and a script runs every command the user may.
    #[default]
    Eval,
    /// `FCALL` of the functions in [`FUNCTIONS_LIBRARY`], which an
    /// administrator loads once per node (Redis 7.0 or later). The lock
    /// user then needs `+fcall` and no scripting permission: it can run
    /// only the functions an administrator installed.
    ///
    /// Functions are saved with the data (RDB / AOF) and replicated, but a
    /// node that restarts **empty** has none until they are loaded again;
    /// until then it fails every script call with
    /// [`NodeError::FunctionsNotLoaded`](crate::NodeError::FunctionsNotLoaded).
    /// Make loading part of the node's provisioning (`FUNCTION LOAD
    /// REPLACE` is idempotent).
    Functions,
}

/// Whether a node releases and extends plain locks with the server's own
/// compare-and-set commands where it has them, instead of a script.
///
/// Where the server offers them — `SET … IFEQ` (Valkey 8.1; Redis 8.4) and
/// `DELIFEQ` (Valkey 9.0) or `DELEX … IFEQ` (Redis 8.4) — a plain lock's
/// acquire, release, extension and auto-extension need no script at all:
/// they cost the server less, and a lock user needs no scripting
/// permission. Each node is asked what it offers (`COMMAND DOCS`, on its
/// own connection, never from its version string) and takes its own best
/// path, so a fleet may mix servers. The value under a key is the token on
/// every path: managers on either path, and other Redlock clients, exclude
/// each other on the same keys.
///
/// Fenced and multi-resource locks, semaphores, reader-writer locks and
/// elections keep their scripts: their steps touch several keys at once.
///
/// # Examples
///
/// ```
/// use quorumlock::{NativeCommands, Redlock};
///
/// # fn main() -> Result<(), quorumlock::Error> {
/// // One path everywhere: scripts, even where a node has native commands.
/// let locks = Redlock::builder()
///     .node("redis://127.0.0.1:6379")
///     .native_commands(NativeCommands::Never)
///     .build()?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum NativeCommands {
    /// Native commands on the nodes that have them, scripts elsewhere.
    #[default]
    WhereAvailable,
    /// Scripts on every node (as [`ScriptMode`] runs them).
    Never,
}

/// The Redis Functions library for [`ScriptMode::Functions`]: every script
/// quorumlock runs, registered as a function of the library `quorumlock`.
///
/// An administrator loads it once per node (on a cluster, on every master)
/// and again after upgrading quorumlock; `REPLACE` makes that idempotent:
///
/// ```sh
/// redis-cli -h 10.0.0.1 --user admin --askpass -x FUNCTION LOAD REPLACE < src/scripts/functions.lua
/// ```
///
/// The file ships in the crate's source (`src/scripts/functions.lua`), or
/// can be written out from this constant by a deployment tool:
///
/// ```no_run
/// # fn main() -> redis::RedisResult<()> {
/// let mut admin = redis::Client::open("redis://admin:secret@10.0.0.1:6379")?.get_connection()?;
/// let library: String = redis::cmd("FUNCTION")
///     .arg("LOAD")
///     .arg("REPLACE")
///     .arg(quorumlock::FUNCTIONS_LIBRARY)
///     .query(&mut admin)?;
/// assert_eq!(library, "quorumlock");
/// # Ok(())
/// # }
/// ```
///
/// The library is generated from the individual scripts, each wrapped
/// verbatim as `function(KEYS, ARGV) … end`, so both modes run the same
/// code; a unit test fails if the file falls out of step with them.
pub const FUNCTIONS_LIBRARY: &str = include_str!("functions.lua");

/// A Lua script: the `redis::Script` (hash, EVALSHA, reload on NOSCRIPT),
/// its text, which a cluster node sends with `EVAL` on NOSCRIPT, and the
/// name of the same script as a function of [`FUNCTIONS_LIBRARY`].
///
/// Each is a `static` beside the commands that run it (its primitive's
/// folder, its `.lua` file next to it), built with [`Lua::new`]; the
/// tests below list every one of them for the library.
pub(crate) struct Lua {
    pub(crate) script: Script,
    pub(crate) source: &'static str,
    pub(crate) function: &'static str,
    /// Whether `WAIT` for replicas goes right behind it.
    pub(crate) replicas: Replicas,
    /// A number of its own among the scripts: a node keeps one bit per
    /// script for whether it is known to have it cached.
    pub(crate) index: u32,
}

/// Whether a script writes a lock (or its counter) that replica sync waits
/// for: every script but the releases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Replicas {
    Wait,
    DontWait,
}

/// The number the next script built gets.
static NEXT_INDEX: AtomicU32 = AtomicU32::new(0);

impl Lua {
    /// The script `source`, the function `function` of the library. Meant
    /// for a `LazyLock` static: each gets its own index.
    pub(crate) fn new(function: &'static str, source: &'static str, replicas: Replicas) -> Self {
        Self {
            script: Script::new(source),
            source,
            function,
            replicas,
            index: NEXT_INDEX.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Its bit among a node's cached scripts; none (never known cached, so
    /// sent with its text) past the 32nd script, which a test rules out.
    pub(crate) fn cache_bit(&self) -> u32 {
        1u32.checked_shl(self.index).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;

    /// Regenerates `functions.lua` from the scripts when set.
    const BLESS: &str = "QUORUMLOCK_BLESS";

    const HEADER: &str = "#!lua name=quorumlock
-- quorumlock's Lua scripts as one Redis Functions library, for
-- ScriptMode::Functions. Load it once per node (every master of a cluster),
-- and again after upgrading quorumlock:
--   redis-cli -x FUNCTION LOAD REPLACE < functions.lua
-- GENERATED from the other .lua files of this directory, each wrapped
-- verbatim as function(KEYS, ARGV) ... end: do not edit by hand. After
-- changing a script, regenerate with
--   QUORUMLOCK_BLESS=1 cargo test --lib scripts
";

    /// Every script, in the library's order: the engine's (`batch.lua`),
    /// then each primitive's, in the list of primitives (each is a static
    /// beside its commands). A script missing there fails
    /// `every_script_file_is_in_the_library`.
    fn library() -> Vec<&'static Lua> {
        std::iter::once(&crate::node::BATCH)
            .chain(
                crate::primitives::PRIMITIVES
                    .iter()
                    .flat_map(|primitive| primitive.scripts.iter().copied()),
            )
            .map(|lua| &**lua)
            .collect()
    }

    /// The library text the scripts call for.
    fn generated_library() -> String {
        let mut out = String::from(HEADER);
        for lua in library() {
            let name = lua.function;
            out.push_str(&format!(
                "\nredis.register_function('{name}', function(KEYS, ARGV)\n"
            ));
            for line in lua.source.lines() {
                if !line.is_empty() {
                    out.push_str("  ");
                }
                out.push_str(line);
                out.push('\n');
            }
            out.push_str("end)\n");
        }
        out
    }

    fn src_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
    }

    fn scripts_dir() -> PathBuf {
        src_dir().join("scripts")
    }

    /// Every `.lua` file under `dir`, sorted.
    fn lua_files(dir: &Path) -> Vec<PathBuf> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).expect("dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                files.extend(lua_files(&path));
            } else if path.extension().is_some_and(|ext| ext == "lua") {
                files.push(path);
            }
        }
        files.sort();
        files
    }

    #[test]
    fn the_functions_library_wraps_every_script_verbatim() {
        let expected = generated_library();
        if FUNCTIONS_LIBRARY != expected && std::env::var_os(BLESS).is_some() {
            std::fs::write(scripts_dir().join("functions.lua"), &expected).expect("write");
            return;
        }
        assert!(
            FUNCTIONS_LIBRARY == expected,
            "src/scripts/functions.lua is out of step with the scripts; regenerate it with \
             `{BLESS}=1 cargo test --lib scripts`"
        );
        assert!(FUNCTIONS_LIBRARY.starts_with("#!lua name=quorumlock\n"));
    }

    /// Each `.lua` file under src/ (but the library) is one script of the
    /// library list, and each script of the list is a file.
    #[test]
    fn every_script_file_is_in_the_library() {
        let library = library();
        let library_file = scripts_dir().join("functions.lua");
        let files: Vec<PathBuf> = lua_files(&src_dir())
            .into_iter()
            .filter(|path| *path != library_file)
            .collect();
        for file in &files {
            let text = std::fs::read_to_string(file).expect("read");
            let listed = library.iter().filter(|lua| lua.source == text).count();
            assert_eq!(
                listed,
                1,
                "{} must be one script of the library list (scripts::tests::library)",
                file.display()
            );
        }
        assert_eq!(files.len(), library.len(), "a listed script without a file");
    }

    #[test]
    fn scripts_have_distinct_names_and_cache_bits() {
        let library = library();
        let mut names: Vec<&str> = library.iter().map(|lua| lua.function).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), library.len(), "a function name twice");
        let mut bits = 0u32;
        for lua in &library {
            assert_ne!(lua.cache_bit(), 0, "{}: no cache bit left", lua.function);
            assert_eq!(
                bits & lua.cache_bit(),
                0,
                "{}: a cache bit twice",
                lua.function
            );
            bits |= lua.cache_bit();
        }
    }

    /// The text of `source` without comments (`--` to the end of the line;
    /// the scripts use no long comments and no `--` inside strings).
    fn code(source: &str) -> String {
        source
            .lines()
            .map(|line| line.split("--").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn identifiers(code: &str) -> impl Iterator<Item = &str> {
        code.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|word| !word.is_empty())
    }

    /// Scripts are constant text whose commands are fixed: keys come only
    /// from KEYS, token and ttl only from ARGV, and nothing is compiled at
    /// run time. Checked on every `.lua` file, the function library too.
    #[test]
    fn scripts_never_build_commands_or_code_at_run_time() {
        let mut checked = 0;
        for path in lua_files(&src_dir()) {
            let source = std::fs::read_to_string(&path).expect("read");
            let code = code(&source);
            let name = path.display();
            // No string concatenation: nothing builds a command, key or
            // value out of pieces.
            assert!(!code.contains(".."), "{name}: uses `..`");
            // No code compiled from strings.
            for word in identifiers(&code) {
                assert!(
                    ![
                        "load",
                        "loadstring",
                        "loadfile",
                        "dofile",
                        "setfenv",
                        "getfenv"
                    ]
                    .contains(&word),
                    "{name}: uses `{word}`"
                );
            }
            // Every command name is a literal: `redis.call('SET', …)`.
            for call in ["redis.call(", "redis.pcall("] {
                for (at, _) in code.match_indices(call) {
                    let next = code[at + call.len()..].chars().next();
                    assert_eq!(
                        next,
                        Some('\''),
                        "{name}: a command name that is not a literal"
                    );
                }
            }
            checked += 1;
        }
        assert_eq!(checked, library().len() + 1, "every script and the library");
    }

    /// Scripts are sent as the constant texts above: no Rust code formats
    /// a key, token or ttl into a script or a function name.
    #[test]
    fn rust_code_never_formats_script_text() {
        fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
            for entry in std::fs::read_dir(dir).expect("dir") {
                let path = entry.expect("entry").path();
                if path.is_dir() {
                    rust_files(&path, out);
                } else if path.extension().is_some_and(|ext| ext == "rs") {
                    out.push(path);
                }
            }
        }
        let mut files = Vec::new();
        rust_files(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut files,
        );
        // Built from pieces, so that this file does not match itself.
        let script_new = ["Script", "::new("].concat();
        let formatted = [
            [script_new.as_str(), "format!"].concat(),
            [script_new.as_str(), "&format!"].concat(),
        ];
        let mut constructions = 0;
        for path in &files {
            let text = std::fs::read_to_string(path).expect("read");
            for needle in &formatted {
                assert!(
                    !text.contains(needle.as_str()),
                    "{}: {needle}",
                    path.display()
                );
            }
            let here = text.matches(script_new.as_str()).count();
            if here > 0 {
                assert!(
                    path.ends_with("src/scripts/mod.rs"),
                    "{}: builds a script outside src/scripts",
                    path.display()
                );
            }
            constructions += here;
        }
        // The one construction, `Lua::new`, takes `&'static str` texts.
        assert_eq!(constructions, 1);
    }
}
