"""Issue 28 items 3-6, over a socket against the real broker, as Kafka answers them: the
failed-authentication delay on every SASL path, DescribeCluster's authorized operations, the
refusal log, OffsetFetch v0-1 on a refused group.

One broker serves the module: SASL_PLAINTEXT with PLAIN users, an authorizer, ``admin`` a super
user, ``connection.failed.authentication.delay.ms=300``.
"""

from __future__ import annotations

import time

import pytest

from broker.security.acl import Operation, PatternType, Permission, ResourceType
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.broker_process import BrokerProcess
from tests.raw_client import RawConnection
from tests.secured import sasl_plain as login
from tests.secured import secured

DELAY_MS = 300


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    d = tmp_path_factory.mktemp("review")
    proc = BrokerProcess.configured(d, "\n".join(secured(
        f"connection.failed.authentication.delay.ms={DELAY_MS}",
        "group.initial.rebalance.delay.ms=0")) + "\n")
    proc.start()
    try:
        with login(RawConnection(port(proc)), "admin") as admin:
            created = admin.request(ApiKey.CREATE_TOPICS, 4, {"topics": [
                {"name": name, "num_partitions": 2, "replication_factor": 1, "assignments": [],
                 "configs": []} for name in ("orders", "hidden")],
                "timeout_ms": 5000, "validate_only": False})
            assert [t.error_code for t in created.topics] == [0, 0]
            grant(admin, ResourceType.CLUSTER, "kafka-cluster", "alice", Operation.DESCRIBE)
            grant(admin, ResourceType.CLUSTER, "kafka-cluster", "alice",
                  Operation.IDEMPOTENT_WRITE)
            grant(admin, ResourceType.TOPIC, "orders", "alice", Operation.READ)
            grant(admin, ResourceType.TOPIC, "orders", "alice", Operation.WRITE)
            grant(admin, ResourceType.GROUP, "g-alice", "alice", Operation.READ)
            grant(admin, ResourceType.TOPIC, "orders", "mallory", Operation.READ)
            grant(admin, ResourceType.TOPIC, "fresh", "alice", Operation.DESCRIBE)
            for group in ("g-alice", *(f"g-{i}" for i in range(20))):
                commit(admin, group, "orders", {0: 5, 1: 7})
            for i in range(20):
                started = admin.request(ApiKey.INIT_PRODUCER_ID, 4, {
                    "transactional_id": f"tx-{i}", "transaction_timeout_ms": 60000})
                assert started.error_code == 0
        yield proc
    finally:
        proc.stop()


def grant(admin: RawConnection, rtype: ResourceType, name: str, user: str,
          operation: Operation) -> None:
    made = admin.request(ApiKey.CREATE_ACLS, 2, {"creations": [{
        "resource_type": rtype, "resource_name": name, "resource_pattern_type": PatternType.LITERAL,
        "principal": f"User:{user}", "host": "*", "operation": operation,
        "permission_type": Permission.ALLOW}]})
    assert [r.error_code for r in made.results] == [0]


def commit(conn: RawConnection, group: str, topic: str, offsets: dict[int, int]) -> None:
    done = conn.request(ApiKey.OFFSET_COMMIT, 2, {
        "group_id": group, "generation_id": -1, "member_id": "", "retention_time_ms": -1,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": p, "committed_offset": o, "committed_metadata": ""}
            for p, o in offsets.items()]}]})
    assert {p.error_code for t in done.topics for p in t.partitions} == {0}


def port(broker) -> int:
    return int(broker.bootstrap.rsplit(":", 1)[1])


def seconds_until_closed(conn: RawConnection) -> float:
    """From now until the broker closes the connection, reading (and ignoring) any answers."""
    started = time.monotonic()
    while conn.read_frame() is not None:
        pass
    return time.monotonic() - started


# -- item 3: the failed-authentication delay on every SASL path ---------------------------------


def test_a_failed_v0_handshake_is_closed_after_the_delay(broker):
    # SaslHandshake v0: the tokens are bare frames and a failure has no answer; Kafka closes the
    # connection after connection.failed.authentication.delay.ms, as on the v1 path.
    for version, mechanism in ((0, "PLAIN"), (1, "PLAIN"), (1, "GSSAPI")):
        with RawConnection(port(broker)) as conn:
            started = time.monotonic()
            handshake = conn.request(ApiKey.SASL_HANDSHAKE, version, {"mechanism": mechanism})
            token = b"\0alice\0wrong"
            if mechanism != "PLAIN":  # answered after the delay, then closed
                assert handshake.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
            elif version == 0:
                assert handshake.error_code == 0
                started = time.monotonic()
                conn.send_raw(len(token).to_bytes(4, "big") + token)
            else:
                started = time.monotonic()
                conn.send_request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})
            conn.sock.settimeout(10)
            seconds_until_closed(conn)
            elapsed = time.monotonic() - started
        assert DELAY_MS / 1000 * 0.9 <= elapsed < 5, (version, mechanism, elapsed)
    assert any("Authentication failed: invalid credentials for user 'alice'" in line
               for line in broker.output)
    assert not any("wrong" in line for line in broker.output)  # no password is logged


def test_other_connections_are_served_during_the_delay(broker):
    with RawConnection(port(broker)) as failing, RawConnection(port(broker)) as other:
        assert failing.request(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}).error_code == 0
        token = b"\0alice\0wrong"
        failing.send_raw(len(token).to_bytes(4, "big") + token)
        started = time.monotonic()
        login(other, "alice")
        assert time.monotonic() - started < DELAY_MS / 1000
        failing.sock.settimeout(10)
        assert failing.read_frame() is None


def test_a_peer_that_leaves_during_the_delay_costs_nothing(broker):
    with RawConnection(port(broker)) as conn:
        assert conn.request(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}).error_code == 0
        token = b"\0alice\0wrong"
        conn.send_raw(len(token).to_bytes(4, "big") + token)
    time.sleep(DELAY_MS / 1000 + 0.2)
    with RawConnection(port(broker)) as conn:
        login(conn, "admin")
    assert not any("Traceback" in line for line in broker.output)


# -- item 4: authorized operations as the principal has them -------------------------------------

INT32_MIN = -(1 << 31)


def bits(*operations: Operation) -> int:
    return sum(1 << op for op in operations)


CLUSTER_OPERATIONS = bits(Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                          Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER,
                          Operation.DESCRIBE)
TOPIC_OPERATIONS = bits(Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE,
                        Operation.DELETE, Operation.ALTER, Operation.DESCRIBE_CONFIGS,
                        Operation.ALTER_CONFIGS)


def describe_cluster(conn: RawConnection, version: int, include: bool = True) -> int:
    answer = conn.request(ApiKey.DESCRIBE_CLUSTER, version, {
        "include_cluster_authorized_operations": include, "endpoint_type": 1,
        "include_fenced_brokers": False})
    assert answer.error_code == 0
    return answer.cluster_authorized_operations


def test_describe_cluster_answers_the_operations_the_principal_has(broker):
    # Kafka: 0 without Describe on the cluster, else the bits of the cluster operations the
    # principal may do; INT32_MIN when not asked for.
    expected = {"admin": CLUSTER_OPERATIONS, "mallory": 0,
                "alice": bits(Operation.DESCRIBE, Operation.IDEMPOTENT_WRITE)}
    for user, operations in expected.items():
        with login(RawConnection(port(broker)), user) as conn:
            assert describe_cluster(conn, 0) == operations, user
            assert describe_cluster(conn, 1) == operations, user
            assert describe_cluster(conn, 1, include=False) == INT32_MIN


def test_metadata_and_describe_groups_answer_the_operations_the_principal_has(broker):
    with login(RawConnection(port(broker)), "alice") as conn:
        answer = conn.request(ApiKey.METADATA, 9, {
            "topics": [{"name": "orders"}, {"name": "hidden"}],
            "allow_auto_topic_creation": False, "include_cluster_authorized_operations": True,
            "include_topic_authorized_operations": True})
        assert answer.cluster_authorized_operations == bits(Operation.DESCRIBE,
                                                            Operation.IDEMPOTENT_WRITE)
        by_name = {t.name: (t.error_code, t.topic_authorized_operations) for t in answer.topics}
        assert by_name == {
            "orders": (0, bits(Operation.READ, Operation.WRITE, Operation.DESCRIBE)),
            "hidden": (ErrorCode.TOPIC_AUTHORIZATION_FAILED, INT32_MIN)}
        groups = conn.request(ApiKey.DESCRIBE_GROUPS, 3, {
            "groups": ["g-alice", "g-1"], "include_authorized_operations": True})
        assert [(g.error_code, g.authorized_operations) for g in groups.groups] == [
            (0, bits(Operation.READ, Operation.DESCRIBE)),
            (ErrorCode.GROUP_AUTHORIZATION_FAILED, INT32_MIN)]
    with login(RawConnection(port(broker)), "admin") as conn:
        answer = conn.request(ApiKey.METADATA, 9, {
            "topics": None, "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": True})
        assert answer.cluster_authorized_operations == INT32_MIN
        assert {t.name: t.topic_authorized_operations for t in answer.topics
                if t.name in ("orders", "hidden")} == {"orders": TOPIC_OPERATIONS,
                                                        "hidden": TOPIC_OPERATIONS}


# -- item 5: the refusal log ---------------------------------------------------------------------


def refusal_lines(broker, principal: str) -> list[str]:
    return [line for line in broker.output
            if "refused: " in line and f" {principal} from " in line]


def test_no_create_check_for_topics_that_exist(broker):
    before = len(refusal_lines(broker, "User:alice"))
    with login(RawConnection(port(broker)), "alice") as conn:
        answer = conn.request(ApiKey.METADATA, 9, {
            "topics": [{"name": "orders"}], "allow_auto_topic_creation": True,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False})
        assert [t.error_code for t in answer.topics] == [0]
        # A topic that does not exist: Create is asked of it (and refused: logged once, for
        # the topic; the cluster check before it is not logged, as in Kafka).
        answer = conn.request(ApiKey.METADATA, 9, {
            "topics": [{"name": "fresh"}], "allow_auto_topic_creation": True,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False})
        assert [t.error_code for t in answer.topics] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    broker.wait_for_output("may not CREATE TOPIC 'fresh'")
    time.sleep(0.2)  # (a line that should not be there would come by now)
    new = refusal_lines(broker, "User:alice")[before:]
    assert [line.split("refused: ", 1)[1].strip() for line in new] == [
        "User:alice from 127.0.0.1 may not CREATE TOPIC 'fresh'"]


def test_listings_log_no_line_per_hidden_resource(broker):
    before = len(refusal_lines(broker, "User:mallory"))
    with login(RawConnection(port(broker)), "mallory") as conn:
        groups = conn.request(ApiKey.LIST_GROUPS, 4, {"states_filter": []})
        assert groups.groups == []
        txns = conn.request(ApiKey.LIST_TRANSACTIONS, 0, {"state_filters": [],
                                                          "producer_id_filters": []})
        assert txns.transaction_states == []
        everything = conn.request(ApiKey.METADATA, 9, {
            "topics": None, "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False})
        assert [t.name for t in everything.topics] == ["orders"]
    time.sleep(0.2)
    assert refusal_lines(broker, "User:mallory")[before:] == []
    # With Describe on the cluster, ListGroups lists every group (as Kafka).
    with login(RawConnection(port(broker)), "alice") as conn:
        groups = conn.request(ApiKey.LIST_GROUPS, 4, {"states_filter": []})
        assert len(groups.groups) == 21


def test_refusal_lines_are_bounded_per_connection(broker):
    before = len(refusal_lines(broker, "User:mallory"))
    with login(RawConnection(port(broker)), "mallory") as conn:
        answer = conn.request(ApiKey.METADATA, 9, {
            "topics": [{"name": f"burst-{i}"} for i in range(50)],
            "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False})
        assert {t.error_code for t in answer.topics} == {ErrorCode.TOPIC_AUTHORIZATION_FAILED}
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any(
            "more refusals" in line for line in refusal_lines(broker, "User:mallory")[before:]):
        time.sleep(0.05)
    new = refusal_lines(broker, "User:mallory")[before:]
    assert len(new) == 11, new
    assert "refused: 40 more refusals of User:mallory from 127.0.0.1 not logged" in new[-1]


def test_acl_deletions_are_logged_like_creations(broker):
    with login(RawConnection(port(broker)), "admin") as admin:
        grant(admin, ResourceType.TOPIC, "doomed", "mallory", Operation.READ)
        deleted = admin.request(ApiKey.DELETE_ACLS, 2, {"filters": [{
            "resource_type_filter": ResourceType.TOPIC, "resource_name_filter": "doomed",
            "pattern_type_filter": PatternType.LITERAL, "principal_filter": None,
            "host_filter": None, "operation": Operation.ANY, "permission_type": Permission.ANY}]})
        assert len(deleted.filter_results[0].matching_acls) == 1
    time.sleep(0.2)
    created = [line for line in broker.output if "User:admin created ACLs" in line
               and "'doomed'" in line]
    gone = [line for line in broker.output if "User:admin deleted ACLs" in line
            and "'doomed'" in line]
    assert len(created) == 1 and len(gone) == 1, (created, gone)


# -- item 6: OffsetFetch v1 on a refused group ---------------------------------------------------


def test_offset_fetch_v1_of_a_refused_group_fails_every_partition(broker):
    # OffsetFetch v0-1 have no top-level error code: Kafka answers GROUP_AUTHORIZATION_FAILED
    # (offset -1) on every requested partition; v2+ answer it at the top, with no partitions.
    with login(RawConnection(port(broker)), "mallory") as conn:
        v1 = conn.request(ApiKey.OFFSET_FETCH, 1, {
            "group_id": "g-alice", "topics": [{"name": "orders", "partition_indexes": [0, 1]}]})
        assert [(t.name, p.partition_index, p.committed_offset, p.error_code)
                for t in v1.topics for p in t.partitions] == [
            ("orders", 0, -1, ErrorCode.GROUP_AUTHORIZATION_FAILED),
            ("orders", 1, -1, ErrorCode.GROUP_AUTHORIZATION_FAILED)]
        v2 = conn.request(ApiKey.OFFSET_FETCH, 2, {
            "group_id": "g-alice", "topics": [{"name": "orders", "partition_indexes": [0, 1]}]})
        assert v2.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED and v2.topics == []
    with login(RawConnection(port(broker)), "alice") as conn:
        v1 = conn.request(ApiKey.OFFSET_FETCH, 1, {
            "group_id": "g-alice", "topics": [{"name": "orders", "partition_indexes": [0, 1]}]})
        assert [(p.committed_offset, p.error_code) for t in v1.topics for p in t.partitions] == [
            (5, 0), (7, 0)]


# -- item 7: a change the broker cannot save is answered as an error and changes nothing ---------


def test_changes_that_cannot_be_saved_are_refused_and_change_nothing(broker):
    # A directory where the temporary file must go: the broker's write fails (EISDIR) as it
    # would on a full disk; the good file stays, the change is answered as an error and is
    # not in force, and once the obstacle is gone the same change works.
    data = broker.data_dir
    with login(RawConnection(port(broker)), "admin") as admin:
        blocked = data / "acls.json.tmp"
        blocked.mkdir()
        acls_before = (data / "acls.json").read_bytes()
        made = admin.request(ApiKey.CREATE_ACLS, 2, {"creations": [{
            "resource_type": ResourceType.TOPIC, "resource_name": "hidden",
            "resource_pattern_type": PatternType.LITERAL, "principal": "User:mallory",
            "host": "*", "operation": Operation.READ, "permission_type": Permission.ALLOW}]})
        assert [r.error_code for r in made.results] == [ErrorCode.UNKNOWN_SERVER_ERROR]
        assert "could not save the ACLs" in made.results[0].error_message
        assert (data / "acls.json").read_bytes() == acls_before
        with login(RawConnection(port(broker)), "mallory") as conn:  # not in force
            named = conn.request(ApiKey.METADATA, 9, {
                "topics": [{"name": "hidden"}], "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False})
            assert named.topics[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        blocked.rmdir()

        blocked = data / "scram-credentials.json.tmp"
        blocked.mkdir()
        altered = admin.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {
            "deletions": [], "upsertions": [{"name": "carol", "mechanism": 1,
                                             "iterations": 4096, "salt": b"s" * 16,
                                             "salted_password": b"p" * 32}]})
        assert [r.error_code for r in altered.results] == [ErrorCode.UNKNOWN_SERVER_ERROR]
        listed = admin.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None})
        assert "carol" not in [r.user for r in listed.results]
        blocked.rmdir()

        blocked = data / "topics.json.tmp"
        blocked.mkdir()
        changed = admin.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, {"resources": [{
            "resource_type": 2, "resource_name": "orders",
            "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1234"}]}],
            "validate_only": False})
        assert [r.error_code for r in changed.responses] == [ErrorCode.KAFKA_STORAGE_ERROR]
        described = admin.request(ApiKey.DESCRIBE_CONFIGS, 1, {"resources": [{
            "resource_type": 2, "resource_name": "orders", "configuration_keys": ["retention.ms"]}],
            "include_synonyms": False})
        assert described.results[0].configs[0].value != "1234"
        blocked.rmdir()
        changed = admin.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, {"resources": [{
            "resource_type": 2, "resource_name": "orders",
            "configs": [{"name": "retention.ms", "config_operation": 1, "value": None}]}],
            "validate_only": False})
        assert [r.error_code for r in changed.responses] == [0]
    assert not any("Traceback" in line for line in broker.output)


# -- item 9: the open doors docs/security.md warns of, as Kafka has them -------------------------------


def _anonymous_acl(conn: RawConnection) -> int:
    made = conn.request(ApiKey.CREATE_ACLS, 2, {"creations": [{
        "resource_type": ResourceType.TOPIC, "resource_name": "t",
        "resource_pattern_type": PatternType.LITERAL, "principal": "User:ANONYMOUS",
        "host": "*", "operation": Operation.ALL, "permission_type": Permission.ALLOW}]})
    return made.results[0].error_code


def test_the_doors_the_readme_warns_of(tmp_path):
    # allow.everyone.if.no.acl.found=true and no ACL on the cluster: anyone may create ACLs;
    # one ACL on the cluster closes that door (as in Kafka).
    props = tmp_path / "open.properties"
    props.write_text("authorizer.class.name=x\nallow.everyone.if.no.acl.found=true\n")
    with BrokerProcess(tmp_path / "open", "--config", str(props)) as proc, \
            RawConnection(port(proc)) as conn:
        assert _anonymous_acl(conn) == 0
        made = conn.request(ApiKey.CREATE_ACLS, 2, {"creations": [{
            "resource_type": ResourceType.CLUSTER, "resource_name": "kafka-cluster",
            "resource_pattern_type": PatternType.LITERAL, "principal": "User:admin",
            "host": "*", "operation": Operation.ALTER, "permission_type": Permission.ALLOW}]})
        assert made.results[0].error_code == 0
        assert _anonymous_acl(conn) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    # No authorizer: anyone may set anyone's SCRAM credential.
    with BrokerProcess(tmp_path / "none") as proc, RawConnection(port(proc)) as conn:
        altered = conn.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {
            "deletions": [], "upsertions": [{"name": "admin", "mechanism": 1,
                                             "iterations": 4096, "salt": b"s" * 16,
                                             "salted_password": b"p" * 32}]})
        assert [r.error_code for r in altered.results] == [0]
