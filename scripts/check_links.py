#!/usr/bin/env python3
"""Every local link of the built site points at a file that exists (the docs.build test runs this).

    check_links.py HTML_DIR

Reads every .html under HTML_DIR, takes each href= and src= that is not an absolute URL (scheme:),
a bare #anchor or javascript:, resolves it against the page's folder and checks that the file exists
inside HTML_DIR. Doxygen warns about unresolved @ref, but not about a Markdown link to a file it does
not copy (step_09's `attention.cu` was one): this catches those. Exit 1 with every broken link listed;
exit 2 (one line) when there is nothing to check (no folder, no page in it), a page cannot be read or the
output cannot be written, so that an error never reads as broken links, nor an empty folder as a pass.
"""
import argparse
import os
import re
import sys
from html.parser import HTMLParser
from urllib.parse import unquote, urlsplit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fl_results as flr  # noqa: E402  (run_main: a lost output or an unreadable page is one line, exit 2)


class Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.targets: list[str] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("href", "src") and value:
                self.targets.append(value)


def local_target(url: str) -> str | None:
    parts = urlsplit(url)
    if parts.scheme or parts.netloc or url.startswith("#"):
        return None
    return unquote(parts.path) or None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("html_dir", help="the built site's folder (Doxygen's HTML_DIR)")
    a = ap.parse_args()  # --help; a missing or extra argument is refused (exit 2)
    root = os.path.abspath(a.html_dir)
    if not os.path.isdir(root):
        print(f"check_links.py: {a.html_dir} is not a folder: no site to check", file=sys.stderr)
        return 2
    broken: list[str] = []
    pages = 0
    for folder, _, files in os.walk(root):
        for f in files:
            if not f.endswith(".html"):
                continue
            pages += 1
            page = os.path.join(folder, f)
            parser = Links()
            with open(page, encoding="utf-8", errors="replace") as fh:
                parser.feed(fh.read())
            for url in parser.targets:
                path = local_target(url)
                if path is None:
                    continue
                target = os.path.normpath(os.path.join(folder, path))
                if not (target.startswith(root + os.sep) or target == root) or not os.path.exists(target):
                    broken.append(f"{os.path.relpath(page, root)}: {url}")
    if not pages:  # "0 pages, every local link resolves" passed a site that was never built
        print(f"check_links.py: no .html page under {a.html_dir}: nothing to check", file=sys.stderr)
        return 2
    if broken:
        print(f"check_links: {len(broken)} broken local link(s) in {root}:")
        for b in sorted(set(broken)):
            print("  " + b)
        return 1
    print(f"check_links: {pages} pages, every local link resolves")
    return 0


if __name__ == "__main__":
    sys.exit(flr.run_main("check_links.py", main))
