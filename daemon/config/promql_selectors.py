"""The check that every series a configured PromQL query reads carries the exporter's (or ingress') selector, on
the query's syntax tree.

Any pod Prometheus scrapes can expose a series under the DCGM exporter's or the ingress controller's metric names
(one line of text), so a query that reads such a series without `{$exporter}` (`{$ingress}`) lets a tenant forge its
demand, capacity or request rate. The query is parsed by promql-parser (GreptimeTeam's parser, compatible with
Prometheus 2.45), not scanned by hand: a hand scan has to guess what Prometheus takes for a string, a comment, a
keyword or a metric name, and each wrong guess (`sum(offset)` reads a metric named `offset`) read a forged series.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import NamedTuple

import promql_parser

EXPORTER = "$exporter"   # in a query: replaced by source.prometheus.exporter_selector
INGRESS = "$ingress"     # in request_rate_query: replaced by source.prometheus.ingress_selector
DEFAULT_EXPORTER = 'job="dcgm-exporter"'
DEFAULT_INGRESS = 'job="ingress-nginx"'
_PLACEHOLDER = re.compile(r"\$(?:exporter|ingress)")
# Put beside the configured matchers where the placeholder stands, in the tree that is checked only (never sent):
# a selector carrying it got the configured matchers from the one key, not from a literal copy of today's value.
# Label names starting with __ are reserved to Prometheus: no query of a site needs this one.
_MARK = "__gpuas_selected_by__"
_NAME = "__name__"
# Bounds on a query before and after it is parsed. promql-parser recurses once per level of nesting and per operator
# of a chain: a query of 20,000 `(` (or `-`) overflowed the stack and killed the process (a segfault, no line at
# all: on a reload, the running daemon), its parse time grows with the square of the depth, and its `walk` with
# about the cube (500 nested parentheses: 4 s, 1,000: over 30 s). A site's queries are a few hundred characters,
# a few levels deep: these refuse only what no site writes.
MAX_QUERY_CHARS = 8192    # as sent (its placeholders replaced)
MAX_OPERATORS = 512       # brackets and operators outside strings and comments: bounds the parse's recursion
MAX_DEPTH = 64            # levels of the parsed tree: bounds `walk`
_OPERATOR = re.compile(r"[(\[+\-*/%^<>=!]|\b(?:and|or|unless|atan2)\b", re.IGNORECASE)
_SKIPPED = re.compile(r'"(?:[^"\\]|\\.)*"?|\'(?:[^\'\\]|\\.)*\'?|`[^`]*`?|#[^\n]*', re.DOTALL)


class Unparsable(ValueError):
    """The query, as sent to Prometheus, does not parse: Prometheus would answer it with an error every cycle."""


class TooLarge(ValueError):
    """The query is past the bounds (MAX_QUERY_CHARS, MAX_OPERATORS, MAX_DEPTH): refused unparsed or unwalked."""


class Matcher(NamedTuple):
    """A label matcher as parsed: compared by what it selects, not by how it was spelled (quotes, spaces)."""
    name: str
    op: str
    value: str


class Selector(NamedTuple):
    """One vector selector's alternative (`{a="1" or b="2"}` has two): its literal name and matchers."""
    name: str | None
    matchers: frozenset[Matcher]
    text: str   # for messages: the matchers as the parser prints them (never the mark's: a selector carrying it
    #             carries the configured matchers too, and is never said unselected)


# the parser's MatchOp is neither hashable nor named: its operator as PromQL writes it
_OPS = ((promql_parser.MatchOp.Equal, "="), (promql_parser.MatchOp.NotEqual, "!="),
        (promql_parser.MatchOp.Re, "=~"), (promql_parser.MatchOp.NotRe, "!~"))


def _matcher(m: promql_parser.Matcher) -> Matcher:
    return Matcher(m.name, next(op for parsed, op in _OPS if m.op == parsed), m.value)


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _too_big(query: str) -> str | None:
    """Why `query` is refused before it is parsed (its length, or more brackets and operators than MAX_OPERATORS
    outside strings and comments), else None."""
    if len(query) > MAX_QUERY_CHARS:
        return f"{len(query):,} characters, over the {MAX_QUERY_CHARS:,} a query may have"
    ops = len(_OPERATOR.findall(_SKIPPED.sub(" ", query)))
    if ops > MAX_OPERATORS:
        return f"{ops:,} brackets and operators, over the {MAX_OPERATORS} a query may have"
    return None


def _children(node: object) -> list:
    """The sub-expressions of a parsed node (its accessors; an unknown node is a leaf here: only the depth bound
    reads this, the selectors are found by promql_parser.walk)."""
    if isinstance(node, (promql_parser.ParenExpr, promql_parser.UnaryExpr, promql_parser.SubqueryExpr)):
        return [node.expr]
    if isinstance(node, promql_parser.BinaryExpr):
        return [node.lhs, node.rhs]
    if isinstance(node, promql_parser.AggregateExpr):
        return [node.expr, node.param]
    if isinstance(node, promql_parser.Call):
        return list(node.args)
    return []


def _depth(expr: promql_parser.Expr) -> int:
    """Levels of the tree, counted without recursion; stops past MAX_DEPTH."""
    deepest, todo = 0, [(expr, 1)]
    while todo:
        node, d = todo.pop()
        deepest = max(deepest, d)
        if deepest > MAX_DEPTH:
            break
        todo.extend((c, d + 1) for c in _children(node) if isinstance(c, promql_parser.Expr))
    return deepest


def _parse(query: str) -> promql_parser.Expr:
    """promql_parser.parse within the bounds above (TooLarge past them, in one line); the parser's ValueError."""
    why = _too_big(query)
    if why is not None:
        raise TooLarge(f"too large to check: {why}")
    expr = promql_parser.parse(query)
    if _depth(expr) > MAX_DEPTH:
        raise TooLarge(f"too large to check: nested more than {MAX_DEPTH} levels deep")
    return expr


def label_matchers(text: str) -> frozenset[Matcher]:
    """The matchers of a configured selector (`job="dcgm-exporter"`), as the parser reads them inside a selector's
    braces. ValueError when `text` is not a comma-separated list of label matchers: anything else (a brace, an `or`,
    a metric name) would change the query it is put into."""
    try:
        expr = _parse(f"x{{{text}}}")
    except ValueError as exc:
        raise ValueError(_one_line(exc)) from None
    if not isinstance(expr, promql_parser.VectorSelector) or expr.offset or expr.at:
        raise ValueError("more than label matchers")
    if expr.matchers.or_matchers:
        raise ValueError("`or` between matchers")
    found = frozenset(_matcher(m) for m in expr.matchers.matchers)
    if not found:   # a __name__ matcher never gets here: the parser refuses the name set twice (x and __name__)
        raise ValueError("no matcher")
    return found


def substitute(query: str, selectors: Mapping[str, str]) -> str:
    """`query` as sent to Prometheus: each placeholder ($exporter, $ingress) replaced by its configured selector, in
    one pass (a selector holding the other placeholder's text stays as written)."""
    return _PLACEHOLDER.sub(lambda m: selectors.get(m.group(), m.group()), query)


def selectors(query: str, placeholder: str, configured: Mapping[str, str]) -> list[Selector]:
    """Every vector selector the query reads (also inside a range, a subquery, a function's or an aggregation's
    arguments), one per `or` alternative of its braces, with the placeholders replaced (substitute) and the mark put
    beside `placeholder`'s selector. Unparsable with the parser's message (one line) when the query, as sent to
    Prometheus, does not parse; ValueError when `placeholder` is not in braces."""
    try:
        _parse(substitute(query, configured))   # what is sent
    except TooLarge:
        raise
    except ValueError as exc:
        raise Unparsable(_one_line(exc)) from None
    marked = {**configured, placeholder: f'{_MARK}="{placeholder[1:]}", {configured[placeholder]}'}
    try:
        # within the bounds too: the mark adds one matcher where each placeholder's selector stands (the same depth)
        expr = promql_parser.parse(substitute(query, marked))
    except ValueError as exc:   # parses without the mark: the placeholder sits outside a selector's braces
        raise ValueError(f"{placeholder} stands outside a selector's braces (in a string?), where it selects "
                         f"nothing ({_one_line(exc)})") from None
    found: list[Selector] = []

    def visit(node: promql_parser.Expr) -> None:
        # walk visits a range's (MatrixSelector's) and a subquery's vector selector as a node of its own
        if not isinstance(node, promql_parser.VectorSelector):
            return
        groups = node.matchers.or_matchers or [node.matchers.matchers]
        for group in groups:
            found.append(Selector(node.name, frozenset(_matcher(m) for m in group), ",".join(map(str, group))))

    promql_parser.walk(expr, visit)
    return found


def unselected(query: str, placeholder: str, configured: Mapping[str, str],
               needs: Callable[[Selector], str | None]) -> list[str]:
    """What `query` reads without `placeholder` among its matchers: for every selector that `needs` names (its
    series may be forged), that name, unless the selector carries the configured matchers put there by the
    placeholder (`configured`: each placeholder's selector). ValueError (one line) when the query or the selector
    does not parse."""
    wanted = label_matchers(configured[placeholder]) | {Matcher(_MARK, "=", placeholder[1:])}
    out = []
    for sel in selectors(query, placeholder, configured):
        name = needs(sel)
        if name is not None and not wanted <= sel.matchers:
            out.append(name)
    return out


def _names(sel: Selector) -> set[str]:
    """The metric names a selector is fixed to (by its name or `__name__="..."`); empty: any name."""
    fixed = {m.value for m in sel.matchers if m.name == _NAME and m.op == "="}
    return fixed | {sel.name} if sel.name else fixed


def dcgm_name(sel: Selector) -> str | None:
    """A selector that may read a raw DCGM series: named by its DCGM name, or `a selector {...}` when its name is
    not fixed (no name, or a `__name__` pattern), as it may match a DCGM name. A recorded series (gpuas:...) or a
    site's own metric is not checked: the shipped recording rules select the exporter themselves."""
    names = _names(sel)
    if not names:
        return f"a selector {{{sel.text}}}"
    dcgm = sorted(n for n in names if n.startswith("DCGM_"))
    return dcgm[0] if dcgm else None


def any_name(sel: Selector) -> str:
    """Every selector of a request-rate query counts: named by its metric name, else `a selector {...}`."""
    return sel.name or "a selector {...}"
