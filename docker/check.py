#!/usr/bin/env python3
"""Checks the docker/ files without a Docker engine: the compose files parse,
their services and ports are what the Docker table of docs/operations.md
(the chapter the README links for Docker) says, the
cluster init really creates 3 masters with a replica each, and the
Dockerfile builds the binary Cargo.toml declares.

Run from anywhere: python3 docker/check.py. Exits non-zero with one line per
problem. Uses PyYAML when it is installed and a small parser for the subset
of YAML these files use otherwise; with PyYAML present, both parsers must
agree, so the fallback cannot drift.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
COMPOSE = "docker/docker-compose.yml"
CLUSTER = "docker/docker-compose.cluster.yml"
DOCKERFILE = "docker/Dockerfile"
# The page with the Docker table and the commands that use these files.
DOCS = "docs/operations.md"

problems = []


def problem(message):
    problems.append(message)


# --- a parser for the YAML subset the compose files use -------------------
#
# Block mappings and block sequences of scalars, flow sequences of scalars,
# plain, single- and double-quoted scalars, comments. Anything else (anchors,
# block scalars, flow mappings, sequences of mappings) is an error, so the
# files stay inside what both parsers read the same way.


class YamlError(Exception):
    pass


def strip_comment(line):
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
            elif c == "\\" and quote == '"':
                continue
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
    return line


def split_outside_quotes(text, sep):
    parts, quote, current = [], None, ""
    for c in text:
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == sep:
            parts.append(current)
            current = ""
            continue
        current += c
    parts.append(current)
    return parts


def mapping_colon(text):
    """Index of the `:` that ends a mapping key, or -1."""
    quote = None
    for i, c in enumerate(text):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == ":" and (i + 1 == len(text) or text[i + 1] == " "):
            return i
    return -1


def scalar(text, where):
    text = text.strip()
    if text.startswith("["):
        if not text.endswith("]"):
            raise YamlError(f"{where}: unterminated flow sequence")
        inner = text[1:-1].strip()
        if not inner:
            return []
        unquoted = re.sub(r'"(\\.|[^"\\])*"|\'[^\']*\'', "", inner)
        if any(c in unquoted for c in "[]{}"):
            raise YamlError(f"{where}: nested flow collections are not supported")
        return [scalar(item, where) for item in split_outside_quotes(inner, ",")]
    if text.startswith("{"):
        raise YamlError(f"{where}: flow mappings are not supported")
    if text[:1] in ("|", ">", "&", "*", "!"):
        raise YamlError(f"{where}: block scalars, anchors and tags are not supported")
    if text.startswith('"'):
        if len(text) < 2 or not text.endswith('"'):
            raise YamlError(f"{where}: unterminated double-quoted string")
        body = text[1:-1]
        escapes = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "/": "/"}
        out, i = "", 0
        while i < len(body):
            if body[i] == "\\":
                if i + 1 >= len(body) or body[i + 1] not in escapes:
                    raise YamlError(f"{where}: unsupported escape in {text}")
                out += escapes[body[i + 1]]
                i += 2
            else:
                out += body[i]
                i += 1
        return out
    if text.startswith("'"):
        if len(text) < 2 or not text.endswith("'"):
            raise YamlError(f"{where}: unterminated single-quoted string")
        return text[1:-1].replace("''", "'")
    if mapping_colon(text) >= 0:
        raise YamlError(f"{where}: `{text}` looks like a nested mapping; not supported here")
    if re.fullmatch(r"[0-9_]+(:[0-9_]+)+", text):
        # YAML 1.1 (PyYAML, older Compose) may read 22:22 as a base-60 number.
        raise YamlError(f"{where}: quote `{text}`; unquoted it may be read as a number")
    if text in ("", "~", "null", "Null", "NULL"):
        return None
    if text in ("true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"):
        return True
    if text in ("false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"):
        return False
    if re.fullmatch(r"[-+]?[0-9]+", text):
        return int(text)
    if re.fullmatch(r"[-+]?([0-9]+\.[0-9]*|\.[0-9]+)", text):
        return float(text)
    return text


def parse_yaml(source, name):
    lines = []
    for number, raw in enumerate(source.splitlines(), 1):
        line = strip_comment(raw).rstrip()
        if not line.strip() or line.strip() == "---":
            continue
        indent = len(line) - len(line.lstrip(" "))
        if line[indent:indent + 1] == "\t":
            raise YamlError(f"{name}:{number}: tab indentation")
        lines.append((indent, line.strip(), f"{name}:{number}"))
    if not lines:
        return None
    value, pos = parse_block(lines, 0, lines[0][0])
    if pos != len(lines):
        raise YamlError(f"{lines[pos][2]}: unexpected indentation")
    return value


def is_item(text):
    return text == "-" or text.startswith("- ")


def parse_block(lines, pos, indent):
    if is_item(lines[pos][1]):
        return parse_sequence(lines, pos, indent)
    return parse_mapping(lines, pos, indent)


def parse_mapping(lines, pos, indent):
    result = {}
    while pos < len(lines):
        ind, text, where = lines[pos]
        if ind < indent or (ind == indent and is_item(text)):
            break
        if ind > indent:
            raise YamlError(f"{where}: unexpected indentation")
        colon = mapping_colon(text)
        if colon < 0:
            raise YamlError(f"{where}: expected `key: value`")
        key = scalar(text[:colon], where)
        if key in result:
            raise YamlError(f"{where}: duplicate key `{key}`")
        rest = text[colon + 1:].strip()
        pos += 1
        if rest:
            result[key] = scalar(rest, where)
        elif pos < len(lines) and (
            lines[pos][0] > indent or (lines[pos][0] == indent and is_item(lines[pos][1]))
        ):
            result[key], pos = parse_block(lines, pos, lines[pos][0])
        else:
            result[key] = None
    return result, pos


def parse_sequence(lines, pos, indent):
    items = []
    while pos < len(lines):
        ind, text, where = lines[pos]
        if ind < indent or not is_item(text):
            break
        if ind > indent:
            raise YamlError(f"{where}: unexpected indentation")
        rest = text[1:].strip()
        if not rest or mapping_colon(rest) >= 0:
            raise YamlError(f"{where}: nested collections in sequences are not supported")
        items.append(scalar(rest, where))
        pos += 1
    return items, pos


def load(relative):
    path = ROOT / relative
    source = path.read_text(encoding="utf-8")
    data = parse_yaml(source, relative)
    try:
        import yaml  # PyYAML, when available: the fallback must agree with it
    except ImportError:
        return data
    reference = yaml.safe_load(source)
    if reference != data:
        problem(f"{relative}: the fallback parser reads it differently from PyYAML")
    return reference


# --- what the files say ----------------------------------------------------


def command_list(service):
    command = service.get("command")
    if isinstance(command, str):
        return command.split()
    return list(command or [])


def option(args, flag):
    if flag in args and args.index(flag) + 1 < len(args):
        return args[args.index(flag) + 1]
    return None


def check_masters(compose):
    """Service -> host port, for the five independent masters."""
    ports = {}
    for name, service in (compose.get("services") or {}).items():
        args = command_list(service)
        if not str(service.get("image", "")).startswith("redis:"):
            problem(f"{COMPOSE}: {name} does not run a redis image")
        if option(args, "--cluster-enabled") == "yes" or "--replicaof" in args or "--slaveof" in args:
            problem(f"{COMPOSE}: {name} is not an independent master")
        if option(args, "--appendfsync") != "always":
            problem(f"{COMPOSE}: {name} does not persist every write (appendfsync always)")
        published = service.get("ports") or []
        if len(published) != 1:
            problem(f"{COMPOSE}: {name} should publish exactly one port")
            continue
        parts = str(published[0]).split(":")
        if len(parts) != 3 or parts[0] != "127.0.0.1" or parts[2] != "6379":
            problem(f"{COMPOSE}: {name} publishes {published[0]}, expected 127.0.0.1:<port>:6379")
            continue
        ports[name] = int(parts[1])
    return ports


def check_cluster(compose):
    """Service -> port (None for the init service), for the cluster."""
    ports = {}
    services = compose.get("services") or {}
    nodes = {n: s for n, s in services.items() if n != "redis-cluster-init"}
    for name, service in nodes.items():
        args = command_list(service)
        if service.get("network_mode") != "host":
            problem(f"{CLUSTER}: {name} must use the host network (announced addresses)")
        if option(args, "--cluster-enabled") != "yes":
            problem(f"{CLUSTER}: {name} is not cluster-enabled")
        port = option(args, "--port")
        if port is None or not port.isdigit():
            problem(f"{CLUSTER}: {name} has no --port")
            continue
        ports[name] = int(port)
    init = services.get("redis-cluster-init")
    if init is None:
        problem(f"{CLUSTER}: no redis-cluster-init service")
        return ports
    ports["redis-cluster-init"] = None
    script = " ".join(command_list(init))
    if "redis-cli --cluster create" not in script:
        problem(f"{CLUSTER}: redis-cluster-init does not run `redis-cli --cluster create`")
    created = re.findall(r"127\.0\.0\.1:(\d+)", script.split("--cluster create", 1)[-1])
    if sorted(map(int, created)) != sorted(ports[n] for n in nodes if n in ports):
        problem(f"{CLUSTER}: --cluster create names {created}, not every node's port")
    replicas = re.search(r"--cluster-replicas (\d+)", script)
    if not replicas or len(nodes) != 3 * (int(replicas.group(1)) + 1):
        problem(f"{CLUSTER}: expected 3 masters with replicas, got {len(nodes)} nodes "
                f"and {replicas.group(0) if replicas else 'no --cluster-replicas'}")
    depends = init.get("depends_on") or {}
    for node in nodes:
        condition = depends.get(node, {}) if isinstance(depends, dict) else {}
        if (condition or {}).get("condition") != "service_healthy":
            problem(f"{CLUSTER}: redis-cluster-init does not wait for {node} to be healthy")
    return ports


def check_dockerfile():
    text = (ROOT / DOCKERFILE).read_text(encoding="utf-8")
    cargo = (ROOT / "Cargo.toml").read_text(encoding="utf-8")
    try:
        import tomllib

        bins = [b["name"] for b in tomllib.loads(cargo).get("bin", [])]
    except ImportError:  # Python < 3.11
        bins = re.findall(r'\[\[bin\]\]\s*name\s*=\s*"([^"]+)"', cargo)
    if bins != ["quorumlock"]:
        problem(f"Cargo.toml: expected one [[bin]] named quorumlock, found {bins}")
    if "cargo build --release --features cli" not in text:
        problem(f"{DOCKERFILE}: does not run `cargo build --release --features cli`")
    for binary in bins:
        if f"target/release/{binary} " not in text:
            problem(f"{DOCKERFILE}: does not copy target/release/{binary}")
        if f'ENTRYPOINT ["{binary}"]' not in text:
            problem(f"{DOCKERFILE}: the entrypoint is not {binary}")
    if len(re.findall(r"^FROM ", text, re.M)) < 2:
        problem(f"{DOCKERFILE}: expected a build stage and a runtime stage")


# --- what the docs say ------------------------------------------------------


def expand_names(cell):
    """`redis-1` … `redis-5` -> redis-1..redis-5; `a` -> [a]; — -> []."""
    names = re.findall(r"`([^`]+)`", cell)
    if len(names) == 2 and ("…" in cell or "..." in cell):
        (a_base, a_num), (b_base, b_num) = (re.fullmatch(r"(.*?)(\d+)", n).groups() for n in names)
        if a_base != b_base:
            problem(f"{DOCS}: cannot expand the range {cell.strip()}")
            return names
        return [f"{a_base}{i}" for i in range(int(a_num), int(b_num) + 1)]
    return names


def expand_ports(cell):
    """7001–7005 -> [7001..7005]; 7101 -> [7101]; — -> []."""
    cell = cell.strip()
    match = re.fullmatch(r"(\d+)\s*[–-]\s*(\d+)", cell)
    if match:
        return list(range(int(match.group(1)), int(match.group(2)) + 1))
    return [int(p) for p in re.findall(r"\d+", cell)]


def docs_table():
    """{file: {service: port or None}} from the Docker table of DOCS."""
    table = {}
    text = (ROOT / DOCS).read_text(encoding="utf-8")
    for line in text.splitlines():
        if not line.startswith("| `docker/"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3:
            continue
        file = cells[0].strip("`")
        names, ports = expand_names(cells[1]), expand_ports(cells[2])
        if ports and len(ports) != len(names):
            problem(f"{DOCS}: {file}: {len(names)} services but {len(ports)} ports")
            continue
        entry = table.setdefault(file, {})
        for i, name in enumerate(names):
            entry[name] = ports[i] if ports else None
    return table, text


def main():
    try:
        masters = check_masters(load(COMPOSE))
        cluster = check_cluster(load(CLUSTER))
    except YamlError as e:
        problem(str(e))
        masters, cluster = {}, {}
    check_dockerfile()

    table, docs = docs_table()
    for file, actual in ((COMPOSE, masters), (CLUSTER, cluster)):
        documented = table.get(file)
        if documented is None:
            problem(f"{DOCS}: the Docker table has no row for {file}")
        elif documented != actual:
            problem(f"{DOCS}: the Docker table says {documented} for {file}, the file has {actual}")
    if DOCKERFILE not in table:
        problem(f"{DOCS}: the Docker table has no row for {DOCKERFILE}")
    nodes = ",".join(f"redis://127.0.0.1:{p}" for p in sorted(masters.values()))
    if masters and f"QUORUMLOCK_NODES={nodes}" not in docs:
        problem(f"{DOCS}: does not show QUORUMLOCK_NODES={nodes}")
    for command in (f"docker compose -f {COMPOSE} up", f"docker compose -f {CLUSTER} up",
                    f"docker build -f {DOCKERFILE}"):
        if command not in docs:
            problem(f"{DOCS}: does not show `{command}`")

    if problems:
        for p in problems:
            print(f"docker/check.py: {p}", file=sys.stderr)
        return 1
    print(f"docker files OK: {len(masters)} masters on {sorted(masters.values())}, "
          f"a {len(cluster) - 1}-node cluster on {sorted(p for p in cluster.values() if p)}, "
          f"Dockerfile builds the cli")
    return 0


if __name__ == "__main__":
    sys.exit(main())
