"""Creates the objects the fuzzer's path ids name, on a fresh server, and prints them as JSON.

The fuzzing agent (`agent`) sells one listing, negotiates on another agent's listing, has
bought a third (with payments, an escalated refund, a live refund and a cancellation on the
orders), holds an approval request, a quote and a compatibility proposal, a spare API key and a webhook;
every id printed is visible to it, so that generated requests reach past `404`.

Usage: fixtures.py BASE_URL OPERATOR_TOKEN
"""

import json
import sys

import requests

BASE, OPERATOR = sys.argv[1], sys.argv[2]


def call(method, path, key=None, body=None, expect=(200, 201)):
    headers = {"authorization": f"Bearer {key}"} if key else {}
    response = requests.request(method, BASE + path, json=body, headers=headers, timeout=30)
    if response.status_code not in expect:
        sys.exit(f"fixtures: {method} {path} answered {response.status_code}: {response.text}")
    return response.json() if response.content else None


def register(name):
    registered = call("POST", "/v1/agents", body={"name": name})
    agent = {"id": registered["agent"]["id"], "key": registered["api_key"], "key_id": registered["key"]["id"]}
    call("PATCH", f"/v1/admin/agents/{agent['id']}", OPERATOR, {"tier": "AGENCY"})
    return agent


def listing(seller, title, ask=100000):
    return call("POST", "/v1/listings", seller["key"], {"title": title, "ask_amount": ask, "quantity": 50})["id"]


fuzzer = register("fuzzer")
other = register("counterparty")
spare_key = call("POST", "/v1/agents/me/keys", fuzzer["key"])["key"]["id"]

own_listing = listing(fuzzer, "The fuzzer's lamp")
negotiated = listing(other, "A standing desk")
bought = listing(other, "A chair")
proposed = listing(other, "Display inventory", ask=5000)

# The fuzzer opens a thread on the desk and the counterparty counters: one bid waits for the
# fuzzer's answer, the other is the fuzzer's own.
opening = call("POST", f"/v1/listings/{negotiated}/bids", fuzzer["key"], {"amount": 80000})
counter = call("POST", f"/v1/bids/{opening['bid']['id']}/counter", other["key"], {"amount": 95000})
order = call("POST", f"/v1/listings/{bought}/purchase", fuzzer["key"])["order"]["id"]
# The fuzzer bought the chair and records a payment on it; and sells a lamp to the counterparty,
# whose payment on it waits for the fuzzer's answer.
paid = call("POST", f"/v1/orders/{order}/payments", fuzzer["key"], {"amount": 1000, "reference": "fixture"})
sold = call("POST", f"/v1/listings/{own_listing}/purchase", other["key"])["order"]["id"]
to_answer = call("POST", f"/v1/orders/{sold}/payments", other["key"], {"amount": 1000, "reference": "fixture"})

# Negotiations on the chair's order: a confirmed payment, a refund the counterparty rejected and
# the fuzzer escalated (for the operator's decision), and a live refund whose pending counter
# waits for the fuzzer's answer. A cancellation of the lamp's order waits for the fuzzer's answer.
confirmed = call("POST", f"/v1/orders/{order}/payments", fuzzer["key"], {"amount": 5000, "reference": "fixture-2"})
call("POST", f"/v1/orders/{order}/payments/{confirmed['payment']['id']}/confirm", other["key"])
refund = {"kind": "refund", "terms": {"reason": "damaged"}}
disputed = call("POST", f"/v1/orders/{order}/negotiations", fuzzer["key"], {**refund, "amount": 1000})
call("POST", f"/v1/bids/{disputed['bid']['id']}/reject", other["key"])
call("POST", f"/v1/threads/{disputed['thread']['id']}/escalate", fuzzer["key"])
live_refund = call("POST", f"/v1/orders/{order}/negotiations", fuzzer["key"], {**refund, "amount": 2000})
refund_offer = call("POST", f"/v1/bids/{live_refund['bid']['id']}/counter", other["key"], {"amount": 500})
cancel = call("POST", f"/v1/orders/{sold}/negotiations", other["key"], {"kind": "cancel", "terms": {"reason": "changed plans"}})

# An approval request of the fuzzer's: a rule on the desk's thread holds its acceptances there.
call("PUT", f"/v1/threads/{opening['thread']['id']}/approval-rules", fuzzer["key"], {"rules": [{"move": "accept"}]})
held = call("POST", f"/v1/bids/{counter['bid']['id']}/accept", fuzzer["key"], expect=(202,))["approval"]["id"]

# A proposal on inventory whose seller lets a policy answer, and a quote on it.
call(
    "PUT",
    f"/v1/listings/{proposed}/policy",
    other["key"],
    {"limit": 3000, "max_auto_rounds": 50, "counter": {"strategy": "split"}},
)
proposal = call("POST", "/proposals", fuzzer["key"], {"product_id": proposed, "price": 20.0})["proposal_id"]
quote = call("POST", "/api/v1/quotes", fuzzer["key"], {"product_id": bought, "deal_type": "PG"})["quote"]["quote_id"]

# A documentation address (TEST-NET-1): public to the server's checks, reached by nobody.
webhook = call("POST", "/v1/webhooks", fuzzer["key"], {"url": "https://192.0.2.1/haggle-fuzz", "events": ["*"]})
webhook = webhook["webhook"]["id"]

json.dump(
    {
        "key": fuzzer["key"],
        "key_id": fuzzer["key_id"],
        "ids": {
            "agent": [other["id"], fuzzer["id"]],
            "key": [spare_key],
            "listing": [own_listing, negotiated, bought, proposed],
            "bid": [opening["bid"]["id"], counter["bid"]["id"], refund_offer["bid"]["id"], cancel["bid"]["id"]],
            "thread": [opening["thread"]["id"], proposal, disputed["thread"]["id"], live_refund["thread"]["id"]],
            "approval": [held],
            "order": [order, sold],
            "payment": [paid["payment"]["id"], to_answer["payment"]["id"]],
            "webhook": [webhook],
            "proposal": [proposal],
            "product": [proposed, bought],
            "quote": [quote],
        },
    },
    sys.stdout,
)
