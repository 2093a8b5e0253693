// Haggle as an A2A agent through the official JavaScript SDK (@a2a-js/sdk): resolve the card
// and negotiate to an order, over JSON-RPC and over HTTP+JSON.
//
// Usage: node e2e.mjs BASE_URL ADMIN_TOKEN
// Prints what it checks and ends with a `N passed, N failed` line.
import { randomUUID } from "node:crypto";
import { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory, RestTransportFactory } from "@a2a-js/sdk/client";
import { Role, TaskState } from "@a2a-js/sdk";

const [BASE, ADMIN_TOKEN] = process.argv.slice(2);
const results = { passed: 0, failed: 0 };

function check(name, condition, detail = "") {
  results[condition ? "passed" : "failed"] += 1;
  console.log(`${condition ? "ok  " : "FAIL"} ${name}${condition ? "" : ": " + JSON.stringify(detail)}`);
}

async function rest(method, path, body, key) {
  const headers = { "content-type": "application/json" };
  if (key) headers.authorization = `Bearer ${key}`;
  const response = await fetch(BASE + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await response.text();
  return text ? JSON.parse(text) : null;
}

async function agent(name, tier) {
  const registered = await rest("POST", "/v1/agents", { name });
  if (tier) await rest("PATCH", `/v1/admin/agents/${registered.agent.id}`, { tier }, ADMIN_TOKEN);
  return registered.api_key;
}

function withKey(key) {
  return (url, init = {}) => {
    const headers = new Headers(init.headers);
    headers.set("authorization", `Bearer ${key}`);
    return fetch(url, { ...init, headers });
  };
}

function move(data, taskId) {
  const message = {
    messageId: randomUUID(),
    role: Role.ROLE_USER,
    parts: [{ content: { $case: "data", value: data }, metadata: undefined, filename: "", mediaType: "application/json" }],
  };
  if (taskId) message.taskId = taskId;
  return { message };
}

function dataOf(message) {
  const part = (message?.parts ?? []).find((p) => p.content?.$case === "data");
  return part ? part.content.value : {};
}

async function negotiate(binding, seller, buyer) {
  const listing = await rest("POST", "/v1/listings", { title: `Desk over ${binding} from JS`, ask_amount: 100000 }, seller);
  await rest("PUT", `/v1/listings/${listing.id}/policy`, { limit: 90000, counter: { strategy: "split" } }, seller);
  const fetchImpl = withKey(buyer);
  const factory = new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl }), new RestTransportFactory({ fetchImpl })],
      preferredTransports: [binding],
    }),
  );
  const client = await factory.createFromUrl(BASE);
  const events = [];
  for await (const event of client.sendMessageStream(move({ action: "place", listing_id: listing.id, amount: 60000 }))) {
    events.push(event);
  }
  const first = events[0]?.payload?.$case === "task" ? events[0].payload.value : events[0];
  const last = events[events.length - 1];
  check(`${binding}: the stream opens with the task`, first?.id && first?.status?.state === TaskState.TASK_STATE_WORKING, events[0]);
  const lastStatus = last?.payload?.value?.status ?? last?.status;
  check(`${binding}: the stream ends when the seller has countered`, lastStatus?.state === TaskState.TASK_STATE_INPUT_REQUIRED, last);
  const done = await client.sendMessage(move({ action: "accept" }, first.id));
  const task = done?.payload?.value ?? done;
  check(`${binding}: accepting completes the task`, task?.status?.state === TaskState.TASK_STATE_COMPLETED, done);
  const order = task?.artifacts?.[0] ? dataOf(task.artifacts[0]).order : undefined;
  check(`${binding}: the order is the task's artifact`, order?.thread_id === first.id, task?.artifacts);
}

const seller = await agent("js seller");
const buyer = await agent("js buyer", "AGENCY");
await negotiate("JSONRPC", seller, buyer);
await negotiate("HTTP+JSON", seller, buyer);
console.log(`${results.passed} passed, ${results.failed} failed`);
process.exit(results.failed ? 1 : 0);
