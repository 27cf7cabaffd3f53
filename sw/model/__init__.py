"""Reference model of an MRC endpoint (issue 3): the same algorithms as the gateware."""
