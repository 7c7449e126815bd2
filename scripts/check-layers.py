#!/usr/bin/env python3
"""check-layers.py BUILD - the layer rules of src/ (docs/development.md,
"Layers"), checked on the sources and on the objects of BUILD/obj.

Each folder of src/ is one layer, and LAYERS below ranks them bottom to
top. A folder may reach only folders of a lower rank:
  - includes: each `#include "..."` of src/**/*.[ch] that names a file of
    src/ (the public plugin header include/taskmill.h is below them all);
  - calls: each symbol an object of BUILD/obj/FOLDER/ references (nm -u)
    that an object of another folder defines.
Inside a folder, the files' include graph and call graph may hold at most
one cycle (a strongly connected set of files), and only the one the
folder's header names in a comment line "cycle: a.c b.c - reason" (the
file names first, then why they must stay together); a cycle that the header names but the code no longer has is
an offence too, so that the comment stays true.
Headers: every folder has its header, FOLDER/FOLDER.h; a header that no
file outside its folder includes is that folder's own and is named
*_private.h (tests/, plugins/ and bench/ count as outside).

Exit 0 when every rule holds; 1 with each offence on its own line.
"""
import os
import re
import subprocess
import sys

# bottom to top; folders of one rank (peers) may not reach each other
LAYERS = [
    ["util"],                  # allocation, time, text, log, JSON, dlopen
    ["schedule"],              # cron, time zones, slots: pure time
    ["config"],                # the YAML config, knows no broker
    ["task"],                  # a task at run time, one message's run
    ["otel"],                  # the trace exporter: spans, OTLP, its thread
    ["broker", "pool"],        # the two seams (vtables)
    ["redis", "amqp", "fork"],  # the adapters behind them
    ["daemon"],                # generations, intake, settlement, firing
    ["admin"],                 # what operators run: emit, pause, dead letters
    ["http"],                  # endpoints, admin API, console
    ["cli"],                   # the commands and the entry point
]
RANK = {f: r for r, fs in enumerate(LAYERS) for f in fs}
# objects built from generated sources, by the folder that owns them
GENERATED = {"console_assets.o": "http"}

INCLUDE_RX = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
CYCLE_RX = re.compile(r'^\s*(?:/\*+|\*)?\s*cycle:\s*(.+)$', re.M)

offences = []


def offence(msg):
    offences.append("check-layers: " + msg)


def folder_of(rel):
    """The folder of a path under src/ (None for a loose file)."""
    parts = rel.split("/")
    return parts[0] if len(parts) > 1 else None


def sccs(graph):
    """Strongly connected sets of more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    nodes = set(graph) | {w for ws in graph.values() for w in ws}

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
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
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def main():
    if len(sys.argv) != 2:
        print("usage: check-layers.py BUILD", file=sys.stderr)
        return 2
    build = sys.argv[1]
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

    sources = []
    for d, _, fs in os.walk("src"):
        for f in fs:
            if f.endswith((".c", ".h")):
                sources.append(os.path.relpath(os.path.join(d, f), "src"))
    sources.sort()
    folders = sorted({folder_of(s) for s in sources if folder_of(s)})

    for s in sources:
        if folder_of(s) is None:
            offence(f"src/{s} is in no folder: each file belongs to a layer")
    for f in folders:
        if f not in RANK:
            offence(f"src/{f}/ is no layer of check-layers.py's LAYERS")
        if not os.path.exists(f"src/{f}/{f}.h"):
            offence(f"src/{f}/ has no header src/{f}/{f}.h")

    # includes, as file -> file edges (paths under src/)
    inc = {}
    for s in sources:
        text = open(os.path.join("src", s), errors="replace").read()
        targets = set()
        for name in INCLUDE_RX.findall(text):
            here = os.path.normpath(os.path.join(os.path.dirname(s), name))
            if os.path.exists(os.path.join("src", here)):
                targets.add(here)
            elif os.path.exists(os.path.join("src", name)):
                targets.add(os.path.normpath(name))
        inc[s] = targets

    # calls, as object -> object edges (paths under BUILD/obj, as .c)
    obj_root = os.path.join(build, "obj")
    objects = []
    for d, _, fs in os.walk(obj_root):
        for f in fs:
            if f.endswith(".o"):
                objects.append(os.path.relpath(os.path.join(d, f), obj_root))
    if not objects:
        offence(f"no objects in {obj_root} (build first)")
    defined, undefined = {}, {o: set() for o in objects}
    if objects:
        # one nm for all: each line "PATH:[VALUE] TYPE NAME"
        out = subprocess.run(["nm", "-A"] + [os.path.join(obj_root, o)
                                             for o in sorted(objects)],
                             capture_output=True, text=True, check=True)
        for line in out.stdout.splitlines():
            path, _, rest = line.partition(".o:")
            path += ".o"
            o = os.path.relpath(path, obj_root)
            p = rest.split()
            if len(p) == 2 and p[0] == "U":
                undefined[o].add(p[1])
            elif len(p) == 3 and p[1] in "TDBRV":
                defined[p[2]] = o

    def obj_folder(o):
        return GENERATED.get(o) or folder_of(o)

    calls = {}
    why = {}
    for o, syms in undefined.items():
        for sym in syms:
            t = defined.get(sym)
            if t is None or t == o:
                continue
            a, b = o[:-2] + ".c", t[:-2] + ".c"
            calls.setdefault(a, set()).add(b)
            why.setdefault((a, b), sym)

    # between folders: only downwards
    for kind, graph in (("includes", inc), ("calls", calls)):
        for a in sorted(graph):
            for b in sorted(graph[a]):
                fa = obj_folder(a) if kind == "calls" else folder_of(a)
                fb = obj_folder(b) if kind == "calls" else folder_of(b)
                if b.endswith(".c") and kind == "calls":
                    fa = GENERATED.get(a[:-2] + ".o", fa)
                    fb = GENERATED.get(b[:-2] + ".o", fb)
                if fa is None or fb is None or fa == fb:
                    continue
                if fa not in RANK or fb not in RANK:
                    continue
                if RANK[fb] >= RANK[fa]:
                    what = f" ({why[(a, b)]})" if kind == "calls" else ""
                    offence(f"src/{a} {kind} src/{b}{what}: {fb}/ is not "
                            f"below {fa}/")

    # inside a folder: at most the one cycle its header names
    for f in folders:
        header = f"src/{f}/{f}.h"
        named = []
        if os.path.exists(header):
            for m in CYCLE_RX.findall(open(header).read()):
                # the file names lead the line; the reason follows them
                files = []
                for w in m.split():
                    w = w.strip(",;:")
                    if not w.endswith((".c", ".h")):
                        break
                    files.append(w)
                named.append(sorted(set(files)))
        found = []
        for kind, graph in (("include", inc), ("call", calls)):
            sub = {a[len(f) + 1:]: {b[len(f) + 1:] for b in bs
                                    if folder_of(b) == f}
                   for a, bs in graph.items() if folder_of(a) == f}
            for comp in sccs(sub):
                found.append((kind, comp))
        for kind, comp in found:
            if comp not in named:
                offence(f"src/{f}/: {kind} cycle {' '.join(comp)} is not "
                        f"the one {header} names (\"cycle: ...\")")
        if len({tuple(c) for _, c in found}) > 1:
            offence(f"src/{f}/: more than one cycle")
        for comp in named:
            if comp not in [c for _, c in found]:
                offence(f"{header} names the cycle {' '.join(comp)}, which "
                        f"the code does not have")

    # headers used only inside their folder are named *_private.h
    users = {}
    for a, bs in inc.items():
        for b in bs:
            users.setdefault(b, set()).add(folder_of(a))
    outside = set()
    for top in ("tests", "plugins", "bench"):
        for d, _, fs in os.walk(top):
            if "node_modules" in d:
                continue
            for fn in fs:
                if fn.endswith((".c", ".h")):
                    text = open(os.path.join(d, fn), errors="replace").read()
                    outside.update(os.path.normpath(n)
                                   for n in INCLUDE_RX.findall(text))
    for s in sources:
        if not s.endswith(".h"):
            continue
        f = folder_of(s)
        if f is None or s == f"{f}/{f}.h" or s.endswith("_private.h"):
            continue
        if users.get(s, set()) <= {f} and s not in outside:
            offence(f"src/{s} is included only inside {f}/: name it "
                    f"{s[:-2]}_private.h")

    for line in offences:
        print(line, file=sys.stderr)
    if offences:
        print("check-layers: each layer reaches only the layers below it",
              file=sys.stderr)
        return 1
    print(f"check-layers: {len(folders)} layers, each reaching only those "
          "below it; no cycle a folder's header does not name")
    return 0


if __name__ == "__main__":
    sys.exit(main())
