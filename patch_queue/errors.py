"""One error base and the exit-code table.

Exit codes: 0 ok, 1 user error (bad input, nothing changed), 3 conflicts left to resolve,
4 bug (traceback written to a log file).  Every message is one line that names the file (and
line where there is one) and, where it helps, the command to run next.  No message shows a
credential: a URL's user information is dropped from every line pq prints, and from the crash log before it
is written, as git drops it, whatever characters it holds; so is every credential pq knows of (the
environment's, the command line's and the settings it read) wherever it stands (:func:`redact`).  What pq
requests, records and keys drops a URL's user information by the URL's own structure (:func:`without_userinfo`),
never by a redaction of text.
"""

from __future__ import annotations

import os
import re
import sys
import urllib.parse

# scheme://user[:password]@ in free text: the user information runs to the last "@" before the host ends (a
# "/", "?", "#", a space or a control character), whatever else it holds (quotes, "@", ":", "%xx", unicode)
_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^\x00-\x20\x7f/?#]*@")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_NAMED_USER = ("ssh", "git+ssh", "ssh+git", "sftp")  # schemes whose bare user name is no secret (git keeps it)
_SHORT = 4  # a credential shorter than this is dropped after "://" only: alone, it would be any word
_hidden: set[str] = set()


def hide(value: str) -> None:
    """Keep the credentials of every URL in ``value`` (a setting pq read: pip's configuration, a link of an index
    page) so that :func:`redact` drops them wherever they show up, whatever they hold."""
    _hidden.update(_secrets(value))


# user:password where a raw "/", "?" or "#" of the password ended the host (not a host:port/path, not a path)
_BROKEN_USERINFO = re.compile(r"[^:/?#@]+:(?![0-9]*(?:[/?#]|$))[^@]+")


def _secrets(value: str) -> list[str]:
    """The user information of every ``scheme://`` URL in a setting (its authority runs to the first "/", "?" or
    "#": spaces, quotes and newlines may be part of it; else, up to the first "@", a ``user:password`` whose
    password holds a raw "/", "?" or "#"), with its password, each also percent-decoded."""
    found: list[str] = []
    for scheme in _SCHEME.finditer(value):
        rest = value[scheme.end() :]
        userinfo, at, _host = re.split(r"[/?#]", rest, maxsplit=1)[0].rpartition("@")
        if not at and _BROKEN_USERINFO.fullmatch(broken := rest.partition("@")[0]):
            userinfo, at = broken, "@"
        if not at or not userinfo:
            continue
        user, colon, password = userinfo.partition(":")
        if not colon and scheme.group()[:-3].lower() in _NAMED_USER:
            continue
        for text in (userinfo, password or user):
            found += [text, urllib.parse.unquote(text)]
    return [text for text in dict.fromkeys(found) if text]


def _known() -> list[str]:
    """Every credential pq knows of now: the ``scheme://user:password@`` of the environment (``PIP_*``, the
    proxies, ``PQ_UPSTREAM_GIT``, ...), of the command line (a ``git:`` spec, ``--upstream``) and of the settings
    :func:`hide` kept; longest first."""
    values = [v for v in (*os.environ.values(), *sys.argv) if "@" in v and "://" in v]
    return sorted({*_hidden, *(s for v in values for s in _secrets(v))}, key=len, reverse=True)


def without_userinfo(url: str) -> str:
    """One URL without its user information, by its structure (its netloc up to the last "@"), whatever that
    information holds: what is requested, shown, recorded and keyed; ``url`` itself when it has none (or is no
    URL: its reader says so)."""
    try:
        parts = urllib.parse.urlsplit(url) if "://" in url else None
    except ValueError:
        return url
    if parts is None or "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def redact(text: str) -> str:
    """``text`` without any credential: the user information of every ``scheme://user:password@host`` URL in it
    dropped, as git prints a URL (``transport_anonymize_url``): ``https://host/path``; a known password (of a
    setting, the environment or the command line) is dropped wherever it stands, ``***`` in its place."""
    for secret in _known():
        if secret not in text:
            continue
        if len(secret) >= _SHORT:
            text = text.replace(secret + "@", "").replace(secret, "***")
        else:
            text = text.replace(f"://{secret}@", "://")
    return _USERINFO.sub(r"\1", text) if "@" in text else text


EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CONFLICT = 3
EXIT_BUG = 4


class PqError(Exception):
    """An expected failure: bad input, missing data, unreachable source.  One line, exit 1."""

    exit_code = EXIT_ERROR

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        self.path = redact(path) if path is not None else None
        self.line = line
        self.message = redact(message)  # without the "file:line: " prefix
        where = ""
        if self.path is not None:
            where = f"{self.path}:{line}: " if line is not None else f"{self.path}: "
        super().__init__(where + self.message)


class SourceError(PqError):
    """An upstream or downstream source cannot be read, resolved, downloaded or verified."""


class PatchError(PqError):
    """A patch file is malformed or does not apply."""


class QueueError(PqError):
    """queue.toml or series is malformed, or the queue is in the wrong state for the command."""
