"""The download helper against a local HTTP server on 127.0.0.1: never the internet."""

import dataclasses
import hashlib
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from stability.tasks import build, har, mnist, ptb, ucr
from stability.tasks.download import (
    ChecksumMismatch,
    DatasetUnavailable,
    InsecureURL,
    Remote,
    check_secure,
    data_root,
    fetch,
)
from test_tasks_loaders import write_mnist  # small files in the real IDX format

BODY = bytes(range(256)) * 5000  # 1.28 MB: more than one download chunk
BODY_MD5 = hashlib.md5(BODY).hexdigest()


TASKS = Path(__file__).resolve().parent.parent / "stability" / "tasks"


class Files(BaseHTTPRequestHandler):
    """Serves ``routes[path]``; a path ending in ``/truncated`` promises more bytes than it sends;
    ``redirects[path]`` answers 302 with that location."""

    routes: dict[str, bytes] = {}
    redirects: dict[str, str] = {}

    def do_GET(self):  # noqa: N802 (http.server's naming)
        if self.path in self.redirects:
            self.send_response(302)
            self.send_header("Location", self.redirects[self.path])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = self.routes.get(self.path.removesuffix("/truncated"))
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.path.endswith("/truncated"):
            self.wfile.write(body[: len(body) // 3])
            self.close_connection = True
        else:
            self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server(monkeypatch):
    for variable in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.delenv("STABILITY_OFFLINE", raising=False)
    Files.routes = {"/body.bin": BODY}
    Files.redirects = {}
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Files)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def leftovers(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.iterdir()) if folder.exists() else []


def test_download_verifies_reports_progress_and_caches(server, tmp_path):
    calls = []
    remote = Remote("body.bin", (f"{server}/body.bin",), BODY_MD5)
    path = fetch(remote, tmp_path, progress=lambda *call: calls.append(call))
    assert path == tmp_path / "body.bin" and path.read_bytes() == BODY
    assert calls[0] == ("body.bin", 0, len(BODY)) and calls[-1] == ("body.bin", len(BODY), len(BODY))
    assert [done for _, done, _ in calls] == sorted(done for _, done, _ in calls)
    Files.routes = {}  # a second fetch uses the cache
    assert fetch(remote, tmp_path) == path
    assert leftovers(tmp_path) == ["body.bin"]


def test_a_failing_mirror_falls_through_to_the_next(server, tmp_path):
    remote = Remote("body.bin", (f"{server}/missing.bin", f"{server}/body.bin"), BODY_MD5)
    assert fetch(remote, tmp_path).read_bytes() == BODY


def test_every_mirror_failing_is_one_line_naming_url_and_path(server, tmp_path):
    remote = Remote("body.bin", (f"{server}/missing.bin", f"{server}/gone.bin"), BODY_MD5)
    with pytest.raises(DatasetUnavailable) as error:
        fetch(remote, tmp_path / "cache")
    message = str(error.value)
    assert "\n" not in message and "HTTP 404" in message
    assert f"download {server}/missing.bin and save it as {tmp_path / 'cache' / 'body.bin'}" in message
    assert leftovers(tmp_path / "cache") == []


def test_no_server_at_all(tmp_path):
    remote = Remote("body.bin", ("http://127.0.0.1:9/body.bin",), None)  # port 9: nothing listens
    with pytest.raises(DatasetUnavailable, match="could not download body.bin .*127.0.0.1:9"):
        fetch(remote, tmp_path, timeout=5)


def test_a_served_file_with_the_wrong_checksum_is_refused(server, tmp_path):
    remote = Remote("body.bin", (f"{server}/body.bin",), "0" * 32)
    with pytest.raises(ChecksumMismatch) as error:
        fetch(remote, tmp_path)
    assert "\n" not in str(error.value) and BODY_MD5 in str(error.value)
    assert leftovers(tmp_path) == []


def test_a_cached_file_with_the_wrong_checksum_is_refused(tmp_path):
    (tmp_path / "body.bin").write_bytes(b"not the file")
    remote = Remote("body.bin", ("http://127.0.0.1:9/body.bin",), BODY_MD5)
    with pytest.raises(ChecksumMismatch, match=r"body.bin has MD5 .* but .* was expected.*delete it"):
        fetch(remote, tmp_path)
    assert (tmp_path / "body.bin").read_bytes() == b"not the file"  # left for the user to inspect


def test_a_truncated_download_leaves_no_partial_file(server, tmp_path):
    remote = Remote("body.bin", (f"{server}/body.bin/truncated",), None)
    with pytest.raises(DatasetUnavailable, match="interrupted after"):
        fetch(remote, tmp_path)
    assert leftovers(tmp_path) == []


def test_an_interrupted_download_leaves_no_partial_file(server, tmp_path):
    def interrupt(name, done, total):
        if done > 0:
            raise KeyboardInterrupt

    remote = Remote("body.bin", (f"{server}/body.bin",), BODY_MD5)
    with pytest.raises(KeyboardInterrupt):
        fetch(remote, tmp_path, progress=interrupt)
    assert leftovers(tmp_path) == []
    assert fetch(remote, tmp_path).read_bytes() == BODY  # and the next attempt starts clean


def test_offline_never_downloads(server, tmp_path, monkeypatch):
    remote = Remote("body.bin", (f"{server}/body.bin",), BODY_MD5)
    with pytest.raises(DatasetUnavailable, match="downloads are off"):
        fetch(remote, tmp_path, download=False)
    monkeypatch.setenv("STABILITY_OFFLINE", "1")
    with pytest.raises(DatasetUnavailable, match=f"download {server}/body.bin and save it as {tmp_path / 'body.bin'}"):
        fetch(remote, tmp_path)
    assert leftovers(tmp_path) == []


def test_data_root_resolution(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("STABILITY_DATA", raising=False)
    assert data_root() == tmp_path / "home" / ".stability" / "data"
    monkeypatch.setenv("STABILITY_DATA", str(tmp_path / "env"))
    assert data_root() == tmp_path / "env"
    assert data_root(tmp_path / "option") == tmp_path / "option"  # the build option wins


def test_mnist_builds_from_a_download(server, tmp_path, monkeypatch):
    staging = tmp_path / "staging"
    write_mnist(staging)
    Files.routes = {f"/mnist/{path.name}": path.read_bytes() for path in staging.iterdir()}
    remotes = {
        key: dataclasses.replace(
            remote,
            urls=(f"{server}/nowhere/{remote.filename}", f"{server}/mnist/{remote.filename}"),
            md5=hashlib.md5(Files.routes[f"/mnist/{remote.filename}"]).hexdigest(),
        )
        for key, remote in mnist.REMOTES.items()
    }
    monkeypatch.setattr(mnist, "REMOTES", remotes)
    seen = set()
    task = build("mnist", data_dir=tmp_path / "cache", val_size=10, progress=lambda name, *_: seen.add(name))
    assert seen == {remote.filename for remote in remotes.values()}
    assert task.split_size("train") == 110 and task.split_size("test") == 40
    assert leftovers(tmp_path / "cache" / "mnist") == sorted(seen)


# --- https only -----------------------------------------------------------------------------


def test_every_url_in_the_task_modules_is_https():
    schemes = {
        (path.name, match.group(0))
        for path in TASKS.glob("*.py")
        for match in re.finditer(r"[A-Za-z][A-Za-z0-9+.-]*://", path.read_text())
    }
    assert schemes and {scheme for _, scheme in schemes} == {"https://"}, sorted(schemes)
    remotes = [*mnist.REMOTES.values(), *ptb.REMOTES.values(), har.ARCHIVE]
    urls = [url for remote in remotes for url in remote.urls] + [url.format(name="Adiac") for url in ucr.MIRRORS]
    assert len(urls) == 4 * 2 + 3 * 2 + 3 + 2
    for url in urls:
        assert url.startswith("https://")
        check_secure(url)


@pytest.mark.parametrize("url", [
    "http://example.com/mnist/train-images-idx3-ubyte.gz",
    "http://10.0.0.1/data.zip",
    "HTTP://example.com/x",
    "ftp://example.com/x",
    "file:///etc/passwd",
    "http://127.0.0.1.example.com/x",
    "example.com/x",
])
def test_a_url_that_is_not_https_is_refused_with_one_line(url, tmp_path):
    with pytest.raises(InsecureURL) as error:
        check_secure(url)
    assert "\n" not in str(error.value) and url in str(error.value) and "only https" in str(error.value)
    # through the helper: nothing is contacted, nothing is written, the next mirror is not skipped
    with pytest.raises(DatasetUnavailable) as error:
        fetch(Remote("x.bin", (url,), None), tmp_path)
    message = str(error.value)
    assert "\n" not in message and f"refusing to download {url}: only https URLs are allowed" in message
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("url", [
    "https://example.com/x", "http://127.0.0.1:8000/x", "http://127.8.9.10/x",
    "http://localhost/x", "http://[::1]:8000/x",
])
def test_https_and_loopback_http_are_accepted(url):
    check_secure(url)


def test_an_insecure_mirror_is_skipped_for_the_next_one(server, tmp_path):
    remote = Remote("body.bin", ("http://example.com/body.bin", f"{server}/body.bin"), BODY_MD5)
    assert fetch(remote, tmp_path).read_bytes() == BODY


def test_a_redirect_to_plain_http_is_refused(server, tmp_path):
    Files.redirects = {"/moved.bin": "http://example.com/body.bin", "/local.bin": f"{server}/body.bin"}
    remote = Remote("body.bin", (f"{server}/moved.bin",), BODY_MD5)
    with pytest.raises(DatasetUnavailable) as error:
        fetch(remote, tmp_path)
    message = str(error.value)
    assert "\n" not in message
    assert f"refusing to download {server}/moved.bin (redirected to http://example.com/body.bin)" in message
    assert leftovers(tmp_path) == []
    # a redirect that stays on loopback is followed, and what it serves is still checked
    assert fetch(Remote("body.bin", (f"{server}/local.bin",), BODY_MD5), tmp_path).read_bytes() == BODY
    with pytest.raises(ChecksumMismatch):
        fetch(Remote("other.bin", (f"{server}/local.bin",), "0" * 32), tmp_path)
    assert leftovers(tmp_path) == ["body.bin"]
