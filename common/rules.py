"""What the API accepts as a name or a quantity, as regular expressions the schema publishes.

The server validates with these same patterns, so the OpenAPI schema and the server agree by
construction: a value the schema admits is accepted, one it refuses is refused. The patterns
use only syntax that Python's ``re`` and ECMAScript read alike (character ranges, ``\\u``
escapes, a lookahead), and say "end of text" with ``$`` as JSON Schema validators mean it.
"""

from __future__ import annotations

import re
from typing import TypeGuard

from sherdlock import MAX_QUANTITY

# The longest transaction id, wallet or other name; a currency; a client's namespace of ids.
ID_MAX_LENGTH = 128
CURRENCY_MAX_LENGTH = 32
NAMESPACE_MAX_LENGTH = 64

# Control characters (Unicode Cc: C0, DEL, C1) cannot be told apart in logs and pages, and
# PostgreSQL cannot store NUL.
CONTROL_CHARS = r"\u0000-\u001f\u007f-\u009f"
# Lone surrogates (JSON can write "\ud800") are not text: PostgreSQL cannot store them. The
# schema cannot name them (regex engines over Unicode text reject the range), and needs not:
# a JSON string holding one is not a Unicode string, which is what a JSON Schema string is.
_SURROGATE = re.compile(r"[\ud800-\udfff]")
# Every whitespace character (str.isspace) that is not a control character.
BLANK_CHARS = r" \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"

IDENTIFIER_PATTERN = rf"^(?![{BLANK_CHARS}]+$)[^{CONTROL_CHARS}]+$"
# A name that is also a URL path segment (a selection's tx_id, a wallet in a path): no "/".
PATH_IDENTIFIER_PATTERN = rf"^(?![{BLANK_CHARS}]+$)[^/{CONTROL_CHARS}]+$"

_IDENTIFIER = re.compile(IDENTIFIER_PATTERN)
_PATH_IDENTIFIER = re.compile(PATH_IDENTIFIER_PATTERN)
_CONTROL = re.compile(f"[{CONTROL_CHARS}]")


def is_identifier(
    value: object, max_length: int = ID_MAX_LENGTH, path: bool = False
) -> TypeGuard[str]:
    """Tell whether ``value`` is a usable name: 1..max_length characters, no control
    characters, not only whitespace (and, for ``path``, no "/")."""
    if not isinstance(value, str) or not 0 < len(value) <= max_length:
        return False
    # fullmatch, not the pattern's own "$": Python's "$" also matches before a final newline.
    return bool(
        (_PATH_IDENTIFIER if path else _IDENTIFIER).fullmatch(value)
        and not _SURROGATE.search(value)
    )


def identifier_problem(value: str) -> str:
    """Name what is wrong with a non-empty string that is not an identifier (a message key)."""
    if _CONTROL.search(value) or _SURROGATE.search(value):
        return "printable"
    if "/" in value:
        return "slash"
    return "blank"


def identifier_schema(max_length: int, path: bool = False) -> dict[str, object]:
    """Return the JSON Schema of a name (a query, path or body value)."""
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": max_length,
        "pattern": PATH_IDENTIFIER_PATTERN if path else IDENTIFIER_PATTERN,
    }


def at_most(limit: int) -> str:
    """Return a regex (no anchors) for the decimal integers 1..limit without leading zeros.

    Shorter numbers are free; a number as long as ``limit`` either equals it or is smaller at
    its first differing digit, one alternative per digit of ``limit``.
    """
    if limit < 1:
        raise ValueError("limit must be at least 1")
    digits = str(limit)
    width = len(digits)
    alternatives = [f"[1-9][0-9]{{0,{width - 2}}}"] if width > 1 else []
    for position, digit in enumerate(map(int, digits)):
        lowest = 1 if position == 0 else 0
        if digit > lowest:
            smaller = f"[{lowest}-{digit - 1}]" if digit - 1 > lowest else str(lowest)
            rest = width - position - 1
            alternatives.append(digits[:position] + smaller + (f"[0-9]{{{rest}}}" if rest else ""))
    alternatives.append(digits)
    return "|".join(alternatives)


# A quantity in a request: 1..2**64-1 as digits, no sign, no leading zero.
QUANTITY_PATTERN = f"^(?:{at_most(MAX_QUANTITY)})$"
# A quantity in a response: any non-negative integer (sums may exceed a token's range).
AMOUNT_PATTERN = "^(?:0|[1-9][0-9]*)$"
MAX_QUANTITY_DIGITS = len(str(MAX_QUANTITY))
