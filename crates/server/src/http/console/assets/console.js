// The Haggle console: reads the operator API with the session's cookie, draws the figures with
// uPlot, and follows the market's event stream. No inline script: the page's CSP forbids it.
"use strict";

(() => {
  const body = document.body;
  const page = body.dataset.page;
  if (page === "sign-in") return;

  // ---- helpers -------------------------------------------------------------------------
  const $ = (selector, root = document) => root.querySelector(selector);
  const el = (tag, attributes = {}, ...children) => {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes)) {
      if (value === undefined || value === null) continue;
      if (name === "class") node.className = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value);
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  };
  const problem = (message) => {
    const node = $("#problem");
    if (!node) return;
    node.textContent = message || "";
    node.hidden = !message;
  };

  /** A call to the operator API; the session cookie goes with it, same-origin. */
  async function api(method, path, payload) {
    const init = { method, credentials: "same-origin", headers: { accept: "application/json" } };
    if (payload !== undefined) {
      init.headers["content-type"] = "application/json";
      init.body = JSON.stringify(payload);
    }
    const response = await fetch(path, init);
    if (response.status === 401) {
      window.location.assign("/console/sign-in");
      throw new Error("signed out");
    }
    const text = await response.text();
    const data = text && (response.headers.get("content-type") || "").includes("json") ? JSON.parse(text) : text;
    if (!response.ok) {
      const detail = data && data.detail ? data.detail : response.statusText;
      throw new Error(`${method} ${path}: ${response.status} ${detail}`);
    }
    return data;
  }
  const items = (answer) => (Array.isArray(answer) ? answer : (answer && (answer.data || answer.items)) || []);

  const digitsOf = {};
  function money(amount, currency) {
    if (amount === null || amount === undefined) return "—";
    if (!currency) return Number(amount).toLocaleString();
    if (!(currency in digitsOf)) {
      try {
        digitsOf[currency] = new Intl.NumberFormat("en", { style: "currency", currency }).resolvedOptions().maximumFractionDigits;
      } catch (_) {
        digitsOf[currency] = 2;
      }
    }
    const digits = digitsOf[currency];
    try {
      return new Intl.NumberFormat(undefined, { style: "currency", currency, minimumFractionDigits: digits }).format(amount / 10 ** digits);
    } catch (_) {
      return `${(amount / 10 ** digits).toFixed(digits)} ${currency}`;
    }
  }
  const when = (iso) => (iso ? new Date(iso).toLocaleString() : "—");
  const time = (iso) => (iso ? new Date(iso).toLocaleTimeString() : "—");
  const short = (id) => (id ? String(id).slice(0, 8) : "—");
  const status = (value) => el("span", { class: `status ${value || ""}` }, value || "—");

  /** A uPlot chart in `container`, sized to it; redraws with `setData`. */
  function chart(container, series, options = {}) {
    const width = () => Math.max(280, container.clientWidth - 24);
    const plot = new uPlot(
      {
        width: width(),
        height: options.height || 200,
        series: [{}, ...series],
        scales: { x: { time: options.time !== false } },
        axes: options.axes || [{}, { size: 60 }],
        legend: { show: series.length > 1 },
        cursor: { drag: { x: false, y: false } },
      },
      [[], ...series.map(() => [])],
      container,
    );
    window.addEventListener("resize", () => plot.setSize({ width: width(), height: options.height || 200 }));
    return plot;
  }
  const line = (label, stroke, extra = {}) => ({ label, stroke, width: 2, points: { show: true, size: 5 }, ...extra });
  const bars = (label, fill) => ({ label, stroke: fill, fill, paths: uPlot.paths.bars({ size: [0.7, 40] }), points: { show: false } });

  // ---- the event stream ----------------------------------------------------------------
  /** Follows `/v1/admin/events/stream`; calls `onEvent` with each market event. */
  function follow(onEvent) {
    const indicator = $("#live");
    const types = (body.dataset.eventTypes || "").split(" ").filter(Boolean);
    const source = new EventSource("/v1/admin/events/stream");
    const mark = (on) => {
      indicator.textContent = on ? "live" : "reconnecting";
      indicator.className = `live ${on ? "on" : "off"}`;
    };
    source.onopen = () => mark(true);
    source.onerror = () => mark(false);
    const handle = (message) => {
      try {
        onEvent(JSON.parse(message.data));
      } catch (error) {
        console.error(error);
      }
    };
    for (const type of types) source.addEventListener(type, handle);
    source.onmessage = handle;
    return source;
  }

  // ---- the market ----------------------------------------------------------------------
  async function market() {
    const charts = {
      deals: chart($("#chart-deals"), [bars("deals", "rgba(47,111,237,0.75)")]),
      volume: chart($("#chart-volume"), [line("volume", "#1e8e3e", { fill: "rgba(30,142,62,0.12)" })]),
      opened: chart($("#chart-opened"), [bars("opened", "rgba(240,160,48,0.8)")]),
    };
    let refreshing = null;
    async function refreshStats() {
      const stats = await api("GET", "/v1/admin/stats?hours=24");
      const hours = stats.per_hour || [];
      const x = hours.map((hour) => Date.parse(hour.hour) / 1000);
      const currencies = new Map();
      for (const hour of hours) for (const v of hour.volume || []) currencies.set(v.currency, (currencies.get(v.currency) || 0) + v.amount);
      // The volume chart follows the currency with the most volume.
      const main = [...currencies.entries()].sort((a, b) => b[1] - a[1])[0];
      const mainCurrency = main ? main[0] : null;
      const digits = mainCurrency ? (money(0, mainCurrency), digitsOf[mainCurrency]) : 0;
      const volumeOf = (hour) => ((hour.volume || []).find((v) => v.currency === mainCurrency) || { amount: 0 }).amount / 10 ** digits;
      charts.deals.setData([x, hours.map((hour) => hour.deals)]);
      charts.volume.setData([x, hours.map(volumeOf)]);
      charts.opened.setData([x, hours.map((hour) => hour.negotiations_opened)]);
      $("#fig-deals").textContent = hours.reduce((sum, hour) => sum + hour.deals, 0).toLocaleString();
      $("#fig-volume").textContent = currencies.size ? [...currencies.entries()].map(([c, a]) => money(a, c)).join(" · ") : "0";
      $("#fig-opened").textContent = hours.reduce((sum, hour) => sum + hour.negotiations_opened, 0).toLocaleString();
      const rounds = stats.median_rounds_to_deal ?? stats.median_rounds;
      $("#fig-rounds").textContent = rounds === null || rounds === undefined ? "—" : Number(rounds).toLocaleString();
      const rate = stats.agreement_rate;
      $("#fig-agreement").textContent = rate === null || rate === undefined ? "—" : `${(rate * 100).toFixed(1)} %`;
    }
    // At most one refresh at a time, and one more after it if events came meanwhile.
    let again = false;
    function scheduleStats() {
      if (refreshing) {
        again = true;
        return;
      }
      refreshing = new Promise((resolve) => setTimeout(resolve, 1000))
        .then(refreshStats)
        .catch((error) => problem(error.message))
        .finally(() => {
          refreshing = null;
          if (again) {
            again = false;
            scheduleStats();
          }
        });
    }

    const rows = new Map();
    const tbody = $("#threads tbody");
    function threadRow(thread, fresh) {
      const row = el(
        "tr",
        { "data-thread-id": thread.id, class: fresh ? "fresh" : null },
        el("td", {}, time(thread.created_at)),
        el("td", {}, el("a", { href: `/console/threads/${thread.id}`, class: "mono" }, short(thread.id))),
        el("td", {}, status(thread.status)),
        el("td", {}, thread.rounds ?? "—"),
        el("td", {}, thread.turn || "—"),
      );
      const old = rows.get(thread.id);
      if (old) old.replaceWith(row);
      else tbody.prepend(row);
      rows.set(thread.id, row);
      while (rows.size > 50) {
        const last = tbody.lastElementChild;
        rows.delete(last.dataset.threadId);
        last.remove();
      }
    }
    const pending = new Set();
    async function refreshThread(id) {
      if (pending.has(id)) return;
      pending.add(id);
      try {
        const thread = await api("GET", `/v1/admin/threads/${id}`);
        threadRow(thread, true);
      } catch (error) {
        problem(error.message);
      } finally {
        pending.delete(id);
      }
    }

    const events = $("#events");
    follow((event) => {
      events.prepend(
        el("li", {}, el("span", { class: "type" }, event.type), " ", time(event.created_at),
          event.thread_id ? [" · ", el("a", { href: `/console/threads/${event.thread_id}`, class: "mono" }, short(event.thread_id))] : null),
      );
      while (events.children.length > 100) events.lastElementChild.remove();
      if (event.thread_id) refreshThread(event.thread_id);
      scheduleStats();
    });

    try {
      const [threads] = await Promise.all([api("GET", "/v1/admin/threads?limit=20"), refreshStats()]);
      for (const thread of items(threads).slice().reverse()) if (!rows.has(thread.id)) threadRow(thread, false);
      // For the first-paint figure: when the market view has its data drawn.
      performance.mark("console:market-ready");
    } catch (error) {
      problem(error.message);
    }
  }

  // ---- a negotiation's price ladder ----------------------------------------------------
  async function thread() {
    const id = body.dataset.threadId;
    const ladder = chart(
      $("#ladder"),
      [line("buyer", "#2f6fed", { spanGaps: true }), line("seller", "#c0362c", { spanGaps: true })],
      { time: false, height: 320, axes: [{ label: "round", incrs: [1, 2, 5, 10] }, { size: 80 }] },
    );
    async function draw() {
      const found = await api("GET", `/v1/admin/threads/${id}`);
      const bids = found.bids || [];
      const currency = bids.length ? bids[0].currency : null;
      const digits = currency ? (money(0, currency), digitsOf[currency]) : 0;
      const x = bids.map((_, index) => index + 1);
      const of = (author) => bids.map((bid) => (bid.author === author ? bid.amount / 10 ** digits : null));
      ladder.setData([x, of("buyer"), of("seller")]);
      const summary = $("#thread-summary");
      summary.replaceChildren(
        ...[
          ["Negotiation", el("span", { class: "mono" }, found.id)],
          ["Status", status(found.status)],
          ["Rounds", found.rounds],
          ["Turn", found.turn || "—"],
          ["Buyer", el("span", { class: "mono" }, short(found.buyer_id))],
          ["Seller", el("span", { class: "mono" }, short(found.seller_id))],
          ["Opened", when(found.created_at)],
          ["Closed because", found.closed_reason || "—"],
          ["Kind", found.kind || "price"],
          ["Order", found.order_id ? el("a", { href: `/console/orders/${found.order_id}`, class: "mono" }, short(found.order_id)) : "—"],
        ].map(([label, value]) => el("span", {}, el("b", {}, label), value)),
      );
      $("#bids tbody").replaceChildren(
        ...bids.map((bid) =>
          el("tr", {}, el("td", {}, bid.round), el("td", {}, bid.author), el("td", {}, money(bid.amount, bid.currency), bid.final ? " (final)" : ""),
            el("td", {}, status(bid.status)), el("td", {}, when(bid.created_at))),
        ),
      );
    }
    let drawing = Promise.resolve();
    follow((event) => {
      if (event.thread_id === id) drawing = drawing.then(draw).catch((error) => problem(error.message));
    });
    await draw().catch((error) => problem(error.message));
  }

  // ---- agents --------------------------------------------------------------------------
  async function agents() {
    const tiers = (body.dataset.tiers || "").split(" ").filter(Boolean);
    const tbody = $("#agents tbody");
    const more = $("#agents-more");
    let query = "";
    let after = null;

    function agentRow(agent) {
      const select = el("select", { "aria-label": "tier", name: "tier" }, tiers.map((tier) => {
        const option = el("option", { value: tier }, tier);
        option.selected = tier === agent.tier;
        return option;
      }));
      const suspended = Boolean(agent.suspended_at);
      const act = async (button, method, path, payload) => {
        button.disabled = true;
        try {
          const updated = await api(method, path, payload);
          problem("");
          row.replaceWith(agentRow({ ...agent, ...(updated && updated.id ? updated : await api("GET", `/v1/admin/agents/${agent.id}`)) }));
        } catch (error) {
          problem(error.message);
          button.disabled = false;
        }
      };
      const save = el("button", { class: "secondary", "data-action": "save-tier" }, "Set tier");
      save.addEventListener("click", () => act(save, "PATCH", `/v1/admin/agents/${agent.id}`, { tier: select.value }));
      const toggle = el("button", { class: suspended ? "secondary" : "danger", "data-action": suspended ? "reinstate" : "suspend" }, suspended ? "Reinstate" : "Suspend");
      toggle.addEventListener("click", () => act(toggle, "POST", `/v1/admin/agents/${agent.id}/${suspended ? "reinstate" : "suspend"}`, {}));
      const row = el(
        "tr",
        { "data-agent-id": agent.id },
        el("td", {}, agent.name),
        el("td", { class: "mono" }, agent.id),
        el("td", {}, select, " ", save),
        el("td", {}, status(suspended ? "suspended" : "active")),
        el("td", {}, toggle),
      );
      return row;
    }
    async function load(reset) {
      if (reset) {
        tbody.replaceChildren();
        after = null;
      }
      try {
        const page = await api("GET", `/v1/admin/agents?limit=50${query}${after ? `&after=${after}` : ""}`);
        for (const agent of items(page)) tbody.append(agentRow(agent));
        after = page.next_cursor || null;
        more.hidden = !after;
        problem("");
      } catch (error) {
        problem(error.message);
      }
    }
    $("#agent-search").addEventListener("submit", (submit) => {
      submit.preventDefault();
      const form = new FormData(submit.target);
      query = [...form.entries()].filter(([, value]) => value).map(([name, value]) => `&${name}=${encodeURIComponent(value)}`).join("");
      load(true);
    });
    more.addEventListener("click", () => load(false));
    await load(true);
  }

  // ---- webhooks ------------------------------------------------------------------------
  async function webhooks() {
    const section = $("#deliveries");
    async function deliveries(hook) {
      section.hidden = false;
      $("#deliveries-of").textContent = hook.url;
      try {
        const page = await api("GET", `/v1/admin/webhooks/${hook.id}/deliveries`);
        $("tbody", section).replaceChildren(
          ...items(page).map((delivery) => {
            const last = (delivery.attempt_log || []).slice(-1)[0];
            const answer = last ? last.status_code ?? last.error ?? last.outcome ?? JSON.stringify(last) : "—";
            return el("tr", {}, el("td", {}, delivery.event_type, " #", delivery.event_id), el("td", {}, status(delivery.status)),
              el("td", {}, delivery.attempts), el("td", {}, answer), el("td", {}, when(delivery.next_attempt_at)));
          }),
        );
      } catch (error) {
        problem(error.message);
      }
    }
    try {
      const page = await api("GET", "/v1/admin/webhooks?failing=true");
      $("#webhooks tbody").replaceChildren(
        ...items(page).map((hook) => {
          const open = el("button", { class: "secondary" }, "Deliveries");
          open.addEventListener("click", () => deliveries(hook));
          const counts = hook.deliveries || {};
          return el("tr", {}, el("td", { class: "mono" }, short(hook.id)), el("td", {}, hook.agent_name || short(hook.agent_id)),
            el("td", { class: "mono" }, hook.url), el("td", {}, `${counts.failed ?? "?"} failed, ${counts.pending ?? "?"} pending · last ${when(hook.last_failure_at)}`), el("td", {}, open));
        }),
      );
    } catch (error) {
      problem(error.message);
    }
  }

  // ---- system health -------------------------------------------------------------------
  /** Prometheus text: every sample as {name, labels, value}. */
  function parseMetrics(text) {
    const samples = [];
    for (const raw of text.split("\n")) {
      const lineText = raw.trim();
      if (!lineText || lineText.startsWith("#")) continue;
      const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(lineText);
      if (!match) continue;
      const labels = {};
      for (const pair of (match[3] || "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1]] = pair[2];
      samples.push({ name: match[1], labels, value: Number(match[4]) });
    }
    return samples;
  }
  const sum = (samples, name, filter = () => true) => {
    const found = samples.filter((s) => s.name === name && filter(s.labels));
    return found.length ? found.reduce((total, s) => total + s.value, 0) : null;
  };
  /** A quantile of a histogram summed over its label sets, from its cumulative buckets. */
  function quantile(samples, name, q) {
    const buckets = new Map();
    for (const s of samples.filter((s) => s.name === `${name}_bucket`)) buckets.set(s.labels.le, (buckets.get(s.labels.le) || 0) + s.value);
    const sorted = [...buckets.entries()].map(([le, count]) => [le === "+Inf" ? Infinity : Number(le), count]).sort((a, b) => a[0] - b[0]);
    if (!sorted.length) return null;
    const total = sorted[sorted.length - 1][1];
    if (!total) return null;
    let previous = [0, 0];
    for (const [le, count] of sorted) {
      if (count >= q * total) {
        if (le === Infinity) return previous[0];
        const share = count === previous[1] ? 0 : (q * total - previous[1]) / (count - previous[1]);
        return previous[0] + (le - previous[0]) * share;
      }
      previous = [le, count];
    }
    return previous[0];
  }

  async function health() {
    const requests = chart($("#chart-requests"), [line("req/s", "#2f6fed")]);
    const latency = chart($("#chart-latency"), [line("p50", "#1e8e3e"), line("p99", "#c0362c")]);
    const history = { x: [], rate: [], p50: [], p99: [] };
    let last = null;
    const figure = (label, value, bad) => el("div", { class: `figure ${bad === undefined ? "" : bad ? "bad" : "good"}` },
      el("span", { class: "label" }, label), el("span", { class: "value" }, value));
    const show = (value, unit = "") => (value === null || value === undefined ? "—" : `${Number(value.toFixed ? value.toFixed(3) : value).toLocaleString()}${unit}`);
    async function poll() {
      let ready;
      try {
        const answer = await fetch("/readyz", { headers: { accept: "application/json" } });
        ready = answer.ok ? await answer.json() : { status: `not ready (${answer.status})` };
      } catch (error) {
        ready = { status: "unreachable" };
      }
      let samples = [];
      let metricsNote = null;
      try {
        const answer = await fetch("/metrics", { credentials: "same-origin", headers: { accept: "text/plain" } });
        if (answer.ok) samples = parseMetrics(await answer.text());
        else metricsNote = `/metrics answered ${answer.status}`;
      } catch (error) {
        metricsNote = "/metrics is unreachable";
      }
      const now = Date.now() / 1000;
      const total = sum(samples, "haggle_http_requests_total");
      if (total !== null && last && now > last.at) {
        history.x.push(now);
        history.rate.push(Math.max(0, (total - last.total) / (now - last.at)));
        const p50 = quantile(samples, "haggle_http_request_duration_seconds", 0.5);
        const p99 = quantile(samples, "haggle_http_request_duration_seconds", 0.99);
        history.p50.push(p50);
        history.p99.push(p99);
        for (const list of Object.values(history)) if (list.length > 120) list.shift();
        requests.setData([history.x, history.rate]);
        latency.setData([history.x, history.p50, history.p99]);
      }
      if (total !== null) last = { at: now, total };
      const pool = (state) => sum(samples, "haggle_db_pool_connections", (labels) => labels.state === state);
      const backlog = sum(samples, "haggle_webhook_backlog");
      const oldest = sum(samples, "haggle_webhook_oldest_pending_age_seconds");
      $("#health").replaceChildren(
        figure("Readiness", ready.status + (ready.instances ? ` · ${ready.instances} instance(s)` : ""), ready.status !== "ready"),
        figure("Requests served", show(total)),
        figure("Pool connections (idle / in use)", pool("idle") === null && pool("in_use") === null && pool("used") === null
          ? "—" : `${show(pool("idle"))} / ${show(pool("in_use") ?? pool("used") ?? pool("busy"))}`),
        figure("Waiting for a connection", show(sum(samples, "haggle_db_pool_waiting"))),
        figure("Open event streams", show(sum(samples, "haggle_open_streams"))),
        figure("Open long polls", show(sum(samples, "haggle_open_long_polls"))),
        figure("Webhook backlog", show(backlog), backlog === null ? undefined : backlog > 1000),
        figure("Oldest pending delivery", show(oldest, " s"), oldest === null ? undefined : oldest > 300),
        figure("Events committed", show(sum(samples, "haggle_events_published_total"))),
      );
      const names = [...new Set(samples.map((s) => s.name))].filter((name) => name.startsWith("haggle_") && !name.endsWith("_bucket")).sort();
      $("#metrics tbody").replaceChildren(
        ...(metricsNote ? [el("tr", {}, el("td", { colspan: 2 }, metricsNote))] : []),
        ...names.map((name) => el("tr", {}, el("td", { class: "mono" }, name), el("td", {}, show(sum(samples, name))))),
      );
    }
    await poll();
    setInterval(poll, 5000);
  }

  const pages = { market, thread, agents, webhooks, health };
  if (pages[page]) pages[page]().catch((error) => problem(error.message));
  if (page !== "market" && page !== "thread") {
    // The other pages show the stream's state only.
    try {
      follow(() => {});
    } catch (_) {
      /* no stream: the indicator stays offline */
    }
  }
})();
