"""Renders every table of measured numbers in README.md and docs/*.md from the committed bench JSON in bench/out/,
and the configuration key table from the config models, so the docs carry the benches' numbers and nothing typed.

A rendered block sits between two markers, each on a line of its own:

    <!-- generated:NAME -->
    ...what render_docs.py wrote; edit the JSON or this script, never the text...
    <!-- /generated:NAME -->

    python bench/render_docs.py            # rewrite every block in place
    python bench/render_docs.py --check    # exit 1 naming the stale or malformed blocks; changes nothing
    python bench/render_docs.py --undescribed   # config keys that have no Field(description=...)

A bench's goals are in its JSON (``targets``, written from bench/targets.py); whether each is met is computed
here from the goal and the measured value. Fast: it reads JSON and imports the config models, nothing else.

The renderers live in bench/render/, one module per docs page (common.py for what they share); this file is the
command, finds the blocks in each page and checks that their markers pair up. Importing a page's module registers
its blocks, so a new page's module is added to the import below.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:   # run as `python bench/render_docs.py`: make the bench.render package importable
    sys.path.insert(0, str(ROOT))

# importing a page's module registers its blocks; each is named here so a page's module is never left out
from bench.render import (  # noqa: E402  (after the sys.path line above)
    benchmarks,
    common,
    configuration,
    eta,
    fleet,
    forecasting,
    health,
    high_availability,
    kubernetes,
    own_cluster,
    readme,
    replay as replay_page,
    replay_inference,
    replay_sizing,
    replay_what_if,
    safety,
    skill_gate_hours,
    skill_gate_services,
    windows,
)
from bench.render.common import BLOCKS, MARKER, DocError, doc_files, load, met  # noqa: E402
from bench.render.configuration import config_keys, undescribed  # noqa: E402
from bench.render.replay import replay, replay_verdicts  # noqa: E402

PAGES = (benchmarks, configuration, eta, fleet, forecasting, health, high_availability, kubernetes, own_cluster,
         readme, replay_page, replay_inference, replay_sizing, replay_what_if, safety, skill_gate_hours,
         skill_gate_services, windows)
# what other files (tests/project/test_docs.py) read from render_docs: kept importable from here. OUT is not: a
# test points the pages at a copy of bench/out by patching common.OUT, and a patch of render_docs.OUT would move
# nothing, so it fails (no such attribute) instead of silently reading the committed JSON
__all__ = ["BLOCKS", "DocError", "blocks_in", "common", "config_keys", "doc_files", "load", "main", "met",
           "render_text", "replay", "replay_verdicts", "run", "undescribed"]


def blocks_in(text: str, where: str) -> list[tuple[str, int, int]]:
    """(name, start of the content, end of the content) of every block, checking that the markers pair up: each
    opening is closed by a marker of the same name before any other marker, and each sits on a line of its own."""
    found, open_ = [], None
    for m in MARKER.finditer(text):
        closing, name = m.group(1) == "/", m.group(2)
        line_start = text.rfind("\n", 0, m.start()) + 1
        line_end = text.find("\n", m.end())
        line_end = len(text) if line_end < 0 else line_end
        if text[line_start:m.start()].strip() or text[m.end():line_end].strip():
            raise DocError(f"{where}: marker {m.group(0)} must be on a line of its own")
        if not closing:
            if open_ is not None:
                raise DocError(f"{where}: generated:{name} opens inside generated:{open_[0]}")
            open_ = (name, line_end + 1)
        else:
            if open_ is None:
                raise DocError(f"{where}: /generated:{name} closes a block that was not opened")
            if open_[0] != name:
                raise DocError(f"{where}: /generated:{name} closes generated:{open_[0]}")
            found.append((name, min(open_[1], line_start), line_start))
            open_ = None
    if open_ is not None:
        raise DocError(f"{where}: generated:{open_[0]} is never closed")
    return found


def render_text(text: str, where: str) -> tuple[str, list[str], list[str]]:
    """The text with every block rendered; the names of the blocks in it, and of those that were stale."""
    names, stale, parts, pos = [], [], [], 0
    for name, start, end in blocks_in(text, where):
        if name not in BLOCKS:
            raise DocError(f"{where}: generated:{name} is not a block bench/render_docs.py knows")
        body = BLOCKS[name]().rstrip("\n") + "\n"
        names.append(name)
        if text[start:end] != body:
            stale.append(name)
        parts += [text[pos:start], body]
        pos = end
    parts.append(text[pos:])
    return "".join(parts), names, stale


def run(root: Path = ROOT, check: bool = False) -> list[str]:
    """Renders (or, with check, only compares) every block; returns the problems, one line each."""
    problems, seen = [], {}
    for path in doc_files(root):
        where = str(path.relative_to(root))
        text = path.read_text()
        try:
            new, names, stale = render_text(text, where)
        except DocError as exc:
            problems.append(str(exc))
            continue
        except (OSError, KeyError, ValueError) as exc:
            problems.append(f"{where}: a block could not be rendered: {exc!r}")
            continue
        for name in names:
            if name in seen:
                problems.append(f"{where}: generated:{name} is also in {seen[name]}")
            seen[name] = where
        if check:
            problems += [f"{where}: generated:{name} is stale (run: python bench/render_docs.py)" for name in stale]
        elif new != text:
            path.write_text(new)
    problems += [f"generated:{name} is rendered by bench/render_docs.py but appears in no page"
                 for name in BLOCKS if name not in seen]
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 naming stale or malformed blocks")
    ap.add_argument("--undescribed", action="store_true", help="list the config keys without a description")
    a = ap.parse_args(argv)
    if a.undescribed:
        print("\n".join(undescribed()))
        return 0
    problems = run(check=a.check)
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
