"""A SigV4-verifying front before the Iceberg REST fixture, for tests/catalog_sigv4.rs.

Every request's signature is recomputed with botocore's SigV4Auth (an implementation independent
of the registrar's aws-sigv4) from the keys, region and signing name this front was started with,
over the method, path, query, headers and body exactly as they arrived. A request that does not
verify gets 403 with a REST ErrorModel body, as AWS answers; one that does is forwarded to the
fixture and the answer relayed.

Checked, beyond the signature itself:
- every header that arrived is signed (but the framing ones the HTTP client adds after signing,
  and User-Agent, which SigV4 signers leave out): headers set before signing are covered;
- x-amz-content-sha256 is the SHA-256 of the body received (botocore trusts that header);
- X-Amz-Date is within 5 minutes of this front's clock (plus --clock-offset, to fake skew);
- with a session token, x-amz-security-token carries it and is signed.

Keys come from the environment (SIGV4_FRONT_ACCESS_KEY, SIGV4_FRONT_SECRET_KEY,
SIGV4_FRONT_SESSION_TOKEN), not argv. Prints `READY <port>` once listening on 127.0.0.1, logs one
JSON line per request to --log, and exits when its stdin closes (the test that started it died).
"""

import argparse
import datetime
import hashlib
import hmac
import json
import os
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

# Added by the HTTP client after signing (framing), or left unsigned by SigV4 signers.
UNSIGNED = {
    "authorization",
    "user-agent",
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "accept-encoding",
    "expect",
    "te",
}
# Not passed to the fixture.
HOP = {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "authorization"}
MAX_SKEW = datetime.timedelta(minutes=5)


def parse_authorization(value):
    """{'Credential': ..., 'SignedHeaders': ..., 'Signature': ...} or None."""
    prefix = "AWS4-HMAC-SHA256 "
    if not value or not value.startswith(prefix):
        return None
    parts = {}
    for item in value[len(prefix):].split(","):
        key, _, val = item.strip().partition("=")
        parts[key] = val
    if not {"Credential", "SignedHeaders", "Signature"} <= parts.keys():
        return None
    return parts


class Front(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    settings = None
    log_lock = threading.Lock()

    def log_message(self, *args):
        pass

    def record(self, verdict, signed):
        s = self.settings
        if not s.log:
            return
        line = json.dumps({
            "method": self.command,
            "path": self.path.split("?")[0],
            "query": self.path.partition("?")[2],
            "verdict": verdict,
            "signed_headers": signed,
        })
        with self.log_lock, open(s.log, "a") as f:
            f.write(line + "\n")

    def refuse(self, reason, signed):
        self.record(reason, signed)
        body = json.dumps({
            "error": {"message": f"SigV4 check failed: {reason}", "type": "AccessDeniedException",
                      "code": 403}
        }).encode()
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def verify(self, body):
        """None when the request verifies, else the reason."""
        s = self.settings
        auth = parse_authorization(self.headers.get("Authorization"))
        if auth is None:
            return "no AWS4-HMAC-SHA256 Authorization header"
        signed = auth["SignedHeaders"].split(";")
        received = {name.lower() for name in self.headers.keys()}
        unsigned = sorted(received - UNSIGNED - set(signed))
        if unsigned:
            return f"headers sent but not signed: {unsigned}"
        amz_date = self.headers.get("X-Amz-Date", "")
        try:
            when = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ")
        except ValueError:
            return "X-Amz-Date missing or malformed"
        now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
        now += datetime.timedelta(seconds=s.clock_offset)
        if abs(now - when) > MAX_SKEW:
            return "Signature expired: X-Amz-Date is more than 5 minutes from the server's clock"
        if self.headers.get("X-Amz-Content-SHA256") != hashlib.sha256(body).hexdigest():
            return "x-amz-content-sha256 is not the SHA-256 of the body"
        if s.session_token is not None:
            if self.headers.get("X-Amz-Security-Token") != s.session_token:
                return "x-amz-security-token missing or wrong"
            if "x-amz-security-token" not in signed:
                return "x-amz-security-token is not signed"
        headers = {
            name: value for name, value in self.headers.items()
            if name.lower() not in UNSIGNED
        }
        request = AWSRequest(method=self.command, url=f"http://{self.headers.get('Host')}{self.path}",
                             headers=headers, data=body)
        request.context["timestamp"] = amz_date
        signer = SigV4Auth(Credentials(s.access_key, s.secret_key, s.session_token),
                           s.signing_name, s.region)
        canonical = signer.canonical_request(request)
        signature = signer.signature(signer.string_to_sign(request, canonical), request)
        expected = (
            f"AWS4-HMAC-SHA256 Credential={signer.scope(request)}, "
            f"SignedHeaders={signer.signed_headers(signer.headers_to_sign(request))}, "
            f"Signature={signature}"
        )
        if not hmac.compare_digest(expected, self.headers.get("Authorization", "")):
            return "signature does not match"
        return None

    def handle_any(self):
        s = self.settings
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if s.tamper_body and body:
            # As if the body had been changed on the way: the signature no longer covers it.
            body = bytes([body[0] ^ 1]) + body[1:]
        auth = parse_authorization(self.headers.get("Authorization")) or {}
        signed = auth.get("SignedHeaders", "")
        reason = self.verify(body)
        if reason is not None:
            self.refuse(reason, signed)
            return
        self.record("ok", signed)
        forward = urllib.request.Request(s.upstream + self.path, data=body if body else None,
                                         method=self.command)
        for name, value in self.headers.items():
            if name.lower() not in HOP:
                forward.add_header(name, value)
        try:
            answer = s.opener.open(forward, timeout=60)
            status, headers, data = answer.status, answer.headers, answer.read()
        except urllib.error.HTTPError as e:
            status, headers, data = e.code, e.headers, e.read()
        self.send_response(status)
        for name, value in headers.items():
            if name.lower() not in HOP:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_HEAD = do_DELETE = do_PUT = handle_any


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--upstream", required=True)
    p.add_argument("--region", required=True)
    p.add_argument("--signing-name", required=True)
    p.add_argument("--clock-offset", type=float, default=0.0, help="seconds added to this clock")
    p.add_argument("--tamper-body", action="store_true")
    p.add_argument("--log")
    s = p.parse_args()
    s.upstream = s.upstream.rstrip("/")
    s.access_key = os.environ["SIGV4_FRONT_ACCESS_KEY"]
    s.secret_key = os.environ["SIGV4_FRONT_SECRET_KEY"]
    s.session_token = os.environ.get("SIGV4_FRONT_SESSION_TOKEN") or None
    s.opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    Front.settings = s
    server = ThreadingHTTPServer(("127.0.0.1", 0), Front)
    server.daemon_threads = True

    def watch_parent():
        sys.stdin.read()
        os._exit(0)

    threading.Thread(target=watch_parent, daemon=True).start()
    print(f"READY {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
