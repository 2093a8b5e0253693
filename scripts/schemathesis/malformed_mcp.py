"""Sends /mcp the malformed requests Schemathesis does not make, for scripts/fuzz.

Each one must be refused with a 4xx: a problem document (`application/problem+json`, whose
`status` is the answer's) or, for a message of the protocol that is wrong for it, the
protocol's JSON-RPC error. Any 5xx, or any other answer, fails the run.

Usage: malformed_mcp.py BASE_URL API_KEY
"""

import http.client
import json
import sys
import urllib.parse

BASE, KEY = sys.argv[1], sys.argv[2]
BOTH = "application/json, text/event-stream"
PING = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}}}).encode()

# (what, method, headers, body)
CASES = [
    ("not JSON", "POST", {"Content-Type": "application/json"}, b"{not json"),
    ("empty", "POST", {"Content-Type": "application/json"}, b""),
    ("a batch", "POST", {"Content-Type": "application/json"}, b"[" + PING + b"," + PING + b"]"),
    ("an empty batch", "POST", {"Content-Type": "application/json"}, b"[]"),
    ("an object", "POST", {"Content-Type": "application/json"}, b"{}"),
    ("null", "POST", {"Content-Type": "application/json"}, b"null"),
    ("not UTF-8", "POST", {"Content-Type": "application/json"}, b"\xff\xfe\x00{"),
    ("deeply nested", "POST", {"Content-Type": "application/json"}, b"[" * 5000 + b"]" * 5000),
    ("a wrong jsonrpc", "POST", {"Content-Type": "application/json"}, b'{"jsonrpc":"1.0","id":1,"method":"ping"}'),
    ("a result of nothing", "POST", {"Content-Type": "application/json"}, b'{"jsonrpc":"2.0","id":7,"result":{}}'),
    ("text", "POST", {"Content-Type": "text/plain"}, PING),
    ("a form", "POST", {"Content-Type": "application/x-www-form-urlencoded"}, b"a=b"),
    ("no content type", "POST", {}, PING),
    ("a garbled content type", "POST", {"Content-Type": ";;;"}, PING),
    ("over the body limit", "POST", {"Content-Type": "application/json"}, b'{"pad":"' + b"x" * 200_000 + b'"}'),
    ("no Accept", "POST", {"Content-Type": "application/json", "Accept": None}, PING),
    ("a wrong Accept", "POST", {"Content-Type": "application/json", "Accept": "text/html"}, PING),
    ("before initialize", "POST", {"Content-Type": "application/json"}, b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}'),
    ("an unknown version", "POST", {"Content-Type": "application/json", "MCP-Protocol-Version": "1999-01-01"}, PING),
    ("a garbled version", "POST", {"Content-Type": "application/json", "MCP-Protocol-Version": "2025-13-99\xe9"}, PING),
    ("an unknown session", "POST", {"Content-Type": "application/json", "Mcp-Session-Id": "00000000"}, PING),
    ("an empty session", "POST", {"Content-Type": "application/json", "Mcp-Session-Id": ""}, PING),
    ("a huge session", "POST", {"Content-Type": "application/json", "Mcp-Session-Id": "s" * 6000}, PING),
    ("a mismatched initialize", "POST", {"Content-Type": "application/json", "MCP-Protocol-Version": "2025-03-26"}, INITIALIZE),
    ("a web page", "POST", {"Content-Type": "application/json", "Origin": "https://evil.example"}, INITIALIZE),
    ("a null origin", "POST", {"Content-Type": "application/json", "Origin": "null"}, INITIALIZE),
    ("a garbled origin", "POST", {"Content-Type": "application/json", "Origin": "::::"}, INITIALIZE),
    ("a rebound host", "POST", {"Content-Type": "application/json", "Host": "evil.example"}, INITIALIZE),
    ("a garbled host", "POST", {"Content-Type": "application/json", "Host": "a b"}, INITIALIZE),
    ("a stream without a session", "GET", {"Accept": "text/event-stream"}, None),
    ("a stream of an unknown session", "GET", {"Accept": "text/event-stream", "Mcp-Session-Id": "nope"}, None),
    ("a stream not accepted", "GET", {"Accept": "application/json"}, None),
    ("an end without a session", "DELETE", {}, None),
    ("an end of an unknown session", "DELETE", {"Mcp-Session-Id": "nope"}, None),
    ("another method", "PUT", {"Content-Type": "application/json"}, PING),
    ("an invented method", "BREW", {}, None),
]


def send(method, headers, body):
    url = urllib.parse.urlsplit(BASE)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=10)
    sent = {"Authorization": f"Bearer {KEY}", "Accept": BOTH}
    sent.update(headers)
    connection.putrequest(method, "/mcp", skip_host="Host" in sent, skip_accept_encoding=True)
    for name, value in sent.items():
        if value is not None:
            connection.putheader(name, value.encode("latin-1"))
    if body is not None:
        connection.putheader("Content-Length", str(len(body)))
    connection.endheaders(body)
    response = connection.getresponse()
    content = response.read()
    connection.close()
    return response.status, response.getheader("Content-Type") or "", content


def main():
    failures = []
    for what, method, headers, body in CASES:
        status, content_type, content = send(method, headers, body)
        verdict = None
        if not 400 <= status < 500:
            verdict = f"answered {status}"
        elif content_type.startswith("application/problem+json"):
            problem = json.loads(content)
            if problem.get("status") != status or not problem.get("code"):
                verdict = f"a problem document that does not match its status: {problem}"
        elif content_type.startswith("application/json"):
            if "error" not in json.loads(content):
                verdict = f"JSON that is not a JSON-RPC error: {content[:200]!r}"
        else:
            verdict = f"{status} as {content_type or 'no content type'}: {content[:200]!r}"
        print(f"malformed /mcp: {what}: {status} {content_type}" + (f"  FAILED: {verdict}" if verdict else ""))
        if verdict:
            failures.append(what)
    print(f"malformed /mcp: {len(CASES)} cases, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
