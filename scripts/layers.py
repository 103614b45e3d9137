#!/usr/bin/env python3
"""Import circles between a crate's modules (issue 33).

A module's imports are every path it names into its own crate: `use`
statements (with their `{...}` groups expanded) and paths written inline,
starting with `crate::`, `super::`, `self::` or the name of a child module.
`mod x;` itself is containment, not an import. Each path is resolved to the
deepest module it reaches, so `crate::slab::Slabs` is an import of `slab`;
an inline `mod tests { ... }` is a module of its own (its imports are not
its parent's). Comments and string literals are skipped.

A circle is a set of modules that reach each other through imports (a
strongly connected component of more than one module). The script prints
each circle with the imports inside it and exits 1 if there is one.

It also holds the engine's files to a size (issue 33): at most 1,200 lines
of code in any file of crates/engine/src and 800 in `engine.rs`, counting
lines that are not blank and not comments, outside `#[cfg(test)]` modules.

    scripts/layers.py                       # both checks, as the suite runs them
    scripts/layers.py crates/server/src     # the circles of one crate
    scripts/layers.py --floors crates/engine/src   # its top-level modules by floor
    scripts/layers.py --dot crates/engine/src | dot -Tsvg > docs/engine-floors.svg
"""

import re
import sys
from pathlib import Path

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
# A raw string's opening, and a char literal (so that a quote in it starts no string).
RAW = re.compile(r'r(#*)"')
CHAR = re.compile(r"'(\\.|[^\\'])'|'\\u\{[0-9a-fA-F]+\}'|'\\x[0-9a-fA-F]{2}'")


def strip(text):
    """The source with comments, strings and chars blanked (lengths kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and (m := RAW.match(text, i)) and not re.match(r"\w", text[i - 1 : i] or " "):
            hashes = m.group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            j = n if end < 0 else end + 1 + len(hashes)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i : j + 1]))
            i = j + 1
        elif c == "'" and (m := CHAR.match(text, i)):
            out.append(" " * len(m.group(0)))
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand(tree):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e']."""
    tree = re.sub(r"\s+", "", tree)
    if "{" not in tree:
        return [tree]
    head, rest = tree.split("{", 1)
    body = rest[: rest.rindex("}")]
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    return [head + p for part in parts if part for p in expand(part)]


def module_of(src, path):
    rel = path.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("lib", "main", "mod"):
        parts.pop()
    return tuple(parts)


def scan(src):
    """Modules (tuples) -> list of (path segments, line) they name."""
    refs, modules = {}, set()
    for path in sorted(src.rglob("*.rs")):
        base = module_of(src, path)
        modules.add(base)
        text = strip(path.read_text())
        # Inline modules: `mod name {` opens one until its brace closes.
        stack, depth, spans = [], 0, []
        for m in re.finditer(r"\bmod\s+(" + IDENT + r")\s*\{|[{}]", text):
            tok = m.group(0)
            if tok.startswith("mod"):
                stack.append((m.group(1), depth))
                depth += 1
                spans.append((m.start(), tuple(s for s, _ in stack)))
            elif tok == "{":
                depth += 1
            else:
                depth -= 1
                if stack and stack[-1][1] == depth:
                    stack.pop()
                    spans.append((m.end(), tuple(s for s, _ in stack)))
        spans.sort()

        def owner(pos):
            inner = ()
            for start, names in spans:
                if start > pos:
                    break
                inner = names
            return base + inner

        for start, names in spans:
            modules.add(base + names)
        line_of = lambda pos: text.count("\n", 0, pos) + 1
        used = []
        for m in re.finditer(r"\buse\s+([^;]+);", text):
            tree = re.sub(r"\s+as\s+" + IDENT, "", m.group(1))
            for p in expand(tree):
                used.append((m.start(), p))
        use_spans = [(m.start(), m.end()) for m in re.finditer(r"\buse\s+[^;]+;", text)]
        for m in re.finditer(r"\b(?:crate|super|self|" + IDENT + r")(?:::" + IDENT + r")+", text):
            if any(a <= m.start() < b for a, b in use_spans):
                continue
            if text[max(0, m.start() - 2) : m.start()] == "::":
                continue
            used.append((m.start(), m.group(0)))
        for pos, p in used:
            refs.setdefault(owner(pos), []).append((p.strip(":").split("::"), line_of(pos), path))
    return modules, refs


def resolve(modules, here, segs):
    if not segs or not segs[0]:
        return None
    if segs[0] == "crate":
        cur, rest = (), segs[1:]
    elif segs[0] in ("super", "self"):
        cur, rest = here, segs
        while rest and rest[0] in ("super", "self"):
            cur = cur[:-1] if rest[0] == "super" else cur
            rest = rest[1:]
    elif here + (segs[0],) in modules:
        cur, rest = here, segs
    else:
        return None  # another crate, std, a type or a variable
    for s in rest:
        if cur + (s,) in modules:
            cur = cur + (s,)
        else:
            break
    return cur


def circles(src):
    modules, refs = scan(src)
    edges = {}
    for here, items in refs.items():
        for segs, line, path in items:
            to = resolve(modules, here, segs)
            if to is None or to == here:
                continue
            edges.setdefault(here, {}).setdefault(to, (path, line, "::".join(segs)))
    # Tarjan's strongly connected components.
    index, low, onstack, stack, out, counter = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        onstack.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in onstack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                onstack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(modules):
        if v not in index:
            visit(v)
    return out, edges, modules


# The engine's rooms: the largest a file may be, in lines of code.
SIZE_LIMITS = {"crates/engine/src": (1200, {"engine.rs": 800})}


def code_lines(path):
    """Lines that are not blank or comments, outside `#[cfg(test)]` modules."""
    text = strip(path.read_text())
    out, depth, skip_at = 0, 0, None
    pending_test = False
    for line in text.split("\n"):
        stripped = line.strip()
        if skip_at is None and stripped.startswith("#[cfg(test)]"):
            pending_test = True
            continue
        if pending_test and skip_at is None and re.match(r"(pub(\(\w+\))?\s+)?mod\s+\w+\s*\{", stripped):
            skip_at = depth
        pending_test = pending_test and not stripped.endswith(";") and skip_at is None
        depth += line.count("{") - line.count("}")
        if skip_at is not None:
            if depth <= skip_at:
                skip_at = None
            continue
        if stripped:
            out += 1
    return out


def sizes(d):
    limits = SIZE_LIMITS.get(d.rstrip("/"))
    if not limits:
        return 0
    default, special = limits
    bad = 0
    for path in sorted(Path(d).rglob("*.rs")):
        limit = special.get(str(path.relative_to(d)), default)
        n = code_lines(path)
        if n > limit:
            bad += 1
            print(f"{path}: {n} lines of code, more than {limit}")
    if not bad:
        print(f"{d}: every file within {default} lines of code" + "".join(f", {k} within {v}" for k, v in special.items()))
    return bad


def name(m):
    return "::".join(m) or "crate"


def floors(src):
    """Top-level modules (children folded in, tests left out) -> floor, where
    a module's floor is one above the highest module it imports; and the
    folded edges. A child that its parent's importers import (as `config`
    imports `rebalance::tuning` while `rebalance` imports `config`) is kept
    apart, so that folding makes no circle. Meaningful only without circles."""
    _, edges, modules = circles(src)
    pairs = [(a, b) for a, tos in edges.items() for b in tos
             if a and b and "tests" not in a and "tests" not in b]
    apart = set()

    def node(m):
        for k in range(len(m), 0, -1):
            if m[:k] in apart:
                return "::".join(m[:k])
        return m[0]

    while True:
        deps = {}
        for a, b in pairs:
            if node(a) != node(b):
                deps.setdefault(node(a), set()).add(node(b))
        mutual = [(a, b) for a in deps for b in deps[a] if a in deps.get(b, ())]
        if not mutual:
            break
        a, b = mutual[0]
        # Keep apart the modules that one side imports of the other.
        new = {y for x, y in pairs
               if {node(x), node(y)} == {a, b} and len(y) > 1 and y not in apart}
        if not new:
            break  # nothing left to split: a real circle
        apart |= new
    names = {node(m) for m in modules if m and "tests" not in m}
    level = {}

    def floor(m, seen=()):
        if m not in level:
            below = [floor(d, seen + (m,)) for d in deps.get(m, ()) if d not in seen]
            level[m] = 1 + max(below, default=0)
        return level[m]

    for m in names:
        floor(m)
    return level, deps


def dot(src):
    level, deps = floors(src)
    # Draw only the imports no longer path implies (transitive reduction).
    def reach(a, skip):
        out, todo = set(), [d for d in deps.get(a, ()) if d != skip]
        while todo:
            d = todo.pop()
            if d not in out:
                out.add(d)
                todo.extend(deps.get(d, ()))
        return out
    print("digraph floors {")
    print('  rankdir=BT; node [shape=box, fontname="Helvetica", fontsize=11]; edge [color="#888888"];')
    for f in sorted(set(level.values())):
        ms = sorted(m for m, l in level.items() if l == f)
        print(f'  {{ rank=same; "floor {f}" [shape=plaintext]; ' + " ".join(f'"{m}";' for m in ms) + " }")
    floors_ = sorted(set(level.values()))
    for a, b in zip(floors_, floors_[1:]):
        print(f'  "floor {a}" -> "floor {b}" [style=invis];')
    for a in sorted(deps):
        for b in sorted(deps[a]):
            if not any(b in reach(c, None) for c in deps[a] if c != b):
                print(f'  "{a}" -> "{b}";')
    print("}")


def main(dirs):
    if dirs and dirs[0] in ("--dot", "--floors"):
        src = Path(dirs[1] if len(dirs) > 1 else "crates/engine/src")
        if dirs[0] == "--dot":
            dot(src)
        else:
            level, _ = floors(src)
            for f in sorted(set(level.values())):
                print(f"floor {f}: " + ", ".join(sorted(m for m, l in level.items() if l == f)))
        return 0
    bad = 0
    for d in dirs:
        src = Path(d)
        found, edges, _ = circles(src)
        for comp in found:
            bad += 1
            members = set(comp)
            print(f"{d}: circle of {len(comp)} modules: {', '.join(name(m) for m in comp)}")
            for a in comp:
                for b, (path, line, p) in sorted(edges.get(a, {}).items()):
                    if b in members:
                        print(f"  {name(a)} -> {name(b)}  ({path}:{line}: {p})")
        if not found:
            print(f"{d}: no import circles")
        bad += sizes(d)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["crates/engine/src", "crates/server/src"]))
