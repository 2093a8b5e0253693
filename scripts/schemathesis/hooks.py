"""Schemathesis hooks for scripts/fuzz: real ids in paths and bodies, and short waits.

Ids: a generated UUID in a path or in a body's id field is replaced, four times in five, by
an object of the right kind that the fuzzing agent can see (scripts/schemathesis/fixtures.py
made them), so that requests get past `404` to the rules behind it. Values that are not UUIDs
(negative cases) are left alone. The choice follows from the generated UUID, not from a random
source, so that a case replays the same. The id of the key the fuzzer authenticates with, which
Schemathesis may pick up from a response, is never revoked: it becomes the spare key's.

Idempotency keys: Schemathesis draws few distinct ones, so that most requests would replay an
earlier one or be refused as `idempotency_key_reused`. A valid key gets a serial number, so that
each request has its own key: appended, or in place of its last characters where appending would
change what the key is (past 255 characters, or from under 32, the least registration takes, to
32 or more). An invalid key is left alone.

MCP: `/mcp` reads a message only from a client that accepts its answers' types, so its cases
carry that `Accept`, and their bodies (schema-valid and not) reach the message's parsing.
scripts/schemathesis/malformed_mcp.py sends it the bodies Schemathesis does not make (not
JSON, empty, a batch, other content types).

Waits: `wait` (a long poll) is capped at a tenth of a second. The server's handling of the
whole range is tested in tests/api; here it would only make cases slow.
"""

import itertools
import json
import os
import re
import string
import uuid

import schemathesis

FIXTURES = json.loads(os.environ["HAGGLE_FUZZ_FIXTURES"])
IDS = FIXTURES["ids"]
OWN_KEY_ID = FIXTURES["key_id"]
LONGEST_WAIT = 0.1
SERIAL = itertools.count(1)
IDEMPOTENCY_KEY = re.compile(r"[!-~]{1,255}")
LONGEST_KEY = 255
SHORTEST_REGISTRATION_KEY = 32
DIGITS = string.digits + string.ascii_letters

# The kind of object each path template's id names (by parameter, where a path has two).
PATH_KINDS = {
    "/v1/agents/me/keys/{key_id}": "key",
    "/v1/admin/agents/{id}": "agent",
    "/v1/listings/{id}": "listing",
    "/v1/listings/{id}/withdraw": "listing",
    "/v1/listings/{id}/bids": "listing",
    "/v1/listings/{id}/purchase": "listing",
    "/v1/listings/{id}/policy": "listing",
    "/v1/bids/{id}": "bid",
    "/v1/bids/{id}/counter": "bid",
    "/v1/bids/{id}/accept": "bid",
    "/v1/bids/{id}/reject": "bid",
    "/v1/bids/{id}/withdraw": "bid",
    "/v1/threads/{id}": "thread",
    "/v1/threads/{id}/policy": "thread",
    "/v1/orders/{id}": "order",
    "/v1/orders/{id}/fulfil": "order",
    "/v1/orders/{id}/complete": "order",
    "/v1/orders/{id}/payments": "order",
    "/v1/orders/{id}/payments/{payment_id}/confirm": {"id": "order", "payment_id": "payment"},
    "/v1/orders/{id}/payments/{payment_id}/dispute": {"id": "order", "payment_id": "payment"},
    "/v1/orders/{id}/negotiations": "order",
    "/v1/threads/{id}/escalate": "thread",
    "/v1/threads/{id}/settle": "thread",
    "/v1/threads/{id}/approval-rules": "thread",
    "/v1/listings/{id}/approval-rules": "listing",
    "/v1/admin/threads/{id}": "thread",
    "/v1/admin/threads/{id}/decide": "thread",
    "/v1/approvals/{id}": "approval",
    "/v1/approvals/{id}/approve": "approval",
    "/v1/approvals/{id}/deny": "approval",
    "/v1/approvals/{id}/withdraw": "approval",
    "/v1/webhooks/{id}": "webhook",
    "/v1/webhooks/{id}/deliveries": "webhook",
    "/v1/webhooks/{id}/enable": "webhook",
    "/proposals/{id}/counter": "proposal",
}

# The `Accept` the MCP endpoint takes, by method.
MCP_ACCEPT = {"POST": "application/json, text/event-stream", "GET": "text/event-stream"}

# The kind of object each body field names, on the compatibility routes.
BODY_KINDS = {
    "product_id": "product",
    "quote_id": "quote",
    "proposal_id": "proposal",
    "negotiation_id": "proposal",
}


def as_uuid(value):
    if not isinstance(value, str):
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def real_id(kind, value):
    parsed = as_uuid(value)
    if parsed is None:
        return value
    if kind == "key" and parsed == uuid.UUID(OWN_KEY_ID):
        return IDS["key"][0]
    if parsed.int % 5 == 0:
        return value
    return IDS[kind][parsed.int // 5 % len(IDS[kind])]


def serial_key(value):
    if not isinstance(value, str) or not IDEMPOTENCY_KEY.fullmatch(value):
        return value
    number, tag = next(SERIAL), ""
    while number:
        number, digit = divmod(number, len(DIGITS))
        tag = DIGITS[digit] + tag
    appended = value + tag
    crosses = len(value) < SHORTEST_REGISTRATION_KEY <= len(appended)
    if len(appended) <= LONGEST_KEY and not crosses:
        return appended
    if len(tag) >= len(value):
        return value
    return value[: len(value) - len(tag)] + tag


def short_wait(value):
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return value
    if isinstance(value, bool) or not 0 <= seconds <= 60:
        return value
    return min(seconds, LONGEST_WAIT)


@schemathesis.hook
def map_case(context, case):
    kind = PATH_KINDS.get(case.operation.path)
    if kind and case.path_parameters:
        for name, value in case.path_parameters.items():
            named = kind.get(name) if isinstance(kind, dict) else kind
            if named:
                case.path_parameters[name] = real_id(named, value)
    if isinstance(case.body, dict):
        for name, kind in BODY_KINDS.items():
            if name in case.body:
                case.body[name] = real_id(kind, case.body[name])
    if case.headers and "Idempotency-Key" in case.headers:
        case.headers["Idempotency-Key"] = serial_key(case.headers["Idempotency-Key"])
    accept = MCP_ACCEPT.get(case.operation.method.upper()) if case.operation.path == "/mcp" else None
    if accept:
        case.headers = {**(case.headers or {}), "Accept": accept}
    if case.query and "wait" in case.query:
        case.query["wait"] = short_wait(case.query["wait"])
    return case
