#!/usr/bin/env python3
"""Checks the links of README.md and of the chapters in docs/.

- Every relative link (`[text](path)`, `![alt](path)`, `[id]: path`) points
  to a file or directory that exists, relative to the page it is on.
- Every `#anchor` (on the same page, or on another Markdown page) names a
  heading of that page, by GitHub's rules: the heading's text, lowercased,
  each space made a '-', every other character but letters, digits, '-'
  and '_' dropped; a repeated heading gets '-1', '-2', ... Explicit
  `<a id="…">` / `<a name="…">` anchors count too.
- Every chapter docs/*.md is linked from README.md, and src/lib.rs compiles
  its code blocks as doctests (a `#[cfg(doctest)]` item with
  `#[doc = include_str!("../docs/<chapter>.md")]`), as it does README.md's.

Links inside code (fenced blocks, `code spans`) and absolute URLs
(`https://…`, `mailto:…`) are not checked.

Run from anywhere: python3 docs/check.py. Exits non-zero with one line per
problem. `python3 docs/check.py --self-test` runs the checker on a small
tree with known mistakes and fails unless it reports exactly those.
"""

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parent.parent

FENCE = re.compile(r"^ {0,3}(?:[-*+] |\d+[.)] )?\s*(`{3,}|~{3,})")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
INLINE_LINK = re.compile(
    r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]"  # [text], one level of nested brackets
    r"\(\s*<?([^()\s<>]*(?:\([^()\s]*\)[^()\s<>]*)*)>?"  # (target, balanced parens
    r"(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^()]*\)))?\s*\)"  # "optional title")
)
REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_ANCHOR = re.compile(r"<a\s+[^>]*?(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.I)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def slug(text):
    """GitHub's anchor for a heading whose Markdown source is `text`."""
    text = re.sub(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)", r"\1", text)  # links -> their text
    text = CODE_SPAN.sub(lambda m: m.group(2).strip(), text)
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("*", "")  # emphasis
    text = re.sub(r"(?<![0-9A-Za-z])_+([^_]+?)_+(?![0-9A-Za-z])", r"\1", text)  # _emphasis_
    out = []
    for c in text.strip().lower():
        if c.isalnum() or c in "-_":
            out.append(c)
        elif c == " ":
            out.append("-")
    return "".join(out)


def scan(text):
    """(headings [(line, text)], explicit anchors, links [(line, target)])
    of a Markdown page, leaving out what is inside code."""
    headings, anchors, links = [], set(), []
    fence = None  # the opening fence while inside a fenced block
    previous = ""  # the previous line outside code, for setext headings
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if fence:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) \
                    and not line[match.end():].strip():
                fence = None
            continue
        if match:
            fence = match.group(1)
            previous = ""
            continue
        atx = ATX.match(line)
        setext = SETEXT.match(line)
        if atx:
            headings.append((number, atx.group(2) or ""))
        elif setext and previous.strip() and not re.match(r"^\s*([-*+] |\d+[.)] |\||>|#)", previous):
            headings.append((number - 1, previous.strip()))
            previous = ""
            continue
        plain = CODE_SPAN.sub("code", line)
        anchors.update(HTML_ANCHOR.findall(plain))
        for match in INLINE_LINK.finditer(plain):
            links.append((number, match.group(2)))
        definition = REFERENCE_DEF.match(plain)
        if definition:
            links.append((number, definition.group(1)))
        previous = line
    return headings, anchors, links


SOAK = Path("tests") / "it" / "soak-results.jsonl"

# The pages that quote the latest soak's figures (seeds, grants, violations).
SOAK_QUOTED_IN = ["README.md", "docs/safety.md"]


def soak_runs(path):
    """The soak runs recorded in `path`, oldest first: a run is the lines
    from its "before" controls to its "after" controls. Each run's totals:
    commit, seeds, grants, violations, failed seeds."""
    runs, run = [], None
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        if record.get("when") == "before" and (run is None or run["ended"]):
            run = {"commit": record.get("commit"), "seeds": 0, "grants": 0,
                   "violations": 0, "failed": 0, "ended": False}
            runs.append(run)
        if run is None:
            continue
        if "control" in record:
            run["ended"] = record.get("when") == "after"
            continue
        run["seeds"] += 1
        if "failed" in record:
            run["failed"] += 1
            continue
        run["grants"] += record.get("grants", 0)
        run["violations"] += len(record.get("violations", []))
    return runs


# The protocol's files: the engine, the node layer, the scripts, and each
# primitive's node commands and scripts. A soak older than their last change
# no longer speaks for the code.
PROTOCOL = ["src/round", "src/node", "src/scripts", ":(glob)src/*/node.rs", ":(glob)src/**/*.lua"]


def git(root, *args):
    """`git args` in `root`: its output, or None where git cannot say (not
    a checkout, an unknown commit)."""
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              check=False)
    except OSError:
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def stale_soak(root, run, git=git):
    """Why the soak `run` is older than the last change to the protocol's
    files, or None (it is not, or this is no git checkout)."""
    last = git(root, "log", "-1", "--format=%h", "--", *PROTOCOL)
    if not last:
        return None
    if git(root, "merge-base", "--is-ancestor", last, run["commit"]) is None:
        return (f"the latest soak (at {run['commit']}) is older than the last change to the "
                f"protocol's files ({last}): run it again (docs/testing.md)")
    return None


def soak_quote(run):
    """What the README must say of a soak run."""
    return [f"{run['seeds']} seeds", f"{run['grants']:,} grants",
            f"{run['violations'] + run['failed']} violations"]


class Site:
    """The pages of one tree (README.md and docs/*.md) and what they hold."""

    def __init__(self, root):
        self.root = root
        self.pages = [root / "README.md"] + sorted((root / "docs").glob("*.md"))
        self.cache = {}

    def anchors(self, page):
        if page not in self.cache:
            headings, explicit, _ = scan(page.read_text(encoding="utf-8"))
            seen, slugs = {}, set(explicit)
            for _, text in headings:
                base = slug(text)
                n = seen.get(base, 0)
                seen[base] = n + 1
                slugs.add(base if n == 0 else f"{base}-{n}")
            self.cache[page] = slugs
        return self.cache[page]

    def name(self, path):
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return str(path)

    def targets(self):
        """Every relative link of the pages, resolved: (where, target, path)."""
        for page in self.pages:
            if not page.is_file():
                continue
            _, _, links = scan(page.read_text(encoding="utf-8"))
            for number, target in links:
                if not target or SCHEME.match(target) or target.startswith("//"):
                    continue
                path = target.partition("#")[0]
                if not path:
                    continue
                base = self.root if path.startswith("/") else page.parent
                resolved = (base / unquote(path).lstrip("/")).resolve()
                yield f"{self.name(page)}:{number}", target, resolved

    def unshipped(self, shipped):
        """The links whose targets the published crate does not hold:
        `shipped` is `cargo package --list`'s output (paths from the root).
        A link to a directory needs something shipped below it."""
        problems = []
        for where, target, resolved in self.targets():
            name = self.name(resolved)
            if name in shipped or any(s.startswith(name + "/") for s in shipped):
                continue
            problems.append(f"{where}: {target} is not in the published crate "
                            f"(add {name} to Cargo.toml's include)")
        return problems

    def check(self):
        problems = []
        linked_from_readme = set()
        for page in self.pages:
            if not page.is_file():
                problems.append(f"{self.name(page)}: missing")
                continue
            _, _, links = scan(page.read_text(encoding="utf-8"))
            for number, target in links:
                where = f"{self.name(page)}:{number}"
                if not target or SCHEME.match(target) or target.startswith("//"):
                    continue
                path, _, fragment = target.partition("#")
                if path:
                    base = self.root if path.startswith("/") else page.parent
                    resolved = (base / unquote(path).lstrip("/")).resolve()
                    if not resolved.exists():
                        problems.append(f"{where}: broken link {target}: no such file {self.name(resolved)}")
                        continue
                else:
                    resolved = page
                if page.name == "README.md" and page.parent == self.root:
                    linked_from_readme.add(resolved)
                if fragment and resolved.is_file() and resolved.suffix == ".md":
                    if unquote(fragment) not in self.anchors(resolved):
                        problems.append(f"{where}: broken anchor {target}: no heading "
                                        f"'#{fragment}' in {self.name(resolved)}")

        lib = self.root / "src" / "lib.rs"
        lib_text = lib.read_text(encoding="utf-8") if lib.is_file() else ""
        for page in self.pages:
            if not page.is_file():
                continue
            relative = self.name(page)
            include = re.compile(
                r"#\[cfg\(doctest\)\]\s*#\[doc\s*=\s*include_str!\(\s*\"\.\./"
                + re.escape(relative) + r"\"\s*\)\s*\]")
            if not include.search(lib_text):
                problems.append(f"{relative}: its code blocks are not doctests: src/lib.rs has no "
                                f'#[cfg(doctest)] #[doc = include_str!("../{relative}")] item')
            if relative != "README.md" and page.resolve() not in linked_from_readme:
                problems.append(f"{relative}: not linked from README.md")

        # The pages that quote the latest soak must quote it as recorded.
        soak = self.root / SOAK
        runs = soak_runs(soak) if soak.is_file() else []
        for quoting in SOAK_QUOTED_IN:
            page = self.root / quoting
            if not runs or not page.is_file():
                continue
            text = page.read_text(encoding="utf-8")
            missing = [q for q in soak_quote(runs[-1]) if q not in text]
            if missing:
                problems.append(f"{quoting}: does not quote the latest soak in {SOAK.as_posix()} "
                                f"(at {runs[-1]['commit']}): {', '.join(missing)}")
        if runs:
            stale = stale_soak(self.root, runs[-1])
            if stale:
                problems.append(f"{SOAK.as_posix()}: {stale}")
        return problems


def self_test():
    failures = []
    slugs = {
        "Command line: `quorumlock`": "command-line-quorumlock",
        "Limits (the assumptions)": "limits-the-assumptions",
        "The assumptions, and the checks that cover them":
            "the-assumptions-and-the-checks-that-cover-them",
        "Many requests, one call (group commit)": "many-requests-one-call-group-commit",
        "doctor: are these nodes safe for Redlock?": "doctor-are-these-nodes-safe-for-redlock",
        "Why not 3×": "why-not-3",
        "A — B": "a--b",
        "snake_case and *emphasis* and _more_": "snake_case-and-emphasis-and-more",
        "[Linked](x.md) heading": "linked-heading",
        "µs per cycle": "µs-per-cycle",
    }
    for text, expected in slugs.items():
        if slug(text) != expected:
            failures.append(f"slug({text!r}) = {slug(text)!r}, expected {expected!r}")

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "docs").mkdir()
        (root / "src").mkdir()
        (root / "tests").mkdir()
        (root / "tests" / "data.txt").write_text("x\n")
        (root / "tests" / "it").mkdir()
        control = '{{"commit":"{c}","control":"eviction","flagged":true,"when":"{w}"}}\n'
        seed = '{{"commit":"{c}","grants":{g},"seed":"1","violations":{v}}}\n'
        (root / SOAK).write_text(
            control.format(c="old", w="before") + seed.format(c="old", g=1000, v="[]")
            + control.format(c="old", w="after")
            + control.format(c="new", w="before") + seed.format(c="new", g=1200, v="[]")
            + seed.format(c="new", g=800, v='["overlap"]') + '{"commit":"new","seed":"2","failed":"x"}\n'
            + control.format(c="new", w="after"),
            encoding="utf-8")
        (root / "README.md").write_text(
            "# Title\n\n"
            "[good](docs/a.md) and [good anchor](docs/a.md#first-section), "
            "[a directory](tests/), [a file](tests/data.txt#L1), [self](#title),\n"
            "[broken link](docs/missing.md) and [broken anchor](docs/a.md#no-such-heading).\n"
            "[external](https://example.com/x.md#y) ![image](tests/data.txt)\n"
            "`[in a code span](nowhere.md)`\n\n"
            "```text\n[in a fence](nowhere.md)\n```\n\n"
            "[ref]: docs/a.md#second-section\n\n"
            "The soak: 1 seeds, 1,000 grants, 0 violations; then 3 seeds, 0 violations.\n",
            encoding="utf-8")
        (root / "docs" / "a.md").write_text(
            "# A\n\n## First section\n\nSecond section\n--------------\n\n"
            "[back](../README.md#title), [repeated](#same-1), [case](#Same).\n\n"
            "## Same\n\n## Same\n\n- ```sh\n  [in a list fence](nowhere.md)\n  ```\n",
            encoding="utf-8")
        (root / "docs" / "b.md").write_text("# B\n\n[up](../README.md)\n", encoding="utf-8")
        (root / "docs" / "safety.md").write_text(
            "# Safety\n\n[up](../README.md). The latest soak: 2 seeds, 2,000 grants, "
            "1 violations.\n", encoding="utf-8")
        (root / "src" / "lib.rs").write_text(
            '#[cfg(doctest)]\n#[doc = include_str!("../README.md")]\nstruct ReadmeDoctests;\n'
            '#[cfg(doctest)]\n#[doc = include_str!("../docs/a.md")]\nstruct ADoctests;\n',
            encoding="utf-8")
        got = sorted(Site(root).check())
        expected = sorted([
            "README.md:4: broken link docs/missing.md: no such file docs/missing.md",
            "README.md:4: broken anchor docs/a.md#no-such-heading: no heading "
            "'#no-such-heading' in docs/a.md",
            "docs/a.md:8: broken anchor #Same: no heading '#Same' in docs/a.md",
            "docs/b.md: its code blocks are not doctests: src/lib.rs has no "
            '#[cfg(doctest)] #[doc = include_str!("../docs/b.md")] item',
            "docs/b.md: not linked from README.md",
            "README.md: does not quote the latest soak in tests/it/soak-results.jsonl "
            "(at new): 2,000 grants, 2 violations",
            "docs/safety.md: does not quote the latest soak in tests/it/soak-results.jsonl "
            "(at new): 3 seeds, 2 violations",
            "docs/safety.md: its code blocks are not doctests: src/lib.rs has no "
            '#[cfg(doctest)] #[doc = include_str!("../docs/safety.md")] item',
            "docs/safety.md: not linked from README.md",
        ])
        for line in expected:
            if line not in got:
                failures.append(f"not reported: {line}")
        for line in got:
            if line not in expected:
                failures.append(f"reported wrongly: {line}")
        # A package without tests/: the links into it are reported; with
        # a file below tests/, a link to the directory resolves.
        unshipped = Site(root).unshipped({"README.md", "docs/a.md", "docs/b.md", "src/lib.rs"})
        if not any("tests/data.txt is not in the published crate" in p for p in unshipped):
            failures.append(f"unshipped link not reported: {unshipped}")
        unshipped = Site(root).unshipped({"README.md", "docs/a.md", "docs/b.md", "tests/data.txt",
                                          "docs/missing.md", "docs/safety.md"})
        if unshipped:
            failures.append(f"shipped links reported: {unshipped}")

    # A soak older than the last change to the protocol's files is stale;
    # one at or after it is not; outside a checkout nothing is said.
    def fake_git(last, ancestor):
        def run(_root, *args):
            if args[0] == "log":
                return last
            return "" if ancestor else None
        return run
    run = {"commit": "abc1234"}
    if not stale_soak(Path("."), run, fake_git("def5678", ancestor=False)):
        failures.append("a soak older than the protocol's last change not reported")
    if stale_soak(Path("."), run, fake_git("def5678", ancestor=True)):
        failures.append("a soak at the protocol's last change reported stale")
    if stale_soak(Path("."), run, fake_git(None, ancestor=False)):
        failures.append("a tree without git history reported a stale soak")

    if failures:
        for failure in failures:
            print(f"docs/check.py --self-test: {failure}", file=sys.stderr)
        return 1
    print(f"docs/check.py --self-test OK: {len(slugs)} slugs; a broken link, a broken anchor, "
          f"a wrongly cased anchor, an unlinked chapter, a chapter without doctests, stale "
          f"soak quotes (README.md, docs/safety.md) and links the package lacks reported")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) == 3 and argv[1] == "--package-list":
        # Every link of the README and docs resolves in the published crate
        # too (its page on crates.io and docs.rs shows them).
        shipped = {line.strip() for line in Path(argv[2]).read_text().splitlines() if line.strip()}
        problems = Site(ROOT).unshipped(shipped)
        for problem in problems:
            print(f"docs/check.py: {problem}", file=sys.stderr)
        if problems:
            return 1
        print(f"docs OK in the package: every link resolves among its {len(shipped)} files")
        return 0
    if argv[1:]:
        print(f"usage: {argv[0]} [--self-test | --package-list FILE]", file=sys.stderr)
        return 2
    site = Site(ROOT)
    problems = site.check()
    if problems:
        for problem in problems:
            print(f"docs/check.py: {problem}", file=sys.stderr)
        return 1
    links = sum(len(scan(p.read_text(encoding="utf-8"))[2]) for p in site.pages)
    print(f"docs OK: {len(site.pages)} pages, {links} links; every chapter linked from "
          f"README.md and compiled as doctests")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
