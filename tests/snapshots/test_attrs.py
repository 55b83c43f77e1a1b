"""Compact vertex attributes and stamps: what goes in comes out, whatever JSON it is."""

from __future__ import annotations

from pulsegraph.snapshots.attrs import NULL, AttrTable, Stamps, attr_columns, decode, encode


def test_attributes_round_trip_including_what_orjson_refuses():
    t = AttrTable()
    values = [{"kind": "hashtag"}, {"n": 2**70}, {"deep": [[[[1]]]]}, {"x": 1.5, "a": "é"}]
    deep: dict = {}
    cur = deep
    for _ in range(300):
        cur["k"] = {}
        cur = cur["k"]
    values.append(deep)
    for i, v in enumerate(values):
        t.put(i * 2, encode(v))
    assert [t.get(i * 2) for i in range(len(values))] == values
    assert t.get(1) is None and t.get(10_000) is None and t.ids() == [0, 2, 4, 6, 8]


def test_small_repeated_values_share_one_object():
    t = AttrTable()
    t.put(0, encode({"kind": "hashtag"}))
    t.put(5, encode({"kind": "hashtag"}))
    assert t.raw(0) is t.raw(5)


def test_a_saved_table_loads_back_the_same_into_an_empty_one_or_over_one_that_holds_attributes():
    t = AttrTable()
    for i, v in ((0, {"kind": "hashtag"}), (3, {"x": "y" * 40}), (4, {"kind": "hashtag"}), (9, {"n": 1})):
        t.put(i, encode(v))
    t.clear(9)  # a trailing id without attributes: not kept as a slot
    empty = AttrTable()
    empty.load(t.state())
    assert [empty.raw(i) for i in range(12)] == [t.raw(i) for i in range(12)]
    assert empty.ids() == [0, 3, 4] and empty.raw(0) is empty.raw(4)
    held = AttrTable()
    held.put(1, encode({"old": True}))
    held.load(t.state())  # None in what is loaded leaves what is held
    assert held.ids() == [0, 1, 3, 4] and held.get(1) == {"old": True} and held.get(3) == {"x": "y" * 40}


def test_stamps_compare_by_partition_name_not_by_the_order_seen():
    s = Stamps()
    s.put(3, (1.0, "p:9", 4, 0))
    s.put(1, (1.0, "p:1", 7, 2))
    assert s.get(3) == (1.0, "p:9", 4, 0) and s.get(1) == (1.0, "p:1", 7, 2) and s.get(2) is None
    assert s.get(3) > s.get(1)
    assert s.items() == {1: (1.0, "p:1", 7, 2), 3: (1.0, "p:9", 4, 0)}
    assert decode(encode({"b": 1, "a": 2})) == {"a": 2, "b": 1}


def test_a_delta_carries_of_the_attributes_whether_there_are_any_and_their_last_seen():
    raws = [encode({"kind": "user", "last_seen": 12.5}), NULL, encode({"kind": "hashtag"}), encode({"last_seen": 7}),
            encode({"last_seen": "yesterday"}), encode({"last_seen": True})]
    present, seen = attr_columns(raws)
    assert present.tolist() == [True, False, True, True, True, True]
    # Only a number is a time: a string or a bool is none, as no last_seen at all.
    assert seen.tolist() == [12.5, 0.0, 0.0, 7.0, 0.0, 0.0]
    # Attributes that are not an object (a hand-made delta's) are read one by one, and have no last_seen.
    assert attr_columns([b"[1, 2]", encode({"last_seen": 3.0})])[1].tolist() == [0.0, 3.0]
    assert [a.tolist() for a in attr_columns([])] == [[], []]
