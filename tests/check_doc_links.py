#!/usr/bin/python3
"""check_doc_links.py ROOT - every relative link in ROOT/README.md and
ROOT/docs/**/*.md must name a file or folder that exists, and a link with
#anchor into a Markdown file (or into the page itself) must name one of its
headings (GitHub's anchors: the heading's text lower-cased, punctuation other
than - and _ dropped, spaces made -, a repeated heading given -1, -2, ...).
Links inside code (fenced blocks, `spans`) and links with a scheme (https:,
mailto:) are not checked. Exit 1 naming each broken link (file:line), 0 when
all resolve; standard library only."""
import os
import re
import sys

LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose_lines(path):
    """(line number, text) of the lines outside code fences, inline code removed."""
    fence = None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = FENCE.match(line)
            if m:
                fence = None if fence == m.group(1) else (fence or m.group(1))
                continue
            if fence:
                continue
            yield n, re.sub(r"`+[^`]*`+", "", line.rstrip("\n"))


def slug(heading):
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen, out = {}, set()
        fence = None
        with open(path, encoding="utf-8") as f:
            for line in f:
                m = FENCE.match(line)
                if m:
                    fence = None if fence == m.group(1) else (fence or m.group(1))
                    continue
                h = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line) if not fence else None
                if h:
                    s = slug(h.group(1))
                    k = seen.get(s, 0)
                    seen[s] = k + 1
                    out.add(s if k == 0 else f"{s}-{k}")
        cache[path] = out
    return cache[path]


def pages(root):
    yield os.path.join(root, "README.md")
    for d, _, names in os.walk(os.path.join(root, "docs")):
        for n in sorted(names):
            if n.endswith(".md"):
                yield os.path.join(d, n)


def main(argv):
    if len(argv) != 1:
        print("usage: check_doc_links.py ROOT", file=sys.stderr)
        return 2
    root = os.path.abspath(argv[0])
    bad, nlinks = [], 0
    for page in pages(root):
        if not os.path.exists(page):
            bad.append(f"{os.path.relpath(page, root)}: missing")
            continue
        for n, line in prose_lines(page):
            for target in LINK.findall(line):
                if SCHEME.match(target):
                    continue
                nlinks += 1
                where = f"{os.path.relpath(page, root)}:{n}: ({target})"
                path, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) \
                    if path else page
                if not os.path.exists(dest):
                    bad.append(f"{where}: no such file {os.path.relpath(dest, root)}")
                elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                    bad.append(f"{where}: {os.path.relpath(dest, root)} has no heading "
                               f"#{anchor}")
    for b in bad:
        print(f"check_doc_links: {b}", file=sys.stderr)
    if bad:
        return 1
    print(f"check_doc_links: {nlinks} relative links resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
