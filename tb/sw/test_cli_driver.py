"""``mrcnic info | counters | qp list | paths`` on the model backend (no hardware)."""

from mrcnic.cli import main


def test_info_and_empty_views(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert (
        "4 planes, 4 QPs, 16 EV slots" in out
        and "plane 3 up" in out
        and "64-bit host addresses, PMTU up to 4096" in out
    )
    assert main(["counters"]) == 0
    out = capsys.readouterr().out
    assert "every event counter is 0" in out
    ports = [line.split() for line in out.splitlines()[1:5]]
    assert ports == [[str(p), "0", "0", "0", "0", "0"] for p in range(4)]
    assert main(["qp", "list"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].split()[:3] == ["qp", "qpn", "state"] and len(rows) == 5


def test_views_after_a_transfer(capsys):
    assert main(["counters", "--device", "model:demo"]) == 0
    lines = capsys.readouterr().out.splitlines()
    ports = [[int(x) for x in line.split()] for line in lines[1:5]]
    counters = dict(line.split() for line in lines[7:])
    assert int(counters["tx_packets"]) >= 256 and counters["host_cqes_written"] == "8"
    # every data frame leaves on some plane port: 8 WRITEs of 32 KiB at PMTU 4096 = 64 frames per plane
    assert sum(p[3] for p in ports) >= int(counters["tx_packets"]) and all(p[3] > 0 for p in ports)
    assert sum(p[1] for p in ports) > 0 and all(p[4] > p[3] * 4096 for p in ports)
    assert main(["qp", "list", "--device", "model:demo"]) == 0
    qp0 = capsys.readouterr().out.splitlines()[1].split()
    assert qp0[:3] == ["0", "0x100", "rts"] and qp0[4:7] == ["8", "8", "8"]
    assert main(["paths", "--device", "model:demo", "--qp", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "QP 0:" and lines[-1].strip() == "16 of 16 slots GOOD"
    rows = [line.split() for line in lines[2:-1]]
    assert [int(r[0]) for r in rows] == list(range(16))
    assert all(
        int(r[1]) == int(r[0]) % 4 and int(r[3], 16) >> 29 == int(r[1]) and r[4] == "GOOD" for r in rows
    )


def test_errors_are_one_clear_line(capsys):
    assert main(["info", "--device", "uart:/dev/mrcnic-no-such-port"]) == 1
    assert capsys.readouterr().out.strip() == (
        "mrcnic info: cannot open UART port /dev/mrcnic-no-such-port: No such file or directory"
    )
    assert main(["paths", "--device", "model:", "--qp", "9"]) == 1
    assert "QP 9 outside 0..3" in capsys.readouterr().out
