"""This session's role on this server (stability.access, Note [Roles]) and the lines that say it.

    visitor = current_visitor()        # Visitor: role, identity, reason
    if visitor.may_start: ...          # draw Start; the action itself checks again (Note [Guarded in the action])
    view_only_line(visitor)            # the caption a viewer reads where a control would be
    sidebar_role_line(visitor)         # the sidebar: who this is, and Sign in / Sign out (Note [Sign-in])
"""
from __future__ import annotations

import logging

import streamlit as st

from pages.ui.links import escaped
from stability.access import VIEWER, Policy, SignIn, Visitor, missing_packages, sign_in_decides, sign_in_setup
from stability.core.errors import ConfigError

_LOG = logging.getLogger(__name__)
IDENTITY_KEYS = ("email", "preferred_username", "name", "sub")  # st.user's keys, the first one set names the visitor
_SAID = set()  # the sign-in problems this server has logged already (one line each, once)


def server_policy() -> Policy:
    """The server's rule, from its ``server.address`` and ``$STABILITY_*`` (cheap: read at every script run,
    so a test or an operator changing the environment is obeyed).  A malformed setting makes everybody a
    viewer, and says why in the log, rather than open anything."""
    try:
        return Policy.from_environment(st.get_option("server.address"))
    except ConfigError as error:
        _LOG.error("access policy: %s; serving view-only", error)
        return Policy(loopback=False, view_only=True)


def signed_in_identity() -> str | None:
    """Who this session is signed in as: ``st.user`` (``st.login``'s OpenID Connect claims, or the headers an
    authenticating proxy sets, mapped by ``server.trustedUserHeaders``); None where nobody is."""
    try:
        user = st.user.to_dict()
    except Exception:  # noqa: BLE001 - no session (a bare script run) or no sign-in configured
        return None
    for key in IDENTITY_KEYS:
        value = user.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def current_visitor() -> Visitor:
    """This session's :class:`~stability.access.Visitor`."""
    return server_policy().visitor(signed_in_identity())


def view_only_line(visitor: Visitor, where=st) -> None:
    """One caption where a viewer would have found controls: what the page is and why it cannot act."""
    if visitor.role == VIEWER:
        where.caption(f":material/visibility: **View only**: {escaped(visitor.reason)}. Runs, live charts and results "
                      "are all here; starting and stopping them is for the lecturer's own server.")


def server_sign_in() -> SignIn | None:
    """The sign-in the server's secrets set up (their ``[auth]`` section; Note [Sign-in] in
    stability/access/sign_in.py), None where they set up none.  Secrets that cannot be read are none: the
    server's log has Streamlit's own line about them."""
    try:
        if not st.secrets.load_if_toml_exists():
            return None
        auth = st.secrets.get("auth")
    except Exception:  # noqa: BLE001 - a malformed secrets file: Streamlit logs it; no sign-in, no traceback
        return None
    return sign_in_setup(auth if hasattr(auth, "items") else None, missing_packages())


def signed_in_with_provider() -> bool:
    """Whether this session signed in through ``st.login`` (a proxy's header never sets ``is_logged_in``)."""
    try:
        return st.user.to_dict().get("is_logged_in") is True
    except Exception:  # noqa: BLE001 - no session (a bare script run)
        return False


def sign_in_buttons(visitor: Visitor) -> None:
    """Sign out for a session signed in through ``st.login``; Sign in (one a provider) for one that is not,
    where the server's secrets set up a sign-in and signing in may change a role here; else nothing.  A
    sign-in that cannot work is one line (keys and packages named, never a value) and one line in the log."""
    setup = server_sign_in()
    if setup is None:
        return
    if signed_in_with_provider():
        st.button("Sign out", key="sign_out", icon=":material/logout:", on_click=st.logout,
                  help=f"Signed in as {visitor.identity}" if visitor.identity else None)
        return
    if visitor.identity is not None or not sign_in_decides(server_policy()):
        return
    if setup.problem:
        if setup.problem not in _SAID:
            _SAID.add(setup.problem)
            _LOG.error("sign-in: %s", setup.problem)
        st.caption(f":material/key_off: {setup.problem}")
        return
    for provider in setup.providers:
        label = "Sign in" if len(setup.providers) == 1 else f"Sign in with {provider}"
        st.button(label, key=f"sign_in_{provider}", icon=":material/login:", on_click=st.login, args=(provider,))


def sidebar_role_line(visitor: Visitor) -> None:
    """Who this session is, in the sidebar, wherever it is not the lone operator of a loopback server; and
    its Sign in or Sign out where the server has a sign-in (:func:`sign_in_buttons`)."""
    if visitor.role == VIEWER:
        st.caption(":material/visibility: **View only**" + (f" · {escaped(visitor.identity)}" if visitor.identity else ""))
    elif visitor.identity:  # a provider's or a proxy's text, shown as text (no mailto link, no markdown)
        st.caption(f":material/person: {escaped(visitor.identity)} · {visitor.role}")
    sign_in_buttons(visitor)
