"""The items of one array of a JSON object read piece by piece: ``squeue --json``'s jobs, one at a time.

squeue --json prints every job (22.05 does whatever -j names), ~3 KB of JSON each: a tenant's 10^5 pending arrays
were a 300 MB string and its parsed objects, all held at once by a read that needs six fields per job. Here the
text comes in chunks (the command's pipe) and each item is decoded on its own and dropped once read, so what is held
is a chunk and one item, whatever the number of jobs.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Iterator

WHITESPACE = " \t\n\r"
MAX_ITEM_CHARS = 64 << 20   # one item (one job's JSON) larger than this is not squeue's output: an error
_DECODER = json.JSONDecoder()


class _Text:
    """The text of `chunks`, read as far as needed: `s[i:]` is what is not consumed yet."""

    def __init__(self, chunks: Iterable[str], max_item: int) -> None:
        self.chunks = iter(chunks)
        self.s = ""
        self.i = 0
        self.done = False
        self.head = ""          # the text's first characters, for an error that names it
        self.max_item = max_item

    def more(self, at_least: int = 1) -> bool:
        """Reads on, `at_least` characters (or to the end) in one step: False where nothing was left."""
        got: list[str] = []
        n = 0
        while n < at_least and not self.done:
            c = next(self.chunks, None)
            if c is None:
                self.done = True
                break
            if len(self.head) < 120:
                self.head = (self.head + c)[:120]
            got.append(c)
            n += len(c)
        if not got:
            return False
        self.s = self.s[self.i:] + "".join(got)   # what was consumed is dropped: the text held is one item and more
        self.i = 0
        return True

    def peek(self) -> str:
        """The next character that is not whitespace ('' at the end), not consumed."""
        while True:
            while self.i < len(self.s) and self.s[self.i] in WHITESPACE:
                self.i += 1
            if self.i < len(self.s) or not self.more():
                return self.s[self.i] if self.i < len(self.s) else ""

    def take(self, expected: str) -> str:
        c = self.peek()
        if not c or c not in expected:
            raise ValueError(f"{expected!r} expected, {c!r} found")
        self.i += 1
        return c

    def value(self) -> Any:
        """The next whole JSON value (read on while it is cut off by the chunk's end)."""
        self.peek()
        while True:
            try:
                v, end = _DECODER.raw_decode(self.s, self.i)
                if end < len(self.s) or self.done:   # a number at the chunk's end may go on in the next one
                    self.i = end
                    return v
            except json.JSONDecodeError:
                if self.done:
                    raise ValueError("not JSON") from None
            held = len(self.s) - self.i
            if held > self.max_item:
                raise ValueError(f"an item past {self.max_item} characters")
            # each try decodes from the item's start: tried again once what is held has doubled, an item cut over
            # many pieces is decoded (and copied) in work linear in its size, not pieces times it
            self.more(min(held, self.max_item + 1 - held) or 1)


def _elements(t: _Text, brackets: str) -> Iterator[None]:
    """Once per element of the object or array that opens here (`brackets`: "{}" or "[]"), for the caller to read
    it; the opening bracket, the commas between and the closing one are consumed here."""
    t.take(brackets[0])
    if t.peek() == brackets[1]:
        t.take(brackets[1])
        return
    while True:
        yield
        if t.take("," + brackets[1]) == brackets[1]:
            return


def array_items(chunks: Iterable[str], key: str, max_item: int = MAX_ITEM_CHARS) -> Iterator[Any]:
    """Each item of the array under `key` of the JSON object that `chunks` (pieces of its text) make, in order;
    the object's other values are read and dropped. Raises ValueError (or RecursionError, nested past Python's
    limit) where the text is not such an object, naming its first characters."""
    t = _Text(chunks, max_item)
    try:
        found = False
        for _ in _elements(t, "{}"):
            k = t.value()
            t.take(":")
            if k == key and not found:
                found = True
                for _ in _elements(t, "[]"):
                    yield t.value()
            else:
                t.value()
        if not found:
            raise ValueError(f"no {key!r}")
    except ValueError as exc:
        raise ValueError(f"{exc}: {t.head!r}") from None
