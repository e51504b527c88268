// cyclesd from TypeScript over Connect (JSON) and gRPC-Web, with protobuf-es
// v2 stubs generated from proto/ (npm run generate). `make test-clients` runs
// it against a dev-mode cyclesd; any failed step exits non-zero.
//
//   CYCLES_HTTP=http://127.0.0.1:7780 CYCLES_ADMIN_KEY=dev-admin-key-change-me npm start
//
// int64 fields are bigint in protobuf-es: never convert amounts to Number.
import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-node";

import { AdminService } from "./gen/cycles/v1/admin_pb.js";
import { CommitOveragePolicy, Unit } from "./gen/cycles/v1/common_pb.js";
import { EventService, StartPosition, type Event } from "./gen/cycles/v1/events_pb.js";
import { EventType } from "./gen/cycles/v1/event_types_pb.js";
import { RuntimeService } from "./gen/cycles/v1/runtime_pb.js";
import { ErrorInfoSchema } from "./gen/google/rpc/error_details_pb.js";

const baseUrl = process.env.CYCLES_HTTP ?? "http://127.0.0.1:7780";
const adminKey = process.env.CYCLES_ADMIN_KEY ?? "dev-admin-key-change-me";
const BIG = 2n ** 53n + 1n; // the first integer a float64 cannot hold

function check(ok: boolean, what: string): void {
  if (!ok) throw new Error(`FAILED: ${what}`);
  console.log(`ok  ${what}`);
}

// Connect protocol with JSON bodies (what curl speaks), and gRPC-Web.
const connect: Transport = createConnectTransport({ baseUrl, httpVersion: "1.1" });
const grpcWeb: Transport = createGrpcWebTransport({ baseUrl, httpVersion: "1.1" });

const admin = createClient(AdminService, connect);
const events = createClient(EventService, connect);
const asAdmin = { headers: { "x-cycles-admin-key": adminKey } };

async function main(): Promise<void> {
  // A fresh tenant with a key and two budgets (one holding exactly 2^53+1).
  const tenantId = `ts-${Date.now()}`;
  const scope = `tenant:${tenantId}`;
  await admin.createTenant({ tenantId, name: "TypeScript example" }, asAdmin);
  const key = await admin.createApiKey({ tenantId, name: "ts" }, asAdmin);
  await admin.createBudget({ tenantId, scopePath: scope, unit: Unit.TOKENS, allocated: 1000n }, asAdmin);
  await admin.createBudget({ tenantId, scopePath: scope, unit: Unit.USD_MICROCENTS, allocated: BIG }, asAdmin);
  const asAgent = { headers: { "x-cycles-api-key": key.secret } };
  const runtime = createClient(RuntimeService, connect);

  // Watch from the start; stop after three events and keep the cursor.
  const seen: Event[] = [];
  const abort = new AbortController();
  for await (const res of events.watchEvents(
    { tenantId, start: StartPosition.EARLIEST },
    { ...asAdmin, signal: abort.signal },
  )) {
    if (res.item.case === "event") seen.push(res.item.value);
    if (seen.length === 3) break; // leaving the loop cancels the stream: a disconnect
  }
  abort.abort();
  check(seen[0].type === EventType.TENANT_CREATED && seen[0].payload.case === "tenantChanged",
    "watch: typed tenant.created first");
  const cursor = seen[1].cursor;

  // Reserve, then commit less than the estimate.
  const reserved = await runtime.createReservation({
    idempotencyKey: "ts-r1",
    subject: { workspace: "prod", agent: "bot" },
    action: { kind: "llm.completion", name: "gpt-4o-mini" },
    estimate: { unit: Unit.TOKENS, amount: 500n },
    overagePolicy: CommitOveragePolicy.REJECT,
  }, asAgent);
  check(reserved.reservationId !== "", `reserve 500 TOKENS -> ${reserved.reservationId}`);
  const committed = await runtime.commitReservation({
    reservationId: reserved.reservationId, idempotencyKey: "ts-c1", actual: { unit: Unit.TOKENS, amount: 400n },
  }, asAgent);
  check(committed.charged?.amount === 400n, "commit 400 charged exactly 400");

  // Balances over gRPC-Web.
  const grpcWebRuntime = createClient(RuntimeService, grpcWeb);
  const balances = await grpcWebRuntime.getBalances({ tenant: tenantId, unit: Unit.TOKENS }, asAgent);
  const tokens = balances.balances.find((b) => b.scopePath === scope);
  check(tokens?.remaining?.amount === 600n && tokens?.spent?.amount === 400n,
    "gRPC-Web GetBalances: remaining 600, spent 400");

  // 2^53+1 round-trips exactly: reserve all of the USD budget.
  const all = await runtime.createReservation({
    idempotencyKey: "ts-big", subject: { tenant: tenantId }, action: { kind: "batch", name: "big" },
    estimate: { unit: Unit.USD_MICROCENTS, amount: BIG },
  }, asAgent);
  const usd = all.balances.find((b) => b.scopePath === scope);
  check(usd?.reserved?.amount === BIG && usd?.remaining?.amount === 0n, "2^53+1 reserved exactly");

  // A refusal carries google.rpc.ErrorInfo.
  try {
    await runtime.createReservation({
      idempotencyKey: "ts-too-much", subject: { tenant: tenantId }, action: { kind: "llm.completion", name: "x" },
      estimate: { unit: Unit.TOKENS, amount: BIG },
    }, asAgent);
    throw new Error("FAILED: an over-budget reserve was allowed");
  } catch (e) {
    const err = ConnectError.from(e);
    const [info] = err.findDetails(ErrorInfoSchema);
    check(err.code === Code.FailedPrecondition && info?.reason === "BUDGET_EXCEEDED" && info?.domain === "cycles",
      `refusal: ${Code[err.code]} ErrorInfo ${info?.reason} ${JSON.stringify(info?.metadata)}`);
  }

  // Resume after the disconnect: exactly what followed the cursor, in order,
  // including what happened while away; filter by typed enum.
  const resumed: Event[] = [];
  const abort2 = new AbortController();
  for await (const res of events.watchEvents(
    { tenantId, start: StartPosition.CURSOR, cursor },
    { ...asAdmin, signal: abort2.signal },
  )) {
    if (res.item.case === "event") resumed.push(res.item.value);
    if (resumed.length === 3) break;
  }
  abort2.abort();
  check(resumed[0].eventId === seen[2].eventId, "resume from cursor: no gap, no duplicate");
  const exhausted = resumed.find((e) => e.type === EventType.BUDGET_EXHAUSTED);
  check(exhausted?.payload.case === "budgetExhausted" && exhausted.payload.value.allocated === BIG,
    "typed budget.exhausted after the 2^53+1 reserve, allocated exact");
}

main().then(
  () => console.log("typescript client: all steps passed"),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
