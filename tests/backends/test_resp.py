"""django_rl's own RESP encoding (backends/resp.py) is byte for byte redis-py's."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis.connection import Connection

from django_rl.backends import resp

REDIS_PY = Connection()  # never connected: only its packer is used

arguments = st.one_of(
    st.text(max_size=40),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.binary(max_size=40),
)


def redis_py(*args: object) -> bytes:
    return b"".join(REDIS_PY.pack_command(*args))


@given(st.lists(arguments, min_size=1, max_size=12))
def test_commands_are_encoded_as_redis_py_encodes_them(args):
    assert resp.command(["EVALSHA", *args]) == redis_py("EVALSHA", *args)


@pytest.mark.parametrize("value", ["", "1", "0", 0, 1, 100, 101, -1, "NX", "é", b"\x00\xff"])
def test_common_and_other_values(value):
    assert resp.command(["GET", value]) == redis_py("GET", value)


@pytest.mark.parametrize("value", [True, False, 1.5, None, object()])
def test_other_types_are_refused(value):
    with pytest.raises(TypeError):
        resp.bulk(value)


@given(
    st.text(max_size=40),
    st.integers(min_value=-1, max_value=10**15),
    st.integers(min_value=1, max_value=10**6),
    st.booleans(),
)
def test_the_fixed_windows_transaction_is_encoded_as_redis_py_encodes_it(key, window, cost, nx):
    from django_rl.algorithms.fixed_window import HIT, HIT_NX

    hit = HIT_NX if nx else HIT
    window_key, end, flags = f"{key}:{window}", (window + 1) * 60_000, ("NX",) if nx else ()
    expected = b"".join(
        [
            redis_py("MULTI"),
            redis_py("INCRBY", window_key, cost),
            redis_py("PEXPIREAT", window_key, end, *flags),
            redis_py("PTTL", window_key),
            redis_py("EXEC"),
        ]
    )
    assert hit.encode(window_key, (cost, end)) == expected
    assert hit.encode(window_key, (cost, end)) == expected  # its end kept
    # redis-py's way (ASKING, a connection it must handle) sends the same commands.
    filled = hit.filled(window_key, (cost, end))
    sent = [redis_py("MULTI"), *(redis_py(*c) for c in filled), redis_py("EXEC")]
    assert b"".join(sent) == expected


@given(
    st.lists(st.lists(st.one_of(arguments, st.sampled_from(["k", "v", "w"])), max_size=4),
             min_size=1, max_size=4),
    st.text(max_size=20),
    st.lists(st.tuples(arguments, arguments), min_size=1, max_size=3),
)  # fmt: skip
def test_any_transaction_is_encoded_as_redis_py_encodes_it(shapes, key, value_sets):
    """Slots anywhere (the key several times, or not first), literals and values with ``%``."""
    slots = {"k": resp.KEY, "v": resp.Slot("v"), "w": resp.Slot("w")}
    commands = [["SET", *(slots.get(arg, arg) for arg in shape)] for shape in shapes]
    transaction = resp.Transaction(commands)
    for values in [*value_sets, *value_sets]:  # the second time from the kept templates
        values = values[: len(transaction.slots) - 1]
        by_slot = dict(zip(transaction.slots, (key, *values), strict=False))
        filled = [[by_slot.get(arg, arg) if isinstance(arg, resp.Slot) else arg for arg in each]
                  for each in commands]  # fmt: skip
        expected = b"".join([redis_py("MULTI"), *(redis_py(*c) for c in filled), redis_py("EXEC")])
        assert transaction.encode(key, values) == expected
        assert transaction.filled(key, values) == [tuple(each) for each in filled]


def test_a_transactions_templates_are_dropped_past_the_most_kept():
    transaction = resp.Transaction([("INCRBY", resp.KEY, resp.Slot("cost"))])
    for cost in range(resp.MAX_VALUES + 5):
        assert transaction.encode("k%s", (cost,)) == b"".join(
            [redis_py("MULTI"), redis_py("INCRBY", "k%s", cost), redis_py("EXEC")]
        )
    assert len(transaction._templates) <= resp.MAX_VALUES
    with pytest.raises(TypeError, match="1 values expected, not 2"):
        transaction.encode("k", (1, 2))


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["sliding_log", "token_bucket", "fixed_window", "concurrency"]),
            st.lists(st.text(max_size=30), min_size=1, max_size=2),
            st.lists(st.one_of(st.integers(0, 10**15), st.text(max_size=12)), max_size=5),
            st.integers(min_value=1, max_value=10**6),
            st.booleans(),
        ),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from(["", "1700000000123"]),
    st.booleans(),
)
def test_several_policies_script_is_encoded_as_redis_py_encodes_it(hits, time_argument, count):
    """``together._segments`` encoded by the script, each segment kept (asked twice), is
    redis-py's EVALSHA of ``together._arguments``."""
    from types import SimpleNamespace

    from django_rl.policies import together

    group = [
        SimpleNamespace(
            variant=SimpleNamespace(algorithm=SimpleNamespace(name=name)),
            policy=SimpleNamespace(shadow=shadow, partial=False),
            cost=cost,
        )
        for name, _, _, cost, shadow in hits
    ]
    entries = [(keys, tuple(parameters)) for _, keys, parameters, _, _ in hits]
    keys, argv = together._arguments(group, entries, time_argument, count)  # type: ignore[arg-type]
    expected = redis_py("EVALSHA", together.SCRIPT.sha, len(keys), *keys, *argv)
    for _ in range(2):  # made, then from what was kept
        keys, head, segments = together._segments(group, entries, time_argument, count)  # type: ignore[arg-type]
        assert together.SCRIPT.encoded(keys, head, segments) == expected
