#!/usr/bin/env python3
"""layers.py - check that the daemon's includes run down its layers, never up.

Reads daemon/LAYERS (the layers bottom to top, the folders of each, and the
known upward includes allowed for now) and every #include "..." of the .c
and .h files under daemon/. A header is found as the compiler finds it: next
to the including file, then in the layers' folders, then in proto/ (the wire
constants shared with the clients, below every layer). A file may include a
header of its own layer or of a layer below. It fails, with one
`file:line: what is wrong` line each, when a file:

- includes a header of a layer above its own that LAYERS does not allow;
- includes a header that is found nowhere, or under two folders at once;
- sits in a folder that LAYERS does not list;

and when an allowed upward include is no longer there (the debt was paid:
strike it from LAYERS, so it cannot come back unseen).

With --objects (after a build) it also reads the symbols of every daemon
object file (nm) and fails when a file calls, or takes the address of, a
function or table defined in a layer above its own (a lower layer reaches up
only through callbacks it declares: a pointer it is handed, never a name),
and when files call each other in a circle: the daemon's files, with an
arrow from each file to every file whose functions or tables it names, form
no cycle.

Usage: layers.py [--root DIR] [--objects]   (DIR: the project root; default: this
repository). Exit 0 when the tree keeps its layers, 1 when it does not, 2 when
LAYERS itself is malformed. Python stdlib only.
"""

import argparse
import collections
import os
import re
import subprocess
import sys

INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
OUTSIDE_DIRS = ("proto",)  # found on the include path, below every layer


class LayersError(Exception):
    """LAYERS itself is malformed: file:line: what."""


def parse_layers(path, shown="daemon/LAYERS"):
    """Return (layers, folder_layer, allowed); shown: path's name in messages.

    layers: names bottom to top; folder_layer: folder -> layer name;
    allowed: {(file, header): (line, reason)}.
    """
    layers, folder_layer, allowed = [], {}, {}
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            words = line.split()
            where = "%s:%d" % (shown, n)
            if words[0] == "layer":
                if len(words) < 3:
                    raise LayersError("%s: 'layer NAME FOLDER...' expected" % where)
                name = words[1]
                if name in layers:
                    raise LayersError("%s: layer %s listed twice" % (where, name))
                layers.append(name)
                for folder in words[2:]:
                    folder = folder.rstrip("/")
                    if folder in folder_layer:
                        raise LayersError("%s: folder %s is already in layer %s"
                                          % (where, folder, folder_layer[folder]))
                    folder_layer[folder] = name
            elif words[0] == "allow":
                reason = line.split("--", 1)[1].strip() if "--" in line else ""
                words = line.split("--", 1)[0].split()
                if len(words) != 3 or not reason:
                    raise LayersError("%s: 'allow FILE HEADER -- reason' expected" % where)
                allowed[(words[1], words[2])] = (n, reason)
            else:
                raise LayersError("%s: unknown entry %r" % (where, words[0]))
    if not layers:
        raise LayersError("%s: no layer listed" % shown)
    return layers, folder_layer, allowed


def daemon_files(root):
    """Every .c/.h under daemon/, as paths relative to root, sorted."""
    out = []
    for d, _dirs, files in os.walk(os.path.join(root, "daemon")):
        for name in files:
            if name.endswith((".c", ".h")):
                out.append(os.path.relpath(os.path.join(d, name), root))
    return sorted(out)


def check(root):
    """Return (problems, summary): problems as `file:line: what` strings."""
    layers_path = os.path.join(root, "daemon", "LAYERS")
    layers, folder_layer, allowed = parse_layers(layers_path)
    rank = {name: i for i, name in enumerate(layers)}
    problems = []
    # Where each header name lives (headers are included by name).
    by_name = {}
    for folder in list(folder_layer) + list(OUTSIDE_DIRS):
        full = os.path.join(root, folder)
        if not os.path.isdir(full):
            problems.append("daemon/LAYERS: folder %s does not exist" % folder)
            continue
        for name in sorted(os.listdir(full)):
            if name.endswith(".h"):
                by_name.setdefault(name, []).append(folder)
    seen_allowed = set()
    nincludes = 0
    files = daemon_files(root)
    for rel in files:
        folder = os.path.dirname(rel)
        own = folder_layer.get(folder)
        if own is None:
            problems.append("%s:1: folder %s is in no layer of daemon/LAYERS" % (rel, folder))
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
        for n, text in enumerate(lines, 1):
            m = INCLUDE_RE.match(text)
            if not m:
                continue
            nincludes += 1
            inc = m.group(1)
            local = os.path.normpath(os.path.join(folder, inc))
            if os.path.isfile(os.path.join(root, local)):
                target = os.path.dirname(local)
            else:
                homes = by_name.get(inc, [])
                if not homes:
                    problems.append("%s:%d: includes \"%s\", found in no layer's folder"
                                    % (rel, n, inc))
                    continue
                if len(homes) > 1:
                    problems.append("%s:%d: includes \"%s\", which is in %s: ambiguous"
                                    % (rel, n, inc, " and ".join(homes)))
                    continue
                target = homes[0]
            if target in OUTSIDE_DIRS:
                continue
            theirs = folder_layer.get(target)
            if theirs is None:
                problems.append("%s:%d: includes \"%s\" from %s, which is in no layer"
                                % (rel, n, inc, target))
                continue
            if rank[theirs] <= rank[own]:
                continue
            key = (rel, os.path.basename(inc))
            if key in allowed:
                seen_allowed.add(key)
                continue
            problems.append("%s:%d: includes \"%s\" of layer %s, above its own layer %s"
                            " (a lower layer reaches up only through callbacks it declares)"
                            % (rel, n, inc, theirs, own))
    for key, (n, _reason) in sorted(allowed.items(), key=lambda kv: kv[1][0]):
        if key not in seen_allowed:
            problems.append("daemon/LAYERS:%d: allowed upward include %s -> %s is gone: strike it"
                            % (n, key[0], key[1]))
    summary = "layers: %d layers, %d files, %d includes, %d allowed upward includes (debt)" % (
        len(layers), len(files), nincludes, len(allowed))
    return problems, summary


def object_arrows(root, files):
    """Arrows between the daemon's .c files: {a: {b: set(names)}}.

    A calls (or takes the address of) a function or table B's object
    defines. Objects are read with nm.
    """
    defs, undef = {}, collections.defaultdict(set)
    for rel in files:
        if not rel.endswith(".c"):
            continue
        obj = os.path.join(root, rel[:-2] + ".o")
        if not os.path.isfile(obj):
            continue
        out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            w = line.split()
            if len(w) == 3 and w[1] in "TDBR":
                defs[w[2]] = rel
            elif len(w) == 2 and w[0] == "U":
                undef[rel].add(w[1])
    arrows = collections.defaultdict(lambda: collections.defaultdict(set))
    for rel, names in undef.items():
        for name in names:
            home = defs.get(name)
            if home is not None and home != rel:
                arrows[rel][home].add(name)
    return arrows


def cycles(arrows):
    """The strongly connected parts of more than one file, each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(arrows.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                out.append(sorted(part))

    sys.setrecursionlimit(10000)
    for v in sorted(arrows):
        if v not in index:
            visit(v)
    return out


def check_objects(root):
    """Problems of calls: upward calls by name, and cycles among files."""
    layers, folder_layer, _allowed = parse_layers(os.path.join(root, "daemon", "LAYERS"))
    rank = {name: i for i, name in enumerate(layers)}
    files = daemon_files(root)
    arrows = object_arrows(root, files)
    problems = []
    nobj = sum(1 for f in files if f.endswith(".c") and os.path.isfile(
        os.path.join(root, f[:-2] + ".o")))
    if nobj == 0:
        return ["daemon: no object file to read: build first (make)"], 0
    for a in sorted(arrows):
        la = folder_layer.get(os.path.dirname(a))
        for b in sorted(arrows[a]):
            lb = folder_layer.get(os.path.dirname(b))
            if la is None or lb is None or rank[lb] <= rank[la]:
                continue
            problems.append("%s: calls %s of %s, layer %s above its own layer %s (a lower "
                            "layer reaches up only through callbacks it declares)"
                            % (a, ", ".join(sorted(arrows[a][b])), b, lb, la))
    for part in cycles(arrows):
        ties = []
        for a in part:
            for b in part:
                if b in arrows.get(a, {}):
                    ties.append("%s -> %s (%s)" % (os.path.basename(a), os.path.basename(b),
                                                   ", ".join(sorted(arrows[a][b]))))
        problems.append("%s: files in a cycle: %s" % (part[0], "; ".join(ties)))
    return problems, nobj


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "..", ".."))
    ap.add_argument("--objects", action="store_true",
                    help="also check the calls and cycles among the built object files")
    args = ap.parse_args(argv)
    root = os.path.normpath(args.root)
    try:
        problems, summary = check(root)
        if args.objects:
            more, nobj = check_objects(root)
            problems += more
            summary += ", %d objects: no upward call, no cycle" % nobj
    except (LayersError, OSError, subprocess.CalledProcessError) as e:
        print("layers: %s" % e, file=sys.stderr)
        return 2
    for p in problems:
        print(p, file=sys.stderr)
    print(summary if not problems else "layers: %d problems" % len(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
