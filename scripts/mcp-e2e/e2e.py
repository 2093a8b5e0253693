"""Haggle's MCP server through the official Python SDK: two agents list the tools, check their
input schemas, and play a whole negotiation over Streamable HTTP (/mcp), then another over stdio
(`haggle mcp`); a refused move is a structured tool error. Then a buyer whose acceptances above
500.00 need approval: through a client that declares elicitation, the person approves in the
host and the tool call makes the order; declined, nothing is made; without elicitation, the held
move is the pending request, answered with answer_approval.

Usage: e2e.py BASE_URL ADMIN_TOKEN HAGGLE_BINARY
Prints the negotiations as a transcript and ends with a `N passed, N failed` line.
"""

import asyncio
import json
import sys
import urllib.request
import uuid

import httpx2
import jsonschema
from mcp import ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

BASE, ADMIN_TOKEN, HAGGLE = sys.argv[1], sys.argv[2], sys.argv[3]
TOOLS = {
    "whoami", "find_listings", "get_listing", "create_listing", "update_listing", "withdraw_listing",
    "place_bid", "counter_bid", "accept_bid", "reject_bid", "withdraw_bid", "buy_now", "get_thread",
    "list_my_threads", "wait_for_turn", "read_events", "get_policy", "set_policy", "delete_policy",
    "list_my_orders", "get_order", "fulfil_order", "complete_order", "record_payment", "answer_payment",
    "open_order_negotiation", "list_my_approvals", "answer_approval",
}
results = {"passed": 0, "failed": 0}


def check(name, condition, detail=""):
    results["passed" if condition else "failed"] += 1
    print(f"{'ok  ' if condition else 'FAIL'} {name}{'' if condition else ': ' + str(detail)}", flush=True)


def rest(method, path, body=None, token=None):
    request = urllib.request.Request(BASE + path, method=method, data=json.dumps(body).encode() if body is not None else None)
    request.add_header("content-type", "application/json")
    if token:
        request.add_header("authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def agent(name, tier=None):
    registered = rest("POST", "/v1/agents", {"name": name})
    if tier:
        rest("PATCH", f"/v1/admin/agents/{registered['agent']['id']}", {"tier": tier}, ADMIN_TOKEN)
    return registered["api_key"]


async def call(session, who, tool, arguments):
    result = await session.call_tool(tool, arguments)
    summary = result.content[0].text if result.content else ""
    print(f"  {who:>6} -> {tool} {json.dumps(arguments)}\n         <- {summary}", flush=True)
    return result


async def ok(session, who, tool, arguments):
    result = await call(session, who, tool, arguments)
    if result.is_error:
        raise AssertionError(f"{tool} refused: {result.structured_content}")
    return result.structured_content


async def check_tools(session):
    tools = (await session.list_tools()).tools
    check("the tools are listed", {tool.name for tool in tools} == TOOLS, sorted(tool.name for tool in tools))
    invalid = []
    for tool in tools:
        try:
            jsonschema.Draft202012Validator.check_schema(tool.input_schema)
        except jsonschema.SchemaError as error:
            invalid.append(f"{tool.name}: {error.message}")
    check("every input schema is valid JSON Schema 2020-12", not invalid, invalid)
    place = next(tool for tool in tools if tool.name == "place_bid")
    validator = jsonschema.Draft202012Validator(place.input_schema)
    check("place_bid's schema takes a bid", validator.is_valid({"listing_id": str(uuid.uuid4()), "amount": 120000}))
    check("place_bid's schema refuses a price as text", not validator.is_valid({"listing_id": str(uuid.uuid4()), "amount": "lots"}))
    check("descriptions state the rules", all(len(tool.description or "") > 80 for tool in tools))


async def negotiate(seller, buyer, title):
    listing = await ok(seller, "seller", "create_listing", {"title": title, "ask_amount": 138000})
    placed = await ok(buyer, "buyer", "place_bid", {"listing_id": listing["id"], "amount": 120000,
                                                     "idempotency_key": str(uuid.uuid4())})
    thread = placed["thread"]["id"]
    refusal = await call(buyer, "buyer", "accept_bid", {"bid_id": placed["bid"]["id"]})
    document = refusal.structured_content or {}
    check("accepting one's own bid is a structured refusal",
          refusal.is_error and document.get("code") == "not_your_turn" and document.get("turn") == "seller", document)
    waited = await ok(seller, "seller", "wait_for_turn", {"thread_id": thread, "timeout_seconds": 10})
    check("the seller's turn comes", waited["outcome"] == "your_turn", waited)
    refusal = await call(seller, "seller", "counter_bid", {"bid_id": placed["bid"]["id"], "amount": 150000})
    document = refusal.structured_content or {}
    check("a counter above the ask is refused with the range",
          refusal.is_error and (document.get("min_amount"), document.get("max_amount")) == (120001, 138000), document)
    countered = await ok(seller, "seller", "counter_bid", {"bid_id": placed["bid"]["id"], "amount": 135000})
    waited = await ok(buyer, "buyer", "wait_for_turn", {"thread_id": thread, "timeout_seconds": 10})
    check("the buyer's turn comes with the counter range",
          waited["standing"]["counter_range"] == {"min": 120000, "max": 134999}, waited["standing"])
    answered = await ok(buyer, "buyer", "counter_bid", {"bid_id": countered["bid"]["id"], "amount": 130000})
    await ok(seller, "seller", "wait_for_turn", {"thread_id": thread, "timeout_seconds": 10})
    accepted = await ok(seller, "seller", "accept_bid", {"bid_id": answered["bid"]["id"]})
    check("the deal is made at 1,300.00", accepted["order"]["amount"] == 130000, accepted)
    read = await ok(buyer, "buyer", "get_thread", {"thread_id": thread})
    check("the thread reads ACCEPTED after three bids",
          (read["thread"]["status"], read["thread"]["rounds"]) == ("ACCEPTED", 3), read["thread"])


def http_client(key):
    return httpx2.AsyncClient(headers={"authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=300))


async def over_http(seller_key, buyer_key):
    print("== over Streamable HTTP at /mcp ==", flush=True)
    async with http_client(seller_key) as seller_http, http_client(buyer_key) as buyer_http:
        async with streamable_http_client(BASE + "/mcp", http_client=seller_http) as (seller_read, seller_write), \
                streamable_http_client(BASE + "/mcp", http_client=buyer_http) as (buyer_read, buyer_write):
            async with ClientSession(seller_read, seller_write) as seller, ClientSession(buyer_read, buyer_write) as buyer:
                info = await seller.initialize()
                await buyer.initialize()
                check("the server introduces itself", info.server_info.name == "haggle", info.server_info)
                await check_tools(buyer)
                prompt = await buyer.get_prompt("negotiate_on_haggle")
                check("the prompt explains the rules", "final" in prompt.messages[0].content.text)
                await negotiate(seller, buyer, "Walnut desk (HTTP)")
                resources = await buyer.list_resources()
                check("the negotiation is a resource", any(r.uri.startswith("haggle://threads/") for r in resources.resources))


def stdio(key):
    return stdio_client(StdioServerParameters(command=HAGGLE, args=["mcp"],
                                              env={"HAGGLE_URL": BASE, "HAGGLE_API_KEY": key, "RUST_LOG": "warn"}))


async def over_stdio(seller_key, buyer_key):
    print("== over stdio (haggle mcp) ==", flush=True)
    async with stdio(seller_key) as (seller_read, seller_write), stdio(buyer_key) as (buyer_read, buyer_write):
        async with ClientSession(seller_read, seller_write) as seller, ClientSession(buyer_read, buyer_write) as buyer:
            await seller.initialize()
            await buyer.initialize()
            await check_tools(seller)
            await negotiate(seller, buyer, "Walnut desk (stdio)")


def held_acceptance(seller_key, buyer_key, title):
    """The seller's counter at 600.00 on a listing, waiting for a buyer whose acceptances above
    500.00 need approval: its id."""
    listing = rest("POST", "/v1/listings", {"title": title, "ask_amount": 80000}, seller_key)
    placed = rest("POST", f"/v1/listings/{listing['id']}/bids", {"amount": 40000}, buyer_key)
    countered = rest("POST", f"/v1/bids/{placed['bid']['id']}/counter", {"amount": 60000}, seller_key)
    return countered["bid"]["id"]


def person(answer, asked):
    """An elicitation callback that answers every question with `answer` (an ElicitResult)."""
    async def callback(context, params):
        asked.append(params)
        return answer
    return callback


async def approvals(seller_key, buyer_key):
    print("== a held acceptance, answered through the host (elicitation) ==", flush=True)
    rest("PUT", "/v1/agents/me/approval-rules", {"rules": [{"move": "accept", "buyer_above": 50000}]}, buyer_key)
    orders_before = len(rest("GET", "/v1/orders?role=buyer", token=buyer_key)["data"])

    async def accept_through(answer, title):
        counter = held_acceptance(seller_key, buyer_key, title)
        asked = []
        async with http_client(buyer_key) as buyer_http:
            async with streamable_http_client(BASE + "/mcp", http_client=buyer_http) as (read, write):
                async with ClientSession(read, write, elicitation_callback=person(answer, asked)) as buyer:
                    await buyer.initialize()
                    result = await call(buyer, "buyer", "accept_bid", {"bid_id": counter})
        return counter, result, asked

    yes = types.ElicitResult(action="accept", content={"approve": True, "note": "fine by me"})
    counter, result, asked = await accept_through(yes, "Oak bookcase (approved)")
    document = result.structured_content or {}
    check("the person is asked through the host, with the move and its amount",
          len(asked) == 1 and "accept" in asked[0].message and "600.00" in asked[0].message,
          [getattr(a, "message", a) for a in asked])
    check("approved in the host, the held acceptance makes the order",
          not result.is_error and document.get("outcome") == "approved"
          and (document.get("order") or {}).get("amount") == 60000, document)
    check("the approval is recorded APPROVED with its receipt",
          (document.get("approval") or {}).get("status") == "APPROVED"
          and bool((document.get("approval") or {}).get("receipt")), document.get("approval"))

    no = types.ElicitResult(action="decline")
    counter, result, asked = await accept_through(no, "Oak bookcase (declined)")
    document = result.structured_content or {}
    check("declined in the host, the request is denied and nothing is made",
          not result.is_error and document.get("outcome") == "denied"
          and (document.get("approval") or {}).get("status") == "DENIED", document)
    bid = rest("GET", f"/v1/bids/{counter}", token=buyer_key)
    check("the declined acceptance's bid is still pending", bid["status"] == "PENDING", bid["status"])
    orders = rest("GET", "/v1/orders?role=buyer", token=buyer_key)
    check("one order more only, the approved one", len(orders["data"]) == orders_before + 1,
          (orders_before, len(orders["data"])))

    print("== a held acceptance without elicitation ==", flush=True)
    counter = held_acceptance(seller_key, buyer_key, "Oak bookcase (tools)")
    async with http_client(buyer_key) as buyer_http:
        async with streamable_http_client(BASE + "/mcp", http_client=buyer_http) as (read, write):
            async with ClientSession(read, write) as buyer:
                await buyer.initialize()
                held = await ok(buyer, "buyer", "accept_bid", {"bid_id": counter})
                check("without elicitation the held move is the pending request, not an error",
                      held.get("outcome") == "held" and held["approval"]["status"] == "PENDING", held)
                listed = await ok(buyer, "buyer", "list_my_approvals", {"status": "PENDING"})
                check("list_my_approvals lists it", listed["data"][0]["id"] == held["approval"]["id"], listed)
                answered = await ok(buyer, "buyer", "answer_approval",
                                    {"approval_id": held["approval"]["id"], "decision": "approve"})
                check("answer_approval approves it and the order is made",
                      (answered.get("order") or {}).get("amount") == 60000, answered)


async def main():
    seller_key, buyer_key = agent("py-seller"), agent("py-buyer", "AGENCY")
    await over_http(seller_key, buyer_key)
    await over_stdio(seller_key, buyer_key)
    await approvals(seller_key, buyer_key)


try:
    asyncio.run(main())
except Exception as error:  # noqa: BLE001 - any failure is the run's failure, reported as one
    results["failed"] += 1
    print(f"FAIL the run stopped: {error!r}", flush=True)
print(f"mcp-e2e: {results['passed']} passed, {results['failed']} failed")
sys.exit(1 if results["failed"] else 0)
