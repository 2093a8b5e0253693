"""The console's time to first paint of the market view with many threads stored: the threads
(each with its opening bid, spread over the last 24 hours) are bulk-inserted by SQL, then a
signed-in Chromium loads /console several times and reads the browser's performance entries:
first-contentful-paint, and the console's own mark for when the figures, charts and the list
of negotiations are drawn (`console:market-ready`).

Usage: first_paint.py BASE_URL ADMIN_TOKEN THREADS   (DATABASE_URL in the environment)
"""

import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid

from playwright.sync_api import sync_playwright

BASE, ADMIN_TOKEN, THREADS = sys.argv[1], sys.argv[2], int(sys.argv[3])
LOADS = 7


def rest(method, path, body=None, token=None):
    request = urllib.request.Request(BASE + path, method=method, data=json.dumps(body).encode() if body is not None else None)
    request.add_header("content-type", "application/json")
    if token:
        request.add_header("authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def uuid7(ms):
    """A version 7 UUID for a moment in milliseconds, as the server makes its ids."""
    random = int.from_bytes(os.urandom(10), "big")
    value = (ms << 80) | (0x7 << 76) | ((random >> 62) & 0xFFF) << 64 | (0b10 << 62) | (random & ((1 << 62) - 1))
    return uuid.UUID(int=value)


def store_threads(listing, buyer, seller):
    now_ms = int(time.time() * 1000)
    step = 24 * 3600 * 1000 // THREADS
    lines = []
    for i in range(THREADS):
        at = now_ms - (i + 1) * step
        lines.append(f"{uuid7(at)}\t{uuid7(at)}\t{at / 1000:.3f}\t{90000 + i % 5000}\n")
    sql = f"""
        BEGIN;
        CREATE TEMP TABLE seed (thread_id uuid, bid_id uuid, at_epoch float8, amount bigint);
        COPY seed FROM STDIN;
{''.join(lines)}\\.
        INSERT INTO threads (id, listing_id, buyer_id, seller_id, status, rounds, last_bid_id, expires_at,
                             closed_reason, created_at, updated_at)
        SELECT thread_id, '{listing}', '{buyer}', '{seller}', 'REJECTED', 1, bid_id, NULL, 'rejected',
               to_timestamp(at_epoch), to_timestamp(at_epoch) FROM seed;
        INSERT INTO bids (id, thread_id, author, author_id, amount, currency, final, status, reason, round,
                          expires_at, responded_at, created_at, updated_at)
        SELECT bid_id, thread_id, 'buyer', '{buyer}', amount, 'USD', false, 'REJECTED', 'rejected', 1,
               to_timestamp(at_epoch) + interval '1 day', to_timestamp(at_epoch), to_timestamp(at_epoch),
               to_timestamp(at_epoch) FROM seed;
        COMMIT;
        ANALYZE threads; ANALYZE bids;
    """
    subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", os.environ["DATABASE_URL"]], input=sql.encode(), check=True)


def main():
    seller = rest("POST", "/v1/agents", {"name": "paint-seller"})
    buyer = rest("POST", "/v1/agents", {"name": "paint-buyer"})
    listing = rest("POST", "/v1/listings", {"title": "Paint desk", "ask_amount": 140000}, seller["api_key"])["id"]
    started = time.monotonic()
    store_threads(listing, buyer["agent"]["id"], seller["agent"]["id"])
    print(f"stored {THREADS} threads (and their bids) in {time.monotonic() - started:.1f} s", flush=True)

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium"))
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        page.goto(BASE + "/console/sign-in")
        page.fill("#token", ADMIN_TOKEN)
        page.click("button[type=submit]")
        page.wait_for_url(BASE + "/console")
        paints, readies = [], []
        for load in range(LOADS):
            fresh = context.new_page()
            fresh.goto(BASE + "/console")
            fresh.wait_for_function("() => performance.getEntriesByName('console:market-ready').length > 0", timeout=60000)
            fresh.wait_for_function("() => performance.getEntriesByName('first-contentful-paint').length > 0", timeout=60000)
            paint = fresh.evaluate("performance.getEntriesByName('first-contentful-paint')[0].startTime")
            ready = fresh.evaluate("performance.getEntriesByName('console:market-ready')[0].startTime")
            rows = fresh.locator("#threads tbody tr").count()
            print(f"load {load + 1}: first-contentful-paint {paint:.0f} ms, market drawn {ready:.0f} ms ({rows} negotiations listed)", flush=True)
            paints.append(paint)
            readies.append(ready)
            fresh.close()
        browser.close()
    print(f"first-contentful-paint of /console with {THREADS} threads stored: median {statistics.median(paints):.0f} ms "
          f"(min {min(paints):.0f}, max {max(paints):.0f}, {LOADS} loads, the first with a cold asset cache)")
    print(f"market view drawn (figures, charts, negotiations): median {statistics.median(readies):.0f} ms "
          f"(min {min(readies):.0f}, max {max(readies):.0f})")


main()
