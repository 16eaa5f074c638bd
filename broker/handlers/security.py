"""Security APIs: SaslHandshake, SaslAuthenticate (the connection's ``Session``, broker/network/peer.py),
CreateAcls / DescribeAcls / DeleteAcls and Describe/AlterUserScramCredentials (docs/security.md).

SASL as Kafka does it: on a SASL listener the first requests are ApiVersions, SaslHandshake and
SaslAuthenticate (anything else closes the connection, in the dispatcher); a failed
authentication is answered with SASL_AUTHENTICATION_FAILED after
``connection.failed.authentication.delay.ms`` and the connection closed. On other listeners, or
once authenticated, both answer ILLEGAL_SASL_STATE.
"""

from __future__ import annotations

import logging

import trio

from broker.handlers import peer
from broker.handlers.authz import allowed
from broker.handlers.context import Broker
from broker.handlers.marks import handles
from broker.reply import Deferred
from broker.security import scram
from broker.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    validate,
)
from broker.security.sasl import AuthenticationFailed
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode

log = logging.getLogger("minibroker.security")


@handles(ApiKey.SASL_HANDSHAKE)
def sasl_handshake(broker: Broker, header, request) -> dict | Deferred[dict]:
    session = peer.session()
    enabled = list(broker.config.security.sasl_enabled_mechanisms)
    if session.sasl_state != "handshake":
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE, "mechanisms": enabled}
    if request.mechanism not in enabled:
        session.close_after_reply = True
        log.info("closing %s: SASL mechanism %r is not enabled", peer.client_host(),
                 request.mechanism)
        # A failed authentication in Kafka too: answered after the delay, then closed.
        return _after_failure_delay(broker, {"error_code": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                             "mechanisms": enabled})
    session.sasl = broker.security.sasl_server(request.mechanism)
    session.sasl_state = "authenticate" if header.api_version >= 1 else "tokens"
    return {"error_code": ErrorCode.NONE, "mechanisms": enabled}


@handles(ApiKey.SASL_AUTHENTICATE)
def sasl_authenticate(broker: Broker, header, request):
    session = peer.session()
    if session.sasl_state != "authenticate":
        return {"error_code": ErrorCode.ILLEGAL_SASL_STATE,
                "error_message": "SaslAuthenticate without a SaslHandshake v1 before it, or after "
                                 "authentication", "auth_bytes": b""}
    try:
        token = session.sasl.step(bytes(request.auth_bytes))
    except AuthenticationFailed as exc:
        log.warning("%s (client %s)", exc, peer.client_host())
        session.close_after_reply = True
        return _after_failure_delay(broker, {
            "error_code": ErrorCode.SASL_AUTHENTICATION_FAILED, "error_message": str(exc),
            "auth_bytes": b""})
    if session.sasl.done:
        session.principal, session.sasl_state = session.sasl.principal, "done"
        session.sasl = None
    return {"error_code": ErrorCode.NONE, "error_message": None, "auth_bytes": token,
            "session_lifetime_ms": 0}


def _after_failure_delay(broker: Broker, answer: dict) -> Deferred[dict]:
    """``answer`` after ``connection.failed.authentication.delay.ms``: slows down password
    guessing, as Kafka does (the SaslHandshake v0 path, which has no answer, is the
    dispatcher's)."""
    delay = broker.config.security.connection_failed_authentication_delay_ms / 1000

    async def later() -> dict:
        await trio.sleep(delay)
        return answer

    return Deferred(later)


# -- ACLs ------------------------------------------------------------------------------------------


def _enum(cls, value: int):
    try:
        return cls(value)
    except ValueError:
        return cls.UNKNOWN


def _filter(f) -> AclFilter:
    return AclFilter(_enum(ResourceType, f.resource_type_filter), f.resource_name_filter,
                     _enum(PatternType, f.pattern_type_filter), f.principal_filter,
                     f.host_filter, _enum(Operation, f.operation),
                     _enum(Permission, f.permission_type))


def _filter_error(f: AclFilter) -> str | None:
    unknown = [name for name, value in (("resource type", f.resource_type),
                                        ("pattern type", f.pattern_type),
                                        ("operation", f.operation), ("permission", f.permission))
               if value == 0]
    return f"unknown {', '.join(unknown)}" if unknown else None


@handles(ApiKey.DESCRIBE_ACLS)
def describe_acls(broker: Broker, header, request) -> dict:
    if not allowed(broker, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": _refused("Describe", "the cluster"), "resources": []}
    if broker.security.authorizer is None:
        return {"error_code": ErrorCode.SECURITY_DISABLED,
                "error_message": "no authorizer is configured (authorizer.class.name)",
                "resources": []}
    f = _filter(request)
    error = _filter_error(f)
    if error:
        return {"error_code": ErrorCode.INVALID_REQUEST, "error_message": error, "resources": []}
    grouped: dict[tuple, list[AclBinding]] = {}
    for b in broker.security.acls.bindings:
        if f.matches(b):
            grouped.setdefault((b.resource_type, b.name, b.pattern_type), []).append(b)
    return {"error_code": ErrorCode.NONE, "error_message": None, "resources": [
        {"resource_type": rt, "resource_name": name, "pattern_type": pt,
         "acls": [{"principal": b.principal, "host": b.host, "operation": b.operation,
                   "permission_type": b.permission} for b in bindings]}
        for (rt, name, pt), bindings in grouped.items()
    ]}


@handles(ApiKey.CREATE_ACLS)
def create_acls(broker: Broker, header, request) -> dict:
    refused = not allowed(broker, Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    disabled = broker.security.authorizer is None
    results, valid = [], []
    for c in request.creations:
        binding = AclBinding(_enum(ResourceType, c.resource_type), c.resource_name,
                             _enum(PatternType, c.resource_pattern_type), c.principal, c.host,
                             _enum(Operation, c.operation), _enum(Permission, c.permission_type))
        if refused:
            results.append({"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                            "error_message": _refused("Alter", "the cluster")})
        elif disabled:
            results.append({"error_code": ErrorCode.SECURITY_DISABLED,
                            "error_message": "no authorizer is configured"})
        elif (why := validate(binding)) is not None:
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": why})
        else:
            valid.append(binding)
            results.append({"error_code": ErrorCode.NONE, "error_message": None})
    if valid:
        try:
            broker.security.add_acls(valid)  # durable before the answer
        except OSError as exc:
            return {"throttle_time_ms": 0, "results": [
                r if r["error_code"] != ErrorCode.NONE else _not_saved("ACLs", exc)
                for r in results]}
        log.info("%s created ACLs: %s", peer.principal_and_host()[0], valid)
    return {"throttle_time_ms": 0, "results": results}


@handles(ApiKey.DELETE_ACLS)
def delete_acls(broker: Broker, header, request) -> dict:
    refused = not allowed(broker, Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    disabled = broker.security.authorizer is None
    filters = [_filter(f) for f in request.filters]
    if refused or disabled:
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED if refused else ErrorCode.SECURITY_DISABLED
        message = _refused("Alter", "the cluster") if refused else "no authorizer is configured"
        return {"throttle_time_ms": 0, "filter_results": [
            {"error_code": code, "error_message": message, "matching_acls": []} for _ in filters]}
    usable = [f for f in filters if _filter_error(f) is None]
    try:
        matched = broker.security.remove_acls(usable)  # durable before the answer
    except OSError as exc:
        return {"throttle_time_ms": 0, "filter_results": [
            {**_not_saved("ACLs", exc), "matching_acls": []} for _ in filters]}
    gone = [b for group in matched for b in group]
    if gone:
        log.info("%s deleted ACLs: %s", peer.principal_and_host()[0], gone)
    removed = iter(matched)
    results = []
    for f in filters:
        error = _filter_error(f)
        if error:
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": error,
                            "matching_acls": []})
            continue
        results.append({"error_code": ErrorCode.NONE, "error_message": None, "matching_acls": [
            {"error_code": ErrorCode.NONE, "error_message": None, "resource_type": b.resource_type,
             "resource_name": b.name, "pattern_type": b.pattern_type, "principal": b.principal,
             "host": b.host, "operation": b.operation, "permission_type": b.permission}
            for b in next(removed)
        ]})
    return {"throttle_time_ms": 0, "filter_results": results}


def _not_saved(what: str, exc: OSError) -> dict:
    """The answer to a change that could not be saved (disk full, I/O error): nothing changed."""
    log.error("could not save %s: %s", what, exc)
    return {"error_code": ErrorCode.UNKNOWN_SERVER_ERROR,
            "error_message": f"the broker could not save the {what} ({exc}); nothing changed"}


def _refused(operation: str, what: str) -> str:
    principal, host = peer.principal_and_host()
    return f"{principal} from {host or '?'} is not allowed {operation} on {what}"


# -- SCRAM credentials -----------------------------------------------------------------------------


@handles(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)
def describe_user_scram_credentials(broker: Broker, header, request) -> dict:
    if not allowed(broker, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return {"error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "error_message": _refused("Describe", "the cluster"), "results": []}
    known = broker.security.scram.users()
    # null or empty: every user (Kafka's rule; its Admin sends an empty list for "all")
    names = sorted(known) if not request.users else [u.name for u in request.users]
    results: list[dict] = []
    for name in dict.fromkeys(names):
        if name not in known:
            results.append({"user": name, "error_code": ErrorCode.RESOURCE_NOT_FOUND,
                            "error_message": f"no SCRAM credentials for user {name!r}",
                            "credential_infos": []})
            continue
        results.append({"user": name, "error_code": ErrorCode.NONE, "error_message": None,
                        "credential_infos": [
                            {"mechanism": scram.CODES[m], "iterations": i}
                            for m, i in sorted(known[name].items())]})
    if len(names) != len(set(names)):
        return {"error_code": ErrorCode.DUPLICATE_RESOURCE,
                "error_message": "a user is named twice", "results": []}
    return {"error_code": ErrorCode.NONE, "error_message": None, "results": results}


@handles(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
def alter_user_scram_credentials(broker: Broker, header, request) -> dict:
    refused = not allowed(broker, Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    users = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
    errors: dict[str, tuple[ErrorCode, str | None]] = {}
    seen: set[tuple[str, int]] = set()
    for item in [*request.deletions, *request.upsertions]:
        if (item.name, item.mechanism) in seen:
            errors[item.name] = (ErrorCode.DUPLICATE_RESOURCE,
                                 "the same user and mechanism twice in one request")
        seen.add((item.name, item.mechanism))
    upserts, deletions = [], []
    known = broker.security.scram.users()
    for d in request.deletions:
        mechanism = scram.MECHANISMS.get(d.mechanism)
        if refused or d.name in errors:
            continue
        if mechanism is None:
            errors[d.name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"mechanism {d.mechanism}")
        elif mechanism not in known.get(d.name, {}):
            errors[d.name] = (ErrorCode.RESOURCE_NOT_FOUND,
                              f"no {mechanism} credential for user {d.name!r}")
        else:
            deletions.append((d.name, mechanism))
    for u in request.upsertions:
        mechanism = scram.MECHANISMS.get(u.mechanism)
        if refused or u.name in errors:
            continue
        if not u.name:
            errors[u.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "the user name is empty")
        elif mechanism is None:
            errors[u.name] = (ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"mechanism {u.mechanism}")
        elif not scram.MIN_ITERATIONS <= u.iterations <= scram.MAX_ITERATIONS:
            errors[u.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL,
                              f"iterations must be {scram.MIN_ITERATIONS}-{scram.MAX_ITERATIONS}")
        elif not u.salt or not u.salted_password:
            errors[u.name] = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "empty salt or salted password")
        else:
            upserts.append((u.name, mechanism, scram.derive(
                mechanism, bytes(u.salted_password), bytes(u.salt), u.iterations)))
    upserts = [x for x in upserts if x[0] not in errors]
    deletions = [x for x in deletions if x[0] not in errors]
    if upserts or deletions:
        try:
            broker.security.scram.apply(upserts, deletions)  # durable before the answer
        except OSError as exc:
            failed = _not_saved("SCRAM credentials", exc)
            for user in {u for u, *_ in upserts} | {u for u, _ in deletions}:
                errors[user] = (failed["error_code"], failed["error_message"])
            upserts, deletions = [], []
    if upserts or deletions:
        log.info("%s altered SCRAM credentials of %s", peer.principal_and_host()[0],
                 sorted({u for u, *_ in upserts} | {u for u, _ in deletions}))
    results = []
    code: ErrorCode
    message: str | None
    for name in dict.fromkeys(users):
        if refused:
            code, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, _refused("Alter", "the cluster")
        else:
            code, message = errors.get(name, (ErrorCode.NONE, None))
        results.append({"user": name, "error_code": code, "error_message": message})
    return {"throttle_time_ms": 0, "results": results}
