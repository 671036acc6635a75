"""Secrets out of the messages users see, without cutting the words around them.

A secret (a connection string, a storage credential) is removed where it appears *as a secret*:

- the connection string as a whole (``<connection string>``);
- a password field anywhere in the text: a URI's ``user:***@``, libpq's ``password=***``, ODBC's
  ``PWD=***`` (braced or quoted values included), whoever's string it is;
- the secret's password, in every form a driver may echo it (percent-encoded, unescaped, with ODBC's
  doubled braces, or the pieces libpq splits an unquoted one into), where it stands as a whole word.

Why whole words, not substrings: passwords are often ordinary words (``postgres``, ``admin``), even one
character, and replacing their text anywhere cut every word that contains them: ``postgresql`` became
``***ql``, ``typo_key.yaml`` became ``typo_key.y***ml`` with the password ``a``. A whole word is a
run the secret fills entirely: its neighbours are neither word characters nor characters of the
secret itself, nor a dot or hyphen joining it to more of a name (``db`` in ``db.example.invalid``,
``127`` in ``127.0.0.1`` are parts of names, not the secret). A word equal to the secret is masked
wherever it stands (``for user "***"`` when the password is the user name): the secret never shows.

A secret long and varied enough to be no one's word (``distinctive``) is removed anywhere, even
glued to other text: drivers and libraries echo strings in escaped and encoded forms
(``password%3D...``, ``\\n...`` in a repr) where no word rule would find it, and such a secret cannot
cut a word of ours.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from urllib.parse import quote, unquote

MARK = "***"
WHOLE = "<connection string>"

# pwd=/password= in ODBC ({braced}, }} escaping a brace) and libpq key=value ('quoted') strings
SECRET_FIELDS = re.compile(r"(?i)\b(pwd|password)\s*=\s*(\{(?:[^}]|\}\})*\}|'(?:[^'\\]|\\.)*'|[^;\s]*)")
URI_PASSWORD = re.compile(r"(://[^:/@\s]*:)([^@\s]*)(@)")
# a URI password holding an unencoded '@': up to the last '@' of the authority
_URI_PASSWORD_TO_LAST_AT = re.compile(r"://[^:/@\s]*:([^\s/?#]*)@")
_QUERY_PASSWORD = re.compile(r"[?&]password=([^&#\s]*)")
# what libpq and URI parsers split an unquoted password at, quoting the pieces in their errors
_PIECES = re.compile(r"[\s@]+")
# an unquoted password holding spaces, which the patterns above end at its first space (a review: the
# rest of "password=correct horse battery staple" was echoed by libpq): in a key=value string, up to the
# next key=; in a URI, up to the authority's last '@'
_FIELD_TO_NEXT_KEY = re.compile(r"(?i)\b(?:pwd|password)\s*=\s*([^\s'{;][^;]*?)(?=\s+[A-Za-z_]\w*\s*=|\s*;|\s*$)")
_URI_PASSWORD_WITH_SPACES = re.compile(r"://[^:/@\s]*:(.*)@")
# libpq's refusals of a connection string's syntax, which quote a piece of it: a password's, as often as not
_CONNINFO_SYNTAX = re.compile(
    r"^(unexpected spaces found in|missing \"=\" after|extra key/value separator|invalid percent-encoded token"
    r"|invalid URI query parameter|unterminated quoted string|invalid integer value)"
)
MIN_PIECE = 4  # the shortest word of a password of several words masked on its own
_WORDS = re.compile(r"\s+")
_UNKNOWN_OPTION = re.compile(r'^invalid connection option "([^"]*)"')
_CONNINFO_HINTS = (", use percent-encoded spaces (%20) instead", " in connection info string")


def distinctive(value: str) -> bool:
    """A secret that is no one's word: removed anywhere, even inside other text. Why not by length
    alone: ``postgres`` and ``password`` have 8 characters and are words of our own messages; a secret
    of 8 or more characters mixing letter cases, digits or symbols is not, nor one of 16 or more."""
    if len(value) >= 16:
        return True
    if len(value) < 8:
        return False
    kinds = (str.islower, str.isupper, str.isdigit, lambda c: not c.isalnum())
    return sum(any(kind(c) for c in value) for kind in kinds) >= 2


def _field_value(raw: str) -> str:
    if raw.startswith("{") and raw.endswith("}") and len(raw) >= 2:
        return raw[1:-1].replace("}}", "}")
    if raw.startswith("'") and raw.endswith("'") and len(raw) >= 2:
        return re.sub(r"\\(.)", r"\1", raw[1:-1])
    return raw


def password_forms(secret: str) -> set[str]:
    """The password(s) inside a connection string, in the forms a driver may echo them: as written,
    unescaped, percent-encoded, with ODBC's doubled braces, and the pieces an unquoted one is split
    into (libpq's ``missing "=" after "..."`` quotes a piece of ``password=two words``)."""
    values: set[str] = set()
    for match in SECRET_FIELDS.finditer(secret):
        values.update((match.group(2), _field_value(match.group(2))))
    for pattern in (URI_PASSWORD, _URI_PASSWORD_TO_LAST_AT, _QUERY_PASSWORD, _URI_PASSWORD_WITH_SPACES):
        for match in pattern.finditer(secret):
            raw = match.group(2 if pattern is URI_PASSWORD else 1)
            values.update((raw, unquote(raw)))
    for match in _FIELD_TO_NEXT_KEY.finditer(secret):
        values.add(match.group(1))
    forms: set[str] = set()
    for value in values:
        forms.update((value, value.replace("}", "}}"), quote(value, safe="")))
        # a word of a few characters tells little of a password of several words, and masked as a word it
        # cut our own messages ('x' became '***': a review); what an '@' splits (a URI's password, read as
        # part of the host) and a whole password are masked however short
        for word in _WORDS.split(value):
            if len(word) >= MIN_PIECE or word == value:
                forms.add(word)
            if "@" in word:
                forms.update(_PIECES.split(word))
    forms.discard("")
    return forms


def conninfo_refusal(message: str, connection: str | None = None) -> str:
    """A driver's refusal of a connection string's syntax, without the piece of the string it quotes:
    that piece is a password's as often as not (``missing "=" after "horse"`` of ``password=correct horse
    ...``), and one holding quotes cannot even be told where it ends. An unknown option is masked where it
    stands after the password's key in ``connection`` (``invalid connection option "horse"`` of
    ``password=correct horse=battery``), and named where it stands before (a typo of a key). Any other
    message as it is."""
    if connection is not None and not password_forms(connection):
        return message  # no password in the string: the piece quoted is no secret, and says what is wrong
    option = _UNKNOWN_OPTION.match(message)
    if option is not None and connection:
        key = re.search(r"(?i)\b(?:pwd|password)\s*=", connection)
        at = re.search(rf"(?<![\w.-]){re.escape(option.group(1))}\s*=", connection)
        if key is not None and (at is None or at.start() > key.start()):
            return message[: option.start(1) - 1] + '"' + MARK + '"' + message[option.end(1) + 1 :]
        return message
    if not _CONNINFO_SYNTAX.match(message):
        return message
    quoted = next((q for q in re.finditer(r'"="|"', message) if q.group() == '"'), None)  # not the "=" it names
    if quoted is None:
        return message
    hints = "".join(h for h in _CONNINFO_HINTS if h in message[quoted.start() :])
    return message[: quoted.start()] + '"' + MARK + '"' + hints


_CONNECTION_KEYS = re.compile(r"(?i)\b(host|hostaddr|server|servername|dsn|driver|dbname|database|uid|user)\s*=")


def _is_connection_string(secret: str) -> bool:
    """Whether to name a secret's place ``<connection string>`` (a reader then knows what was there)
    rather than ``***`` (a storage credential is not one)."""
    return "://" in secret or bool(SECRET_FIELDS.search(secret) or _CONNECTION_KEYS.search(secret))


@functools.lru_cache(maxsize=256)
def _as_word(value: str) -> re.Pattern[str]:
    """``value`` where it is a whole word (see the module's docstring); an escape such as ``\\n``
    before it (a repr's line break) ends the word before, though ``n`` is a word character."""
    own = sorted({c for c in value if not c.isspace() and not (c.isalnum() or c == "_")})
    inside = r"\w" + "".join(re.escape(c) for c in own)
    before = rf"(?:(?<=\\[nrt])|(?<![{inside}])(?<!\w[.\-]))"
    after = rf"(?![{inside}])(?![.\-]\w)"
    return re.compile(before + re.escape(value) + after)


def redact(text: str, secrets: Iterable[str | None], words: bool = True) -> str:
    """``text`` without the ``secrets`` (connection strings, credentials) nor any password field.

    ``words=False`` skips the whole-word rule, for a message whose foreign parts were already
    redacted where it was built (db.py's errors): the rest is our own text, and a short password
    that happens to be one of its words (``queue``) must not mask it. Distinctive secrets, the
    connection string and password fields are still removed."""
    # marks go in as private-use stand-ins, so that a short password cannot match inside a mark
    # already placed (the word "connection" of "<connection string>")
    stand_in = {WHOLE: "\ue000", MARK: "\ue001"}
    forms: dict[str, str] = {}
    for secret in secrets:
        if secret:
            forms.setdefault(secret, stand_in[WHOLE if _is_connection_string(secret) else MARK])
            for form in password_forms(secret):
                forms.setdefault(form, stand_in[MARK])
    # longest first, so a password is not half-replaced by a shorter form of itself
    for form in sorted(forms, key=len, reverse=True):
        mark = forms[form]
        if distinctive(form):
            text = text.replace(form, mark)
        elif words:
            text = _as_word(form).sub(mark, text)  # a stand-in: no backslash to expand
    text = SECRET_FIELDS.sub(lambda m: m.group(1) + "=" + MARK, text)
    text = URI_PASSWORD.sub(lambda m: m.group(1) + MARK + m.group(3), text)
    for mark, placed in stand_in.items():
        text = text.replace(placed, mark)
    return text
