"""Our ``minibroker`` client commands, unchanged, against the three-node Kafka 4.4 cluster: the
tests of tests/integration/test_cli.py that talk to a broker run there as they are (``broker`` is
the cluster here: it has the ``bootstrap`` they use). Left out: test_configs_describe_and_alter
(it names broker 0; Kafka's nodes are 1-3) and the tests that start brokers of their own."""

from __future__ import annotations

import pytest

from tests.integration import test_cli

pytestmark = [pytest.mark.xdist_group("kafka_three"), pytest.mark.slow]


@pytest.fixture
def broker(kafka_three):
    return kafka_three


@pytest.fixture
def b(kafka_three) -> list[str]:
    return ["--bootstrap-server", kafka_three.bootstrap]


test_group_consumer_commits_every_assigned_partition = test_cli.test_group_consumer_commits_every_assigned_partition
test_max_messages_never_commits_past_an_unprinted_record = (
    test_cli.test_max_messages_never_commits_past_an_unprinted_record)
test_transactions_abort_finishes_what_a_killed_producer_left = (
    test_cli.test_transactions_abort_finishes_what_a_killed_producer_left)
test_ctrl_c_during_transactional_produce_aborts = test_cli.test_ctrl_c_during_transactional_produce_aborts
test_transactions_list_json_and_state_filter = test_cli.test_transactions_list_json_and_state_filter
test_group_join_delay_does_not_eat_the_timeout = test_cli.test_group_join_delay_does_not_eat_the_timeout
test_if_not_exists_is_honest = test_cli.test_if_not_exists_is_honest
test_groups_describe_shows_every_partition_member_and_log_end = (
    test_cli.test_groups_describe_shows_every_partition_member_and_log_end)
test_groups_reset_offsets_dry_run_and_execute = test_cli.test_groups_reset_offsets_dry_run_and_execute
test_consume_partition_offsets_and_formats = test_cli.test_consume_partition_offsets_and_formats
test_get_offsets_and_json_listings = test_cli.test_get_offsets_and_json_listings
test_perf_produce_and_consume_report_progress_and_a_summary = (
    test_cli.test_perf_produce_and_consume_report_progress_and_a_summary)
test_groups_delete = test_cli.test_groups_delete
test_describe_producers_and_find_hanging = test_cli.test_describe_producers_and_find_hanging
