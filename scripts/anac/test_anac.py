"""The harness's own rules, without a server: `target/anac-venv/bin/python -m unittest
scripts/anac/test_anac.py` (scripts/anac/run makes that virtualenv)."""

import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import anac  # noqa: E402
from negmas import ResponseType  # noqa: E402

OFFER, ACCEPT, END = ResponseType.REJECT_OFFER, ResponseType.ACCEPT_OFFER, ResponseType.END_NEGOTIATION


class Referee(unittest.TestCase):
    def test_an_accepted_bid_is_the_deal(self):
        moves = [("buyer", OFFER, 12000), ("seller", OFFER, 25000), ("buyer", ACCEPT, None)]
        self.assertEqual(anac.referee(moves, "strict"), ("agreement", 25000, 2, ""))

    def test_a_counter_past_the_pending_price_accepts_that_price(self):
        moves = [("buyer", OFFER, 12000), ("seller", OFFER, 20000), ("buyer", OFFER, 21000)]
        self.assertEqual(anac.referee(moves, "strict"), ("agreement", 20000, 2, ""))
        moves = [("buyer", OFFER, 12000), ("seller", OFFER, 11000)]
        self.assertEqual(anac.referee(moves, "strict"), ("agreement", 12000, 1, ""))

    def test_a_retraction_is_refused_under_the_strict_rule_only(self):
        moves = [("buyer", OFFER, 12000), ("seller", OFFER, 25000), ("buyer", OFFER, 11000), ("seller", ACCEPT, None)]
        self.assertEqual(anac.referee(moves, "strict"), ("refused:not_a_concession", None, 2, "buyer"))
        self.assertEqual(anac.referee(moves, "none"), ("agreement", 11000, 3, ""))
        # A seller's first counter is bounded by the ask, later ones by its own previous counter.
        moves = [("buyer", OFFER, 12000), ("seller", OFFER, 25000), ("buyer", OFFER, 13000), ("seller", OFFER, 26000)]
        self.assertEqual(anac.referee(moves, "strict"), ("refused:not_a_concession", None, 3, "seller"))

    def test_standing_firm_is_no_retraction(self):
        moves = [("buyer", OFFER, 12000), ("seller", OFFER, anac.HI), ("buyer", OFFER, 12000), ("seller", END, None)]
        self.assertEqual(anac.referee(moves, "strict"), ("no_agreement", None, 3, ""))


class Score(unittest.TestCase):
    def test_shares_of_the_surplus(self):
        wide = anac.Scenario("wide", 1, floor=12000, ceiling=28000)
        self.assertEqual(anac.shares(wide, 24000), (0.25, 0.75))
        self.assertEqual(anac.shares(wide, None), (0.0, 0.0))
        # Past a reservation: the side that crossed it below 0, never beyond -1.
        self.assertEqual(anac.shares(wide, 10000), (1.0, -0.125))
        self.assertEqual(anac.agreement_ending(wide, 10000), "agreement_past_floor")
        narrow = anac.Scenario("narrow", 1, floor=20000, ceiling=21000)
        self.assertEqual(anac.shares(narrow, 10000), (1.0, -1.0))
        self.assertEqual(anac.agreement_ending(narrow, 29000), "agreement_past_ceiling")
        disjoint = anac.Scenario("disjoint", 1, floor=21000, ceiling=19000)
        self.assertEqual(anac.shares(disjoint, 20000), (0.0, 0.0))

    def test_scenarios_are_the_same_for_every_pair_and_of_their_kind(self):
        self.assertEqual(anac.scenarios(3), anac.scenarios(3))
        for sc in anac.scenarios(20):
            self.assertTrue(anac.LO <= min(sc.floor, sc.ceiling) and max(sc.floor, sc.ceiling) <= anac.HI)
            self.assertEqual(sc.feasible, sc.kind != "disjoint", sc)


class InProcess(unittest.TestCase):
    def test_time_based_agents_meet_on_the_listing_clock(self):
        sc = anac.Scenario("wide", 1, floor=12000, ceiling=28000)
        game = anac.play_in_process(anac.Game("LinearTB", "LinearTB", "wide", 1, 10, sc.floor, sc.ceiling), "strict")
        self.assertEqual(game.ending, "agreement", game)
        self.assertLessEqual(game.bids, 10)
        self.assertAlmostEqual(game.buyer_share + game.seller_share, 1.0)

    def test_the_answer_to_the_final_bid_cannot_counter(self):
        sc = anac.Scenario("disjoint", 1, floor=21000, ceiling=19000)
        game = anac.play_in_process(anac.Game("BoulwareTB", "BoulwareTB", "disjoint", 1, 5, sc.floor, sc.ceiling), "strict")
        self.assertEqual((game.ending, game.bids), ("no_agreement", 5), game)


if __name__ == "__main__":
    unittest.main()
