"""Sign-in through ``st.login`` end to end (stability/access/sign_in.py, Note [Sign-in]; Note [Roles]).

A real OpenID Connect provider on 127.0.0.1 (tests/oidc_provider.py: discovery, /authorize, /token with an
RS256 id_token, /jwks), a real ``streamlit run app.py`` whose secrets file points its ``[auth]`` at it, with
one operator named, and a real Chromium that clicks the sidebar's Sign in and follows the redirects: nobody
signed in views; the operator, signed in, gets Start; Sign out views again; a second user of the same
provider, not named, views.  The sidebar's logic without a browser: the tests of ``sign_in_setup``.
"""
from __future__ import annotations

import secrets
from importlib import util

import pytest

from browsers import LOGS, browser, streamlit_server, unavailable  # noqa: F401 - browser: the fixture
from stability.access import Policy, SignIn, sign_in_decides, sign_in_setup

ADA = "ada@school.example"  # the operator
BOB = "bob@school.example"  # signed in with the same provider, named nowhere
CLIENT_ID = "stability-lab"
COMPLETE = {"redirect_uri": "http://127.0.0.1:{port}/oauth2callback", "cookie_secret": "c" * 32,
            "client_id": CLIENT_ID, "client_secret": "s" * 24,
            "server_metadata_url": "http://127.0.0.1:1/.well-known/openid-configuration"}


# ------------------------------------------------------------------------------ the sidebar's logic
def test_no_auth_section_is_no_sign_in():
    assert sign_in_setup(None) is None and sign_in_setup({}) is None


def test_a_complete_section_signs_in_with_its_default_or_named_providers():
    assert sign_in_setup(COMPLETE) == SignIn(("default",))
    shared = {key: COMPLETE[key] for key in ("redirect_uri", "cookie_secret")}
    school = {key: COMPLETE[key] for key in ("client_id", "client_secret", "server_metadata_url")}
    assert sign_in_setup({**shared, "school": school, "google": school}).providers == ("school", "google")


@pytest.mark.parametrize("change, said", [
    ({"cookie_secret": None}, "[auth] lacks cookie_secret"),
    ({"client_secret": None}, "[auth] lacks client_secret"),
    ({"redirect_uri": "http://127.0.0.1:8501/"}, "redirect_uri must be this server's address followed by"),
])
def test_a_section_that_cannot_work_is_one_line_naming_keys_never_values(change, said):
    section = {key: value for key, value in {**COMPLETE, **change}.items() if value is not None}
    setup = sign_in_setup(section)
    assert setup.providers == () and said in setup.problem and "\n" not in setup.problem
    assert "s" * 24 not in setup.problem and "c" * 32 not in setup.problem


def test_authlib_missing_is_one_line_with_the_install_command():
    setup = sign_in_setup(COMPLETE, missing=("Authlib>=1.3.2",))
    assert setup.providers == ()
    assert setup.problem == 'Sign-in is set up but cannot work: it needs Authlib>=1.3.2 (pip install -e ".[auth]").'


def test_the_sign_in_is_offered_only_where_it_may_change_a_role():
    assert sign_in_decides(Policy(loopback=True, operators=frozenset({ADA})))
    assert sign_in_decides(Policy(loopback=False, students_run=True))
    assert not sign_in_decides(Policy(loopback=True))  # everybody an operator already
    assert not sign_in_decides(Policy(loopback=False))  # nobody signed in can be more than a viewer
    assert not sign_in_decides(Policy(loopback=False, view_only=True, operators=frozenset({ADA})))


# ------------------------------------------------------------------------------ the sidebar, drawn (no browser)
def _sidebar_script():
    import streamlit as st

    import pages.ui.access as access

    with st.sidebar:
        access.sidebar_role_line(access.current_visitor())


@pytest.mark.parametrize("auth, user, without_authlib, buttons, line", [
    (None, {}, False, [], None),                                            # no [auth]: no button, no line
    (COMPLETE, {}, False, ["Sign in"], None),
    (COMPLETE, {"is_logged_in": True, "email": ADA}, False, ["Sign out"], f"{ADA} · operator"),
    (COMPLETE, {}, True, [], 'it needs Authlib>=1.3.2 (pip install -e ".[auth]")'),
])
def test_the_sidebar_offers_sign_in_and_out_or_says_in_one_line_why_not(monkeypatch, auth, user, without_authlib,
                                                                         buttons, line):
    from streamlit.testing.v1 import AppTest

    import pages.ui.access  # the module the script runs, in this process

    missing = ("Authlib>=1.3.2",) if without_authlib else ()  # as a Python without / with the auth extra says
    monkeypatch.setattr(pages.ui.access, "missing_packages", lambda: missing)
    monkeypatch.setenv("STABILITY_OPERATORS", ADA)
    monkeypatch.delenv("STABILITY_VIEW_ONLY", raising=False)
    app = AppTest.from_function(_sidebar_script, default_timeout=60)
    app.user = user
    if auth is not None:
        app.secrets["auth"] = auth
    app.run()
    assert not app.exception
    assert [button.label for button in app.sidebar.button] == buttons
    captions = " ".join(caption.value for caption in app.sidebar.caption)
    assert line is None or line in captions.replace("\\", "")  # the identity escaped: text, not a mailto link
    assert COMPLETE["client_secret"] not in captions and COMPLETE["cookie_secret"] not in captions


# ------------------------------------------------------------------------------ a real provider and browser
@pytest.fixture
def provider():
    for module, package in (("authlib", "Authlib"), ("httpx", "httpx"), ("joserfc", "joserfc")):
        if util.find_spec(module) is None:
            unavailable(f"{package} is not installed (pip install -e \".[test]\"): st.login cannot sign in")
    from oidc_provider import OidcProvider

    with OidcProvider(CLIENT_ID, secrets.token_urlsafe(24), users=[ADA, BOB]) as running:
        yield running


def sidebar_says(page, text: str) -> None:
    page.locator('[data-testid="stSidebar"]').get_by_text(text).first.wait_for(timeout=60_000)


def sign_in_button(page):
    return page.locator('[data-testid="stSidebar"]').get_by_role("button", name="Sign in")


def starts(page) -> int:
    return page.get_by_role("button", name="Start", exact=True).count()


@pytest.mark.browser
def test_signing_in_with_the_schools_provider_decides_the_role(tmp_path, provider, browser):  # noqa: F811
    cookie_secret = secrets.token_urlsafe(32)
    secrets_file = tmp_path / "secrets.toml"
    secrets_file.write_text("[auth]\n"
                            'redirect_uri = "http://127.0.0.1:{port}/oauth2callback"\n'
                            f'cookie_secret = "{cookie_secret}"\n'
                            f'client_id = "{provider.client_id}"\n'
                            f'client_secret = "{provider.client_secret}"\n'
                            f'server_metadata_url = "{provider.metadata_url}"\n')
    env = {"STREAMLIT_SECRETS_FILES": str(secrets_file), "STABILITY_OPERATORS": ADA, "STABILITY_STUDENTS": "",
           "STABILITY_VIEW_ONLY": "", "STABILITY_OFFLINE": "1"}
    with streamlit_server(tmp_path / "runs.db", tmp_path / "server.log", env) as (url, _process):
        page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        page.goto(url)
        sign_in_button(page).wait_for(timeout=90_000)  # nobody signed in: a viewer, offered the sign-in
        sidebar_says(page, "View only")
        assert starts(page) == 0

        sign_in_button(page).click()  # st.login: /auth/login -> the provider -> /oauth2callback -> the app
        sidebar_says(page, f"{ADA} · operator")
        page.get_by_role("button", name="Start", exact=True).wait_for(timeout=60_000)
        assert provider.issued == [ADA] and provider.redirects == [f"{url}/oauth2callback"]
        page.locator('[data-testid="stSidebar"]').screenshot(path=str(tmp_path / "signed-in-sidebar.png"))
        assert sign_in_button(page).count() == 0

        page.locator('[data-testid="stSidebar"]').get_by_role("button", name="Sign out").click()
        sign_in_button(page).wait_for(timeout=60_000)
        sidebar_says(page, "View only")
        assert starts(page) == 0 and page.get_by_text(ADA).count() == 0

        provider.user = BOB  # the same provider's other user, named nowhere
        sign_in_button(page).click()
        sidebar_says(page, f"View only · {BOB}")
        page.get_by_text("not an operator of this server").first.wait_for(timeout=60_000)
        assert starts(page) == 0 and provider.issued == [ADA, BOB]
        page.context.close()
        log = LOGS[url].read_text()
        assert cookie_secret not in log and provider.client_secret not in log
