"""The approval page (/approve) in a real browser: Playwright for Python driving the machine's
Chromium. An approver signs in with its token; a held acceptance is on the page with its
listing, price ladder and expiry; approving it makes the order (read back through the API); a
new request appears without a reload; a bad token is refused; a form posted from another origin
is refused and changes nothing.

Usage: page.py BASE_URL ADMIN_TOKEN
Ends with a `N passed, N failed` line.
"""

import json
import os
import sys
import urllib.error
import urllib.request

from playwright.sync_api import sync_playwright

BASE, ADMIN_TOKEN = sys.argv[1], sys.argv[2]
results = {"passed": 0, "failed": 0}


def check(name, condition, detail=""):
    results["passed" if condition else "failed"] += 1
    print(f"{'ok  ' if condition else 'FAIL'} {name}{'' if condition else ': ' + str(detail)}", flush=True)


def rest(method, path, body=None, token=None, expect=(200, 201, 202)):
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


def held_acceptance(seller, buyer, title):
    """The buyer's acceptance of the seller's 600.00, held for approval: the request."""
    listing = rest("POST", "/v1/listings", {"title": title, "ask_amount": 80000}, seller)
    placed = rest("POST", f"/v1/listings/{listing['id']}/bids", {"amount": 40000}, buyer)
    countered = rest("POST", f"/v1/bids/{placed['bid']['id']}/counter", {"amount": 60000}, seller)
    held = rest("POST", f"/v1/bids/{countered['bid']['id']}/accept", {}, buyer)
    return held["approval"]


def main():
    seller, buyer = agent("page-seller"), agent("page-buyer", "AGENCY")
    rest("PUT", "/v1/agents/me/approval-rules", {"rules": [{"move": "accept", "buyer_above": 50000}]}, buyer)
    token = rest("POST", "/v1/agents/me/approvers", {"name": "Alice"}, buyer)["token"]
    first = held_acceptance(seller, buyer, "Teak sideboard")

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium"))
        page = browser.new_page()
        errors = []
        # Uncaught script errors (the refused sign-in's 401 and a missing favicon are answers, not errors).
        page.on("pageerror", lambda error: errors.append(str(error)))

        # A bad token is refused, with the form again.
        page.goto(BASE + "/approve")
        page.fill("#token", "hap_not-a-real-token")
        page.click("button[type=submit]")
        check("a bad token is refused", page.locator("#sign-in-error").is_visible(), page.content()[:300])

        # Sign in; the held acceptance is there, with its listing, ladder and expiry.
        page.fill("#token", token)
        page.click("button[type=submit]")
        page.wait_for_selector(f"[data-id='{first['id']}']", timeout=10000)
        card = page.locator(f"[data-id='{first['id']}']")
        text = card.inner_text()
        check("the page shows the held acceptance with its listing",
              "Teak sideboard" in text and "600.00 USD" in text and "Accept" in text, text)
        check("with the thread's price ladder", card.locator("table.ladder tbody tr").count() == 2, text)
        check("and when it expires", "Expires" in text, text)
        check("the session cookie is HttpOnly (scripts cannot read it)",
              "haggle-approve" not in page.evaluate("document.cookie"))

        # A new request appears without a reload.
        marker = page.evaluate("window.__marker = Math.random()")
        second = held_acceptance(seller, buyer, "Teak chair")
        page.wait_for_selector(f"[data-id='{second['id']}']", timeout=15000)
        check("a new request appears without a reload", page.evaluate("window.__marker") == marker)
        check("the count follows", page.locator("#count").inner_text() == "2", page.locator("#count").inner_text())

        # A form posted from another origin is refused and changes nothing.
        refused = page.request.post(f"{BASE}/approve/requests/{first['id']}/approve",
                                    headers={"origin": "https://elsewhere.example"}, form={"note": "x"},
                                    max_redirects=0)
        check("a post from another origin is refused", refused.status == 403, refused.status)
        still = rest("GET", f"/v1/approvals/{first['id']}", token=buyer)
        check("and the request is still pending", still["status"] == "PENDING", still["status"])

        # Approve: the order is made, as the API shows.
        card.locator("form.approve button").click()
        page.wait_for_selector("#answered:not([hidden])", timeout=10000)
        notice = page.locator("#answered").inner_text()
        check("the page says it was approved and the order made",
              "Approved" in notice and "was made (order" in notice, notice)
        approval = rest("GET", f"/v1/approvals/{first['id']}", token=buyer)
        check("the request is APPROVED by Alice",
              (approval["status"], approval["approver"]) == ("APPROVED", "Alice"), approval)
        order = rest("GET", f"/v1/orders/{approval['order_id']}", token=buyer)
        check("the order is made at 600.00", order.get("order", order)["amount"] == 60000, order)
        page.wait_for_function("document.querySelectorAll('[data-id]').length === 1", timeout=10000)
        check("the approved request leaves the list", page.locator(f"[data-id='{first['id']}']").count() == 0)

        # Deny the second.
        page.locator(f"[data-id='{second['id']}'] form.deny input[name=note]").fill("too much")
        page.locator(f"[data-id='{second['id']}'] form.deny button").click()
        page.wait_for_selector("#answered[data-status=DENIED]", timeout=10000)
        denied = rest("GET", f"/v1/approvals/{second['id']}", token=buyer)
        check("a denial from the page is recorded with its note",
              (denied["status"], denied["note"]) == ("DENIED", "too much"), denied)

        # Sign out: the page asks for the token again.
        page.click("#sign-out")
        page.wait_for_selector("#token", timeout=10000)
        check("signing out ends the session", page.locator("#token").is_visible())
        check("no script error on the page", not errors, errors)
        browser.close()


try:
    main()
except Exception as error:  # noqa: BLE001 - any failure is the run's failure, reported as one
    results["failed"] += 1
    print(f"FAIL the run stopped: {error!r}", flush=True)
print(f"approvals-page: {results['passed']} passed, {results['failed']} failed")
sys.exit(1 if results["failed"] else 0)
