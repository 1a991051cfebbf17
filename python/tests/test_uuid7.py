"""idem.uuid7(): RFC 9562 version 7, from the core's monotonic generator."""

import time
import uuid

import idem


def test_version_and_variant():
    value = idem.uuid7()
    assert isinstance(value, uuid.UUID)
    assert value.version == 7
    assert value.variant == uuid.RFC_4122


def test_strictly_increasing_within_one_millisecond():
    values = [idem.uuid7() for _ in range(10_000)]
    assert all(a < b for a, b in zip(values, values[1:]))
    assert len(set(values)) == len(values)


def test_carries_the_unix_milliseconds_of_its_birth():
    before = int(time.time() * 1000)
    value = idem.uuid7()
    after = int(time.time() * 1000)
    born = int.from_bytes(value.bytes[:6], "big")
    assert before <= born <= after
