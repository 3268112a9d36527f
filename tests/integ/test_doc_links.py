"""test_doc_links.py - the README is a front door, and every door of the docs opens.

README.md is written by hand: at most 250 lines, the manuals being pages of
docs/ that it links to. This checks, with no daemon (`make readme-check`
runs it alone, and `make test` with the rest):

- README.md is at most 250 lines, and links every page of docs/;
- every relative link of README.md, docs/*.md and proto/PROTOCOL.md, as
  `[text](path#anchor)` or `![alt](path)`, names a file or folder of the repo,
  and its anchor, if any, a heading of the Markdown file it names (GitHub's
  anchors: lowercase, punctuation dropped, blanks as `-`, `-N` for repeats);
- every path into a folder of sources only (docs/, proto/, conf/, systemd/,
  scripts/, mk/, .ci/) those files name in backticks exists (a `*` in it
  matches something);
- the README's second command is the test command `.ci/run` runs (CI runs
  "the README's test command");
- the conf the README's tour shows is a part of conf/admitd.conf, the conf
  its blocks run against: each of its sections is one of the example's,
  and each of its settings is one of that section's.

Stdlib only, and no harness: it runs before anything is built.
"""

import glob
import os
import re
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

README_MAX_LINES = 250


def doc_pages():
    return sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(REPO, "docs"))
                  if f.endswith(".md"))


def checked_files():
    return ["README.md"] + doc_pages() + ["proto/PROTOCOL.md"]


def read(path):
    with open(os.path.join(REPO, path)) as f:
        return f.read()


def prose(text):
    """The text outside fenced code blocks (a `[x](y)` in code is code)."""
    out, fence = [], False
    for line in text.split("\n"):
        if re.match(r"^\s*```", line):
            fence = not fence
            out.append("")
            continue
        out.append("" if fence else line)
    return "\n".join(out)


def anchors(text):
    """The anchors GitHub gives the headings of a Markdown text."""
    seen, out = {}, set()
    for line in prose(text).split("\n"):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))  # a link's text
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else "%s-%d" % (slug, n))
    return out


def links(text):
    """[(line, target)] of the Markdown links and images of a text."""
    out = []
    for i, line in enumerate(prose(text).split("\n"), 1):
        for m in re.finditer(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", line):
            out.append((i, m.group(1)))
    return out


def broken_links(path, text):
    """What is wrong with the relative links of one file (a list of strings)."""
    bad = []
    base = os.path.dirname(path)
    for line, target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        where = "%s:%d: %s" % (path, line, target)
        file_part, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(base, file_part)) if file_part else path
        if dest.startswith(".."):
            bad.append("%s: outside the repo" % where)
            continue
        if not os.path.exists(os.path.join(REPO, dest)):
            bad.append("%s: no such file" % where)
            continue
        if anchor:
            if not dest.endswith(".md"):
                bad.append("%s: an anchor into a file that is not Markdown" % where)
            elif anchor not in anchors(read(dest)):
                bad.append("%s: %s has no heading #%s" % (where, dest, anchor))
    return bad


# Folders that hold only sources: nothing in them is built, so a path into one
# that does not exist is a wrong path, not a build not run yet.
SOURCE_DIRS = ("docs", "proto", "conf", "systemd", "scripts", "mk", ".ci")


def missing_paths(path, text):
    """The paths into SOURCE_DIRS a file names in backticks that name nothing."""
    bad = []
    pat = r"`((?:%s)/[\w.*/-]*)`" % "|".join(re.escape(d) for d in SOURCE_DIRS)
    for m in re.finditer(pat, prose(text)):
        if not glob.glob(os.path.join(REPO, m.group(1))):
            bad.append("%s: `%s`: no such file" % (path, m.group(1)))
    return bad


def conf_sections(text):
    """{section: set of "key = value" lines} of an INI text (comments dropped)."""
    out, cur = {}, None
    for line in text.split("\n"):
        line = line.strip()
        if not line or line[0] in ";#":
            continue
        if line.startswith("["):
            cur = line
            out.setdefault(cur, set())
        else:
            out.setdefault(cur, set()).add(re.sub(r"\s*=\s*", " = ", line, count=1))
    return out


class DocLinksTest(unittest.TestCase):

    def test_readme_is_a_front_door(self):
        readme = read("README.md")
        n = len(readme.rstrip("\n").split("\n"))
        self.assertLessEqual(n, README_MAX_LINES, "README.md has %d lines" % n)
        # Every page of docs/ is reached from the front door.
        linked = {os.path.normpath(t.partition("#")[0]) for _, t in links(readme)}
        self.assertEqual([p for p in doc_pages() if p not in linked], [])

    def test_relative_links_lead_somewhere(self):
        bad = []
        for path in checked_files():
            text = read(path)
            bad += broken_links(path, text) + missing_paths(path, text)
        self.assertEqual(bad, [])

    def test_the_checks_catch_what_they_should(self):
        # The checks themselves: a wrong file, a wrong anchor, a wrong path fail.
        self.assertEqual(broken_links("README.md", "[x](docs/bench.md#the-picture)"), [])
        self.assertEqual(broken_links("docs/x.md", "[x](../proto/PROTOCOL.md#override)"), [])
        self.assertEqual(len(broken_links("README.md", "[x](docs/no-such-page.md)")), 1)
        self.assertEqual(len(broken_links("README.md", "![x](docs/bench.md#no-such-heading)")), 1)
        self.assertEqual(len(broken_links("docs/x.md", "[x](docs/bench.md)")), 1)  # docs/docs/
        self.assertEqual(broken_links("README.md", "```\n[x](nowhere.md)\n```"), [])
        self.assertEqual(len(missing_paths("README.md", "see `docs/nowhere.md`")), 1)
        self.assertEqual(len(missing_paths("README.md", "`conf/*.nothing` `.ci/run`")), 1)
        self.assertEqual(anchors("# A `b` c: d\n## A `b` c: d\n"), {"a-b-c-d", "a-b-c-d-1"})

    def test_readme_test_command_is_what_ci_runs(self):
        section = read("README.md").split("\n## Two commands\n", 1)[1].split("\n## ", 1)[0]
        block = re.search(r"```sh\n(.*?)\n```", section, re.S).group(1)
        commands = [x for x in block.split("\n") if x.strip() and not x.startswith("#")]
        self.assertEqual(commands[-1], "make test")
        self.assertIn("make test", read(".ci/run").split("\n"))

    def test_readme_tour_conf_is_the_example_conf(self):
        readme = read("README.md")
        tour = readme.split("\n## A 30-second tour\n", 1)[1].split("\n## ", 1)[0]
        blocks = re.findall(r"<!-- conf: (\S+) -->\n```ini\n(.*?)\n```", tour, re.S)
        self.assertEqual(len(blocks), 1, "one conf in the tour, marked with the conf it is from")
        path, shown = blocks[0]
        self.assertEqual(path, "conf/admitd.conf")
        example = conf_sections(read(path))
        shown = conf_sections(shown)
        self.assertGreaterEqual(len(shown), 3)
        for section, settings in shown.items():
            with self.subTest(section):
                self.assertIn(section, example)
                self.assertEqual(settings - example[section], set())


if __name__ == "__main__":
    unittest.main()
