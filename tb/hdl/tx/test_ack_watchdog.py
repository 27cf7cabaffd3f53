"""ACK watchdog (§7.4 AETH loss): asks again for the newest message's ACK every RTO once everything is
released, never before; an ACK covering it stops the requests; the retry budget ends in an error."""

from mrcnic.hdl.tx.ack_watchdog import AckWatchdog

from support.pysim import run

RTO = 50


def _bench(dut, script):
    async def bench(ctx):
        ctx.set(dut.rto_cycles, RTO)
        ctx.set(dut.retry_budget, 3)
        ctx.set(dut.request.ready, 1)
        ctx.set(dut.error.ready, 1)
        await script(ctx)

    return bench


async def _ticks(ctx, dut, cycles, log):
    """Advance ``cycles`` cycles, counting time in ``now`` and logging requests and errors."""
    for _ in range(cycles):
        now = ctx.get(dut.now) + 1
        ctx.set(dut.now, now)
        _clk, _rst, rv, rp, ev, ep = await ctx.tick().sample(
            dut.request.valid, dut.request.payload, dut.error.valid, dut.error.payload
        )
        if rv:
            log.append(("request", now, rp.qp, rp.psn, rp.ack_req))
        if ev:
            log.append(("error", now, ep.qp, ep.psn))


async def _record(ctx, port, **fields):
    for k, v in fields.items():
        ctx.set(getattr(port.payload, k), v)
    ctx.set(port.valid, 1)
    await ctx.tick()
    ctx.set(port.valid, 0)


def test_requests_every_rto_then_error():
    dut = AckWatchdog(qps=2, ev_slots=8)
    log = []

    async def script(ctx):
        await _record(ctx, dut.configure, qp=1)
        for psn in range(100, 104):
            await _record(ctx, dut.sent, qp=1, psn=psn, rtx=0, msn=7, end=psn == 103)
        ctx.set(dut.cack[1], 102)  # PSN 103 not yet released: no request
        await _ticks(ctx, dut, 3 * RTO, log)
        assert log == []
        ctx.set(dut.cack[1], 103)
        await _ticks(ctx, dut, 4 * RTO + 20, log)

    run(dut, _bench(dut, script), name="ack_watchdog")
    requests = [e for e in log if e[0] == "request"]
    errors = [e for e in log if e[0] == "error"]
    assert [e[2:] for e in requests] == [(1, 103, 1)] * 3
    gaps = [b[1] - a[1] for a, b in zip(requests, requests[1:], strict=False)]
    assert all(RTO <= g <= RTO + 2 for g in gaps), gaps
    assert [e[2:] for e in errors] == [(1, 103)]
    assert errors[0][1] - requests[-1][1] >= RTO


def test_ack_stops_requests_and_a_new_end_is_not_acked_by_an_older_ack():
    dut = AckWatchdog(qps=2, ev_slots=8)
    log = []

    async def script(ctx):
        await _record(ctx, dut.sent, qp=0, psn=5, rtx=0, msn=1, end=1)
        ctx.set(dut.cack[0], 5)
        await _ticks(ctx, dut, RTO + 10, log)
        assert len(log) == 1
        # The ACK for MSN 1 arrives in the same cycle as the end of MSN 2 is sent.
        for k, v in dict(qp=0, psn=6, rtx=0, msn=2, end=1).items():
            ctx.set(getattr(dut.sent.payload, k), v)
        for k, v in dict(qp=0, msn=1, nak=0).items():
            ctx.set(getattr(dut.ack.payload, k), v)
        ctx.set(dut.sent.valid, 1)
        ctx.set(dut.ack.valid, 1)
        await ctx.tick()
        ctx.set(dut.sent.valid, 0)
        ctx.set(dut.ack.valid, 0)
        ctx.set(dut.cack[0], 6)
        await _ticks(ctx, dut, RTO + 10, log)
        assert len(log) == 2 and log[1][2:] == (0, 6, 1), log
        await _record(ctx, dut.ack, qp=0, msn=2, nak=0)
        await _ticks(ctx, dut, 3 * RTO, log)
        assert len(log) == 2, "an ACK covering the newest message stops the requests"
        # Retransmissions (rtx = 1) change nothing.
        await _record(ctx, dut.sent, qp=0, psn=6, rtx=1, msn=2, end=1)
        await _ticks(ctx, dut, 2 * RTO, log)
        assert len(log) == 2

    run(dut, _bench(dut, script), name="ack_watchdog_ack")
