"""Approval receipts checked as an outsider would: with the server's published keys
(/.well-known/jwks.json) and a JOSE library Haggle did not write (joserfc).

A buyer whose acceptances above 500.00 need approval accepts a counter of 600.00; the move is
held; its approver approves it, which makes the order; the receipt of the approval verifies
against the JWKS, says what was approved, and an altered or forged copy does not verify.

Usage: e2e.py BASE_URL ADMIN_TOKEN
Ends with a `N passed, N failed` line.
"""

import base64
import hashlib
import json
import sys
import urllib.error
import urllib.request

from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

BASE, ADMIN_TOKEN = sys.argv[1], sys.argv[2]
results = {"passed": 0, "failed": 0}


def check(name, condition, detail=""):
    results["passed" if condition else "failed"] += 1
    print(f"{'ok  ' if condition else 'FAIL'} {name}{'' if condition else ': ' + str(detail)}", flush=True)


def rest(method, path, body=None, token=None, expect=(200, 201)):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(BASE + path, method=method, data=data)
    request.add_header("content-type", "application/json")
    if token:
        request.add_header("authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, answer = response.status, json.load(response)
    except urllib.error.HTTPError as error:
        status, answer = error.code, json.load(error)
    if status not in expect:
        raise SystemExit(f"{method} {path}: {status} {answer}")
    return answer


def agent(name, tier=None):
    registered = rest("POST", "/v1/agents", {"name": name})
    if tier:
        rest("PATCH", f"/v1/admin/agents/{registered['agent']['id']}", {"tier": tier}, ADMIN_TOKEN)
    return registered["api_key"]


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def verifies(receipt, keys):
    try:
        return jws.deserialize_compact(receipt, keys, algorithms=["EdDSA"])
    except (JoseError, ValueError):
        return None


seller, buyer = agent("seller"), agent("buyer", "AGENCY")
listing = rest("POST", "/v1/listings", {"title": "Camera", "ask_amount": 100000}, seller)["id"]
rest("PUT", "/v1/agents/me/approval-rules", {"rules": [{"move": "accept", "buyer_above": 50000}]}, buyer)
token = rest("POST", "/v1/agents/me/approvers", {"name": "Alice"}, buyer)["token"]

placed = rest("POST", f"/v1/listings/{listing}/bids", {"amount": 40000}, buyer)["bid"]["id"]
counter = rest("POST", f"/v1/bids/{placed}/counter", {"amount": 60000}, seller)["bid"]["id"]
held = rest("POST", f"/v1/bids/{counter}/accept", {}, buyer, expect=(202,))["approval"]
check("the acceptance is held", held["status"] == "PENDING" and held["move"]["amount"] == 60000, held)
approved = rest("POST", f"/v1/approvals/{held['id']}/approve", {}, token)
order = approved["order"]
check("approving it makes the order", order["amount"] == 60000 and order["approval"]["id"] == held["id"], order)

jwks = rest("GET", "/.well-known/jwks.json")
keys = KeySet.import_key_set(jwks)
check("the JWKS holds Ed25519 keys", all(k["kty"] == "OKP" and k["crv"] == "Ed25519" for k in jwks["keys"]), jwks)
receipt = approved["approval"]["receipt"]
verified = verifies(receipt, keys)
check("the receipt verifies with the published keys", verified is not None)
claims = json.loads(verified.payload) if verified else {}
check("it names the approval, the approver and the order",
      (claims.get("approval_id"), claims.get("approver"), claims.get("order_id")) == (held["id"], "Alice", order["id"]),
      claims)
canonical = json.dumps(claims.get("move"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
check("its move hash is the SHA-256 of the canonical move",
      claims.get("move_hash") == hashlib.sha256(canonical.encode()).hexdigest() == held["move_hash"], claims)

header, payload, signature = receipt.split(".")
altered = dict(claims, move=dict(claims.get("move", {}), amount=6000))
altered_payload = b64(json.dumps(altered, sort_keys=True, separators=(",", ":")).encode())
check("an altered receipt does not verify", verifies(f"{header}.{altered_payload}.{signature}", keys) is None)
check("a forged signature does not verify", verifies(f"{header}.{payload}.{b64(bytes(64))}", keys) is None)

print(f"{results['passed']} passed, {results['failed']} failed")
sys.exit(1 if results["failed"] else 0)
