"""Haggle's operator console in a real browser (Playwright driving Debian's Chromium): a wrong
token is refused; the operator signs in; the market view shows a negotiation that this script
makes over the REST API while the page is open, without a reload; its price ladder is drawn;
an agent's tier raised in the page is the tier the API answers with; the other pages show;
an escalated refund is shown on its order's page, decided through the form, and the order shows
the refund; signing out ends the session. Screenshots of each step go to SHOTS_DIR.

Usage: e2e.py BASE_URL ADMIN_TOKEN SHOTS_DIR
Ends with a `N passed, N failed` line.
"""

import json
import os
import sys
import urllib.error
import urllib.request
import uuid

from playwright.sync_api import expect, sync_playwright

BASE, ADMIN_TOKEN, SHOTS = sys.argv[1], sys.argv[2], sys.argv[3]
COOKIE = "__Host-haggle-console"
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
    return registered["agent"]["id"], registered["api_key"]


def shot(page, name):
    page.screenshot(path=os.path.join(SHOTS, f"{name}.png"), full_page=True)


def console_cookie(context):
    return next((cookie for cookie in context.cookies() if cookie["name"] == COOKIE), None)


def drawn_pixels(page, selector):
    """How many pixels of the canvas in `selector` are not blank."""
    return page.evaluate(
        """(selector) => {
            const canvas = document.querySelector(selector + ' canvas');
            if (!canvas) return -1;
            const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
            let drawn = 0;
            for (let i = 3; i < data.length; i += 4) if (data[i] !== 0) drawn++;
            return drawn;
        }""",
        selector,
    )


def main():
    run = uuid.uuid4().hex[:6]
    seller_id, seller = agent(f"console-seller-{run}")
    buyer_id, buyer = agent(f"console-buyer-{run}", "AGENCY")
    raised_id, _ = agent(f"console-raised-{run}")

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium"))
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        troubles = []
        page.on("pageerror", lambda error: troubles.append(f"page error: {error}"))
        # Script errors and policy violations; an error answer the page expects (the wrong token's
        # 401, /metrics on a server that exports none) is not one.
        page.on("console", lambda message: message.type == "error" and not message.text.startswith("Failed to load resource")
                and troubles.append(f"console: {message.text}"))
        requested = []
        page.on("request", lambda request: requested.append(request.url))

        # A visitor without a session is sent to the sign-in form; a wrong token is refused.
        page.goto(BASE + "/console")
        check("without a session, /console shows the sign-in form", page.url == BASE + "/console/sign-in", page.url)
        page.fill("#token", "not-the-operator-token")
        page.click("button[type=submit]")
        expect(page.locator("#sign-in-error")).to_be_visible()
        check("a wrong token is refused", page.locator("#sign-in-error").is_visible())
        check("a wrong token sets no cookie", console_cookie(context) is None, context.cookies())
        shot(page, "01-wrong-token")

        # Signing in.
        page.fill("#token", ADMIN_TOKEN)
        page.click("button[type=submit]")
        page.wait_for_url(BASE + "/console")
        cookie = console_cookie(context)
        check("signing in sets the session cookie", cookie is not None, context.cookies())
        if cookie:
            check("the cookie is Secure, HttpOnly, SameSite=Strict, Path=/",
                  cookie["secure"] and cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/", cookie)
            check("the page's script cannot read the cookie", COOKIE not in page.evaluate("document.cookie"))
        expect(page.locator("#live")).to_have_text("live", timeout=15000)
        check("the market view follows the event stream", page.locator("#live").inner_text() == "live")
        expect(page.locator("#fig-deals")).not_to_have_text("…", timeout=15000)
        check("the market's figures are shown", page.locator("#fig-deals").inner_text() != "…")
        check("the charts are drawn", page.locator("#chart-deals canvas").count() == 1)
        shot(page, "02-market")

        # A negotiation made over the REST API while the page is open appears on it, live.
        page.evaluate("window.notReloaded = true")
        listing = rest("POST", "/v1/listings", {"title": f"Console desk {run}", "ask_amount": 140000}, seller)["id"]
        placed = rest("POST", f"/v1/listings/{listing}/bids", {"amount": 100000}, buyer)
        thread = placed["thread"]["id"]
        countered = rest("POST", f"/v1/bids/{placed['bid']['id']}/counter", {"amount": 132000}, seller)
        countered = rest("POST", f"/v1/bids/{countered['bid']['id']}/counter", {"amount": 112000}, buyer)
        countered = rest("POST", f"/v1/bids/{countered['bid']['id']}/counter", {"amount": 124000}, seller)
        rest("POST", f"/v1/bids/{countered['bid']['id']}/counter", {"amount": 118000}, buyer)
        row = page.locator(f'#threads tr[data-thread-id="{thread}"]')
        expect(row).to_be_visible(timeout=15000)
        expect(row).to_contain_text("5", timeout=15000)
        check("the negotiation appears live on the market view", row.is_visible())
        check("without a reload", page.evaluate("window.notReloaded === true"))
        check("its events are listed", page.locator("#events li").count() >= 5, page.locator("#events li").count())
        expect(page.locator("#fig-opened")).to_have_text("1", timeout=15000)
        check("the figures count it", page.locator("#fig-opened").inner_text() == "1")
        shot(page, "03-live-negotiation")

        # Its price ladder.
        row.locator("a").click()
        page.wait_for_url(f"{BASE}/console/threads/{thread}")
        expect(page.locator("#bids tbody tr")).to_have_count(5, timeout=15000)
        check("the ladder lists the five bids", page.locator("#bids tbody tr").count() == 5)
        check("the ladder's chart is a canvas", page.locator("#ladder canvas").count() == 1)
        pixels = drawn_pixels(page, "#ladder")
        check("the ladder's chart has drawn content", pixels > 500, pixels)
        shot(page, "04-price-ladder")

        # Raising an agent's tier.
        page.click("nav >> text=Agents")
        page.wait_for_url(BASE + "/console/agents")
        page.fill("#agent-search input[name=q]", f"console-raised-{run}")
        page.click("#agent-search button[type=submit]")
        agent_row = page.locator(f'#agents tr[data-agent-id="{raised_id}"]')
        expect(agent_row).to_be_visible(timeout=15000)
        agent_row.locator("select[name=tier]").select_option("AGENCY")
        agent_row.locator("[data-action=save-tier]").click()
        expect(page.locator(f'#agents tr[data-agent-id="{raised_id}"] select[name=tier]')).to_have_value("AGENCY", timeout=15000)
        page.wait_for_function(
            """(id) => { const row = document.querySelector(`#agents tr[data-agent-id="${id}"]`);
                         return row && !row.querySelector('[data-action=save-tier]').disabled; }""",
            arg=raised_id,
        )
        seen = rest("GET", f"/v1/admin/agents/{raised_id}", token=ADMIN_TOKEN)
        check("the API agrees on the raised tier", seen["tier"] == "AGENCY", seen)
        shot(page, "05-agents")

        # An escalated refund on its order's page, decided through the form.
        lamp = rest("POST", "/v1/listings", {"title": f"Console lamp {run}", "ask_amount": 140000}, seller)["id"]
        bought = rest("POST", f"/v1/listings/{lamp}/purchase", {}, buyer)
        order = bought["order"]["id"]
        paid = rest("POST", f"/v1/orders/{order}/payments", {"amount": 140000, "reference": f"ch_{run}"}, buyer)
        rest("POST", f"/v1/orders/{order}/payments/{paid['payment']['id']}/confirm", {}, seller)
        asked = rest("POST", f"/v1/orders/{order}/negotiations",
                     {"kind": "refund", "amount": 50000, "terms": {"reason": "damaged"}}, buyer)
        refund_thread = asked["thread"]["id"]
        rest("POST", f"/v1/bids/{asked['bid']['id']}/reject", {}, seller)
        rest("POST", f"/v1/threads/{refund_thread}/escalate", {}, buyer)
        page.click("nav >> text=Orders")
        page.wait_for_url(BASE + "/console/orders")
        page.locator(f'#orders tr[data-order-id="{order}"] a').click()
        page.wait_for_url(f"{BASE}/console/orders/{order}")
        timeline = page.locator("#timeline").inner_text()
        check("the order's page shows its timeline",
              all(what in timeline for what in ["order made", "payment confirmed", "refund opened", "escalated"]), timeline)
        check("the escalated refund has the decide form", page.locator("#decide").is_visible())
        shot(page, "06-order-escalated")
        page.fill("#decide input[name=amount]", "not money")
        page.fill("#decide input[name=note]", "a scratch, not a crack")
        page.click("#decide-submit")
        expect(page.locator("#problem")).to_be_visible(timeout=15000)
        check("a bad amount is refused with why", "is not one" in page.locator("#problem").inner_text())
        page.fill("#decide input[name=amount]", "200.00")
        page.click("#decide-submit")
        page.wait_for_url(f"{BASE}/console/orders/{order}")
        expect(page.locator("#timeline")).to_contain_text("operator decided", timeout=15000)
        summary = page.locator("#order-summary").inner_text()
        check("the order shows the refund", "200.00 USD" in summary and page.locator("#decide").count() == 0, summary)
        seen = rest("GET", f"/v1/orders/{order}", token=buyer)
        check("the API agrees on the refund", seen["refunded_amount"] == 20000, seen)
        shot(page, "07-order-decided")

        # The other pages.
        page.click("nav >> text=Webhooks")
        page.wait_for_url(BASE + "/console/webhooks")
        page.wait_for_load_state("networkidle")
        shot(page, "08-webhooks")
        page.click("nav >> text=Health")
        page.wait_for_url(BASE + "/console/health")
        expect(page.locator("#health .figure").first).to_contain_text("ready", timeout=15000)
        check("the health page shows readiness", "ready" in page.locator("#health").inner_text())
        shot(page, "09-health")

        # Nothing of the token in any URL the browser asked for.
        check("the token is in no URL", not any(ADMIN_TOKEN in url for url in requested))
        check("every request stayed on this server", all(url.startswith(BASE) for url in requested),
              [url for url in requested if not url.startswith(BASE)])
        check("no script error and no policy violation", not troubles, troubles)

        # Signing out.
        page.click("#sign-out")
        page.wait_for_url(BASE + "/console/sign-in")
        check("signing out removes the cookie", console_cookie(context) is None, context.cookies())
        page.goto(BASE + "/console")
        check("signed out, the console asks to sign in again", page.url == BASE + "/console/sign-in", page.url)
        shot(page, "10-signed-out")
        browser.close()


try:
    main()
except Exception as error:  # a step that timed out or failed outright
    check("the run completed", False, repr(error))
print(f"{results['passed']} passed, {results['failed']} failed")
sys.exit(1 if results["failed"] else 0)
