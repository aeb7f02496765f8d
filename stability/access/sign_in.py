"""Sign-in with the school's OpenID Connect provider (Streamlit's ``st.login``): is it set up, can it work here,
and does it decide anything on this server.  Plain values in, plain values out; the pages draw the buttons
(pages/ui/access.py).

    setup = sign_in_setup(auth_section, missing_packages())   # None: no [auth] in the server's secrets
    setup.providers, setup.problem                             # ("default",), None  /  (), "one line"
    sign_in_decides(policy)                                    # may signing in change a visitor's role here

Note [Sign-in]
--------------
Streamlit 1.67 signs a visitor in through ``st.login`` when the server's secrets (``.streamlit/secrets.toml``
where the server starts, or the files of ``--secrets.files``) hold an ``[auth]`` section: ``redirect_uri``
(this server's address and ``/oauth2callback``; ``{port}`` stands for the server's port) and
``cookie_secret`` (signs the identity cookie), with a provider's ``client_id``, ``client_secret`` and
``server_metadata_url`` (its ``/.well-known/openid-configuration``) either in ``[auth]`` itself (the default
provider) or in named tables ``[auth.NAME]``.  It needs Authlib ≥ 1.3.2 and httpx (``pip install -e
".[auth]"``).  ``st.user`` then holds the provider's claims; the ``email`` names the visitor
(``pages/ui/access.py``: ``IDENTITY_KEYS``) and :class:`~stability.access.policy.Policy` decides its role.

Every sidebar offers Sign in where signing in may change a role (:func:`sign_in_decides`): not on a
view-only server, and not on a loopback server that names no operators, where everybody is an operator
already (``stability classroom``'s own server reads the same checkout's secrets, but its redirect_uri is the
room's).  A signed-in visitor always gets Sign out.  A section that cannot work (a key missing, Authlib
missing) is one line in the sidebar instead of a button whose click would end in a traceback; the line
names keys and packages, never a value: the section holds the client secret and the cookie secret.
"""
from __future__ import annotations

import functools
import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata

from .policy import Policy

SHARED_KEYS = ("redirect_uri", "cookie_secret")
PROVIDER_KEYS = ("client_id", "client_secret", "server_metadata_url")
CALLBACK_PATH = "/oauth2callback"  # Streamlit's callback route: the redirect_uri must end with it
DEFAULT_PROVIDER = "default"       # st.login()'s provider where [auth] holds the client itself
AUTH_EXTRA = 'pip install -e ".[auth]"'


@dataclass(frozen=True)
class SignIn:
    """The server's sign-in: the providers a Sign in button may name, or why none can work."""

    providers: tuple[str, ...] = ()
    problem: str | None = None  # one line, naming keys and packages only


@functools.cache
def missing_packages() -> tuple[str, ...]:
    """What ``st.login`` needs and this Python lacks (Streamlit's ``auth`` extra: Authlib ≥ 1.3.2, httpx)."""
    missing = []
    try:
        version = tuple(int(part) for part in metadata.version("Authlib").split(".")[:3] if part.isdigit())
    except metadata.PackageNotFoundError:
        version = ()
    if version < (1, 3, 2):
        missing.append("Authlib>=1.3.2")
    if importlib.util.find_spec("httpx") is None:
        missing.append("httpx")
    return tuple(missing)


def _providers(auth: Mapping) -> tuple[list[str], str | None]:
    """The providers of an ``[auth]`` section, or the first thing one of them lacks."""
    named = [name for name, value in auth.items() if isinstance(value, Mapping) and name != "client_kwargs"]
    found = ([DEFAULT_PROVIDER] if any(key in auth for key in PROVIDER_KEYS) else []) + named
    for name in found:
        table = auth if name == DEFAULT_PROVIDER else auth[name]
        lacking = [key for key in PROVIDER_KEYS if not table.get(key)]
        where = "[auth]" if name == DEFAULT_PROVIDER else f"[auth.{name}]"
        if "_" in name:
            return [], f"{where}: a provider's name may not contain '_' (Streamlit refuses it)"
        if lacking:
            return [], f"{where} lacks {', '.join(lacking)}"
    if not found:
        return [], "[auth] names no provider (" + ", ".join(PROVIDER_KEYS) + ")"
    return found, None


def sign_in_setup(auth: Mapping | None, missing: Sequence[str] = ()) -> SignIn | None:
    """The sign-in an ``[auth]`` section sets up (None where there is none), given the packages ``missing``."""
    if not auth:
        return None
    providers, problem = _providers(auth)
    lacking = [key for key in SHARED_KEYS if not auth.get(key)]
    if lacking:
        problem = f"[auth] lacks {', '.join(lacking)}"
    elif not str(auth["redirect_uri"]).rstrip().endswith(CALLBACK_PATH):
        problem = f"[auth] redirect_uri must be this server's address followed by {CALLBACK_PATH}"
    if problem is None and missing:
        problem = f"it needs {' and '.join(missing)} ({AUTH_EXTRA})"
    if problem is not None:
        return SignIn((), f"Sign-in is set up but cannot work: {problem}.")
    return SignIn(tuple(providers))


def sign_in_decides(policy: Policy) -> bool:
    """Whether signing in may change a visitor's role on a server with ``policy`` (Note [Roles]): named
    operators make the sign-in decide; a server beyond loopback that lets students run makes it decide
    too; a view-only server, or a loopback one naming nobody (everybody an operator), it does not."""
    if policy.view_only:
        return False
    return bool(policy.operators) or (policy.students_run and not policy.loopback)
