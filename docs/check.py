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
- The pages that quote the latest soak quote it as recorded.
- Benchmark figures come from committed runs: a table marked
  `<!-- table: benches/NAME.json KIND -->` must read, cell by cell, as
  KIND's table of that run (`--render benches/NAME.json KIND` prints it),
  and a figure followed by `<!-- figure: benches/NAME.json KIND | ROW |
  COLUMN -->` must be that cell. On README.md and docs/speed.md every
  ratio (`2.16×`) but a target's must carry such a marker, and no table
  cell may be a bare figure outside a marked table.

Links inside code (fenced blocks, `code spans`) and absolute URLs
(`https://…`, `mailto:…`) are not checked.

Run from anywhere: python3 docs/check.py. Exits non-zero with one line per
problem. `python3 docs/check.py --render benches/NAME.json KIND` prints a
benchmark table (KIND: run, speed, more, native, degraded, memory, fair,
killed, replica) as a page holds it. `python3 docs/check.py --self-test` runs the checker on a small
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
    from its "before" controls to its "after" controls; a run stopped
    before its "after" controls ends where the next run's "before"
    controls, at another commit, begin. Each run's totals: commit, seeds,
    grants, violations, failed seeds."""
    runs, run = [], None
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        if record.get("when") == "before" and (
                run is None or run["ended"] or record.get("commit") != run["commit"]):
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
    violations = run['violations'] + run['failed']
    return [f"{run['seeds']} seeds", f"{run['grants']:,} grants",
            f"{violations} violation{'' if violations == 1 else 's'}"]


# ---------------------------------------------------------------------------
# Benchmark figures: every table and quoted figure of the speed results
# comes from a committed run (benches/*.json) and is recomputed from it.
#
# A table names its run on the line before its header:
#     <!-- table: benches/valkey-9.1.json speed -->
# and each of its cells must read as render(run, kind) prints it (`python3
# docs/check.py --render benches/valkey-9.1.json speed` prints the table).
# A figure in the prose names the cell it quotes, right after it:
#     2.95×<!-- figure: benches/valkey-9.1.json native | 256 | × rslock -->
# (row: the row's key cells, space-separated; an optional fourth field picks
# the part of an "a / b" cell, from 1). Markers are checked on every page;
# on the pages of BENCH_STRICT every ratio (`1.25×`, `1.25x`) but a target's
# ("at least 3×") must carry one, and every table cell that is a bare figure
# must be in a table with a table marker.

BENCH_STRICT = ["README.md", "docs/speed.md"]
TABLE_MARK = re.compile(r"^\s*<!--\s*table:\s*(\S+)\s+(\S+)\s*-->\s*$")
FIGURE_MARK = re.compile(
    r"<!--\s*figure:\s*(\S+)\s+(\S+)\s*\|\s*([^|]*?)\s*\|\s*([^|]*?)\s*(?:\|\s*(\d+)\s*)?-->")
FIGURE_BEFORE = re.compile(r"(\d[\d,]*(?:\.\d+)?)\s*(?:×|x|%|µs|ms|KiB|B)?\**\s*$")
RATIO = re.compile(r"(?<![\w.])\d+(?:\.\d+)?\s?[×x](?![\w])")
TARGET_BEFORE = re.compile(r"(?:≥|≤|>=|<=|at least|at most|target of|targets?:?)\s*\**$", re.I)
NUMERIC_CELL = re.compile(r"^[\d,.]+(?:×| ?%)?(?: / [\d,.]+(?:×| ?%)?)*$")


def num(x):
    """A measured figure as the pages print it: three significant digits
    below 100 (0.17, 4.60, 45.6), whole numbers with separators above
    (1,003; 34,827)."""
    if x is None:
        return "–"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def times(x):
    """A ratio as the pages print it: 1.96×, 12.3×, 4,483×."""
    return "–" if x is None else num(x) + "×"


def nodes_name(n):
    return f"{n} node" if n == 1 else f"{n} nodes"


def speed_row(run, nodes, measure):
    for row in run.get("rows", []):
        if row["nodes"] == nodes and row["measure"] == measure:
            return row
    raise KeyError(f"no row '{measure}' on {nodes} nodes")


def render_speed(run):
    """Lock cycles/s of quorumlock, rslock and the floor on the fewest and
    the most nodes of the run (1 and 5), the ratios, the share of the
    ceiling, and CPU per cycle."""
    header = ["nodes", "tasks", "quorumlock cycles/s", "rslock", "floor", "× rslock", "× floor",
              "× ceiling", "server CPU µs/cycle: quorumlock / rslock / floor",
              "client CPU µs/cycle: quorumlock / rslock / floor"]
    ceilings = {c["nodes"]: c["lock_cycles_per_s"] for c in run.get("ceilings", [])}
    rows = []
    counts = sorted({r["nodes"] for r in run.get("rows", [])})
    for nodes in sorted({counts[0], counts[-1]}) if counts else []:
        for tasks in (1, 16, 64, 256):
            cycles = speed_row(run, nodes, f"cycles/s, {tasks} tasks")
            server = speed_row(run, nodes, f"server CPU µs per cycle, all nodes, {tasks} tasks")
            client = speed_row(run, nodes, f"client CPU µs per cycle, {tasks} tasks")
            ceiling = ceilings.get(nodes)
            rows.append([str(nodes), str(tasks), num(cycles["quorumlock"]), num(cycles["rslock"]),
                         num(cycles["floor"]), times(cycles["ratio_vs_rslock"]),
                         times(cycles["ratio"]),
                         times(cycles["quorumlock"] / ceiling) if ceiling else "–",
                         " / ".join(num(server[x]) for x in ("quorumlock", "rslock", "floor")),
                         " / ".join(num(client[x]) for x in ("quorumlock", "rslock", "floor"))])
    return header, 2, rows


PRIMITIVE_NOTE = re.compile(
    r"^N=(\d+): (semaphore permit|rwlock read)\b.*? p50 (\d+) µs vs lock (\d+) µs "
    r"\(([\d.]+)x\); 64 tasks (\d+) vs (\d+) cycles/s \(([\d.]+)x")


def render_more(run):
    """The rest of a speed run: one task's latency, the semaphore and
    reader-writer lock against the lock, wake-up against polling on the
    most nodes, and held locks."""
    header = ["measure", "quorumlock", "against", "ratio"]
    rows = []
    nodes = max((r["nodes"] for r in run.get("rows", [])), default=None)
    most = max((c["nodes"] for c in run.get("contention") or []), default=None)
    if nodes:
        for p in ("p50", "p99"):
            row = speed_row(run, nodes, f"lock+release {p}, 1 task (µs)")
            rows.append([f"lock+release {p}, 1 task, {nodes_name(nodes)} (µs)", num(row["quorumlock"]),
                         f"rslock {num(row['rslock'])}", times(row["ratio_vs_rslock"])])
    for note in run.get("notes", []):
        m = PRIMITIVE_NOTE.match(note)
        if m:
            n, what = m.group(1), m.group(2)
            rows.append([f"{what}, p50, 1 task, {nodes_name(int(n))} (µs)", num(float(m.group(3))),
                         f"lock {num(float(m.group(4)))}", times(float(m.group(5)))])
            rows.append([f"{what}, cycles/s, 64 tasks, {nodes_name(int(n))}", num(float(m.group(6))),
                         f"lock {num(float(m.group(7)))}", times(float(m.group(8)))])
    contention = run.get("contention") or []
    for nodes in [most] if most else []:
        by = {c["waiting"]: c for c in contention if c["nodes"] == nodes}
        if "wake-up" in by and "polling" in by:
            wake, poll = by["wake-up"]["handoffs_per_s"], by["polling"]["handoffs_per_s"]
            rows.append([f"handoffs/s, 16 tasks on one resource, wake-up, {nodes_name(nodes)}",
                         num(wake), f"polling {num(poll)}", times(wake / poll if poll else None)])
    held = run.get("held")
    if held:
        rows.append([f"{held['locks']:,} auto-extended locks, 3 nodes: % of one core",
                     num(held["cpu_percent_of_one_core"]), "–", "–"])
        rows.append([f"{held['locks']:,} auto-extended locks: bytes per lock",
                     num(held["bytes_per_lock"]), "–", "–"])
        rows.append([f"{held['locks']:,} auto-extended locks: lost", str(held["lost"]), "–", "–"])
    return header, 1, rows


def render_native(run):
    """Five nodes with native commands: quorumlock native, forced onto
    scripts, and rslock; the share of the native ceiling; CPU per cycle."""
    native = run["native"]
    header = ["tasks", "native cycles/s", "scripted", "rslock", "× scripted", "× rslock",
              "× ceiling", "server CPU µs/cycle: native / scripted / rslock",
              "client CPU µs/cycle: native / scripted / rslock"]
    ceiling = native.get("ceiling_set_delifeq_lock_cycles_per_s")
    rows = []
    for row in native["rows"]:
        c, s, k = row["cycles_per_s"], row["server_cpu_us_per_cycle"], row["client_cpu_us_per_cycle"]
        rows.append([str(row["tasks"]), num(c["native"]), num(c["scripted"]), num(c["rslock"]),
                     times(row["ratio_vs_scripted"]), times(row["ratio_vs_rslock"]),
                     times(c["native"] / ceiling) if ceiling else "–",
                     " / ".join(num(s[x]) for x in ("native", "scripted", "rslock")),
                     " / ".join(num(k[x]) for x in ("native", "scripted", "rslock"))])
    rows.append(["ceiling", num(ceiling), "–", "–", "–", "–", "–", "–", "–"])
    return header, 1, rows


def render_degraded(run):
    """Node 5 of five healthy, slow, frozen or flapping: each library
    against its own healthy row."""
    header = ["node 5", "library", "p50 / p99 ms, 1 task", "cycles/s, 64 tasks",
              "handoffs/s, 16 on one", "vs healthy: p50 / p99 / cycles/s / handoffs/s"]
    rows = []
    for row in run["degraded"]["rows"]:
        v = row["vs_healthy"]
        rows.append([row["node5"], row["library"],
                     f"{num(row['lock_release_p50_ms'])} / {num(row['lock_release_p99_ms'])}",
                     num(row["cycles_per_s_64_tasks"]), num(row["handoffs_per_s_16_on_one"]),
                     " / ".join(times(v[x]) for x in ("p50", "p99", "cycles_per_s",
                                                      "handoffs_per_s"))])
    return header, 2, rows


def render_memory(run):
    """256 quorumlock tasks for 30 s with node 5 frozen, then flapping."""
    header = ["node 5", "cycles", "failed", "resident at start, MiB",
              "peak, first / second half, MiB", "second / first", "tasks beyond the workers, "
              "first / second half"]
    rows = []
    for key in ("memory", "memory_flapping"):
        m = run["degraded"].get(key)
        if not m:
            continue
        first, second = m["peak_first_half_kib"], m["peak_second_half_kib"]
        rows.append([m.get("node5", "frozen"), num(m["cycles"]), str(m["failed"]),
                     num(m["rss_start_kib"] / 1024), f"{num(first / 1024)} / {num(second / 1024)}",
                     times(second / first if first else None),
                     f"{m['peak_tasks_beyond_workers_first_half']} / "
                     f"{m['peak_tasks_beyond_workers_second_half']}"])
    return header, 1, rows


def render_fair(run):
    """16 tasks on one resource: fair_lock and lock, wake-up on and off,
    and with node 5 frozen."""
    header = ["call", "wake-up", "node 5", "grants/s", "wait p50 / p99 / max, ms",
              "FIFO bound, ms", "p99 / bound", "× 1/(hold + 2 RTT)"]
    rows = []
    for row in run["fair"]["rows"]:
        w = row["wait_ms"]
        rows.append([row["call"], "on" if row["wake_up"] else "off",
                     "frozen" if row["node5_frozen"] else "healthy", num(row["grants_per_s"]),
                     f"{num(w['p50'])} / {num(w['p99'])} / {num(w['max'])}",
                     num(row["fifo_bound_ms"]), times(row["wait_p99_vs_fifo_bound"]),
                     times(row["grants_vs_hold_plus_two_round_trips"])])
    return header, 3, rows


def render_killed(run):
    """A killed fair waiter: how long the next waits after a release."""
    fair = run["fair"]
    header = ["node 5", "trials", "release → next grant, worst, ms", "queue lease, ms"]
    rows = []
    for frozen in (False, True):
        trials = [k for k in fair["killed_waiter"] if k["node5_frozen"] == frozen]
        if trials:
            rows.append(["frozen" if frozen else "healthy", str(len(trials)),
                         num(max(k["release_to_grant_ms"] for k in trials)),
                         num(fair["queue_lease_ms"])])
    return header, 1, rows


REPLICA_NOTE = re.compile(
    r"replica sync, .*?: lock\+release p50 ([\d.]+) → ([\d.]+) µs, p99 ([\d.]+) → ([\d.]+) µs "
    r"\(1 task\); ([\d.]+) → ([\d.]+) cycles/s \(16 tasks\); failed cycles (\d+) → (\d+)")


def render_replica(run):
    """Replica sync's cost: lock+release without and with it (the run's
    note, `--only replica`)."""
    note = next((n for n in run.get("notes", []) if REPLICA_NOTE.match(n)), None)
    if note is None:
        raise KeyError("no replica sync note")
    f = [float(x) for x in REPLICA_NOTE.match(note).groups()]
    header = ["replica_sync", "lock+release p50, µs (1 task)", "p99, µs (1 task)",
              "cycles/s (16 tasks)", "failed cycles"]
    rows = [["off", num(f[0]), num(f[2]), num(f[4]), f"{f[6]:.0f}"],
            ["1 replica, 100 ms", num(f[1]), num(f[3]), num(f[5]), f"{f[7]:.0f}"]]
    return header, 1, rows


def render_notice(run):
    """A held lock taken on a majority: take → lost(), watching and not;
    and the nodes' CPU for held locks' renewals, watching and not."""
    notice = run["notice"]
    header = ["measure", "watching", "not watching", "watching / not"]
    lost = notice["lost_after_take_ms"]
    on, off = lost["watching"], lost["not_watching"] or {}
    rows = [["held lock taken on 2 of 3 nodes: runs", str(on["runs"]), str(off.get("runs", "–")), "–"]]
    for p in ("p50", "p99", "max"):
        rows.append([f"take → lost() {p}, ms", num(on[p]), num(off[p]) if off else "–", "–"])
    r = notice["renewals"]
    what = f"{r['locks']:,} auto-extended locks, ttl {r['ttl_ms'] / 1000:g} s, 3 nodes"
    rows.append([f"{what}: nodes' CPU µs/s", num(r["watching"]["server_us_per_s"]),
                 num(r["not_watching"]["server_us_per_s"]), times(r["ratio"])])
    rows.append([f"{what}: µs/s in renewal commands", num(r["watching"]["renewal_calls_us_per_s"]),
                 num(r["not_watching"]["renewal_calls_us_per_s"]),
                 times(r["watching"]["renewal_calls_us_per_s"] / r["not_watching"]["renewal_calls_us_per_s"])])
    rows.append([f"{what}: µs/s in MGET", num(r["watching"]["mget_us_per_s"]),
                 num(r["not_watching"]["mget_us_per_s"]), "–"])
    rows.append([f"{what}: lost", str(r["lost"]), "–", "–"])
    return header, 1, rows


def server_name(run):
    """`redis 7.0.15` or `valkey 9.1.2` (the bench names Valkey's only)."""
    server = run["machine"]["redis"]
    return server if server.startswith("valkey") else f"redis {server}"


def render_run(run):
    """Which run: the server, when, the commit, the parts and the load."""
    load = next((n.rsplit(": ", 1)[1] for n in run.get("notes", [])
                 if n.startswith("load average at the end")), "–")
    machine = run["machine"]
    header = ["server", "date (UTC)", "commit", "parts", "machine",
              "load average at the end (1, 5, 15 min)"]
    return header, 1, [[server_name(run), run["date"], run["commit"], run["parts"],
                        f"{machine['nproc']} cpus, {machine['cpu']}", load]]


def render_runs(runs):
    """Which runs: one row per file of a glob."""
    header = ["run", "server", "date (UTC)", "commit", "parts", "load average at the end"]
    rows = []
    for name, run in runs:
        load = next((n.rsplit(": ", 1)[1] for n in run.get("notes", [])
                     if n.startswith("load average at the end")), "–")
        rows.append([f"`{name}`", server_name(run), run["date"][:16].replace("T", " "),
                     run["commit"], run["parts"], load])
    return header, 1, rows


RENDER = {"run": render_run, "speed": render_speed, "more": render_more, "native": render_native,
          "degraded": render_degraded, "memory": render_memory, "fair": render_fair,
          "killed": render_killed, "replica": render_replica, "notice": render_notice}


def markdown_table(header, rows):
    """The table as the pages hold it (numbers right-aligned)."""
    def line(cells):
        return "| " + " | ".join(cells) + " |"
    align = ["---" if not rows or not NUMERIC_CELL.match(rows[0][i]) else "---:"
             for i in range(len(header))]
    return "\n".join([line(header), line(align)] + [line(r) for r in rows])


def table_cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


class Runs:
    """The committed runs, read once: (run, problem)."""

    def __init__(self, root):
        self.root, self.cache = root, {}

    def get(self, name):
        if name not in self.cache:
            path = self.root / name
            if not name.startswith("benches/") or path.suffix != ".json":
                self.cache[name] = (None, f"{name} is not a run in benches/*.json")
            elif not path.is_file():
                self.cache[name] = (None, f"no such run {name}")
            else:
                try:
                    self.cache[name] = (json.loads(path.read_text(encoding="utf-8")), None)
                except ValueError as e:
                    self.cache[name] = (None, f"{name} is not JSON: {e}")
        return self.cache[name]

    def table(self, name, kind):
        """(header, keys, rows) of `kind` from run `name`, or a problem.
        Kind `runs` takes a glob (`benches/*.json`): a row per run."""
        if kind == "runs":
            runs = []
            for path in sorted(self.root.glob(name)):
                run, problem = self.get(path.relative_to(self.root).as_posix())
                if problem:
                    return None, problem
                if "date" in run:  # runs from before the bench named its date are left out
                    runs.append((path.relative_to(self.root).as_posix(), run))
            if not runs:
                return None, f"no runs match {name}"
            return render_runs(runs), None
        run, problem = self.get(name)
        if problem:
            return None, problem
        if kind not in RENDER:
            return None, f"no table kind '{kind}' (one of {', '.join(RENDER)})"
        try:
            return RENDER[kind](run), None
        except (KeyError, TypeError, ZeroDivisionError) as e:
            return None, f"{name} has no '{kind}' table: missing {e}"


def bench_figures(root, page_name, strict):
    """What is wrong with the benchmark figures of one page."""
    page = root / page_name
    if not page.is_file():
        return []
    runs, problems = Runs(root), []
    lines = page.read_text(encoding="utf-8").splitlines()
    in_fence = None
    i = 0
    while i < len(lines):
        line, number = lines[i], i + 1
        fence = FENCE.match(line)
        if in_fence or fence:
            if in_fence and fence and fence.group(1)[0] == in_fence[0]:
                in_fence = None
            elif not in_fence:
                in_fence = fence.group(1)
            i += 1
            continue
        mark = TABLE_MARK.match(line)
        if mark:
            name, kind = mark.groups()
            start = end = i + 1
            while end < len(lines) and lines[end].lstrip().startswith("|"):
                end += 1
            if end - start < 2:
                problems.append(f"{page_name}:{number}: a table marker with no table after it")
                i += 1
                continue
            rendered, problem = runs.table(name, kind)
            if problem:
                problems.append(f"{page_name}:{number}: {problem}")
            else:
                problems += compare_table(page_name, start + 1, name, kind, rendered,
                                          [table_cells(lines[j]) for j in range(start, end)])
            i = end
            continue
        bare = False
        if strict and line.lstrip().startswith("|") and not re.match(r"^\s*\|[\s|:-]+\|\s*$", line):
            # A table no marker names: a figure in it names its run, as in
            # the prose.
            bare = any(NUMERIC_CELL.match(c) for c in table_cells(line))
            if bare:
                problems.append(f"{page_name}:{number}: a table of figures that names no "
                                f"run (add <!-- table: benches/NAME.json KIND --> above it, "
                                f"or a figure marker in the cell)")
        problems += figures_in_line(runs, page_name, number, CODE_SPAN.sub("code", line),
                                    strict and not bare)
        i += 1
    return problems


def figures_in_line(runs, page_name, number, plain, strict):
    """The figure markers of one line, each against its run's cell; on a
    strict page, every ratio without one."""
    problems = []
    for m in FIGURE_MARK.finditer(plain):
        name, kind, row_key, column, part = m.groups()
        before = FIGURE_BEFORE.search(plain[:m.start()])
        rendered, problem = runs.table(name, kind)
        if problem:
            problems.append(f"{page_name}:{number}: {problem}")
            continue
        if not before:
            problems.append(f"{page_name}:{number}: no figure right before the marker of "
                            f"{name} {kind} | {row_key} | {column}")
            continue
        expected, problem = cell(rendered, row_key, column, part)
        if problem:
            problems.append(f"{page_name}:{number}: {name} {kind}: {problem}")
            continue
        got = before.group(1)
        if strip_unit(expected) != got:
            problems.append(f"{page_name}:{number}: quotes {got} for {kind} | {row_key} | "
                            f"{column}, {name} says {strip_unit(expected)}")
    if strict:
        # A figure with its marker right after it is sourced.
        unmarked = re.sub(r"\d[\d,]*(?:\.\d+)?\s*(?:×|x|%|µs|ms|KiB|B)?\**\s*<!--\s*figure:.*?-->",
                          "", plain)
        unmarked = re.sub(r"<!--.*?-->", "", unmarked)
        for m in RATIO.finditer(unmarked):
            # A target ("at least 3×", "≤ 0.65×") is a bound, not a figure.
            if TARGET_BEFORE.search(unmarked[:m.start()]):
                continue
            problems.append(f"{page_name}:{number}: the ratio {m.group(0)} names no run "
                            f"(add <!-- figure: benches/NAME.json KIND | ROW | COLUMN --> "
                            f"right after it)")
    return problems


def strip_unit(cell_text):
    return re.sub(r"(?:×| ?%)$", "", cell_text)


def cell(rendered, row_key, column, part):
    header, keys, rows = rendered
    if column not in header:
        return None, f"no column '{column}'"
    found = [r for r in rows if " ".join(r[:keys]) == row_key]
    if not found:
        return None, f"no row '{row_key}'"
    text = found[0][header.index(column)]
    if part:
        parts = text.split(" / ")
        if not 1 <= int(part) <= len(parts):
            return None, f"'{text}' has no part {part}"
        text = parts[int(part) - 1]
    return text, None


def compare_table(page_name, first_line, name, kind, rendered, page_rows):
    """Cell by cell: the page's table against the run's."""
    header, keys, rows = rendered
    problems = []
    if page_rows[0] != header:
        problems.append(f"{page_name}:{first_line}: the {kind} table of {name} has the header "
                        f"{' | '.join(header)}")
        return problems
    body = page_rows[2:]
    if len(body) != len(rows):
        problems.append(f"{page_name}:{first_line}: the {kind} table of {name} has {len(rows)} "
                        f"rows, the page {len(body)}")
    for offset, (got, want) in enumerate(zip(body, rows)):
        line = first_line + 2 + offset
        for col, (g, w) in enumerate(zip(got, want)):
            if g != w:
                problems.append(f"{page_name}:{line}: {kind} | {' '.join(want[:keys])} | "
                                f"{header[col]}: the page says {g}, {name} says {w}")
        if len(got) != len(want):
            problems.append(f"{page_name}:{line}: {len(got)} cells, {name} has {len(want)}")
    return problems


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

        # The benchmark's tables and quoted figures, against their runs.
        for page in self.pages:
            quoting = self.name(page)
            problems += bench_figures(self.root, quoting, strict=quoting in BENCH_STRICT)
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

    # Benchmark figures: a table and prose figures checked against a run.
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "docs").mkdir()
        (root / "benches").mkdir()
        row = lambda n, what, f, q, r: {"nodes": n, "measure": what, "floor": f, "quorumlock": q,
                                        "rslock": r, "ratio": q / f, "ratio_vs_rslock": q / r}
        rows = []
        for tasks in (1, 16, 64, 256):
            rows += [row(5, f"cycles/s, {tasks} tasks", 1000.0 * tasks, 1100.0 * tasks, 500.0 * tasks),
                     row(5, f"server CPU µs per cycle, all nodes, {tasks} tasks", 10.0, 9.0, 20.0),
                     row(5, f"client CPU µs per cycle, {tasks} tasks", 30.0, 25.0, 50.0)]
        run = {"rows": rows, "ceilings": [{"nodes": 5, "lock_cycles_per_s": 400000.0}]}
        (root / "benches" / "run.json").write_text(json.dumps(run), encoding="utf-8")
        header, _, good = render_speed(run)
        table = markdown_table(header, good).splitlines()
        table[5] = table[5].replace("2.20×", "2.30×")  # 256 tasks, × rslock: wrong
        (root / "docs" / "speed.md").write_text(
            "# Speed\n\n<!-- table: benches/run.json speed -->\n" + "\n".join(table) + "\n\n"
            "256 tasks: 2.20×<!-- figure: benches/run.json speed | 5 256 | × rslock --> rslock, "
            "at 9.00<!-- figure: benches/run.json speed | 5 256 | server CPU µs/cycle: "
            "quorumlock / rslock / floor | 1 --> µs.\n"
            "Wrong: 2.21×<!-- figure: benches/run.json speed | 5 256 | × rslock -->; "
            "unsourced: 1.50x; a target is not a figure: at least 3×.\n"
            "<!-- figure: benches/missing.json speed | 5 256 | × rslock -->\n\n"
            "| a | b |\n|---|---:|\n| x | 1.25× |\n\n"
            "<!-- table: benches/run.json native -->\n| a |\n|---|\n| 1 |\n\n"
            "| target | run |\n|---|---:|\n"
            "| x | 2.20×<!-- figure: benches/run.json speed | 5 256 | × rslock --> |\n"
            "| y | 0.30×<!-- figure: benches/run.json speed | 5 256 | × ceiling --> |\n",
            encoding="utf-8")
        got = sorted(bench_figures(root, "docs/speed.md", strict=True))
        expected = sorted([
            "docs/speed.md:9: speed | 5 256 | × rslock: the page says 2.30×, "
            "benches/run.json says 2.20×",
            "docs/speed.md:12: quotes 2.21 for speed | 5 256 | × rslock, benches/run.json says 2.20",
            "docs/speed.md:12: the ratio 1.50x names no run (add <!-- figure: benches/NAME.json "
            "KIND | ROW | COLUMN --> right after it)",
            "docs/speed.md:13: no such run benches/missing.json",
            "docs/speed.md:17: a table of figures that names no run (add <!-- table: "
            "benches/NAME.json KIND --> above it, or a figure marker in the cell)",
            "docs/speed.md:19: benches/run.json has no 'native' table: missing 'native'",
            "docs/speed.md:27: quotes 0.30 for speed | 5 256 | × ceiling, benches/run.json says 0.70",
        ])
        for line in expected:
            if line not in got:
                failures.append(f"bench figures: not reported: {line}")
        for line in got:
            if line not in expected:
                failures.append(f"bench figures: reported wrongly: {line}")
        # The same page with the wrong cell put right and the rest removed:
        # nothing to report.
        table[5] = table[5].replace("2.30×", "2.20×")
        (root / "docs" / "speed.md").write_text(
            "# Speed\n\n<!-- table: benches/run.json speed -->\n" + "\n".join(table) + "\n\n"
            "256 tasks: **2.20×**<!-- figure: benches/run.json speed | 5 256 | × rslock -->.\n",
            encoding="utf-8")
        if bench_figures(root, "docs/speed.md", strict=True):
            failures.append(f"bench figures: a right page reported: "
                            f"{bench_figures(root, 'docs/speed.md', strict=True)}")

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
          f"soak quotes (README.md, docs/safety.md), links the package lacks, a benchmark table's wrong "
          f"cell, a wrongly quoted and an unsourced figure, a missing run and a table naming "
          f"no run reported")
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
    if len(argv) == 4 and argv[1] == "--render":
        # The table of kind argv[3] from run argv[2], as a page holds it.
        rendered, problem = Runs(ROOT).table(argv[2], argv[3])
        if problem:
            print(f"docs/check.py: {problem}", file=sys.stderr)
            return 1
        print(f"<!-- table: {argv[2]} {argv[3]} -->")
        print(markdown_table(rendered[0], rendered[2]))
        return 0
    if argv[1:]:
        print(f"usage: {argv[0]} [--self-test | --package-list FILE | --render RUN KIND]",
              file=sys.stderr)
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
