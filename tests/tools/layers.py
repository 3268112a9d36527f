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

Usage: layers.py [--root DIR]   (DIR: the project root; default: this
repository). Exit 0 when the tree keeps its layers, 1 when it does not, 2 when
LAYERS itself is malformed. Python stdlib only.
"""

import argparse
import os
import re
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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "..", ".."))
    args = ap.parse_args(argv)
    root = os.path.normpath(args.root)
    try:
        problems, summary = check(root)
    except (LayersError, OSError) as e:
        print("layers: %s" % e, file=sys.stderr)
        return 2
    for p in problems:
        print(p, file=sys.stderr)
    print(summary if not problems else "layers: %d problems" % len(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
