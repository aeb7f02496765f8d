"""One cached, checksummed download helper for every real-data task.

Files live in a cache directory, resolved in this order:

1. the ``data_dir=`` option of a task build (the CLI's ``--data-dir``, the UI's
   data folder field),
2. the environment variable ``STABILITY_DATA``,
3. ``~/.stability/data``.

Each dataset gets a sub-folder (``mnist/``, ``har/``, ``ptb/``, ``ucr/<Name>/``).
A file already in the cache is checked against its known MD5 and used as is;
nothing is downloaded twice. A missing file is fetched with ``urllib`` from its
mirrors in turn, streamed into a hidden temporary file next to its final
place, checked, and only then renamed into place (``os.replace`` is atomic),
so an interrupted download never leaves a half file that a later run would
take for the real one.

Every download is over ``https``, redirects included: a plain ``http`` URL is
refused with a one-line :class:`InsecureURL` before any connection is made.
The one exception is a loopback host (``127.0.0.0/8``, ``::1``, ``localhost``),
which never leaves the machine; the tests serve files from one. A file with a
known MD5 is checked before it is used, whether it came from the cache or the
network; files without one (the HAR zip, UCR archives) are checked by their
loaders, which verify shapes and counts.

Downloads can be switched off with ``download=False`` or the environment
variable ``STABILITY_OFFLINE=1`` (the test-suite and CI do both). Every
failure a user can meet is a :class:`DatasetUnavailable` (or its subclass
:class:`ChecksumMismatch`) whose message is one line naming the URL and the
exact path where the file can be put by hand.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import io
import ipaddress
import os
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

DATA_ENV = "STABILITY_DATA"
OFFLINE_ENV = "STABILITY_OFFLINE"
DEFAULT_DATA_DIR = Path("~/.stability/data")
CHUNK_BYTES = 1 << 20
USER_AGENT = "stability-rnn-lab (python urllib)"

Progress = Callable[[str, int, "int | None"], None]
"""``progress(filename, bytes_done, bytes_total_or_None)``, called as bytes arrive."""


class DatasetUnavailable(RuntimeError):
    """A dataset file is missing and could not be downloaded; the message is one line."""

    def __init__(self, message: str):
        super().__init__(" ".join(message.split()))


class ChecksumMismatch(DatasetUnavailable):
    """A cached or downloaded file does not have its known MD5."""


class InsecureURL(DatasetUnavailable):
    """A download URL, or a redirect, that is not ``https`` (plain ``http`` is allowed on loopback only)."""


@dataclass(frozen=True)
class Remote:
    """A file the cache can hold: its name there, its mirrors (tried in order), its MD5.

    ``md5=None`` means no checksum is known; such files are checked by parsing
    (the loaders verify shapes and counts) instead.
    """

    filename: str
    urls: tuple[str, ...]
    md5: str | None = None


def mirrored(files: dict[str, tuple[str, str | None]], mirrors: tuple[str, ...]) -> dict[str, Remote]:
    """``{key: (filename, md5)}`` served from every mirror prefix -> ``{key: Remote}``."""
    return {key: Remote(filename, tuple(mirror + filename for mirror in mirrors), md5)
            for key, (filename, md5) in files.items()}


def data_root(data_dir: str | os.PathLike | None = None) -> Path:
    """The cache directory: ``data_dir`` if given, else ``$STABILITY_DATA``, else ``~/.stability/data``."""
    chosen = data_dir or os.environ.get(DATA_ENV) or DEFAULT_DATA_DIR
    return Path(chosen).expanduser()


def downloads_allowed(download: bool = True) -> bool:
    """False when the caller said ``download=False`` or ``STABILITY_OFFLINE`` is set to a true value."""
    offline = os.environ.get(OFFLINE_ENV, "").strip().lower() in {"1", "true", "yes", "on"}
    return download and not offline


def md5sum(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(CHUNK_BYTES), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(path: Path, md5: str | None) -> None:
    """Raise :class:`ChecksumMismatch` if ``path`` does not have the known ``md5``."""
    if md5 is None:
        return
    actual = md5sum(path)
    if actual != md5:
        raise ChecksumMismatch(
            f"{path} has MD5 {actual} but {md5} was expected; the file is damaged or not "
            f"the right one: delete it and build the task again to download it afresh."
        )


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[BinaryIO]:
    """Write ``path`` through a hidden temporary file beside it, renamed into place on success.

    On any exception, KeyboardInterrupt included, the temporary file is removed
    and ``path`` is left as it was (absent, for a fresh download).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = tempfile.NamedTemporaryFile(
        dir=path.parent, prefix=f".{path.name}.", suffix=".part", delete=False
    )
    try:
        with handle:
            yield handle
        os.replace(handle.name, path)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise


def fetch(
    remote: Remote,
    folder: Path,
    *,
    download: bool = True,
    progress: Progress | None = None,
    timeout: float = 60.0,
) -> Path:
    """Return the path of ``remote`` in ``folder``, downloading and verifying it if absent.

    Raises :class:`DatasetUnavailable` when the file is absent and cannot be
    downloaded (offline, no network, every mirror failing), and
    :class:`ChecksumMismatch` when the cached file or every downloaded copy has
    the wrong MD5.
    """
    path = folder / remote.filename
    if path.exists():
        verify(path, remote.md5)
        return path
    by_hand = f"download {remote.urls[0]} and save it as {path}"
    if not downloads_allowed(download):
        raise DatasetUnavailable(
            f"{remote.filename} is not in the data cache and downloads are off "
            f"(download=False or {OFFLINE_ENV} set): {by_hand}."
        )
    failures = []
    for url in remote.urls:
        try:
            _download(url, path, remote.md5, progress, timeout)
            return path
        except (ChecksumMismatch, InsecureURL) as error:
            failures.append(error)
        except DatasetUnavailable as error:
            failures.append(DatasetUnavailable(f"{url}: {error}"))
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as error:
            failures.append(DatasetUnavailable(f"{url}: {_reason(error)}"))
    if all(isinstance(error, ChecksumMismatch) for error in failures):
        raise ChecksumMismatch(f"{failures[-1]} ({by_hand} with the right content)")
    reasons = "; ".join(str(error) for error in failures)
    raise DatasetUnavailable(f"could not download {remote.filename} ({reasons}): {by_hand}.")


def is_loopback(host: str | None) -> bool:
    """True for ``localhost`` and the loopback addresses (``127.0.0.0/8``, ``::1``)."""
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name, not an address
        return False


def check_secure(url: str, redirected_from: str | None = None) -> None:
    """Raise :class:`InsecureURL` unless ``url`` is ``https``, or plain ``http`` to a loopback host."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "https" or (scheme == "http" and is_loopback(parts.hostname)):
        return
    source = f"{redirected_from} (redirected to {url})" if redirected_from else url
    raise InsecureURL(
        f"refusing to download {source}: only https URLs are allowed "
        f"(plain http only to a loopback host such as 127.0.0.1)"
    )


class _SecureRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to a URL that :func:`check_secure` accepts: no downgrade to http."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        try:
            check_secure(newurl, redirected_from=req.full_url)
        except InsecureURL:
            fp.close()
            raise
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _download(url: str, path: Path, md5: str | None, progress: Progress | None, timeout: float) -> None:
    check_secure(url)
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    opener = urllib.request.build_opener(_SecureRedirects)
    digest = hashlib.md5()
    with opener.open(request, timeout=timeout) as response, atomic_file(path) as out:
        length = response.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
        done = 0
        if progress is not None:
            progress(path.name, done, total)
        while chunk := response.read(CHUNK_BYTES):
            out.write(chunk)
            digest.update(chunk)
            done += len(chunk)
            if progress is not None:
                progress(path.name, done, total)
        if total is not None and done != total:
            raise DatasetUnavailable(f"download interrupted after {done} of {total} bytes")
        if md5 is not None and digest.hexdigest() != md5:
            raise ChecksumMismatch(
                f"{url} served a file with MD5 {digest.hexdigest()} but {md5} was expected"
            )


def _reason(error: BaseException) -> str:
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code} {error.reason}"
    if isinstance(error, urllib.error.URLError):
        return f"{type(error.reason).__name__}: {error.reason}"
    return f"{type(error).__name__}: {error}"


def zip_members(archive: Path | BinaryIO) -> dict[str, Callable[[], bytes]]:
    """Readers for every file in a zip archive, by its path inside, zips nested in it included.

    The UCI archive's current address serves a zip holding the original
    ``UCI HAR Dataset.zip``; looking inside nested zips lets one loader take
    either. macOS resource forks (``__MACOSX/``) are skipped.
    """
    try:
        bundle = zipfile.ZipFile(archive)
    except zipfile.BadZipFile:
        raise DatasetUnavailable(
            f"{archive} is not a readable zip archive: delete it and build the task again."
        ) from None
    members: dict[str, Callable[[], bytes]] = {}
    for info in bundle.infolist():
        if info.is_dir() or info.filename.startswith("__MACOSX/"):
            continue
        read = lambda name=info.filename: bundle.read(name)  # noqa: E731
        if info.filename.lower().endswith(".zip"):
            inner = zip_members(io.BytesIO(read()))
            members.update({f"{info.filename}/{name}": reader for name, reader in inner.items()})
        else:
            members[info.filename] = read
    return members


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see either nothing or the whole file."""
    with atomic_file(path) as out:
        out.write(data)
