#!/usr/bin/env python3
"""Lists import circles between the modules of a crate, and fails on them.

A circle is a module that imports one that imports it, directly or through
others. Modules are the crate's files (`lib.rs`/`main.rs` is the root,
`a/mod.rs` and `a.rs` are `a`, `a/b.rs` is `a::b`). An import is a `use`
declaration or an inline `crate::…`/`super::…`/`self::…` path in code that
is not a test (`#[cfg(test)]` modules are left out); it is resolved to the
module that *defines* the item, following every `use` alias on the way, so
`use crate::Error` counts as an import of the module that defines `Error`,
not of `lib.rs`. A `pub use` only re-exports: it is followed, not counted.
Declaring a submodule (`mod a;`) is not an import.

    python3 .ci/module-cycles.py                    # the crates CI holds to it
    python3 .ci/module-cycles.py crates/cairn-server  # any crate: report only

Exit status: 1 when a crate it was asked to hold has a circle, else 0.
"""

import os
import re
import sys

# The crates whose modules must not import each other in a circle.
ENFORCED = [
    "crates/cairn",
    "crates/cairn-agent",
    "crates/cairn-sql",
    "crates/cairn-sqlite",
    "crates/cairn-postgres",
]

ITEM = re.compile(
    r"\b(?:fn|struct|enum|trait|type|const|static|union|mod)\s+([A-Za-z_]\w*)"
)
MACRO = re.compile(r"\bmacro_rules!\s*([A-Za-z_]\w*)")
USE = re.compile(r"\b(pub(?:\s*\([^)]*\))?\s+)?use\s+([^;]*);")
INLINE = re.compile(r"(?<![\w:])((?:crate|super|self)(?:::[A-Za-z_]\w*)+)")


def strip_comments_and_strings(src):
    """Blanks comments, string and char literals, keeping line structure."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif src.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if src.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif src.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if src[i] == "\n":
                        out.append("\n")
                    i += 1
        elif c == "r" and re.match(r'r#*"', src[i:i + 10]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'r(#*)"', src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", src[i:i + 4] + "  ") or src.startswith("'\\u{", i):
            j = src.find("'", i + 1)
            if src.startswith("'\\", i):
                j = src.find("'", i + 2)
            out.append("' '")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def block_end(src, open_at):
    """The index just past the brace block opening at `open_at`."""
    depth = 0
    for k in range(open_at, len(src)):
        if src[k] == "{":
            depth += 1
        elif src[k] == "}":
            depth -= 1
            if depth == 0:
                return k + 1
    return len(src)


TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*([;{])")


def drop_tests(src):
    """Removes `#[cfg(test)] mod x { … }` blocks; returns (src, test file modules)."""
    test_files = set()
    while True:
        m = TEST_MOD.search(src)
        if not m:
            return src, test_files
        if m.group(2) == ";":
            test_files.add(m.group(1))
            src = src[: m.start()] + src[m.end():]
        else:
            end = block_end(src, m.end() - 1)
            src = src[: m.start()] + src[end:]


def expand_use_tree(tree):
    """`a::{b, c::{d as e}, self}` → [(['a','b'], 'b'), …] (path, bound name)."""
    tree = re.sub(r"\s*([{},]|::)\s*", r"\1", re.sub(r"\s+", " ", tree.strip()))
    results = []

    def walk(prefix, text):
        parts, depth, cur = [], 0, ""
        for ch in text:
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
                continue
            depth += ch == "{"
            depth -= ch == "}"
            cur += ch
        if cur:
            parts.append(cur)
        for part in parts:
            if "{" in part:
                head, _, rest = part.partition("{")
                head = head.rstrip(":")
                walk(prefix + ([s for s in head.split("::") if s]), rest[: rest.rfind("}")])
                continue
            name = None
            m = re.match(r"(.*\S)\s+as\s+([A-Za-z_]\w*)$", part)
            if m:
                part, name = m.group(1), m.group(2)
            segs = prefix + [s for s in part.split("::") if s]
            if segs and segs[-1] == "self":
                segs = segs[:-1]
            if not segs:
                continue
            results.append((segs, name or segs[-1]))

    walk([], tree)
    return results


class Crate:
    def __init__(self, root):
        self.root = root
        src = os.path.join(root, "src")
        self.modules = {}  # module path tuple -> dict
        top = "lib.rs" if os.path.exists(os.path.join(src, "lib.rs")) else "main.rs"
        self.load((), os.path.join(src, top), src)

    def load(self, path, file, dir_for_children):
        raw = open(file, encoding="utf-8").read()
        code = strip_comments_and_strings(raw)
        code, test_files = drop_tests(code)
        mod = {"file": file, "items": set(), "aliases": {}, "reexports": set(), "children": set(), "refs": []}
        self.modules[path] = mod
        for m in ITEM.finditer(code):
            mod["items"].add(m.group(1))
        for m in MACRO.finditer(code):
            mod["items"].add(m.group(1))
        for m in USE.finditer(code):
            public = bool(m.group(1))
            for segs, name in expand_use_tree(m.group(2)):
                if name == "*":
                    if not public:
                        mod["refs"].append(segs[:-1] + ["*"])
                    continue
                mod["aliases"][name] = segs
                if public:
                    mod["reexports"].add(name)
                else:
                    mod["refs"].append(segs)
        for m in INLINE.finditer(USE.sub("", code)):
            mod["refs"].append(m.group(1).split("::"))
        for m in re.finditer(r"(?:^|[;}\s])(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code):
            child = m.group(1)
            if child in test_files:
                continue
            mod["children"].add(child)
            for cand in (os.path.join(dir_for_children, child + ".rs"), os.path.join(dir_for_children, child, "mod.rs")):
                if os.path.exists(cand):
                    self.load(path + (child,), cand, os.path.join(dir_for_children, child))
                    break

    def resolve(self, at, segs, seen=None):
        """The module that defines what `segs` names, seen from module `at`."""
        seen = seen or set()
        key = (at, tuple(segs))
        if key in seen:
            return None
        seen.add(key)
        if not segs:
            return at
        first, rest = segs[0], segs[1:]
        if first == "crate":
            cur = ()
        elif first == "super":
            cur = at[:-1]
        elif first == "self":
            cur = at
        elif first in self.modules[at]["children"]:
            cur = at + (first,)
        elif first in self.modules[at]["aliases"]:
            target = self.resolve(at, self.modules[at]["aliases"][first], seen)
            if target is None:
                return None
            return self.resolve(target, rest, seen) if rest and target in self.modules and rest[0] in self.modules[target]["children"] else target
        else:
            return None  # another crate, std, a prelude name
        for i, seg in enumerate(rest):
            mod = self.modules.get(cur)
            if mod is None:
                return None
            if seg in ("*",):
                return cur
            if seg == "super":
                cur = cur[:-1]
                continue
            if seg in mod["children"]:
                cur = cur + (seg,)
                continue
            if seg in mod["aliases"] and seg not in mod["items"]:
                return self.resolve(cur, mod["aliases"][seg] + rest[i + 1:], seen)
            return cur
        return cur

    def edges(self):
        out = {}
        for path, mod in self.modules.items():
            for segs in mod["refs"]:
                target = self.resolve(path, segs)
                if target is None or target == path or target not in self.modules:
                    continue
                out.setdefault(path, {}).setdefault(target, set()).add("::".join(segs))
        return out


def circles(edges, nodes):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, comps = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            visit(v)
    return comps


def name(path):
    return "::".join(path) or "(root)"


def main(args):
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    os.chdir(here)
    crates = args or ENFORCED
    failed = False
    for root in crates:
        crate = Crate(root.rstrip("/"))
        edges = crate.edges()
        comps = circles(edges, list(crate.modules))
        if not comps:
            print(f"{root}: {len(crate.modules)} modules, no import circle")
            continue
        enforced = root.rstrip("/") in ENFORCED
        failed |= enforced
        print(f"{root}: {len(comps)} import circle(s)")
        for comp in comps:
            print("  circle: " + ", ".join(name(p) for p in comp))
            for a in comp:
                for b in comp:
                    if b in edges.get(a, {}):
                        print(f"    {name(a)} -> {name(b)}: " + ", ".join(sorted(edges[a][b])))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
