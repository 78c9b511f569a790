"""A real, small OAuth 2.1 authorization server on a loopback port, for the tests.

It checks what a real one checks: the PKCE S256 verifier, client
authentication (``client_secret_basic``, ``client_secret_post``, ``none``), the
exact redirect URI, single-use codes and known refresh tokens. It offers RFC
8414 metadata and RFC 7591 registration, counts its token calls, and remembers
every secret it issued or received so tests can look for them where they must
not be.

Knobs (attributes, changed by tests): ``access_ttl`` (expires_in), ``rotate_refresh``
(issue a new refresh token on refresh), ``token_delay`` (seconds the token
endpoint sleeps, to make concurrent calls overlap), ``token_failure``
(``None``, ``"500"``, ``"garbage"``, ``"invalid_grant"``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit


class LocalOAuthServer:
    def __init__(self, *, static_clients: dict[str, dict[str, Any]] | None = None) -> None:
        self.lock = threading.Lock()
        self.clients: dict[str, dict[str, Any]] = dict(static_clients or {})
        self.codes: dict[str, dict[str, Any]] = {}
        self.refresh_tokens: dict[str, str] = {}  # refresh token -> client_id
        self.issued: list[str] = []  # every secret issued or received
        self.token_calls: dict[str, int] = {"authorization_code": 0, "refresh_token": 0}
        self.registrations = 0
        self.access_ttl = 3600
        self.rotate_refresh = True
        self.token_delay = 0.0
        self.token_failure: str | None = None
        for client_id, client in self.clients.items():
            if client.get("client_secret"):
                self.issued.append(client["client_secret"])
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="local-oauth-server", daemon=True)

    def __enter__(self) -> LocalOAuthServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)

    @property
    def metadata(self) -> dict[str, Any]:
        return {
            "issuer": self.base_url,
            "authorization_endpoint": f"{self.base_url}/authorize",
            "token_endpoint": f"{self.base_url}/token",
            "registration_endpoint": f"{self.base_url}/register",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post", "none"],
        }

    def total_token_calls(self) -> int:
        with self.lock:
            return sum(self.token_calls.values())

    # -- the browser's step ----------------------------------------------------------------------

    def authorize(self, authorization_url: str, *, deny: bool = False) -> dict[str, str]:
        """Play the browser: follow the authorization URL; return the callback's query parameters.

        Uses ``http.client`` rather than httpx so the browser's URL (with its
        state) stays out of the logs the tests inspect for secrets.
        """
        import http.client

        url = urlsplit(authorization_url + ("&deny=1" if deny else ""))
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
        try:
            conn.request("GET", f"{url.path}?{url.query}")
            response = conn.getresponse()
            body = response.read()
            assert response.status == 302, (response.status, body)
            location = urlsplit(response.getheader("location"))
        finally:
            conn.close()
        return {key: values[0] for key, values in parse_qs(location.query).items()}

    # -- endpoints ---------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                if parts.path == "/.well-known/oauth-authorization-server":
                    return self._json(200, server.metadata)
                if parts.path == "/authorize":
                    return server._authorize(self, {k: v[0] for k, v in parse_qs(parts.query).items()})
                self._json(404, {"error": "not_found"})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length).decode()
                path = urlsplit(self.path).path
                if path == "/register":
                    return server._register(self, json.loads(body or "{}"))
                if path == "/token":
                    return server._token(self, {k: v[0] for k, v in parse_qs(body).items()})
                self._json(404, {"error": "not_found"})

            def _json(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(data)

            def _raw(self, status: int, data: bytes, content_type: str = "text/plain") -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _redirect(self, location: str) -> None:
                self.send_response(302)
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

        return Handler

    def _register(self, handler: Any, request: dict[str, Any]) -> None:
        redirect_uris = request.get("redirect_uris")
        if not isinstance(redirect_uris, list) or not redirect_uris:
            return handler._json(400, {"error": "invalid_redirect_uri"})
        method = request.get("token_endpoint_auth_method", "client_secret_basic")
        client_id = "client-" + secrets.token_hex(8)
        client: dict[str, Any] = {"redirect_uris": redirect_uris, "token_endpoint_auth_method": method}
        answer = {"client_id": client_id, **request, "client_id_issued_at": int(time.time())}
        if method != "none":
            client["client_secret"] = answer["client_secret"] = "csecret-" + secrets.token_urlsafe(24)
            answer["client_secret_expires_at"] = 0
        with self.lock:
            self.clients[client_id] = client
            self.registrations += 1
            if "client_secret" in client:
                self.issued.append(client["client_secret"])
        handler._json(201, answer)

    def _authorize(self, handler: Any, params: dict[str, str]) -> None:
        client = self.clients.get(params.get("client_id", ""))
        if client is None:
            return handler._json(400, {"error": "invalid_client"})
        redirect_uri = params.get("redirect_uri")
        if redirect_uri not in client["redirect_uris"]:
            return handler._json(400, {"error": "invalid_redirect_uri"})  # never redirect to an unknown URI
        state = params.get("state", "")
        with self.lock:
            self.issued.append(state)
        if params.get("deny"):
            return handler._redirect(f"{redirect_uri}?{urlencode({'error': 'access_denied', 'state': state})}")
        if params.get("response_type") != "code" or params.get("code_challenge_method") != "S256" or not params.get(
            "code_challenge"
        ):
            return handler._redirect(f"{redirect_uri}?{urlencode({'error': 'invalid_request', 'state': state})}")
        code = "code-" + secrets.token_urlsafe(24)
        with self.lock:
            self.codes[code] = {
                "client_id": params["client_id"],
                "redirect_uri": redirect_uri,
                "challenge": params["code_challenge"],
                "scope": params.get("scope", ""),
                "expires": time.monotonic() + 60,
            }
            self.issued.append(code)
        handler._redirect(f"{redirect_uri}?{urlencode({'code': code, 'state': state})}")

    def _client_id(self, handler: Any, form: dict[str, str]) -> str | None:
        """The authenticated client, or None (RFC 6749 2.3)."""
        header = handler.headers.get("Authorization", "")
        if header.startswith("Basic "):
            client_id, _, secret = base64.b64decode(header[6:]).decode().partition(":")
            method = "client_secret_basic"
        else:
            client_id, secret = form.get("client_id", ""), form.get("client_secret")
            method = "client_secret_post" if secret else "none"
        client = self.clients.get(client_id)
        if client is None or client["token_endpoint_auth_method"] != method:
            return None
        if method != "none" and not secrets.compare_digest(secret or "", client.get("client_secret", "")):
            return None
        return client_id

    def _token(self, handler: Any, form: dict[str, str]) -> None:
        grant = form.get("grant_type", "")
        with self.lock:
            if grant in self.token_calls:
                self.token_calls[grant] += 1
            for key in ("code_verifier", "refresh_token"):
                if form.get(key):
                    self.issued.append(form[key])
        if self.token_delay:
            time.sleep(self.token_delay)
        if self.token_failure == "500":
            return handler._raw(500, b"Internal Server Error")
        if self.token_failure == "garbage":
            return handler._raw(200, b"<html>surely not json", "text/html")
        if self.token_failure == "invalid_grant":
            return handler._json(400, {"error": "invalid_grant"})
        client_id = self._client_id(handler, form)
        if client_id is None:
            return handler._json(401, {"error": "invalid_client"})
        if grant == "authorization_code":
            with self.lock:
                issued = self.codes.pop(form.get("code", ""), None)  # single use
            if issued is None or issued["client_id"] != client_id or issued["expires"] < time.monotonic():
                return handler._json(400, {"error": "invalid_grant"})
            if form.get("redirect_uri") != issued["redirect_uri"]:
                return handler._json(400, {"error": "invalid_grant", "error_description": "redirect_uri mismatch"})
            verifier = form.get("code_verifier", "")
            challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
            if not 43 <= len(verifier) <= 128 or challenge != issued["challenge"]:
                return handler._json(400, {"error": "invalid_grant", "error_description": "PKCE verification failed"})
            return handler._json(200, self._issue(client_id, issued["scope"], new_refresh=True))
        if grant == "refresh_token":
            with self.lock:
                owner = self.refresh_tokens.get(form.get("refresh_token", ""))
            if owner != client_id:
                return handler._json(400, {"error": "invalid_grant"})
            if self.rotate_refresh:
                with self.lock:
                    del self.refresh_tokens[form["refresh_token"]]
            return handler._json(200, self._issue(client_id, "", new_refresh=self.rotate_refresh))
        handler._json(400, {"error": "unsupported_grant_type"})

    def _issue(self, client_id: str, scope: str, *, new_refresh: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "access_token": "atok-" + secrets.token_urlsafe(24),
            "token_type": "Bearer",
            "expires_in": self.access_ttl,
        }
        if scope:
            body["scope"] = scope
        with self.lock:
            self.issued.append(body["access_token"])
            if new_refresh:
                body["refresh_token"] = "rtok-" + secrets.token_urlsafe(24)
                self.refresh_tokens[body["refresh_token"]] = client_id
                self.issued.append(body["refresh_token"])
        return body
