"""This session's role on this server (stability.access, Note [Roles]) and the lines that say it.

    visitor = current_visitor()        # Visitor: role, identity, reason
    if visitor.may_start: ...          # draw Start; the action itself checks again (Note [Guarded in the action])
    view_only_line(visitor)            # the caption a viewer reads where a control would be
"""
from __future__ import annotations

import logging

import streamlit as st

from stability.access import VIEWER, Policy, Visitor
from stability.core.errors import ConfigError

_LOG = logging.getLogger(__name__)
IDENTITY_KEYS = ("email", "preferred_username", "name", "sub")  # st.user's keys, the first one set names the visitor


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
        where.caption(f":material/visibility: **View only**: {visitor.reason}. Runs, live charts and results "
                      "are all here; starting and stopping them is for the lecturer's own server.")


def sidebar_role_line(visitor: Visitor) -> None:
    """Who this session is, in the sidebar, wherever it is not the lone operator of a loopback server."""
    if visitor.role == VIEWER:
        st.caption(":material/visibility: **View only**" + (f" · {visitor.identity}" if visitor.identity else ""))
    elif visitor.identity:
        st.caption(f":material/person: {visitor.identity} · {visitor.role}")
