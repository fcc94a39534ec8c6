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


class Unparsable(ValueError):
    """The query, as sent to Prometheus, does not parse: Prometheus would answer it with an error every cycle."""


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


def label_matchers(text: str) -> frozenset[Matcher]:
    """The matchers of a configured selector (`job="dcgm-exporter"`), as the parser reads them inside a selector's
    braces. ValueError when `text` is not a comma-separated list of label matchers: anything else (a brace, an `or`,
    a metric name) would change the query it is put into."""
    try:
        expr = promql_parser.parse(f"x{{{text}}}")
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
        promql_parser.parse(substitute(query, configured))   # what is sent
    except ValueError as exc:
        raise Unparsable(_one_line(exc)) from None
    marked = {**configured, placeholder: f'{_MARK}="{placeholder[1:]}", {configured[placeholder]}'}
    try:
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
