"""A tiny real OpenID Connect provider on 127.0.0.1, for the sign-in's browser test (tests/test_browser_login.py).

    with OidcProvider(client_id, client_secret, users=["ada@school.example"]) as provider:
        provider.metadata_url            # what [auth] server_metadata_url names
        provider.user = "bob@..."        # who the next sign-in is (a user who consented already)

The authorization-code flow of OpenID Connect Core 1.0 §3.1, as Streamlit's ``st.login`` (Authlib's Starlette
client) walks it, and no more: ``/.well-known/openid-configuration``; ``/authorize``, which checks the client and
its redirect URI and sends the browser straight back with a code and the state (PKCE S256 recorded);
``/token``, which takes the client's secret (Basic or form), the code once, its redirect URI and the PKCE
verifier, and answers an ``id_token`` signed RS256 (``iss``, ``sub``, ``aud``, ``exp``, ``iat``, the ``nonce``,
``email``); ``/jwks``, the public key.  A request it does not accept is a 400 with an OAuth error, which
the test would see as a failed sign-in.  Signed with joserfc (Authlib's own JOSE library).
"""
from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlencode, urlparse


class OidcProvider:
    def __init__(self, client_id: str, client_secret: str, users: list[str]):
        from joserfc.jwk import RSAKey

        self.client_id, self.client_secret, self.users = client_id, client_secret, list(users)
        self.user = self.users[0]
        self.key = RSAKey.generate_key(2048, parameters={"kid": "test-key", "use": "sig", "alg": "RS256"})
        self.codes: dict[str, dict] = {}
        self.redirects: list[str] = []  # the redirect URIs /authorize sent browsers back to
        self.issued: list[str] = []     # the users an id_token was issued for
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.metadata_url = f"{self.url}/.well-known/openid-configuration"

    def __enter__(self) -> OidcProvider:
        threading.Thread(target=self._server.serve_forever, name="oidc-provider", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    # ------------------------------------------------------------------ the endpoints
    def metadata(self) -> dict:
        return {"issuer": self.url, "authorization_endpoint": f"{self.url}/authorize",
                "token_endpoint": f"{self.url}/token", "jwks_uri": f"{self.url}/jwks",
                "response_types_supported": ["code"], "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"], "scopes_supported": ["openid", "email", "profile"],
                "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
                "code_challenge_methods_supported": ["S256"], "claims_supported": ["sub", "email", "name"]}

    def authorize(self, query: dict) -> tuple[int, dict, str]:
        redirect = query.get("redirect_uri", "")
        if query.get("client_id") != self.client_id or not redirect.startswith("http://127.0.0.1:") \
                or query.get("response_type") != "code" or "openid" not in query.get("scope", "").split():
            return 400, {}, json.dumps({"error": "invalid_request"})
        code = secrets.token_urlsafe(16)
        self.codes[code] = {"user": self.user, "redirect_uri": redirect, "nonce": query.get("nonce"),
                            "challenge": query.get("code_challenge"), "method": query.get("code_challenge_method")}
        self.redirects.append(redirect)
        back = f"{redirect}?{urlencode({'code': code, 'state': query.get('state', '')})}"
        return 302, {"Location": back}, ""

    def token(self, form: dict, authorization: str | None) -> tuple[int, dict, str]:
        client_id, secret = form.get("client_id"), form.get("client_secret")
        if authorization and authorization.startswith("Basic "):
            client_id, _, secret = base64.b64decode(authorization[6:]).decode().partition(":")
            client_id, secret = unquote(client_id), unquote(secret)  # RFC 6749 §2.3.1: form-encoded, then Basic
        if client_id != self.client_id or secret != self.client_secret:
            return 401, {}, json.dumps({"error": "invalid_client"})
        grant = self.codes.pop(form.get("code", ""), None)  # a code is used once
        if form.get("grant_type") != "authorization_code" or grant is None \
                or form.get("redirect_uri") != grant["redirect_uri"]:
            return 400, {}, json.dumps({"error": "invalid_grant"})
        if grant["challenge"]:
            verifier = form.get("code_verifier", "").encode()
            expected = base64.urlsafe_b64encode(hashlib.sha256(verifier).digest()).rstrip(b"=").decode()
            if grant["method"] != "S256" or expected != grant["challenge"]:
                return 400, {}, json.dumps({"error": "invalid_grant", "error_description": "PKCE"})
        self.issued.append(grant["user"])
        return 200, {}, json.dumps({"access_token": secrets.token_urlsafe(16), "token_type": "Bearer",
                                    "expires_in": 300, "scope": "openid email profile",
                                    "id_token": self.id_token(grant["user"], grant["nonce"])})

    def id_token(self, user: str, nonce: str | None) -> str:
        from joserfc import jwt

        now = int(time.time())
        claims = {"iss": self.url, "sub": hashlib.sha256(user.encode()).hexdigest()[:16], "aud": self.client_id,
                  "iat": now, "exp": now + 300, "email": user, "email_verified": True,
                  "name": user.split("@")[0].title()}
        if nonce:
            claims["nonce"] = nonce
        return jwt.encode({"alg": "RS256", "kid": "test-key"}, claims, self.key)

    def jwks(self) -> dict:
        return {"keys": [self.key.as_dict(private=False)]}


def _handler(provider: OidcProvider):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            url = urlparse(self.path)
            query = {key: values[0] for key, values in parse_qs(url.query).items()}
            if url.path == "/.well-known/openid-configuration":
                self._send(200, {}, json.dumps(provider.metadata()))
            elif url.path == "/jwks":
                self._send(200, {}, json.dumps(provider.jwks()))
            elif url.path == "/authorize":
                self._send(*provider.authorize(query))
            else:
                self._send(404, {}, json.dumps({"error": "not_found"}))

        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            form = {key: values[0] for key, values in parse_qs(body).items()}
            if urlparse(self.path).path == "/token":
                self._send(*provider.token(form, self.headers.get("Authorization")))
            else:
                self._send(404, {}, json.dumps({"error": "not_found"}))

        def _send(self, status: int, headers: dict, body: str) -> None:
            data = body.encode()
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", "Cache-Control": "no-store", **headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):  # quiet: pytest shows what a failed test needs
            pass

    return Handler
