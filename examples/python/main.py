"""cyclesd from Python over native gRPC, with stubs generated from proto/.

Debian: apt-get install python3-grpcio python3-protobuf protobuf-compiler
protobuf-compiler-grpc; `make test-clients` generates the stubs into gen/
(protoc >= 3.15 for proto3 `optional`) and runs this against a dev-mode
cyclesd. Any failed step exits non-zero.

    CYCLES_GRPC=127.0.0.1:7700 CYCLES_ADMIN_KEY=dev-admin-key-change-me python3 main.py
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gen"))

import grpc  # noqa: E402

from cycles.v1 import admin_pb2, admin_pb2_grpc  # noqa: E402
from cycles.v1 import common_pb2  # noqa: E402
from cycles.v1 import event_types_pb2  # noqa: E402
from cycles.v1 import events_pb2, events_pb2_grpc  # noqa: E402
from cycles.v1 import runtime_pb2, runtime_pb2_grpc  # noqa: E402
from google.rpc import error_details_pb2, status_pb2  # noqa: E402

TARGET = os.environ.get("CYCLES_GRPC", "127.0.0.1:7700")
ADMIN = [("x-cycles-admin-key", os.environ.get("CYCLES_ADMIN_KEY", "dev-admin-key-change-me"))]
BIG = 2**53 + 1  # the first integer a float64 cannot hold; Python ints are exact


def check(ok, what):
    if not ok:
        raise SystemExit(f"FAILED: {what}")
    print(f"ok  {what}")


def error_info(err):
    """Decodes google.rpc.ErrorInfo from a gRPC error's status details."""
    for key, value in err.trailing_metadata() or ():
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            for any_detail in status.details:
                info = error_details_pb2.ErrorInfo()
                if any_detail.Unpack(info):
                    return info
    return None


def watch(events, request, count):
    """Reads count events, then cancels the stream (a disconnect)."""
    call = events.WatchEvents(request, metadata=ADMIN, timeout=30)
    seen = []
    for res in call:
        if res.HasField("event"):
            seen.append(res.event)
            if len(seen) == count:
                break
    call.cancel()
    return seen


def main():
    channel = grpc.insecure_channel(TARGET)
    admin = admin_pb2_grpc.AdminServiceStub(channel)
    runtime = runtime_pb2_grpc.RuntimeServiceStub(channel)
    events = events_pb2_grpc.EventServiceStub(channel)

    tenant = f"py-{int(time.time() * 1000)}"
    scope = f"tenant:{tenant}"
    admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant_id=tenant, name="Python example"), metadata=ADMIN)
    key = admin.CreateApiKey(admin_pb2.CreateApiKeyRequest(tenant_id=tenant, name="py"), metadata=ADMIN)
    for unit, allocated in ((common_pb2.UNIT_TOKENS, 1000), (common_pb2.UNIT_USD_MICROCENTS, BIG)):
        admin.CreateBudget(admin_pb2.CreateBudgetRequest(
            tenant_id=tenant, scope_path=scope, unit=unit, allocated=allocated), metadata=ADMIN)
    agent = [("x-cycles-api-key", key.secret)]

    seen = watch(events, events_pb2.WatchEventsRequest(
        tenant_id=tenant, start=events_pb2.START_POSITION_EARLIEST), 3)
    check(seen[0].type == event_types_pb2.EVENT_TYPE_TENANT_CREATED
          and seen[0].WhichOneof("payload") == "tenant_changed", "watch: typed tenant.created first")
    cursor = seen[1].cursor

    res = runtime.CreateReservation(runtime_pb2.CreateReservationRequest(
        idempotency_key="py-r1",
        subject=common_pb2.Subject(workspace="prod", agent="bot"),
        action=common_pb2.Action(kind="llm.completion", name="gpt-4o-mini"),
        estimate=common_pb2.Amount(unit=common_pb2.UNIT_TOKENS, amount=500),
    ), metadata=agent)
    check(res.reservation_id != "", f"reserve 500 TOKENS -> {res.reservation_id}")
    done = runtime.CommitReservation(runtime_pb2.CommitReservationRequest(
        reservation_id=res.reservation_id, idempotency_key="py-c1",
        actual=common_pb2.Amount(unit=common_pb2.UNIT_TOKENS, amount=400)), metadata=agent)
    check(done.charged.amount == 400, "commit 400 charged exactly 400")

    bal = runtime.GetBalances(runtime_pb2.GetBalancesRequest(tenant=tenant, unit=common_pb2.UNIT_TOKENS), metadata=agent)
    tokens = [b for b in bal.balances if b.scope_path == scope][0]
    check(tokens.remaining.amount == 600 and tokens.spent.amount == 400, "GetBalances: remaining 600, spent 400")

    big = runtime.CreateReservation(runtime_pb2.CreateReservationRequest(
        idempotency_key="py-big", subject=common_pb2.Subject(tenant=tenant),
        action=common_pb2.Action(kind="batch", name="big"),
        estimate=common_pb2.Amount(unit=common_pb2.UNIT_USD_MICROCENTS, amount=BIG)), metadata=agent)
    usd = [b for b in big.balances if b.scope_path == scope][0]
    check(usd.reserved.amount == BIG and usd.remaining.amount == 0, "2^53+1 reserved exactly")

    try:
        runtime.CreateReservation(runtime_pb2.CreateReservationRequest(
            idempotency_key="py-too-much", subject=common_pb2.Subject(tenant=tenant),
            action=common_pb2.Action(kind="llm.completion", name="x"),
            estimate=common_pb2.Amount(unit=common_pb2.UNIT_TOKENS, amount=BIG)), metadata=agent)
        raise SystemExit("FAILED: an over-budget reserve was allowed")
    except grpc.RpcError as err:
        info = error_info(err)
        check(err.code() == grpc.StatusCode.FAILED_PRECONDITION and info is not None
              and info.reason == "BUDGET_EXCEEDED" and info.domain == "cycles"
              and info.metadata["requested"] == str(BIG),
              f"refusal: {err.code().name} ErrorInfo {info.reason if info else None} {dict(info.metadata) if info else {}}")

    resumed = watch(events, events_pb2.WatchEventsRequest(
        tenant_id=tenant, start=events_pb2.START_POSITION_CURSOR, cursor=cursor), 3)
    check(resumed[0].event_id == seen[2].event_id, "resume from cursor: no gap, no duplicate")
    exhausted = [e for e in resumed if e.type == event_types_pb2.EVENT_TYPE_BUDGET_EXHAUSTED]
    check(len(exhausted) == 1 and exhausted[0].budget_exhausted.allocated == BIG,
          "typed budget.exhausted after the 2^53+1 reserve, allocated exact")
    print("python client: all steps passed")


if __name__ == "__main__":
    main()
