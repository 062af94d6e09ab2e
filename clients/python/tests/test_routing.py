"""Tests of the routing hints' bookkeeping (no cluster needed)."""

import unittest

from paxlock.routing import Router, key_hash


class FakeTransport:
    def __init__(self, name):
        self.name = name
        self.node_id = None
        self.on_hint = None


class RoutingTest(unittest.TestCase):
    def test_key_hash_matches_the_nodes(self):
        # wire.KeyHash("default", key) and its group of 15
        for key, h, g in (("k", 7150872659890045827, 12), ("order:42", 14639836436563309314, 9),
                          ("ключ", 6323974295549525518, 13)):
            self.assertEqual(key_hash("default", key), h, key)
            self.assertEqual(key_hash("default", key) % 15, g, key)

    def test_pick_follows_the_hints(self):
        ts = [FakeTransport(i) for i in range(3)]
        r = Router("default", ts)
        self.assertIs(r.pick("k"), ts[0], "no node identified yet: the first unidentified")
        r.learn(ts[0], {"paxlock-node": "1", "paxlock-master": "3", "paxlock-group": "12/15"})
        self.assertIs(r.pick("k"), ts[1], "master 3 unknown: an unidentified transport, whose answer names it")
        r.learn(ts[1], {"paxlock-node": "2", "paxlock-master": "3", "paxlock-group": "12/15"})
        r.learn(ts[2], {"paxlock-node": "3", "paxlock-master": "3", "paxlock-group": "12/15"})
        self.assertIs(r.pick("k"), ts[2], "the hinted master of k's group")
        r.learn(ts[0], {"paxlock-node": "1", "paxlock-master": "2", "paxlock-group": "bad"})
        r.learn(ts[0], {"paxlock-node": "1", "paxlock-master": "2", "paxlock-group": "15/15"})
        self.assertIs(r.pick("k"), ts[2], "malformed hints change nothing")
        r.learn(ts[0], {"paxlock-node": "1", "paxlock-master": "2", "paxlock-group": "12/15"})
        self.assertIs(r.pick("k"), ts[1], "a newer hint moves the group")

    def test_a_node_found_down_is_not_picked(self):
        ts = [FakeTransport(i) for i in range(3)]
        r = Router("default", ts)
        for i, t in enumerate(ts):
            r.learn(t, {"paxlock-node": str(i + 1), "paxlock-master": "3", "paxlock-group": "12/15"})
        self.assertIs(r.pick("k"), ts[2])
        r.down(ts[2])
        self.assertIsNot(r.pick("k"), ts[2], "the unreachable master was picked again at once")
        r.learn(ts[0], {"paxlock-node": "1", "paxlock-master": "2", "paxlock-group": "12/15"})
        self.assertIs(r.pick("k"), ts[1], "the new master's hint is followed")


if __name__ == "__main__":
    unittest.main()
