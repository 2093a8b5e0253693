"""Haggle as an A2A agent through the official Python SDK (a2a-sdk): resolve the card, negotiate
to an order over JSON-RPC with streamed updates and again over the HTTP+JSON binding, read,
list and cancel tasks, resend a message, be refused with A2A's codes, and race a REST buyer for
the last unit.

Usage: e2e.py BASE_URL ADMIN_TOKEN
Prints what it checks and ends with a `N passed, N failed` line.
"""

import asyncio
import json
import sys
import uuid

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
)
from google.protobuf import json_format

BASE, ADMIN_TOKEN = sys.argv[1], sys.argv[2]
results = {"passed": 0, "failed": 0}


def check(name, condition, detail=""):
    results["passed" if condition else "failed"] += 1
    print(f"{'ok  ' if condition else 'FAIL'} {name}{'' if condition else ': ' + str(detail)}", flush=True)


async def rest(http, method, path, body=None, key=None):
    headers = {"authorization": f"Bearer {key}"} if key else {}
    response = await http.request(method, BASE + path, json=body, headers=headers)
    return response.status_code, (response.json() if response.content else None)


async def agent(http, name, tier=None):
    _, registered = await rest(http, "POST", "/v1/agents", {"name": name})
    if tier:
        await rest(http, "PATCH", f"/v1/admin/agents/{registered['agent']['id']}", {"tier": tier}, ADMIN_TOKEN)
    return registered["api_key"]


def move(data, task_id=None, message_id=None):
    """A message whose one data part is a move, as the extension says."""
    message = {"messageId": message_id or str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"data": data}]}
    if task_id:
        message["taskId"] = task_id
    return json_format.ParseDict(message, Message())


def send(message, immediately=False):
    return SendMessageRequest(message=message, configuration=SendMessageConfiguration(return_immediately=immediately))


def data_of(message):
    """The data part of an agent's message, as a dict."""
    for part in message.parts:
        if part.HasField("data"):
            return json_format.MessageToDict(part.data)
    return {}


async def client_for(key, binding, streaming=True):
    http = httpx.AsyncClient(headers={"authorization": f"Bearer {key}"}, timeout=30)
    config = ClientConfig(httpx_client=http, streaming=streaming, supported_protocol_bindings=[binding])
    return await ClientFactory(config).create_from_url(BASE)


async def negotiate(http, binding, seller, buyer):
    """A negotiation to an order: the seller's policy counters the opening bid while the buyer
    follows the stream, then the buyer accepts."""
    _, listing = await rest(http, "POST", "/v1/listings", {"title": f"Desk over {binding}", "ask_amount": 100000}, seller)
    policy = {"limit": 90000, "counter": {"strategy": "split"}}
    await rest(http, "PUT", f"/v1/listings/{listing['id']}/policy", policy, seller)
    client = await client_for(buyer, binding)
    events = []
    async for event in client.send_message(send(move({"action": "place", "listing_id": listing["id"], "amount": 60000}))):
        events.append(event)
    first, last = events[0], events[-1]
    check(f"{binding}: the stream opens with the task, working", first.HasField("task") and first.task.status.state == TaskState.TASK_STATE_WORKING, first)
    task_id = first.task.id
    check(f"{binding}: the task is the thread", data_of(first.task.status.message).get("thread", {}).get("id") == task_id)
    check(
        f"{binding}: the stream ends when the seller has countered (input required)",
        last.HasField("status_update") and last.status_update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED,
        last,
    )
    standing = data_of(last.status_update.status.message)
    check(f"{binding}: the status names the moves allowed and the counter range", "accept" in standing.get("moves", []) and "counter_range" in standing, standing)
    done = [event async for event in client.send_message(send(move({"action": "accept"}, task_id)))]
    task = done[-1].task if done[-1].HasField("task") else None
    check(f"{binding}: accepting completes the task", task is not None and task.status.state == TaskState.TASK_STATE_COMPLETED, done[-1])
    order = data_of(task.artifacts[0]) if task is not None and task.artifacts else {}
    check(f"{binding}: the order is the task's artifact", order.get("order", {}).get("thread_id") == task_id, order)
    read = await client.get_task(GetTaskRequest(id=task_id))
    check(f"{binding}: GetTask reads it completed", read.status.state == TaskState.TASK_STATE_COMPLETED, read.status)
    await client.close()
    return listing["id"], task_id


async def main():
    async with httpx.AsyncClient(timeout=30) as http:
        seller = await agent(http, "a2a seller")
        buyer = await agent(http, "a2a buyer", "AGENCY")
        rival = await agent(http, "a2a rival", "AGENCY")

        # The card, resolved as the SDK resolves it.
        client = await client_for(buyer, "JSONRPC")
        card = client._card
        bindings = {interface.protocol_binding for interface in card.supported_interfaces}
        check("the card names both bindings", bindings == {"JSONRPC", "HTTP+JSON"}, bindings)
        check("the card declares streaming and the negotiation extension", card.capabilities.streaming and any(e.uri.endswith("/a2a/negotiation/v1") for e in card.capabilities.extensions))
        await client.close()

        listing, task_id = await negotiate(http, "JSONRPC", seller, buyer)
        await negotiate(http, "HTTP+JSON", seller, buyer)

        # Without streaming: a blocking send, a resend, ListTasks, CancelTask.
        client = await client_for(buyer, "JSONRPC", streaming=False)
        _, other = await rest(http, "POST", "/v1/listings", {"title": "Lamp", "ask_amount": 5000}, seller)
        message = move({"action": "place", "listing_id": other["id"], "amount": 4000.0})
        first = [event async for event in client.send_message(send(message, immediately=True))][0].task
        again = [event async for event in client.send_message(send(message, immediately=True))][0].task
        check("a resent message is answered once (the message id keys the move)", first.id == again.id, (first.id, again.id))
        _, threads = await rest(http, "GET", f"/v1/threads?listing_id={other['id']}", key=buyer)
        check("... and made one negotiation", len(threads["data"]) == 1, threads)
        listed = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_WORKING))
        check("ListTasks lists the working task", [task.id for task in listed.tasks] == [first.id], listed)
        canceled = await client.cancel_task(CancelTaskRequest(id=first.id))
        check("CancelTask withdraws the bid: canceled", canceled.status.state == TaskState.TASK_STATE_CANCELED, canceled.status)
        try:
            await client.cancel_task(CancelTaskRequest(id=first.id))
            check("a canceled task cannot be canceled again", False)
        except TaskNotCancelableError as error:
            check("a canceled task cannot be canceled again", True, error)

        # Refusals with A2A's codes.
        try:
            text = json_format.ParseDict({"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "I offer 40 dollars"}]}, Message())
            [event async for event in client.send_message(send(text))]
            check("text alone is refused", False)
        except ContentTypeNotSupportedError as error:
            check("text alone is refused as an unsupported content type, naming the data part", "data part" in str(error.data), error.data)
        try:
            [event async for event in client.send_message(send(move({"action": "place", "listing_id": other["id"], "amount": 4000.5})))]
            check("a fraction of a minor unit is refused", False)
        except InvalidParamsError as error:
            check("a fraction of a minor unit is refused as invalid params", (error.data or {}).get("code") == "validation_failed", error.data)
        await client.close()
        for binding in ("JSONRPC", "HTTP+JSON"):
            client = await client_for(rival, binding)
            try:
                await client.get_task(GetTaskRequest(id=task_id))
                check(f"{binding}: another agent's task is not found", False)
            except TaskNotFoundError:
                check(f"{binding}: another agent's task is not found", True)
            await client.close()

        # SubscribeToTask follows a working task until the seller answers.
        _, lamp = await rest(http, "POST", "/v1/listings", {"title": "Chair", "ask_amount": 20000}, seller)
        placing = await client_for(buyer, "HTTP+JSON", streaming=False)
        placed = [event async for event in placing.send_message(send(move({"action": "place", "listing_id": lamp["id"], "amount": 15000}), immediately=True))][0].task
        await placing.close()
        client = await client_for(buyer, "HTTP+JSON")
        bid = data_of(placed.status.message)["bid"]["id"]

        async def seller_counters():
            await asyncio.sleep(0.5)
            await rest(http, "POST", f"/v1/bids/{bid}/counter", {"amount": 18000}, seller)

        counter = asyncio.create_task(seller_counters())
        followed = []
        async for event in client.subscribe(SubscribeToTaskRequest(id=placed.id)):
            followed.append(event)
            if event.HasField("status_update") and event.status_update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
                break
        await counter
        check("SubscribeToTask streams the seller's counter as it happens", followed and followed[-1].HasField("status_update"), followed)
        await client.close()

        # An A2A buyer and a REST buyer race for the last unit: exactly one order.
        _, last = await rest(http, "POST", "/v1/listings", {"title": "Last one", "ask_amount": 30000, "quantity": 1}, seller)
        client = await client_for(buyer, "JSONRPC", streaming=False)

        async def a2a_buys():
            try:
                return [event async for event in client.send_message(send(move({"action": "purchase", "listing_id": last["id"]})))][0].task.status.state == TaskState.TASK_STATE_COMPLETED
            except InvalidParamsError:
                return False

        a2a_won, (status, _) = await asyncio.gather(a2a_buys(), rest(http, "POST", f"/v1/listings/{last['id']}/purchase", key=rival))
        _, orders = await rest(http, "GET", f"/v1/orders?listing_id={last['id']}", key=seller)
        check("an A2A buyer racing a REST buyer for the last unit: exactly one order", len(orders["data"]) == 1 and a2a_won != (status == 201), (a2a_won, status, orders))
        await client.close()

    print(f"{results['passed']} passed, {results['failed']} failed")
    sys.exit(1 if results["failed"] else 0)


asyncio.run(main())
