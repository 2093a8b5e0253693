"""Haggle's policies against the ANAC agents of negmas-genius-agents, on one price.

Every buyer meets every seller on the same scenarios: ANAC agents (and NegMAS's time-based
ones) against each other in process, with NegMAS's SAOMechanism; any game with a Haggle policy
in it through a live server, the policy played by the server and the ANAC agent's moves sent
through the REST API. Both are held to the same protocol (Haggle's bid rules, SPEC.md §2):

- The buyer opens. A listing of `max_rounds` N takes N bids, alternately; the N-th is final, so
  its answer can only be accept or reject. In NegMAS that is an SAOMechanism of N + 1 steps with
  one offer a step: steps 0 to N - 1 make the N bids, step N can only accept (a counter there is
  the end of time, no agreement).
- Relative time is the share of the bids made: the agent moving at step s sees s / N, so the
  opening is at 0 and the answer to the final bid at 1 (the clock of Haggle's `time` strategy,
  round / max_rounds).
- A counter that gives the other side at least its own pending price is taken as acceptance of
  that price (the server would refuse it as no counter at all). Under the strict concession rule
  a counter that retracts the mover's own earlier concession is refused and ends the game without
  agreement, counted by the server's code `not_a_concession`. In process the same rules are
  applied to the agents' moves in order: the game ends at the first move the server would refuse.

The price is one issue of 201 values: amounts 100.00 to 300.00 (minor units 10000 to 30000) in
steps of 1.00; the listing's ask is the top, 300.00. The buyer's utility falls linearly from 1 at
the bottom to 0 at the top, the seller's rises; each knows only its own reservation (a buyer's
ceiling B, a seller's floor S) as its reserved value. A Haggle counter between two values is
shown to the ANAC agent at the nearest value; the deal is at the server's amount.

Score, per game: for an agreement at amount p where B > S, the buyer gets (B - p) / (B - S) and
the seller (p - S) / (B - S), each side's share of the surplus, held within [-1, 1]: a side that
agreed past its own reservation scores below 0 (at worst -1, however far past), and its opponent
at most the whole surplus, 1. No agreement scores 0 for both; a disjoint scenario (B <= S) scores
0 for both whatever happens. Agreements past a reservation are counted apart
(`agreement_past_floor`, `agreement_past_ceiling`), and a refused move is counted against the side
that made it (`own refused:...`) or its opponent (`other's refused:...`). A Haggle policy may mark
a counter final before the last round (the `tier` engine does); an ANAC agent cannot be told, and
its counter to such a bid is sent as the rejection it amounts to (`countered_final`).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import random
import signal
import statistics
import sys
import time
import traceback
import urllib.error
import urllib.request
import warnings
from dataclasses import asdict, dataclass

LO, HI, STEP = 10_000, 30_000, 100
VALUES = (HI - LO) // STEP  # outcomes 0..VALUES
HORIZONS = (5, 10, 20, 50)
KINDS = ("wide", "narrow", "disjoint")

# Haggle's strategies by the simulator's names (crates/sim/src/roster.rs); `name={json}` adds one.
KNOWN = {
    "split": {"strategy": "split"},
    "step": {"strategy": "step", "fraction": 0.25},
    "time-boulware": {"strategy": "time", "e": 0.2},
    "time-linear": {"strategy": "time", "e": 1.0},
    "time-conceder": {"strategy": "time", "e": 3.0},
    "tft": {"strategy": "tit_for_tat", "kindness": 0.0},
    "tier": {"strategy": "tier"},
    "bayes": {"strategy": "bayes"},
}
DEFAULT_BUYERS = "step,split,time-boulware,time-conceder,tft,bayes"
DEFAULT_SELLERS = "tier,step,split,time-boulware,time-conceder,tft,bayes"
QUICK_AGENTS = "AgentK,HardHeaded,CUHKAgent,Atlas3,AgentGG,BoulwareTB"
NEGMAS_TIME_BASED = ("BoulwareTB", "LinearTB", "ConcederTB")
HAGGLE = "haggle:"

PROBE_SECONDS = 20
GAME_SECONDS = 60


# ---------------------------------------------------------------------------------------------
# Scenarios and score


@dataclass(frozen=True)
class Scenario:
    kind: str
    seed: int
    floor: int  # the seller's reservation S, minor units
    ceiling: int  # the buyer's reservation B

    @property
    def feasible(self) -> bool:
        return self.ceiling > self.floor


def scenarios(seeds: int) -> list[Scenario]:
    """Per seed one scenario of each kind, the same for every pair of agents."""
    out = []
    for seed in range(1, seeds + 1):
        rng = random.Random(seed)
        for kind in KINDS:
            if kind == "wide":
                s, b = rng.uniform(0.05, 0.30), rng.uniform(0.70, 0.95)
            else:
                centre, width = rng.uniform(0.35, 0.65), rng.uniform(0.04, 0.12)
                s, b = centre - width / 2, centre + width / 2
                if kind == "disjoint":
                    s, b = b, s
            out.append(Scenario(kind, seed, amount_at(round(s * VALUES)), amount_at(round(b * VALUES))))
    return out


def amount_at(value: int) -> int:
    return LO + value * STEP


def value_of(amount: int) -> int:
    return min(VALUES, max(0, round((amount - LO) / STEP)))


def shares(sc: Scenario, price: int | None) -> tuple[float, float]:
    """(buyer, seller) shares of the surplus, each within [-1, 1]."""
    if price is None or not sc.feasible:
        return 0.0, 0.0
    gap = sc.ceiling - sc.floor
    clip = lambda share: max(-1.0, min(1.0, share))  # noqa: E731
    return clip((sc.ceiling - price) / gap), clip((price - sc.floor) / gap)


def agreement_ending(sc: Scenario, price: int) -> str:
    """An agreement, and whether a side agreed past its own reservation."""
    if price > sc.ceiling:
        return "agreement_past_ceiling"
    if price < sc.floor:
        return "agreement_past_floor"
    return "agreement"


# ---------------------------------------------------------------------------------------------
# Agents


def anac_registry() -> dict[str, dict[str, list[type]]]:
    import negmas_genius_agents as genius

    return genius._AGENT_REGISTRY


def agent_classes() -> dict[str, type]:
    """Every agent class negmas-genius-agents lists, and NegMAS's three time-based agents."""
    from negmas.sao import BoulwareTBNegotiator, ConcederTBNegotiator, LinearTBNegotiator

    classes: dict[str, type] = {}
    for group in anac_registry().values():
        for cls in group["all"]:
            classes.setdefault(cls.__name__, cls)
    classes["BoulwareTB"] = BoulwareTBNegotiator
    classes["LinearTB"] = LinearTBNegotiator
    classes["ConcederTB"] = ConcederTBNegotiator
    return classes


def finalists() -> list[str]:
    names: list[str] = []
    for year, group in anac_registry().items():
        if year.startswith("anac"):
            for cls in group["winners"] + group["finalists"]:
                if cls.__name__ not in names:
                    names.append(cls.__name__)
    return names + list(NEGMAS_TIME_BASED)


def pick_agents(spec: str) -> list[str]:
    known = agent_classes()
    if spec == "finalists":
        return finalists()
    if spec == "all":
        return list(known)
    if spec == "quick":
        spec = QUICK_AGENTS
    names = [name.strip() for name in spec.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown:
        sys.exit(f"anac: unknown agents {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return names


_recording: dict[type, type] = {}


def recorded(cls: type) -> type:
    """`cls` with every answer it gives the mechanism written down, in order."""
    if cls not in _recording:

        def __call__(self, state, dest=None):
            response = cls.__call__(self, state, dest) if dest is not None else cls.__call__(self, state)
            self.moves.append((state.step, response.response, response.outcome))
            return response

        _recording[cls] = type(cls.__name__, (cls,), {"__call__": __call__})
    return _recording[cls]


def make_agent(name: str, role: str):
    agent = recorded(agent_classes()[name])(name=role)
    agent.moves = []
    return agent


# ---------------------------------------------------------------------------------------------
# One game


def mechanism_class():
    from negmas import SAOMechanism

    class HaggleClock(SAOMechanism):
        """SAO whose relative time is the share of the listing's bids made (step / N)."""

        def _relative_time_for(self, nmi):
            return min(1.0, self._current_state.step / max(1, self._shared_nmi.n_steps - 1))

    return HaggleClock


def new_mechanism(horizon: int):
    from negmas import make_issue

    return mechanism_class()(
        issues=[make_issue((0, VALUES), name="price")], n_steps=horizon + 1, one_offer_per_step=True
    )


def ufuns(mechanism, sc: Scenario):
    from negmas.preferences import LinearAdditiveUtilityFunction
    from negmas.preferences.value_fun import AffineFun

    space = mechanism.outcome_space
    buyer = LinearAdditiveUtilityFunction(
        values=[AffineFun(-1 / VALUES, 1.0)], outcome_space=space, reserved_value=1 - value_of(sc.ceiling) / VALUES
    )
    seller = LinearAdditiveUtilityFunction(
        values=[AffineFun(1 / VALUES, 0.0)], outcome_space=space, reserved_value=value_of(sc.floor) / VALUES
    )
    return buyer, seller


@dataclass
class Game:
    buyer: str
    seller: str
    kind: str
    seed: int
    horizon: int
    floor: int
    ceiling: int
    venue: str = ""  # "process" or "server"
    ending: str = ""  # agreement[_past_floor|_past_ceiling], no_agreement, refused:<code>, error:<what>
    refused: str = ""  # the side whose move was refused (or failed), when one was
    price: int | None = None
    bids: int = 0
    buyer_share: float = 0.0
    seller_share: float = 0.0
    detail: str = ""
    seconds: float = 0.0

    @property
    def scenario(self) -> Scenario:
        return Scenario(self.kind, self.seed, self.floor, self.ceiling)

    def finish(self, ending: str, price: int | None = None, detail: str = "", by: str = "") -> "Game":
        self.refused = by
        if ending == "agreement":
            ending = agreement_ending(self.scenario, price)
        self.ending, self.price, self.detail = ending, price, detail[:300]
        self.buyer_share, self.seller_share = shares(self.scenario, price)
        return self


def referee(moves: list[tuple[str, object, int | None]], rule: str) -> tuple[str, int | None, int, str]:
    """Holds an in-process game to the server's bid rules: `moves` are (mover, response, amount)
    in order, the buyer's opening first. Returns (ending, price, bids made, who was refused)."""
    from negmas import ResponseType

    last = {"buyer": None, "seller": HI}  # a seller's first counter is bounded by the ask
    pending: tuple[str, int] | None = None
    bids = 0
    for mover, response, amount in moves:
        if response == ResponseType.ACCEPT_OFFER and pending is not None:
            return "agreement", pending[1], bids, ""
        if response != ResponseType.REJECT_OFFER or amount is None:
            return "no_agreement", None, bids, ""
        if pending is not None:
            theirs = pending[1]
            if (mover == "buyer" and amount >= theirs) or (mover == "seller" and amount <= theirs):
                return "agreement", theirs, bids, ""
            own = last[mover]
            if rule == "strict" and own is not None:
                if (mover == "buyer" and amount < own) or (mover == "seller" and amount > own):
                    return "refused:not_a_concession", None, bids, mover
        last[mover] = amount
        pending = (mover, amount)
        bids += 1
    return "no_agreement", None, bids, ""


class Timeout(Exception):
    pass


def _alarm(*_):
    raise Timeout()


def play_in_process(game: Game, rule: str, seconds: int = GAME_SECONDS) -> Game:
    from negmas import ResponseType

    game.venue = "process"
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        mechanism = new_mechanism(game.horizon)
        buyer_ufun, seller_ufun = ufuns(mechanism, game.scenario)
        buyer, seller = make_agent(game.buyer, "buyer"), make_agent(game.seller, "seller")
        mechanism.add(buyer, preferences=buyer_ufun)
        mechanism.add(seller, preferences=seller_ufun)
        state = mechanism.run()
        signal.alarm(0)
        if state.has_error:
            return game.finish("error:exception", detail=str(state.error_details))
        calls = sorted(
            [(step, "buyer", r, o) for step, r, o in buyer.moves] + [(step, "seller", r, o) for step, r, o in seller.moves]
        )
        moves = [(who, r, amount_at(int(o[0])) if o is not None else None) for _, who, r, o in calls]
        # The answer to the final bid can only accept: a counter there is time running out.
        if len(moves) > game.horizon and moves[game.horizon][1] == ResponseType.REJECT_OFFER:
            moves[game.horizon] = (moves[game.horizon][0], ResponseType.END_NEGOTIATION, None)
        ending, price, game.bids, by = referee(moves[: game.horizon + 1], rule)
        return game.finish(ending, price, by=by)
    except Timeout:
        return game.finish("error:timeout", detail=f"over {seconds} s")
    except Exception as error:  # an agent's own failure is a result, not the harness's
        signal.alarm(0)
        return game.finish("error:exception", detail=f"{type(error).__name__}: {error}")


# ---------------------------------------------------------------------------------------------
# The server


class Refused(Exception):
    def __init__(self, status: int, code: str, detail: str):
        super().__init__(f"{status} {code}: {detail}")
        self.status, self.code = status, code


class Api:
    def __init__(self, base: str, key: str | None = None):
        self.base, self.key = base.rstrip("/"), key

    def call(self, method: str, path: str, body=None, timeout: float = 30):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("content-type", "application/json")
        if self.key:
            request.add_header("authorization", f"Bearer {self.key}")
        for attempt in range(8):
            try:
                with urllib.request.urlopen(request, timeout=timeout) as response:
                    text = response.read()
                    return json.loads(text) if text else None
            except urllib.error.HTTPError as error:
                text = error.read().decode(errors="replace")
                try:
                    problem = json.loads(text)
                except ValueError:
                    problem = {"code": str(error.code), "detail": text}
                if problem.get("code") in ("rate_limited", "unavailable") and attempt < 7:
                    time.sleep(0.25 * (attempt + 1))
                    continue
                raise Refused(error.code, problem.get("code", str(error.code)), problem.get("detail", "")) from None


def register(base: str, admin_token: str, name: str) -> tuple[Api, Api]:
    """A buyer (raised to AGENCY, the tier the `tier` engine plays against) and a seller."""
    admin = Api(base, admin_token)
    seller = Api(base, Api(base).call("POST", "/v1/agents", {"name": f"{name}-seller"})["api_key"])
    made = Api(base).call("POST", "/v1/agents", {"name": f"{name}-buyer"})
    admin.call("PATCH", f"/v1/admin/agents/{made['agent']['id']}", {"tier": "AGENCY"})
    return Api(base, made["api_key"]), seller


def haggle_strategies(spec: str) -> dict[str, dict]:
    """`name` (a known one, else `{"strategy": name}`) or `name={counter json}`, comma-separated
    (a JSON counter with commas goes in a list of its own: repeat the option)."""
    out: dict[str, dict] = {}
    for item in split_specs(spec):
        name, _, counter = item.partition("=")
        name = name.strip()
        if counter:
            try:
                out[name] = json.loads(counter)
            except ValueError as error:
                sys.exit(f"anac: the counter of `{name}` is not JSON: {error}")
        else:
            out[name] = KNOWN.get(name, {"strategy": name})
    return out


def split_specs(spec: str) -> list[str]:
    """Splits at commas outside braces."""
    items, depth, current = [], 0, ""
    for ch in spec:
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    items.append(current)
    return [item.strip() for item in items if item.strip()]


def opening(counter: dict, ceiling: int) -> int:
    """A Haggle buyer's opening bid, which a policy does not make: as `haggle sim` opens for it
    (bayes at 35 % of the ask, any other strategy at half its ceiling)."""
    if counter.get("strategy") == "bayes":
        return max(1, min(ceiling, math.floor(HI * 0.35)))
    return max(100, ceiling // 2)


class Thread:
    """One game on the server: the listing, the thread, whose bid is pending."""

    WAIT = 10  # seconds a policy has to answer

    def __init__(self, ctx: "ServerContext", game: Game):
        self.ctx, self.game = ctx, game
        self.listing: str | None = None
        self.thread: str | None = None
        self.pending: dict | None = None  # a Haggle bid waiting for the ANAC agent's answer
        self.countered_final = False

    def open_listing(self):
        body = {"title": f"anac {self.game.kind} {self.game.seed}", "ask_amount": HI, "max_rounds": self.game.horizon}
        if self.ctx.rule == "none":
            body["concession_rule"] = "none"
        listing = self.ctx.seller.call("POST", "/v1/listings", body)
        self.listing = listing["id"]
        seller = self.ctx.haggle_sellers.get(self.game.seller.removeprefix(HAGGLE))
        if self.game.seller.startswith(HAGGLE):
            self.ctx.seller.call("PUT", f"/v1/listings/{self.listing}/policy", policy(self.game.floor, seller))
        if self.game.buyer.startswith(HAGGLE):
            buyer = self.ctx.haggle_buyers[self.game.buyer.removeprefix(HAGGLE)]
            self.ctx.buyer.call("PUT", f"/v1/listings/{self.listing}/policy", policy(self.game.ceiling, buyer))

    def place(self, amount: int) -> dict:
        placed = self.ctx.buyer.call("POST", f"/v1/listings/{self.listing}/bids", {"amount": amount})
        self.thread = placed["thread"]["id"]
        return placed["bid"]

    def answer_of_haggle(self, bid: dict) -> tuple[str, int | None]:
        """Waits for the Haggle policy's answer to `bid`: (accept | counter | reject, amount)."""
        deadline = time.monotonic() + self.WAIT
        while True:
            seen = self.ctx.buyer.call("GET", f"/v1/bids/{bid['id']}?wait=5", timeout=15)
            if seen["status"] != "PENDING":
                break
            if time.monotonic() > deadline:
                raise Refused(0, "policy_silent", "the policy did not answer within 10 s")
        if seen["status"] == "ACCEPTED":
            return "accept", bid["amount"]
        if seen["status"] == "COUNTERED":
            thread = self.ctx.buyer.call("GET", f"/v1/threads/{self.thread}")
            self.pending = thread["bids"][-1]
            return "counter", self.pending["amount"]
        return "reject", None

    def send_anac(self, amount: int) -> tuple[str, int | None]:
        """The ANAC agent's bid; the Haggle policy's answer to it."""
        anac_side = "seller" if self.game.buyer.startswith(HAGGLE) else "buyer"
        me = self.ctx.buyer if anac_side == "buyer" else self.ctx.seller
        if self.thread is None:
            return self.answer_of_haggle(self.place(amount))
        theirs, self.pending = self.pending, None
        if (anac_side == "buyer" and amount >= theirs["amount"]) or (anac_side == "seller" and amount <= theirs["amount"]):
            me.call("POST", f"/v1/bids/{theirs['id']}/accept", {})
            return "crossed", theirs["amount"]
        if theirs.get("final"):
            # A final bid takes only accept or reject; the agent, which cannot be told that a bid
            # is final before the last round, countered it: that is its rejection.
            me.call("POST", f"/v1/bids/{theirs['id']}/reject", {})
            self.countered_final = True
            return "reject", None
        made = me.call("POST", f"/v1/bids/{theirs['id']}/counter", {"amount": amount})
        return self.answer_of_haggle(made["bid"])

    def close(self, accept: bool):
        """The ANAC agent's last word on a Haggle bid still waiting for it."""
        if self.pending is None:
            return
        anac = self.ctx.buyer if self.pending["author"] == "seller" else self.ctx.seller
        verb = "accept" if accept else "reject"
        self.pending, bid = None, self.pending
        anac.call("POST", f"/v1/bids/{bid['id']}/{verb}", {})

    def result(self) -> tuple[str, int | None, int]:
        thread = self.ctx.buyer.call("GET", f"/v1/threads/{self.thread}")
        accepted = [bid for bid in thread["bids"] if bid["status"] == "ACCEPTED"]
        if thread["status"] == "ACCEPTED" and accepted:
            return "agreement", accepted[0]["amount"], len(thread["bids"])
        return "no_agreement", None, len(thread["bids"])


def policy(limit: int, counter: dict) -> dict:
    return {"limit": limit, "counter": counter, "max_auto_rounds": 100}


def remote_class():
    from negmas import ResponseType
    from negmas.sao import SAONegotiator, SAOResponse

    class Remote(SAONegotiator):
        """Haggle's side of an SAO game: each offer of the ANAC agent is sent to the server and
        the Haggle policy's answer comes back as this negotiator's."""

        def __init__(self, table: Thread, open_at: int | None, **kwargs):
            super().__init__(**kwargs)
            self.table, self.open_at, self.refused = table, open_at, None

        def __call__(self, state, dest=None):
            offer = state.current_offer
            try:
                if offer is None:  # Haggle's buyer opens
                    bid = self.table.place(self.open_at)
                    self.table.pending = bid
                    return SAOResponse(ResponseType.REJECT_OFFER, (value_of(bid["amount"]),))
                answer, amount = self.table.send_anac(amount_at(int(offer[0])))
            except Refused as refusal:
                self.refused = refusal
                return SAOResponse(ResponseType.END_NEGOTIATION, None)
            if answer in ("accept", "crossed"):
                return SAOResponse(ResponseType.ACCEPT_OFFER, offer)
            if answer == "counter":
                return SAOResponse(ResponseType.REJECT_OFFER, (value_of(amount),))
            return SAOResponse(ResponseType.END_NEGOTIATION, None)

    return Remote


@dataclass
class ServerContext:
    base: str
    buyer: Api
    seller: Api
    rule: str
    haggle_buyers: dict
    haggle_sellers: dict


_ctx: ServerContext | None = None


def play_on_server(game: Game, ctx: ServerContext, seconds: int = GAME_SECONDS) -> Game:
    game.venue = "server"
    table = Thread(ctx, game)
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        table.open_listing()
        if game.buyer.startswith(HAGGLE) and game.seller.startswith(HAGGLE):
            return play_policies(table, game)
        mechanism = new_mechanism(game.horizon)
        buyer_ufun, seller_ufun = ufuns(mechanism, game.scenario)
        if game.buyer.startswith(HAGGLE):
            remote = remote_class()(table, opening(ctx.haggle_buyers[game.buyer.removeprefix(HAGGLE)], game.ceiling), name="buyer")
            anac = make_agent(game.seller, "seller")
            mechanism.add(remote, preferences=buyer_ufun)
            mechanism.add(anac, preferences=seller_ufun)
        else:
            anac = make_agent(game.buyer, "buyer")
            remote = remote_class()(table, None, name="seller")
            mechanism.add(anac, preferences=buyer_ufun)
            mechanism.add(remote, preferences=seller_ufun)
        state = mechanism.run()
        signal.alarm(0)
        if remote.refused is not None:
            code = remote.refused.code
            if table.pending is not None:
                table.close(accept=False)
            if table.thread is not None:
                game.bids = table.result()[2]
            ending = f"refused:{code}" if remote.refused.status in (403, 409, 422) else f"error:{code}"
            anac_side = "seller" if game.buyer.startswith(HAGGLE) else "buyer"
            return game.finish(ending, detail=str(remote.refused), by=anac_side)
        if state.has_error:
            table.close(accept=False)
            return game.finish("error:exception", detail=str(state.error_details))
        table.close(accept=state.agreement is not None)
        if table.thread is None:
            return game.finish("no_agreement")
        ending, price, game.bids = table.result()
        if table.countered_final:
            return game.finish("countered_final", by="seller" if game.buyer.startswith(HAGGLE) else "buyer")
        return game.finish(ending, price)
    except Timeout:
        return game.finish("error:timeout", detail=f"over {seconds} s")
    except Refused as refusal:
        return game.finish(f"error:{refusal.code}", detail=str(refusal))
    except Exception as error:
        signal.alarm(0)
        return game.finish("error:exception", detail=f"{type(error).__name__}: {error}")


def play_policies(table: Thread, game: Game) -> Game:
    """Both sides Haggle's: the opening is placed, the server plays the rest."""
    counter = table.ctx.haggle_buyers[game.buyer.removeprefix(HAGGLE)]
    bid = table.place(opening(counter, game.ceiling))
    for _ in range(game.horizon + 2):
        thread = table.ctx.buyer.call("GET", f"/v1/threads/{table.thread}")
        if thread["status"] != "ACTIVE":
            break
        bid = thread["bids"][-1]
        seen = table.ctx.buyer.call("GET", f"/v1/bids/{bid['id']}?wait=5", timeout=15)
        if seen["status"] == "PENDING":
            return game.finish("error:policy_silent", detail=f"bid {bid['round']} unanswered for 5 s")
    signal.alarm(0)
    ending, price, game.bids = table.result()
    return game.finish(ending, price)


# ---------------------------------------------------------------------------------------------
# Workers


def init_worker(base: str | None, admin_token: str | None, rule: str, buyers: dict, sellers: dict, tag: str):
    global _ctx
    warnings.filterwarnings("ignore")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if base:
        buyer, seller = register(base, admin_token, f"anac-{tag}-{os.getpid()}")
        _ctx = ServerContext(base, buyer, seller, rule, buyers, sellers)


def play(args: tuple[Game, str]) -> Game:
    game, rule = args
    started = time.monotonic()
    if game.buyer.startswith(HAGGLE) or game.seller.startswith(HAGGLE):
        game = play_on_server(game, _ctx)
    else:
        game = play_in_process(game, rule)
    game.seconds = round(time.monotonic() - started, 3)
    return game


def probe(name: str) -> tuple[str, str | None, float]:
    """Can `name` play single-issue alternating offers? One game on each side at 5 and at 50
    bids against NegMAS's linear agent, each within PROBE_SECONDS. None when it can."""
    started = time.monotonic()
    for role in ("buyer", "seller"):
        for horizon in (5, 50):
            opponent = "LinearTB"
            game = Game(
                buyer=name if role == "buyer" else opponent,
                seller=opponent if role == "buyer" else name,
                kind="wide", seed=0, horizon=horizon, floor=amount_at(40), ceiling=amount_at(160),
            )
            played = play_in_process(game, "none", PROBE_SECONDS)
            if played.ending.startswith("error"):
                return name, f"as {role} at {horizon} bids: {played.ending.removeprefix('error:')} ({played.detail})", 0
            agent_moves = played.bids
            if agent_moves == 0 and role == "buyer":
                return name, f"as {role} at {horizon} bids: never made an offer", 0
    return name, None, time.monotonic() - started


# ---------------------------------------------------------------------------------------------
# Ranking


def t95(n: int) -> float:
    if n < 2:
        return float("nan")
    from scipy import stats

    return float(stats.t.ppf(0.975, n - 1))


def summarise(games: list[Game]) -> dict:
    """Per side, per horizon (and all horizons): each agent's mean share with a 95 % interval,
    its games and how they ended, best first."""
    out: dict = {}
    horizons = sorted({g.horizon for g in games})
    for side in ("buyer", "seller"):
        out[side] = {}
        for horizon in [*horizons, "all"]:
            rows: dict[str, dict] = {}
            for g in games:
                if horizon != "all" and g.horizon != horizon:
                    continue
                name = g.buyer if side == "buyer" else g.seller
                row = rows.setdefault(name, {"scores": [], "endings": {}})
                row["scores"].append(g.buyer_share if side == "buyer" else g.seller_share)
                ending = g.ending
                if g.refused:
                    ending = ("own " if g.refused == side else "other's ") + ending
                row["endings"][ending] = row["endings"].get(ending, 0) + 1
            table = []
            for name, row in rows.items():
                scores = row["scores"]
                mean = statistics.fmean(scores)
                half = t95(len(scores)) * statistics.stdev(scores) / math.sqrt(len(scores)) if len(scores) > 1 else float("nan")
                table.append({"agent": name, "mean": mean, "low": mean - half, "high": mean + half, "games": len(scores), "endings": row["endings"]})
            table.sort(key=lambda r: -r["mean"])
            for rank, row in enumerate(table, 1):
                row["rank"] = rank
            out[side][str(horizon)] = table
    return out


def render(summary: dict, games: list[dict], failed: dict[str, str]) -> str:
    """The rankings, one table per side and horizon; `games` as `asdict` gives them."""

    def count(endings: dict, test) -> int:
        return sum(n for ending, n in endings.items() if test(ending))

    lines = [
        "columns: mean share of the surplus [95% Student-t interval], games, then how they ended: deals",
        "(of which past its own reservation), no agreement, its own moves refused by the server's rules",
        "(not_a_concession), its opponent's, its counters to a Haggle final offer, errors",
        "",
    ]
    for side in ("seller", "buyer"):
        past = "agreement_past_floor" if side == "seller" else "agreement_past_ceiling"
        for horizon, table in summary[side].items():
            label = "all horizons" if horizon == "all" else f"{horizon} bids"
            lines.append(f"{side}s, {label}")
            lines.append(
                f"{'rank':>4}  {'agent':<20} {'mean':>6}  {'95% CI':<16} {'games':>5} {'deals':>5} {'past':>4} "
                f"{'none':>4} {'refused':>7} {'opp.ref':>7} {'final':>5} {'errors':>6}"
            )
            for row in table:
                e = row["endings"]
                lines.append(
                    f"{row['rank']:>4}  {row['agent']:<20} {row['mean']:>6.3f}  [{row['low']:>6.3f}, {row['high']:>6.3f}] "
                    f"{row['games']:>5} {count(e, lambda k: k.startswith('agreement')):>5} {e.get(past, 0):>4} "
                    f"{e.get('no_agreement', 0):>4} {count(e, lambda k: k.startswith('own refused')):>7} "
                    f"{count(e, lambda k: k.startswith('other') and 'refused' in k):>7} "
                    f"{e.get('own countered_final', 0):>5} {count(e, lambda k: 'error' in k):>6}"
                )
            lines.append("")
    counts: dict[str, int] = {}
    for g in games:
        counts[g["ending"]] = counts.get(g["ending"], 0) + 1
    total = len(games)
    lines.append(
        f"endings of all {total} games: "
        + ", ".join(f"{k} {v} ({100 * v / total:.1f} %)" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
    )
    for venue, label in (("server", "an ANAC agent against a Haggle policy, through the server"), ("process", "two ANAC agents, in process")):
        some = [g for g in games if g["venue"] == venue and not (g["buyer"].startswith(HAGGLE) and g["seller"].startswith(HAGGLE))]
        if some:
            refused = sum(g["ending"] == "refused:not_a_concession" for g in some)
            lines.append(f"games of {label}: {len(some)}, ended by not_a_concession: {refused} ({100 * refused / len(some):.1f} %)")
    if failed:
        lines.append("agents that could not run:")
        lines += [f"  {name}: {why}" for name, why in sorted(failed.items())]
    lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", help="the Haggle server's base URL; without it only in-process games are played")
    parser.add_argument("--admin-token", default=os.environ.get("HAGGLE_ADMIN_TOKEN"))
    parser.add_argument("--horizons", default=",".join(map(str, HORIZONS)), help="listing max_rounds (bids per thread), comma-separated")
    parser.add_argument("--seeds", type=int, default=1, help="scenarios: this many seeds, each a wide, a narrow and a disjoint one")
    parser.add_argument("--agents", default="finalists", help="finalists (ANAC winners and finalists 2010-2019 and NegMAS's time-based agents), all, or names")
    parser.add_argument("--haggle-buyers", default=DEFAULT_BUYERS, help="Haggle buyer strategies: names, or name={counter json}")
    parser.add_argument("--haggle-sellers", default=DEFAULT_SELLERS, help="Haggle seller strategies: names, or name={counter json}")
    parser.add_argument("--concession-rule", choices=("strict", "none"), default="strict")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", help="write the rankings, the agents that could not run and every game here")
    parser.add_argument("--discover", action="store_true", help="probe every agent class of the package, not only those playing")
    parser.add_argument("--quick", action="store_true", help="a small grid in about two minutes: six agents, bayes and step/tier, 5 and 10 bids, one seed")
    parser.add_argument("--render", metavar="FILE", help="print the rankings of a file --json wrote, playing nothing")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    if args.render:
        with open(args.render) as saved:
            saved = json.load(saved)
        print(render(saved["rankings"], saved["games"], saved["could_not_run"]))
        return

    if args.quick:
        args.agents, args.horizons, args.seeds = "quick", "5,10", 1
        args.haggle_buyers, args.haggle_sellers = "step,bayes", "tier,bayes"
    horizons = [int(h) for h in args.horizons.split(",") if h.strip()]
    if any(not 1 <= h <= 100 for h in horizons):
        sys.exit("anac: a horizon is a listing's max_rounds, 1 to 100")
    haggle_buyers, haggle_sellers = haggle_strategies(args.haggle_buyers), haggle_strategies(args.haggle_sellers)
    started = time.monotonic()

    import negmas
    import negmas_genius_agents

    print(f"anac: negmas {negmas.__version__}, negmas-genius-agents {negmas_genius_agents.__version__}", file=sys.stderr)
    if args.server:
        check_server(args)
    wanted = pick_agents(args.agents)
    to_probe = list(agent_classes()) if args.discover else wanted
    print(f"anac: probing {len(to_probe)} agents in single-issue alternating offers", file=sys.stderr)
    failed: dict[str, str] = {}
    with multiprocessing.Pool(args.workers, initializer=init_worker, initargs=(None, None, args.concession_rule, {}, {}, "probe")) as pool:
        for name, why, _ in pool.imap_unordered(probe, to_probe):
            if why:
                failed[name] = why
                print(f"anac: {name} cannot play: {why}", file=sys.stderr)
    agents = [name for name in wanted if name not in failed]
    print(f"anac: {len(agents)} of {len(wanted)} agents play; {len(failed)} of {len(to_probe)} probed could not", file=sys.stderr)

    buyers = agents + ([HAGGLE + n for n in haggle_buyers] if args.server else [])
    sellers = agents + ([HAGGLE + n for n in haggle_sellers] if args.server else [])
    grid = scenarios(args.seeds)
    games = [
        Game(buyer=b, seller=s, kind=sc.kind, seed=sc.seed, horizon=h, floor=sc.floor, ceiling=sc.ceiling)
        for h in horizons
        for sc in grid
        for b in buyers
        for s in sellers
    ]
    # Server games first, mixed with the rest, so both kinds of work run side by side.
    random.Random(0).shuffle(games)
    print(
        f"anac: {len(games)} games: {len(buyers)} buyers x {len(sellers)} sellers x {len(grid)} scenarios x {len(horizons)} horizons, "
        f"{args.workers} workers",
        file=sys.stderr,
    )
    done: list[Game] = []
    last = time.monotonic()
    with multiprocessing.Pool(
        args.workers,
        initializer=init_worker,
        initargs=(args.server, args.admin_token, args.concession_rule, haggle_buyers, haggle_sellers, str(os.getpid())),
    ) as pool:
        for game in pool.imap_unordered(play, [(g, args.concession_rule) for g in games], chunksize=4):
            done.append(game)
            now = time.monotonic()
            if now - last > 15 or len(done) == len(games):
                last = now
                rate = len(done) / (now - started)
                left = (len(games) - len(done)) / rate if rate else 0
                print(f"anac: {len(done)}/{len(games)} games, {now - started:.0f} s, about {left:.0f} s left", file=sys.stderr)

    summary = summarise(done)
    print(render(summary, [asdict(g) for g in done], failed))
    elapsed = time.monotonic() - started
    print(f"anac: {len(done)} games in {elapsed:.0f} s", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(
                {
                    "settings": {
                        "horizons": horizons, "seeds": args.seeds, "agents": agents, "concession_rule": args.concession_rule,
                        "haggle_buyers": haggle_buyers, "haggle_sellers": haggle_sellers,
                        "negmas": negmas.__version__, "negmas_genius_agents": negmas_genius_agents.__version__,
                        "seconds": round(elapsed),
                    },
                    "could_not_run": failed,
                    "rankings": summary,
                    "games": [asdict(g) for g in done],
                },
                out,
                indent=1,
            )
    errors = sum(g.ending.startswith("error") and (g.buyer.startswith(HAGGLE) or g.seller.startswith(HAGGLE)) for g in done)
    if args.server and errors == sum(1 for g in done if g.venue == "server") and errors:
        sys.exit("anac: every game through the server failed")


def check_server(args) -> None:
    """The server answers, the operator token works, and a listing takes the concession rule."""
    try:
        buyer, seller = register(args.server, args.admin_token, f"anac-check-{os.getpid()}")
    except Refused as refusal:
        sys.exit(f"anac: the server at {args.server} refused to set up agents ({refusal}); start it with "
                 "HAGGLE_OPEN_REGISTRATION=true and pass its HAGGLE_ADMIN_TOKEN")
    except OSError as error:
        sys.exit(f"anac: cannot reach the server at {args.server}: {error}")
    if args.concession_rule == "none":
        try:
            listing = seller.call("POST", "/v1/listings", {"title": "anac check", "ask_amount": HI, "concession_rule": "none"})
        except Refused as refusal:
            sys.exit(f"anac: --concession-rule none, but this server does not take a listing's concession_rule ({refusal})")
        if listing.get("concession_rule") != "none":
            sys.exit("anac: --concession-rule none, but the server's listing does not say concession_rule none")


if __name__ == "__main__":
    main()
