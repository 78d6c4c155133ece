"""Filesystem URIs as options name them (s3://BUCKET/PREFIX?endpoint_override=..., gs://, hdfs://...):
told from a local path, shown and stored without their secrets, and refused where a command writes
as it goes. Rules on strings only; store/remote_runs.py opens and copies what they name."""

from __future__ import annotations

import re
import urllib.parse

from ..errors import ConfigError

URI_FORM = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://.*", re.DOTALL)
URI_ACCEPTED = (
    "a filesystem URI pyarrow opens, e.g. s3://BUCKET/PREFIX (AWS credentials from the environment; "
    "another S3 server: ?endpoint_override=HOST:PORT&scheme=http), gs://BUCKET/PREFIX, hdfs://HOST:PORT/PATH"
)
SECRET_WORDS = ("key", "secret", "token", "password", "credential", "sas", "sig", "ticket")
"""A query parameter whose name holds one of these is left out wherever the URI is shown or stored."""


def is_uri(text: str) -> bool:
    """Whether `text` names a filesystem by URI (scheme://...) rather than a local path."""
    return bool(URI_FORM.fullmatch(text))


def without_secrets(uri: str) -> str:
    """The URI as messages, run.json and --json show it: without user:password@ and without the
    query parameters that carry secrets (endpoint_override, scheme and region are kept)."""
    parts = urllib.parse.urlsplit(uri)
    netloc = parts.netloc.rpartition("@")[2]
    query = [
        (k, v)
        for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
        if not _secret(k)
    ]
    return urllib.parse.urlunsplit(
        (parts.scheme, netloc, parts.path, urllib.parse.urlencode(query, safe=":/"), "")
    )


def join(uri: str, name: str) -> str:
    """`uri` with `name` appended to its path, the query kept: s3://b/p?x=1 + run=a -> s3://b/p/run=a?x=1."""
    parts = urllib.parse.urlsplit(uri)
    return urllib.parse.urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/" + name))


def local_only(path: str, option: str = "--out") -> None:
    """ConfigError(option) for a URI where a command writes as it goes (a sweep, a search, a
    scenario): only a run's finished directory is copied to one (runner/remote_out.py)."""
    if is_uri(path):
        raise ConfigError(
            option,
            f"got {without_secrets(path)!r}: this command writes to a local directory as it goes; "
            "accepted: a directory path (a URI: zmqload run --out URI)",
        )


def _secret(name: str) -> bool:
    return any(word in name.lower() for word in SECRET_WORDS)


def _secrets_of(uri: str) -> list[str]:
    """The secret values in `uri`, to be scrubbed from any text that may repeat them."""
    parts = urllib.parse.urlsplit(uri)
    found = [p for p in re.split(r"[:@]", parts.netloc.rpartition("@")[0]) if p]
    found += [v for k, v in urllib.parse.parse_qsl(parts.query) if _secret(k) and v]
    return found


def scrubbed(text: str, uri: str) -> str:
    """`text` (an error's, say) with every secret of `uri` replaced by ***, on one line."""
    for secret in _secrets_of(uri):
        text = text.replace(secret, "***").replace(urllib.parse.quote(secret, safe=""), "***")
    return " ".join(text.split())
