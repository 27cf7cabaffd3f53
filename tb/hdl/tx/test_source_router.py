"""Source router (Amaranth simulator): every container equals mrcnic.wire.RouteTemplate.destination."""

import random

from mrcnic import wire
from mrcnic.hdl.tx.source_router import SourceRouter
from mrcnic.wire.usid import NO_T1_SLOT, Role

from support.pysim import run, stream_get, stream_put


def _template(route: wire.RouteTemplate) -> dict:
    usids = list(route.usids) + [0] * (6 - len(route.usids))
    return {"locator": route.locator, "usids": usids, "count": len(route.usids), "t1_slot": route.t1_slot}


def test_containers_match_the_python_route_templates():
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    dests = 8
    routes = []
    for _ in range(dests):
        locator = rng.randrange(1 << 32)
        kind = rng.choice(["clos", "same_t0", "custom"])
        if kind == "custom":  # any length 1..6, any T1 slot: the general template
            n = rng.randint(1, 6)
            usids = [
                wire.usid(rng.randrange(8), rng.choice(list(Role)), rng.randrange(2048)) for _ in range(n)
            ]
            t1 = rng.choice([NO_T1_SLOT, rng.randrange(n)])
            routes.append(wire.RouteTemplate(locator, usids, t1))
        else:
            t0 = rng.randrange(64)
            dst_t0 = t0 if kind == "same_t0" else rng.randrange(64)
            routes.append(wire.RouteTemplate.for_clos(locator, t0, dst_t0, rng.randrange(2048)))
    requests = [(rng.randrange(dests), rng.randrange(1 << 32)) for _ in range(400)]
    dut = SourceRouter(destinations=dests)
    answers = []

    async def configure_then_request(ctx):
        for d, route in enumerate(routes):
            await stream_put(ctx, dut.configure, {"dest": d, "template": _template(route)})
        for dest, ev in requests:
            await stream_put(ctx, dut.request, {"dest": dest, "ev": ev}, stall=0.3, rng=rng)

    async def collect(ctx):
        for _ in requests:
            answers.append((await stream_get(ctx, dut.response, stall=0.3, rng=rng)).address)

    run(dut, configure_then_request, collect, name="source_router")
    for (dest, ev), address in zip(requests, answers, strict=True):
        assert address == routes[dest].destination(ev), (dest, hex(ev))
