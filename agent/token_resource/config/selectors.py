"""Kubernetes label selectors, the language of a cluster pool's ``nodes``: parsed as
apimachinery parses them and mapped onto the NodeSelectorRequirements of a ResourceSlice.

The grammar, the lexer and the parser follow ``k8s.io/apimachinery/pkg/labels/selector.go``
(``Lexer.Lex``, ``scanIDOrKeyword``, ``scanSpecialSymbol``, ``Parser.parse``,
``parseRequirement``, ``parseKeyAndInferOperator``, ``parseOperator``, ``parseValues``,
``parseIdentifiersList``, ``parseExactValue``) with ``NewRequirement``'s checks; keys and
values are checked as ``pkg/api/validate/content/kube.go``'s ``IsLabelKey`` and
``IsLabelValue`` do::

    <selector>    ::= <requirement> | <requirement> "," <selector>
    <requirement> ::= [!] KEY [ <set> | <exact> ]
    <set>         ::= ("in" | "notin") "(" VALUE ["," VALUE]* ")"
    <exact>       ::= ("=" | "==" | "!=") VALUE

so ``site=a`` and ``site==a`` become In [a], ``site!=a`` NotIn [a], ``site in (a,b)`` In,
``site notin (a,b)`` NotIn, ``gpu`` Exists and ``!spot`` DoesNotExist; a comma is AND. As
apimachinery does, values are a set (sorted, each once), an empty value is allowed
(``site=`` or ``site in ()``: In [""]), and the requirements are ordered by key.

Where this is stricter: ``>`` and ``<`` (apimachinery's numeric Gt and Lt) are refused, since
a pool's requirements are In, NotIn, Exists or DoesNotExist only; and a NUL, at which
apimachinery's lexer silently stops reading (``Lexer.read`` returns 0 for the end), is an
ordinary character here, which no key or value may hold. Every error names the character it
was found at. Pure: no I/O.
"""

from __future__ import annotations

from typing import NamedTuple

from token_resource.config.errors import quote
from token_resource.config.model import (
    DOES_NOT_EXIST,
    EXISTS,
    IN,
    NOT_IN,
    SelectorRequirement,
)
from token_resource.config.names import (
    DNS_SUBDOMAIN,
    MAX_DNS_SUBDOMAIN_LENGTH,
    MAX_NAME_PART_LENGTH,
    NAME_PART,
)

# Token kinds: an operator's own spelling, or one of these two.
_IDENTIFIER, _END = "identifier", "end"
_SYMBOLS = frozenset("=!(),><")
_WHITESPACE = frozenset(" \t\r\n")
_IDENTIFIER_ENDS = _SYMBOLS | _WHITESPACE
_TWO_CHARACTER_OPERATORS = frozenset({"==", "!="})
_WORD_OPERATORS = frozenset({"in", "notin"})
# What each binary operator means in a NodeSelectorRequirement, and whether it takes a
# parenthesized set ("in (a,b)") or one value ("=a").
_BINARY_OPERATORS = {
    "in": (IN, True),
    "notin": (NOT_IN, True),
    "=": (IN, False),
    "==": (IN, False),
    "!=": (NOT_IN, False),
}
_NUMERIC_OPERATORS = frozenset({">", "<"})
_KEY_NAME_RULE = (
    "letters, digits, '-', '_' and '.', starting and ending with a letter or digit, at most "
    f"{MAX_NAME_PART_LENGTH} characters"
)


class SelectorError(ValueError):
    """A selector that does not parse: ``position`` is the 0-based index of the character
    where the problem was found (``len(text)``: at the end)."""

    def __init__(self, text: str, position: int, problem: str) -> None:
        where = f"at character {position + 1}" if position < len(text) else "at the end"
        super().__init__(f"{where}: {problem}")
        self.position = position
        self.problem = problem


class _Token(NamedTuple):
    kind: str
    literal: str
    position: int


def parse_selector(text: str) -> tuple[SelectorRequirement, ...]:
    """The requirements of a label selector, ordered by key; empty text has none (every
    node, as apimachinery's Parse answers). Raises SelectorError."""
    return _Parser(text).parse()


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is no label key (an optional DNS subdomain prefix and "/", then a name),
    or None: content.IsLabelKey."""
    parts = key.split("/")
    if len(parts) > 2:
        return (
            f"label key {quote(key)} has more than one '/' (a label key is a name, optionally "
            "after a DNS subdomain and '/', e.g. example.com/zone)"
        )
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            return f"label key {quote(key)} has an empty prefix before '/'"
        if len(prefix) > MAX_DNS_SUBDOMAIN_LENGTH or not DNS_SUBDOMAIN.fullmatch(prefix):
            return (
                f"the prefix of label key {quote(key)} must be a DNS subdomain (lowercase "
                "letters, digits, '-' and '.', each dot-separated part starting and ending with "
                f"a letter or digit, at most {MAX_DNS_SUBDOMAIN_LENGTH} characters)"
            )
    name = parts[-1]
    if not name:
        return f"label key {quote(key)} has an empty name"
    if len(name) > MAX_NAME_PART_LENGTH or not NAME_PART.fullmatch(name):
        return f"the name of label key {quote(key)} must be {_KEY_NAME_RULE}"
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is no label value (empty, or what a key's name may be), or None:
    content.IsLabelValue."""
    if value and (len(value) > MAX_NAME_PART_LENGTH or not NAME_PART.fullmatch(value)):
        return f"label value {quote(value)} must be empty or {_KEY_NAME_RULE}"
    return None


def _lex(text: str) -> list[_Token]:
    """Lexer.Lex until the end: identifiers end at whitespace or at a symbol, and a symbol
    is the longest operator it starts (only "==" and "!=" have two characters)."""
    tokens: list[_Token] = []
    position = 0
    while True:
        while position < len(text) and text[position] in _WHITESPACE:
            position += 1
        if position == len(text):
            tokens.append(_Token(_END, "", position))
            return tokens
        start = position
        if text[position] in _SYMBOLS:
            two = text[position : position + 2]
            literal = two if two in _TWO_CHARACTER_OPERATORS else text[position]
            tokens.append(_Token(literal, literal, start))
            position += len(literal)
            continue
        while position < len(text) and text[position] not in _IDENTIFIER_ENDS:
            position += 1
        word = text[start:position]
        tokens.append(_Token(word if word in _WORD_OPERATORS else _IDENTIFIER, word, start))


class _Parser:
    """Parser: a recursive descent over the tokens, one lookahead. ``in`` and ``notin`` are
    identifiers wherever a key or value may stand (``in in (in)`` is a key "in" in the set
    ["in"]), which is lookahead(Values)'s rule; only the operator position reads them as
    operators."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._tokens = _lex(text)
        self._next = 0

    def parse(self) -> tuple[SelectorRequirement, ...]:
        requirements: list[SelectorRequirement] = []
        token = self._peek()
        while token.kind != _END:
            if token.kind not in (_IDENTIFIER, "!"):
                raise self._error(token, "a label key or '!'")
            requirements.append(self._requirement())
            token = self._take()
            if token.kind == ",":
                token = self._peek()
                if token.kind not in (_IDENTIFIER, "!"):
                    raise self._error(token, "a label key or '!' after ','")
            elif token.kind != _END:
                raise self._error(token, "',' or the end")
        # apimachinery sorts by key "to grant deterministic parsing"; a stable sort keeps the
        # written order of one key's requirements.
        return tuple(sorted(requirements, key=lambda requirement: requirement.key))

    def _requirement(self) -> SelectorRequirement:
        """parseRequirement: `[!]key`, or key, operator and value(s)."""
        negated = self._peek().kind == "!"
        if negated:
            self._take()
        key_token = self._take()
        if key_token.kind != _IDENTIFIER:
            raise self._error(key_token, "a label key")
        problem = label_key_problem(key_token.literal)
        if problem is not None:
            raise SelectorError(self._text, key_token.position, problem)
        if negated:
            return SelectorRequirement(key_token.literal, DOES_NOT_EXIST)
        if self._peek().kind in (_END, ","):
            return SelectorRequirement(key_token.literal, EXISTS)
        operator_token = self._take(values=False)
        if operator_token.kind in _NUMERIC_OPERATORS:
            raise SelectorError(
                self._text,
                operator_token.position,
                f"{quote(operator_token.kind)} (a numeric comparison) is not supported in "
                "nodes: use in, notin, =, == or !=",
            )
        if operator_token.kind not in _BINARY_OPERATORS:
            raise self._error(operator_token, "one of in, notin, =, == or !=")
        operator, takes_set = _BINARY_OPERATORS[operator_token.kind]
        values = self._value_set() if takes_set else self._exact_value()
        for value, position in values:
            problem = label_value_problem(value)
            if problem is not None:
                raise SelectorError(self._text, position, problem)
        return SelectorRequirement(
            key_token.literal, operator, tuple(sorted({value for value, _ in values}))
        )

    def _value_set(self) -> list[tuple[str, int]]:
        """parseValues and parseIdentifiersList: "(a,b)"; a missing value (as in "()" or
        "(a,,b)") is the empty value."""
        opening = self._take()
        if opening.kind != "(":
            raise self._error(opening, "'('")
        values: list[tuple[str, int]] = []
        expect_value = True
        while True:
            token = self._take()
            if token.kind == ")":
                if expect_value:
                    values.append(("", token.position))
                return values
            if token.kind == ",":
                if expect_value:
                    values.append(("", token.position))
                expect_value = True
            elif token.kind == _IDENTIFIER and expect_value:
                values.append((token.literal, token.position))
                expect_value = False
            else:
                raise self._error(token, "a value, ',' or ')'" if expect_value else "',' or ')'")

    def _exact_value(self) -> list[tuple[str, int]]:
        """parseExactValue: one value; none before a ',' or the end is the empty value."""
        token = self._peek()
        if token.kind in (_END, ","):
            return [("", token.position)]
        self._take()
        if token.kind != _IDENTIFIER:
            raise self._error(token, "a value")
        return [(token.literal, token.position)]

    def _peek(self) -> _Token:
        return self._as_value(self._tokens[self._next])

    def _take(self, *, values: bool = True) -> _Token:
        token = self._tokens[self._next]
        self._next += 1
        return self._as_value(token) if values else token

    @staticmethod
    def _as_value(token: _Token) -> _Token:
        if token.kind in _WORD_OPERATORS:
            return token._replace(kind=_IDENTIFIER)
        return token

    def _error(self, token: _Token, expected: str) -> SelectorError:
        found = "" if token.kind == _END else f"found {quote(token.literal)}, "
        return SelectorError(self._text, token.position, f"{found}expected {expected}")
