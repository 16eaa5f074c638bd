"""The authorizer's rules (Kafka's), one case each."""

from __future__ import annotations

import pytest

from broker.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    AclStore,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    validate,
)

T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
ALLOW, DENY = Permission.ALLOW, Permission.DENY
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED


def b(rt, name, op, perm=ALLOW, principal="User:alice", host="*", pattern=LIT) -> AclBinding:
    return AclBinding(rt, name, pattern, principal, host, op, perm)


def can(bindings, op, rt, name, principal="User:alice", host="10.0.0.1", **kw) -> bool:
    return Authorizer(bindings, **kw).authorize(principal, host, op, rt, name)


def test_no_acl_on_the_resource_refuses_unless_allow_everyone():
    assert not can([], Operation.READ, T, "t")
    assert can([], Operation.READ, T, "t", allow_if_no_acl=True)
    # Any binding on the resource, even for someone else, makes the default not apply.
    assert not can([b(T, "t", Operation.READ, principal="User:bob")], Operation.READ, T, "t",
                   allow_if_no_acl=True)


def test_super_users_may_do_anything():
    assert can([b(T, "t", Operation.ALL, DENY)], Operation.WRITE, T, "t",
               principal="User:admin", super_users=["User:admin"])


def test_literal_wildcard_and_prefixed_names():
    assert can([b(T, "orders", Operation.WRITE)], Operation.WRITE, T, "orders")
    assert not can([b(T, "orders", Operation.WRITE)], Operation.WRITE, T, "orders2")
    assert can([b(T, "*", Operation.WRITE)], Operation.WRITE, T, "anything")
    assert can([b(T, "ord", Operation.WRITE, pattern=PRE)], Operation.WRITE, T, "orders")
    assert not can([b(T, "ord", Operation.WRITE, pattern=PRE)], Operation.WRITE, T, "xorders")
    assert not can([b(G, "orders", Operation.READ)], Operation.READ, T, "orders")  # other type


def test_deny_wins_and_only_for_its_operation():
    bindings = [b(T, "t", Operation.ALL), b(T, "t", Operation.WRITE, DENY)]
    assert not can(bindings, Operation.WRITE, T, "t")
    assert can(bindings, Operation.READ, T, "t")
    assert not can([b(T, "t", Operation.ALL), b(T, "t", Operation.ALL, DENY)], Operation.READ, T, "t")


def test_implied_operations():
    for op in (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER):
        assert can([b(T, "t", op)], Operation.DESCRIBE, T, "t")
    assert can([b(T, "t", Operation.ALTER_CONFIGS)], Operation.DESCRIBE_CONFIGS, T, "t")
    assert not can([b(T, "t", Operation.DESCRIBE)], Operation.READ, T, "t")
    # A deny of Read does not deny the Describe that Write implies.
    assert can([b(T, "t", Operation.WRITE), b(T, "t", Operation.READ, DENY)],
               Operation.DESCRIBE, T, "t")


def test_principal_and_host_matching():
    assert can([b(T, "t", Operation.READ, principal="User:*")], Operation.READ, T, "t")
    assert not can([b(T, "t", Operation.READ, principal="User:bob")], Operation.READ, T, "t")
    assert can([b(T, "t", Operation.READ, host="10.0.0.1")], Operation.READ, T, "t")
    assert not can([b(T, "t", Operation.READ, host="10.0.0.2")], Operation.READ, T, "t")


def test_write_on_any_topic_for_idempotence():
    authorizer = Authorizer([b(T, "a", Operation.WRITE), b(T, "b", Operation.WRITE, DENY)])
    assert authorizer.any_allowed("User:alice", "h", Operation.WRITE, T)
    assert not authorizer.any_allowed("User:bob", "h", Operation.WRITE, T)
    denied = Authorizer([b(T, "a", Operation.WRITE), b(T, "a", Operation.ALL, DENY)])
    assert not denied.any_allowed("User:alice", "h", Operation.WRITE, T)


@pytest.mark.parametrize("binding, why", [
    (b(ResourceType.ANY, "t", Operation.READ), "resource type"),
    (b(T, "t", Operation.ANY), "operation"),
    (b(T, "t", Operation.READ, Permission.ANY), "permission"),
    (b(T, "", Operation.READ), "name"),
    (b(C, "other", Operation.ALTER), "kafka-cluster"),
    (b(T, "t", Operation.READ, principal="alice"), "Type:name"),
    (b(T, "t", Operation.READ, pattern=PatternType.MATCH), "pattern type"),
])
def test_invalid_bindings(binding, why):
    assert why in validate(binding)


def test_filters():
    bindings = [b(T, "ord", Operation.WRITE, pattern=PRE), b(T, "orders", Operation.READ),
                b(X, "tx", Operation.WRITE), b(C, CLUSTER_NAME, Operation.ALTER, DENY)]
    any_filter = AclFilter(ResourceType.ANY, None, PatternType.ANY, None, None, Operation.ANY,
                           Permission.ANY)
    assert [f for f in bindings if any_filter.matches(f)] == bindings
    match = any_filter._replace(resource_type=T, name="orders", pattern_type=PatternType.MATCH)
    assert [f.name for f in bindings if match.matches(f)] == ["ord", "orders"]
    literal = any_filter._replace(name="orders", pattern_type=LIT)
    assert [f.name for f in bindings if literal.matches(f)] == ["orders"]
    deny = any_filter._replace(permission=DENY)
    assert [f.name for f in bindings if deny.matches(f)] == [CLUSTER_NAME]


def test_store_is_durable_and_removes_what_filters_match(tmp_path):
    store = AclStore(tmp_path / "acls.json")
    store.add([b(T, "t", Operation.READ), b(T, "t", Operation.READ), b(G, "g", Operation.READ)])
    assert len(AclStore(tmp_path / "acls.json").bindings) == 2  # duplicates kept once
    groups = AclFilter(G, None, PatternType.ANY, None, None, Operation.ANY, Permission.ANY)
    assert store.remove([groups]) == [[b(G, "g", Operation.READ)]]
    assert AclStore(tmp_path / "acls.json").bindings == [b(T, "t", Operation.READ)]
