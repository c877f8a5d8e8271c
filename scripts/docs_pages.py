#!/usr/bin/env python3
"""flashladder — scripts/docs_pages.py: the Markdown pages of the Doxygen site, generated at build time.

    scripts/docs_pages.py --root <repository> --out <build dir>/pages

Writes into --out (never into the sources):
  mainpage.md          README.md, as the site's front page
  ladder.md            the ladder: one row per step of steps/ladder.cpp, each linking its page
  step_<NN>.md         one page per step: its line of the list, its README.md, its measured effect from
                       docs/results/*.jsonl, and the diff of its source against the step before, made here
                       with `diff -u` from the sources (never pasted)
  theory.md            the index of the theory pages
  theory_<name>.md     each docs/<name>.md, with the measured ceilings and the glossary's code locations
                       filled in from docs/results and the sources

Each page ends with a comment that marks it as written here: a page that went away is removed from
--out only when it carries it, and a file of --out that is not such a page is never overwritten (refused).

The sources are written for GitHub (math between $…$ and $$…$$, relative links); this script turns them
into Doxygen's dialect (\\f$…\\f$, \\f[…\\f], @ref links) so the same text reads well in both places.
Standard library only.
"""
from __future__ import annotations

import argparse
import html
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fl_results as flr  # noqa: E402
import diff_table  # noqa: E402

# The theory pages, in reading order: docs/<name>.md.
THEORY = ["memory_and_roofline", "io_complexity", "online_softmax", "fa1_vs_fa2", "backward", "conventions",
          "glossary", "golden_sets", "variants", "machine_code"]
NOT_YET = "not yet measured"

# ------------------------------------------------------------------------------------------------------
# GitHub Markdown -> Doxygen Markdown
# ------------------------------------------------------------------------------------------------------
HTML_TAGS = {"a", "b", "i", "em", "strong", "code", "sup", "sub", "br", "img", "div", "span", "p", "table",
             "tr", "td", "th", "thead", "tbody", "pre", "kbd", "ul", "ol", "li", "hr", "details", "summary",
             "small", "center", "blockquote", "dl", "dt", "dd", "caption", "u", "s", "del", "ins", "tt"}


class Links:
    """Maps a link target in a source page (relative to that page's folder) to one Doxygen understands."""

    def __init__(self, root: str, steps: list[flr.Step]):
        self.root = root
        self.step_by_folder = {s.folder: s for s in steps}

    def rewrite(self, target: str, page_dir: str) -> str | None:
        """None: no page or file of the site; the caller shows the path as code instead of a dead link."""
        if re.match(r"^[a-z]+:", target) or target.startswith("#") or target.startswith("@ref"):
            return target
        path, _, anchor = target.partition("#")
        rel = os.path.normpath(os.path.join(page_dir, path)).replace(os.sep, "/")
        parts = rel.split("/")
        if rel in ("README.md", "."):
            return "@ref index"
        if parts[0] == "steps" and len(parts) >= 2 and parts[1] in self.step_by_folder:
            if len(parts) == 2 or parts[2] == "README.md":
                return f"@ref step_{self.step_by_folder[parts[1]].number}"
        if parts[0] == "docs" and len(parts) == 2 and parts[1].endswith(".md"):
            name = parts[1][:-3]
            if name in THEORY:
                return f"@ref theory_{name}" + (f"#{anchor}" if anchor else "")
        if re.fullmatch(r"notebooks/[\w-]+\.ipynb", rel) and os.path.exists(os.path.join(self.root, rel)):
            return rel  # build_docs.cmake copies notebooks/*.ipynb into the site's notebooks/
        if rel.startswith("docs/img/") and os.path.exists(os.path.join(self.root, rel)):
            return os.path.basename(rel)  # IMAGE_PATH holds docs/img; Doxygen copies it by its name
        if os.path.isfile(os.path.join(self.root, rel)) and re.search(r"\.(hpp|cpp|cu|cuh)$", rel):
            return f"@ref {rel}"  # the file's page (FULL_PATH_NAMES: a file is known by its path)
        return None


def _convert_inline(text: str, links: Links, page_dir: str) -> str:
    """One stretch of prose (no code spans, no math): escapes what Doxygen would read as commands or
    unknown HTML, and rewrites links."""
    text = re.sub(r"(?<![\\\w])@(?=\w)", r"\\@", text)                 # @word would be a command
    text = re.sub(r"\\(?=[A-Za-z])", r"\\\\", text)                    # \word would be a command

    def tag(m):
        name = m.group(2).lower()
        return m.group(0) if name in HTML_TAGS else "&lt;" + m.group(1) + m.group(2)
    text = re.sub(r"<(/?)([A-Za-z][\w-]*)", tag, text)

    return re.sub(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)",
                  lambda m: _link(m.group(1), m.group(2), m.group(3).strip(), links, page_dir), text)


def _link(bang: str, label: str, target: str, links: Links, page_dir: str) -> str:
    new = links.rewrite(target, page_dir)
    if new is None:  # not part of the site: name the file instead of leaving a dead link
        if bang:
            return f"*(image {target} not found)*"
        rel = os.path.normpath(os.path.join(page_dir, target)).replace(os.sep, "/")
        return f"`{rel}`" if label.strip("`") in (rel, os.path.basename(rel)) else f"{label} (`{rel}`)"
    return f"{bang}[{label}]({new})"


def _split_code_spans(line: str):
    """Yields (is_code, text) pieces of a line, code spans being `…` (any number of backticks)."""
    pos = 0
    for m in re.finditer(r"(`+)(.+?)\1", line):
        if m.start() > pos:
            yield False, line[pos:m.start()]
        yield True, m.group(0)
        pos = m.end()
    if pos < len(line):
        yield False, line[pos:]


def _inline_math(text: str) -> list[tuple[bool, str]]:
    """Splits prose into (is_math, text) at $…$ pairs: an opening $ followed by a non-space, a closing $
    preceded by a non-space and not followed by a digit (so "$5 and $6" stays prose)."""
    out, pos = [], 0
    for m in re.finditer(r"(?<![\\$])\$(?=[^\s$])(.+?)(?<=[^\s\\])\$(?!\d)", text):
        out.append((False, text[pos:m.start()]))
        out.append((True, m.group(1)))
        pos = m.end()
    out.append((False, text[pos:]))
    return out


def to_doxygen(md: str, links: Links, page_dir: str, label: str | None = None, demote: int = 0,
               drop_title: bool = False) -> str:
    """GitHub Markdown to Doxygen Markdown. label: anchor for the first level-1 heading (the page's id);
    demote: push headings down this many levels; drop_title: remove the first level-1 heading."""
    out, fence, display, titled = [], None, None, False
    lines = md.splitlines()
    k = 0
    while k < len(lines):
        line = lines[k]
        k += 1
        stripped = line.strip()
        # fenced code: copied as is
        fm = re.match(r"^\s*(```+|~~~+)\s*([\w+-]*)", line)
        if fence is None and fm and display is None:
            fence = fm.group(1)
            lang = fm.group(2)
            # Doxygen highlights by file extension; languages it does not know are shown unhighlighted.
            out.append(fence + ({"c++": "cpp", "cuda": "cpp", "cu": "cpp", "python": "py"}.get(lang, lang)
                                if lang else ""))
            continue
        if fence is not None:
            out.append(line)
            if stripped.startswith(fence) and stripped.strip("`~") == "":
                fence = None
            continue
        # display math: $$ … $$ over one or several lines
        if display is not None:
            if stripped.endswith("$$"):
                display.append(stripped[:-2])
                out.append("\\f[" + "\n".join(display).strip() + "\\f]")
                display = None
            else:
                display.append(line)
            continue
        if stripped.startswith("$$"):
            body = stripped[2:]
            if body.endswith("$$") and len(body) >= 2:
                out.append("\\f[" + body[:-2].strip() + "\\f]")
            else:
                display = [body]
            continue
        # headings
        hm = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if hm:
            level, title = len(hm.group(1)), _plain_math(hm.group(2))
            if level == 1 and not titled:
                titled = True
                if drop_title:
                    continue
                if label:
                    line = f"# {_convert_prose(title, links, page_dir)} {{#{label}}}"
                    out.append(line)
                    continue
            level = min(6, level + demote)
            out.append("#" * level + " " + _convert_prose(title, links, page_dir))
            continue
        if stripped.startswith("<!--") and stripped.endswith("-->"):
            out.append(line)
            continue
        # Inline math that runs onto the next line of the paragraph: join the lines, so the pair of $
        # is converted as one formula.
        while (_unpaired_dollar(line) and k < len(lines) and lines[k].strip()
               and not lines[k].lstrip().startswith(("#", "```", "~~~", "$$", "|"))):
            line = line.rstrip() + " " + lines[k].strip()
            k += 1
        out.append(_convert_prose(line, links, page_dir))
    if display is not None:
        raise ValueError(f"unterminated $$ display math in a page from {page_dir or '.'}")
    return "\n".join(out) + "\n"


TEX_TEXT = {r"\circ": "∘", r"\ell": "ℓ", r"\tau": "τ", r"\cdot": "·", r"\times": "×", r"\le": "≤",
            r"\ge": "≥", r"\infty": "∞", r"\top": "ᵀ", r"\to": "→", r"\approx": "≈", r"\Theta": "Θ"}


def _plain_math(title: str) -> str:
    """Headings become page titles and tree entries, where Doxygen renders no formulas: there, $…$ is
    written as plain text (a few TeX symbols as Unicode, the rest of the markup dropped)."""
    def plain(m):
        t = m.group(1)
        for k, v in TEX_TEXT.items():
            t = re.sub(re.escape(k) + r"(?![A-Za-z])", v, t)
        sup = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
        t = re.sub(r"\^\{?(\d+)\}?", lambda d: d.group(1).translate(sup), t)
        t = re.sub(r"\\[A-Za-z]+", "", t).replace("{", "").replace("}", "").replace("-", "−")
        return t
    return re.sub(r"(?<!\\)\$(.+?)\$", plain, title)


def _unpaired_dollar(line: str) -> bool:
    """True when the prose of a line (code spans aside) holds an odd number of single $."""
    n = 0
    for is_code, text in _split_code_spans(line):
        if not is_code:
            n += len(re.findall(r"(?<![\\$])\$(?!\$)", text))
    return n % 2 == 1


# A link whose label is a code span ([`attention.cu`](attention.cu)): rewritten whole, before the line
# is cut at code spans, which would leave "[" and "](attention.cu)" in separate pieces and the
# relative target unrewritten (a dead link on the site).
CODE_LABEL_LINK = re.compile(r"(!?)\[(`+[^`\]]+?`+)\]\(([^)\s]+)\)")


def _convert_prose(line: str, links: Links, page_dir: str) -> str:
    out, pos = [], 0
    for m in CODE_LABEL_LINK.finditer(line):
        out.append(_convert_prose_pieces(line[pos:m.start()], links, page_dir))
        out.append(_link(m.group(1), m.group(2), m.group(3), links, page_dir))
        pos = m.end()
    out.append(_convert_prose_pieces(line[pos:], links, page_dir))
    return "".join(out)


def _convert_prose_pieces(line: str, links: Links, page_dir: str) -> str:
    pieces = []
    for is_code, text in _split_code_spans(line):
        if is_code:
            pieces.append(text)
            continue
        for is_math, t in _inline_math(text):
            pieces.append(f"\\f${t}\\f$" if is_math else _convert_inline(t, links, page_dir))
    return "".join(pieces)


# ------------------------------------------------------------------------------------------------------
# Pieces of pages
# ------------------------------------------------------------------------------------------------------
def diff_html(old: str, new: str, old_label: str, new_label: str) -> tuple[str, int, int]:
    """`diff -u` of two sources, as coloured HTML; returns (html, lines added, lines removed)."""
    r = flr.diff_u(old, new, (old_label, new_label))  # the lab marks (// LAB:…) left out
    if r.returncode not in (0, 1):
        raise RuntimeError(f"diff -u {old} {new} failed: {r.stderr.strip()}")
    rows, added, removed = [], 0, 0
    for ln in r.stdout.splitlines():
        if ln.startswith("+++") or ln.startswith("---"):
            cls = "fl-diff-file"
        elif ln.startswith("@@"):
            cls = "fl-diff-hunk"
        elif ln.startswith("+"):
            cls, added = "fl-diff-add", added + 1
        elif ln.startswith("-"):
            cls, removed = "fl-diff-del", removed + 1
        else:
            cls = "fl-diff-ctx"
        rows.append(f'<span class="{cls}">{html.escape(ln) or " "}</span>')
    # The spans are blocks (one per line, coloured across the whole width): no newline between them,
    # or <pre> would show each as two lines.
    body = "".join(rows) if rows else '<span class="fl-diff-ctx">(the two sources are identical)</span>'
    return ('\\htmlonly[block]\n<div class="fl-diff"><pre>' + body + "</pre></div>\n\\endhtmlonly\n",
            added, removed)


def fmt(x: float, unit: str = "") -> str:
    if x is None:
        return "–"
    s = f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}" if abs(x) >= 0.1 else f"{x:.3g}"
    return s + unit


def shape_text(r: dict) -> str:
    return (f"{r.get('dtype')}, B = {r.get('B')}, H = {r.get('H')}"
            + (f", H_kv = {r.get('H_kv')}" if r.get("H_kv") != r.get("H") else "")
            + (f", N = {r.get('Nq')}" if r.get("Nq") == r.get("Nk") else f", Nq = {r.get('Nq')}, Nk = {r.get('Nk')}")
            + f", d = {r.get('d')}, {'causal' if r.get('causal') else 'non-causal'}")


def measured_section(step: flr.Step, prev: flr.Step | None, steps, records, root: str) -> str:
    out = ["## Measured effect", ""]
    view = flr.headline_view(steps, records)
    if step.where == "cpu":
        rec = view.cpu_rows.get(step.folder)
        prev_rec = view.cpu_rows.get(prev.folder) if prev else None
    else:
        rec = view.rows.get(step.folder)
        prev_rec = view.rows.get(prev.folder) if prev and prev.where == "gpu" else None
    if rec is None:
        what = (f"Headline problem ({flr.problem_text()})" if step.where == "gpu" else
                f"Headline shape ({flr.problem_text().replace('fp16, ', '')}; fp32, the CPU steps' storage type)")
        out.append(f"{what}: **{NOT_YET}** — `docs/results/` holds no record of this step at that shape yet.")
    else:
        ref = view.rows.get("torch_flash") if step.where == "gpu" else None
        out += ["| measured | |", "|---|---|",
                f"| device | {rec.get('device')}" + (f" ({rec.get('sm_count')} SMs, CUDA {rec.get('cuda')}, driver "
                                                      f"{rec.get('driver')})" if rec.get("sm_count") else "") + " |",
                f"| problem | {shape_text(rec)}, forward |",
                f"| median (min, p90) | {fmt(rec['median_ms'])} ms ({fmt(rec.get('min_ms'))}, "
                f"{fmt(rec.get('p90_ms'))}) |",
                f"| TFLOP/s | {fmt(rec['tflops'])} |"]
        if prev_rec:
            out.append(f"| against {prev.folder} | {prev_rec['median_ms'] / rec['median_ms']:.2f}× faster |")
        if ref:
            out.append(f"| of FlashAttention-2 (torch_flash, same GPU and shape) | "
                       f"{100 * ref['median_ms'] / rec['median_ms']:.0f}% |")
        else:
            out.append(f"| of FlashAttention-2 (torch_flash) | {'– (a CPU step)' if step.where == 'cpu' else NOT_YET} |")
        tol = rec.get("tol_used")
        out.append(f"| error, as a fraction of the tolerance | {'unchecked' if tol is None else f'{100 * tol:.0f}%'} |")
        if "extra_bytes" in rec:
            out.append(f"| extra device memory | {rec['extra_bytes'] / 2**20:.1f} MiB |")
        out.append(f"| from | commit {rec.get('commit')}, {rec.get('date')}, `{rec.get('_file')}` |")
        out += ["", flr.FLOP_CONVENTION + "."]
    # The FA2 sweep on the same device, when it was run for this step.
    if view.device and step.where == "gpu":
        sweep = [r for r in records if r.get("impl") == step.folder and r.get("device") == view.device
                 and r.get("pass") == "fwd" and r.get("dtype") == "fp16" and r.get("H") == 2048 // max(1, r.get("d", 1))
                 and r.get("B", 0) * r.get("Nq", 0) == 16384 and r.get("Nq") == r.get("Nk") and not flr.is_variant(r)]
        if sweep:
            newest = {}
            for r in sorted(sweep, key=lambda r: (str(r.get("date")), r["_file"], r["_line"])):
                newest[(r["d"], bool(r["causal"]), r["Nq"])] = r
            cols = sorted({(d, c) for (d, c, _) in newest})
            ns = sorted({n for (_, _, n) in newest})
            out += ["", f"The FA2 paper's sweep on {view.device} (fp16, hidden 2048, B·N = 16384), TFLOP/s:", "",
                    "| N | " + " | ".join(f"d = {d}{', causal' if c else ''}" for d, c in cols) + " |",
                    "|--:|" + "--:|" * len(cols)]
            for n in ns:
                out.append(f"| {n} | " + " | ".join(fmt(newest[(d, c, n)]["tflops"]) if (d, c, n) in newest else "–"
                                                    for d, c in cols) + " |")
    img = f"step_{step.folder}.png"
    if os.path.exists(os.path.join(root, "docs", "img", img)):
        # A step timed by compare_torch.py's decode sweep has notebooks/results.ipynb's decode figure there.
        if any(r.get("suite") == "compare_torch_decode" and r.get("impl") == step.folder for r in records):
            out += ["", f"![K+V bytes per second against the cache length (decode, N_q = 1): {step.folder}, the "
                        f"decode step before it, PyTorch's FlashAttention-2 and cuDNN, a kernel that only reads K "
                        f"and V, and the device-to-device copy of the same run]({img})"]
        else:
            out += ["", f"![TFLOP/s against N: {step.folder}, the step before it, and PyTorch's FlashAttention-2 "
                        f"and cuDNN]({img})"]
    return "\n".join(out) + "\n"


def step_page(i: int, steps, records, links: Links, root: str) -> str:
    s = steps[i]
    prev = steps[i - 1] if i > 0 else None
    nxt = steps[i + 1] if i + 1 < len(steps) else None
    src = s.source(root)
    rel = os.path.relpath(src, root) if src else None
    nav = []
    if prev:
        nav.append(f"previous: @ref step_{prev.number} \"{prev.folder}\"")
    nav.append("@ref ladder \"the ladder\"")
    if nxt:
        nav.append(f"next: @ref step_{nxt.number} \"{nxt.folder}\"")
    out = [f"# Step {s.folder} {{#step_{s.number}}}", "",
           " · ".join(nav), "",
           f"**The one idea:** {_convert_prose(s.change, links, 'steps')}", "",
           "| the step | |", "|---|---|",
           f"| runs on | {s.where.upper()} |",
           f"| storage types | {', '.join(s.dtypes)} |",
           f"| head dims | {s.head_dims_text()} |",
           f"| backward pass | {'yes' if s.backward else 'no'} |",
           f"| source | {('@ref ' + rel) if rel else NOT_YET.replace('measured', 'written')} |", ""]
    readme = os.path.join(root, "steps", s.folder, "README.md")
    out.append("## The step, from its README")
    out.append("")
    if os.path.exists(readme):
        out.append(to_doxygen(flr.read_text(readme), links, f"steps/{s.folder}", demote=1, drop_title=True))
    else:
        out += [f"`steps/{s.folder}/README.md` is not written yet.", ""]
    out.append(measured_section(s, prev, steps, records, root))
    base = next((x for x in steps if x.number == s.base), None)  # the step its diff is against
    out.append(f"## The diff against {base.folder if base else 'the step before'}")
    out.append("")
    if base is None:
        out.append("The first step: there is nothing before it. Its whole source:")
        out.append("")
        if rel:
            out.append(f"\\include{{lineno}} {rel}")
    else:
        bsrc = base.source(root)
        if not src or not bsrc:
            missing = [f"`steps/{x.folder}/`" for x, p in ((base, bsrc), (s, src)) if not p]
            out.append(f"Not available yet: no source in {' and '.join(missing)}.")
        elif s.diff_whole(steps):
            body, added, removed = diff_html(os.devnull, src, "(nothing: the backward is new)", rel)
            out.append(f"This step adds the backward and runs {base.folder}'s forward as its own, so its source "
                       f"is the backward alone, shown whole (the same as `flashladder diff {s.number}`): "
                       f"{added} lines.")
            out.append("")
            out.append(body)
        else:
            body, added, removed = diff_html(bsrc, src, os.path.relpath(bsrc, root), rel)
            out.append(f"Made at build time by `diff -u {os.path.relpath(bsrc, root)} {rel}` "
                       f"(the same as `flashladder diff {s.number}`): {added} lines added, {removed} removed.")
            out.append("")
            out.append(body)
    return "\n".join(out) + "\n"


def ladder_page(steps, root: str) -> str:
    out = ["# The ladder {#ladder}", "",
           "Every step is a working implementation, checked against the fp64 oracle and timed. Each adds one "
           "idea to the step before it; its page shows the idea, the step's README, what it measured, and "
           "its source diffed against the step before.", "",
           "| step | runs on | types | head dims | the one idea |", "|---|---|---|---|---|"]
    for s in steps:
        src = "" if s.source(root) else " *(source not written yet)*"
        out.append(f"| @ref step_{s.number} \"{s.folder}\"{src} | {s.where.upper()} | {', '.join(s.dtypes)} | "
                   f"{s.head_dims_text()} | {s.change} |")
    out.append("")
    # The changed lines of every step against its base: scripts/diff_table.py's table (docs/diff_lines.md).
    table = diff_table.table(root).split("\n")
    body = "\n".join(ln for ln in table[1:] if not ln.startswith("<!--")).strip()
    out += ["## Changed lines per step", "", body, ""]
    out += [f"- @subpage step_{s.number}" for s in steps]
    return "\n".join(out) + "\n"


def ceilings_block(records) -> str:
    """The measured ceilings of the GPU with the newest records (cuBLAS GEMM rate per storage type, and a
    device copy's bandwidth when a record of one exists)."""
    gpu = [r for r in records if flr.is_gpu_record(r)]
    if not gpu:
        return (f"**This GPU's ceilings: {NOT_YET}.** `docs/results/` holds no GPU record yet; once the "
                "benchmark has run, the docs build writes here the cuBLAS GEMM rate it measured (`cublas_gemm` "
                "records) and, when recorded, the device-memory bandwidth.\n")
    newest = max(gpu, key=lambda r: (str(r.get("date")), r["_file"], r["_line"]))
    dev = newest.get("device")
    out = [f"Measured on **{dev}** ({newest.get('sm_count')} SMs, CUDA {newest.get('cuda')}):", "",
           "| ceiling | value | from |", "|---|--:|---|"]
    gemm = {}
    for r in sorted((r for r in gpu if r.get("device") == dev and r.get("impl") == "cublas_gemm"),
                    key=lambda r: (str(r.get("date")), r["_file"], r["_line"])):
        gemm[r.get("dtype")] = r
    for dt in ("fp16", "bf16", "fp32"):
        if dt in gemm:
            r = gemm[dt]
            out.append(f"| matrix-product rate, {dt} (cuBLAS, n = {r.get('Nq')}) | {fmt(r['tflops'])} TFLOP/s | "
                       f"commit {r.get('commit')}, {r.get('date')} |")
    if not gemm:
        out.append(f"| matrix-product rate (cuBLAS) | {NOT_YET} | – |")
    bw = [r for r in gpu if r.get("device") == dev and "gbps" in r]
    if bw:
        r = max(bw, key=lambda r: (str(r.get("date")), r["_file"], r["_line"]))
        out.append(f"| device-memory bandwidth ({r.get('impl')}) | {fmt(r['gbps'])} GB/s | "
                   f"commit {r.get('commit')}, {r.get('date')} |")
        if "fp16" in gemm:
            ridge = gemm["fp16"]["tflops"] * 1e12 / (r["gbps"] * 1e9)
            out.append(f"| ridge point, fp16 (rate ÷ bandwidth) | {ridge:.0f} FLOP/byte | derived from the two above |")
    else:
        out.append(f"| device-memory bandwidth | {NOT_YET} | no record with a `gbps` field yet |")
    out.append("")
    return "\n".join(out) + "\n"


def ladder_effect(folders: list, records) -> str:
    """The headline rows of a few neighbouring steps, each with its speed-up over the row above."""
    view = flr.headline_view([], records)
    out = [f"| step | median ms | TFLOP/s | speed-up over the row above |", "|---|--:|--:|--:|"]
    prev = None
    for f in folders:
        r = view.rows.get(f)
        if r is None:
            out.append(f"| @ref step_{f.split('_')[0]} \"{f}\" | {NOT_YET} | {NOT_YET} | – |")
        else:
            up = f"{prev['median_ms'] / r['median_ms']:.2f}×" if prev else "–"
            out.append(f"| @ref step_{f.split('_')[0]} \"{f}\" | {fmt(r['median_ms'])} | {fmt(r['tflops'])} | {up} |")
        prev = r
    if view.device:
        out += ["", f"On {view.device}, {flr.problem_text()}; {flr.FLOP_CONVENTION}."]
    else:
        out += ["", f"No GPU record of the headline problem ({flr.problem_text()}) yet: {NOT_YET}."]
    return "\n".join(out) + "\n"


IDENT = re.compile(r"`([A-Za-z_][\w]*)`")


def glossary_locations(root: str, idents: list[str]) -> str:
    """For each identifier of the glossary, the source files (steps, common, reference) where it occurs
    as a whole word, with the line numbers: found in the sources at build time, so it does not drift."""
    files = []
    for top in ("steps", "common", "reference"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for n in sorted(names):
                if re.search(r"\.(hpp|cpp|cu|cuh)$", n):
                    files.append(os.path.join(dirpath, n))
    # The steps first (where the papers' symbols become kernels), then the oracle, then the plumbing.
    order = {"steps": 0, "reference": 1, "common": 2}
    files.sort(key=lambda p: (order[os.path.relpath(p, root).split(os.sep)[0]], p))
    texts = {}
    for p in files:
        with open(p, encoding="utf-8", errors="replace") as f:
            texts[os.path.relpath(p, root)] = f.read().splitlines()
    out = ["| identifier | where it occurs now (file: first lines) |", "|---|---|"]
    for ident in idents:
        pat = re.compile(r"(?<!\w)" + re.escape(ident) + r"(?!\w)")
        hits = []
        for rel, lines in texts.items():
            nums = [i + 1 for i, ln in enumerate(lines) if pat.search(ln)]
            if nums:
                more = f" … ({len(nums)} lines)" if len(nums) > 4 else ""
                hits.append(f"@ref {rel} \"{rel}\": {', '.join(map(str, nums[:4]))}{more}")
        shown = hits[:8] + ([f"and {len(hits) - 8} more files"] if len(hits) > 8 else [])
        out.append(f"| `{ident}` | " + ("<br>".join(shown) if shown else "not in the code yet") + " |")
    return "\n".join(out) + "\n"


def theory_page(name: str, links: Links, root: str, records) -> str:
    path = os.path.join(root, "docs", name + ".md")
    text = to_doxygen(flr.read_text(path), links, "docs", label=f"theory_{name}")
    if "<!-- fl:measured-ceilings -->" in text:
        text = text.replace("<!-- fl:measured-ceilings -->", ceilings_block(records))
    if "<!-- fl:glossary-locations -->" in text:
        src = flr.read_text(path)
        idents = []
        for m in re.finditer(r"^\|.*$", src, re.M):  # the code column of the glossary's table rows
            cells = [c.strip() for c in m.group(0).strip("|").split("|")]
            if len(cells) >= 3:
                for ident in IDENT.findall(cells[2]):
                    if len(ident) > 1 and ident not in idents:  # one-letter names match everything
                        idents.append(ident)
        text = text.replace("<!-- fl:glossary-locations -->", glossary_locations(root, idents))
    for m in re.finditer(r"<!-- fl:ladder-effect ([\w ]+?) -->", text):
        text = text.replace(m.group(0), ladder_effect(m.group(1).split(), records))
    if "<!-- fl:figure " in text:
        def fig(m):
            img, alt = m.group(1), m.group(2)
            if os.path.exists(os.path.join(root, "docs", "img", img)):
                return f"![{alt}]({img})"
            return f"*The figure ({alt}) is made by notebooks/results.ipynb from GPU results: {NOT_YET}.*"
        text = re.sub(r"<!-- fl:figure (\S+) (.*?) -->", fig, text)
    return text


def theory_index(root: str) -> str:
    out = ["# Theory {#theory}", "",
           "The mathematics behind the ladder, in the notation of the FlashAttention papers (Q_i, K_j, V_j, "
           "S_ij, P_ij, m_i, ℓ_i, O_i, L_i, B_r, B_c, T_r, T_c), each idea tied to the step that makes it "
           "code.", ""]
    for name in THEORY:
        out.append(f"- @subpage theory_{name}")
    return "\n".join(out) + "\n"


def main_page(root: str, links: Links) -> str:
    readme = os.path.join(root, "README.md")
    text = flr.read_text(readme) if os.path.exists(readme) else "# flashladder\n"
    body = to_doxygen(text, links, "", drop_title=True)
    title = "flashladder"
    m = re.search(r"^#\s+(.*)$", text, re.M)
    if m:
        title = re.sub(r"[`*]", "", m.group(1)).strip()
    return (f"\\mainpage {title}\n\n{body}\n\n"
            "Read on: @ref ladder \"the ladder, one page per step\" · @ref theory \"the theory pages\" · "
            "@ref theory_golden_sets \"check your own kernel (golden sets)\" · "
            "the API under *Namespaces* and *Files*.\n")


# The last line of every page written here: only a file carrying it is removed (a page that went away)
# or overwritten. An HTML comment, so Doxygen shows nothing of it.
MARK = "\n<!-- written by scripts/docs_pages.py: removed or rewritten by it; edit the sources instead -->\n"


def written_here(path: str, page: str | None = None) -> bool:
    """The file at path is a page of this script: it carries MARK, or (a page written before MARK
    existed) it starts with the same title line as the page that replaces it."""
    try:
        text = flr.read_text(path)
    except flr.Refused:
        return False
    return MARK in text or (page is not None and text.split("\n", 1)[0] == page.split("\n", 1)[0])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    if os.path.exists(a.out) and not os.path.isdir(a.out):
        raise flr.Refused(f"--out {a.out} is not a folder (the pages are written into it)")
    steps = flr.parse_ladder(root)
    records = flr.load_records(root)
    links = Links(root, steps)
    try:
        os.makedirs(a.out, exist_ok=True)
    except OSError as e:
        raise flr.Refused(f"cannot create the folder {a.out}: {e.strerror}") from None
    pages = {"mainpage.md": main_page(root, links), "ladder.md": ladder_page(steps, root),
             "theory.md": theory_index(root)}
    for i, s in enumerate(steps):
        pages[f"step_{s.number}.md"] = step_page(i, steps, records, links, root)
    for name in THEORY:
        pages[f"theory_{name}.md"] = theory_page(name, links, root, records)
    pages = {name: text + MARK for name, text in pages.items()}
    for name, text in pages.items():  # nothing is written or removed unless every page is ours to replace
        path = os.path.join(a.out, name)
        if os.path.exists(path) and not written_here(path, text):
            raise flr.Refused(f"--out {a.out}: {name} is there and was not written by docs_pages.py: "
                              "give the pages a folder of their own")
    for old in os.listdir(a.out):  # a step or page that went away leaves no stale page behind
        path = os.path.join(a.out, old)
        # Only a page this script wrote (it carries MARK): --out may be a folder with pages of its own
        # (`--out .` once removed the repository's README.md).
        if old.endswith(".md") and old not in pages and os.path.isfile(path) and written_here(path):
            os.remove(path)
    for name, text in pages.items():
        path = os.path.join(a.out, name)
        if not os.path.exists(path) or flr.read_text(path) != text:
            flr.write_text(path, text)
    print(f"docs_pages: {len(pages)} pages in {a.out} ({len(steps)} steps, {len(records)} records)")
    return 0


if __name__ == "__main__":
    sys.exit(flr.run_main("docs_pages", main))
