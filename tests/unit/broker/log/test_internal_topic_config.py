"""The guard on internal topics' configs (issue 28): what a client may not change, and the
repair of values an older version saved."""

from __future__ import annotations

import pytest

from broker.log.cleaner import internal_topic_config
from broker.log.topic_config import (
    INTERNAL_FIXED_KEYS,
    check_internal_alter,
    internal_overrides_restored,
)
from protocol.errors import ErrorCode, KafkaError

CANONICAL = internal_topic_config(65536)


@pytest.mark.parametrize("key", sorted(INTERNAL_FIXED_KEYS))
def test_each_fixed_key_may_be_neither_set_nor_removed(key):
    with pytest.raises(KafkaError) as info:
        check_internal_alter("__consumer_offsets", CANONICAL, {**CANONICAL, key: "1"})
    assert info.value.code == ErrorCode.POLICY_VIOLATION and key in str(info.value)
    if key in CANONICAL:
        without = {k: v for k, v in CANONICAL.items() if k != key}
        with pytest.raises(KafkaError):
            check_internal_alter("__consumer_offsets", CANONICAL, without)


def test_other_keys_stay_alterable():
    check_internal_alter("__transaction_state", CANONICAL,
                         {**CANONICAL, "delete.retention.ms": "1000", "preallocate": "false"})


def test_saved_values_are_restored_and_the_rest_kept():
    saved = {**CANONICAL, "max.message.bytes": "1", "cleanup.policy": "delete",
             "preallocate": "false"}
    assert internal_overrides_restored(saved, CANONICAL) == {**CANONICAL, "preallocate": "false"}
    assert internal_overrides_restored(CANONICAL, CANONICAL) is None
