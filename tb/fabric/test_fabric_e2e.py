"""Small end-to-end runs of the simulator (fixed seeds): data verified byte for byte."""

import json

import pytest

from mrcnic.cli import build_parser, main
from mrcnic.fabric.report import metrics
from mrcnic.fabric.scenarios import SimConfig, run
from mrcnic.fabric.topology import FabricConfig
from mrcnic.wire import decode


def small(scenario="permutation", transport="mrc", size=96 * 1024, **fab):
    args = dict(hosts=8, planes=2, radix=4, seed=3)
    args.update(fab)
    return SimConfig(
        scenario=scenario,
        transport=transport,
        fabric=FabricConfig(**args),
        message_bytes=size,
        evs=16,
        byte_exact=True,
    )


def test_permutation_clean():
    r = run(small())
    m = metrics(r)
    assert m["completed"] and all(f.verified for f in r.flows)
    assert m["retx_bytes"] == 0 and m["lost_bytes"] == 0 and m["duplicate_arrivals"] == 0
    assert m["goodput_fraction"] > 0.5


def test_permutation_with_loss_byte_exact():
    r = run(small(loss=0.02, size=200 * 1024 + 123))
    m = metrics(r)
    assert m["completed"], m
    assert m["lost_bytes"] > 0 and m["retx_bytes"] > 0 and m["evs_retired"] > 0
    # the fabric duplicates nothing: a packet received twice is a retransmission (a spurious one)
    retx_packets = sum(qp.sender.c["retx_pkts"] for ep in r.endpoints for qp in ep.qps.values())
    assert 0 <= m["duplicate_arrivals"] <= retx_packets


def test_link_failure_all_complete():
    cfg = small("link-failure", size=512 * 1024, loss=0.001)
    cfg.fail_at_us = 5.0
    r = run(cfg)
    m = metrics(r)
    assert m["completed"], m
    assert m["evs_retired"] > 0 and m["recovery_us"] is not None and m["failures"]


def test_incast_trims_recovered_by_nack():
    cfg = small("incast", hosts=16, radix=8, size=256 * 1024)
    r = run(cfg)
    m = metrics(r)
    assert m["completed"], m
    assert m["trims"] > 0 and m["timeouts"] == 0
    assert m["nack_trimmed"] == m["trims"]  # every trimmed packet came back as a NACK


def test_all_to_all():
    r = run(small("all-to-all", size=64 * 1024))
    assert metrics(r)["completed"] and len(r.flows) == 8 * 7


def test_roce_baseline():
    r = run(small(transport="roce-ecmp"))
    m = metrics(r)
    assert m["completed"] and m["transport"] == "roce-ecmp" and m["duplicate_arrivals"] is None
    r = run(small(transport="roce-ecmp", loss=0.01))
    m = metrics(r)
    assert m["completed"] and m["retx_bytes"] >= m["lost_bytes"] > 0  # go-back-N resends everything after


def test_deterministic():
    a, b = metrics(run(small(loss=0.01))), metrics(run(small(loss=0.01)))
    for key in ("wall_s", "events_per_s"):
        a.pop(key), b.pop(key)
    assert a == b


def test_cli_json_pcap_and_help(tmp_path, capsys):
    out = tmp_path / "m.json"
    pcap = tmp_path / "c.pcap"
    rc = main(
        [
            "sim",
            "permutation",
            "--hosts",
            "8",
            "--planes",
            "2",
            "--radix",
            "4",
            "--message-size",
            "64K",
            "--evs",
            "16",
            "--json",
            str(out),
            "--pcap",
            str(pcap),
            "--plots",
            str(tmp_path / "plots"),
            "--quiet",
        ]
    )
    assert rc == 0
    m = json.loads(out.read_text())
    for key in (
        "goodput_fraction",
        "fct_p99_us",
        "fct_slowdown_p99",
        "recovery_us",
        "completed",
        "retx_bytes",
        "lost_bytes",
        "events_per_s",
    ):
        assert key in m and key in m["baseline"]
    assert m["recovery_us"] is None and m["baseline"]["transport"] == "roce-ecmp"
    assert (tmp_path / "plots" / "permutation-throughput.png").stat().st_size > 1000
    from mrcnic.wire.pcap import read_pcap

    frames = list(read_pcap(pcap))
    assert frames
    for _, raw in frames:
        decode(raw, check_icrc=True)
    sim = build_parser()._subparsers._group_actions[0].choices["sim"]
    text = sim.format_help()
    for action in sim._actions:
        for opt in action.option_strings:
            assert opt in text
        assert action.help


@pytest.mark.slow
def test_permutation_64_hosts_figures():
    cfg = SimConfig(fabric=FabricConfig(hosts=64))
    m = metrics(run(cfg))
    assert m["completed"] and m["goodput_fraction"] >= 0.85 and m["fct_slowdown_p99"] <= 1.25


def test_parse_event():
    from mrcnic.fabric.scenarios import parse_event

    e = parse_event("40:link:0,1,3")
    assert (e.at_ps, e.kind, e.args, e.up, e.is_failure) == (40_000_000, "link", (0, 1, 3), False, True)
    assert parse_event("90.5:switch-up:1,1,2").up and parse_event("10:loss:0.01").args == (0.01,)
    for bad in ("40:link:0,1", "x:link:0,0,0", "1:flood:0", "1:loss-up:0.1"):
        with pytest.raises(ValueError):
            parse_event(bad)


@pytest.mark.parametrize(
    "events",
    [
        ["4:switch:1,1,1"],  # a T1 of plane 1 dies
        ["4:port:0,2"],  # host 2 loses its plane-0 port
        ["3:link:0,0,1", "20:link-up:0,0,1"],  # a link dies and comes back
        ["2:loss:0.02", "30:loss:0"],  # a burst of random loss
    ],
)
def test_fabric_events_all_complete(events):
    cfg = small(size=384 * 1024)
    cfg.events = events
    r = run(cfg)
    m = metrics(r)
    assert m["completed"], (events, m)
    if r.failures[0].is_failure:
        assert m["recovery_us"] is not None and m["failover_us"] is not None
